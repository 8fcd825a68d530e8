// SPDX-License-Identifier: MIT
// An asynchronous svmbatch::Arena: the same blocks as a synchronous one, a
// carve that waits for its own chunks only, a failed chunk's Error on
// wait() and on the carves that need it, destruction while the chunks are
// being prepared, and threads carving all the while.  The preparation is
// held, slowed or failed through the chunk hook (arena_prepare.hpp).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <svmbatch/all.hpp>
#include <svmbatch/arena.hpp>

#include "arena/arena_prepare.hpp"
#include "gpu/host_register_plan.hpp"
#if SVMBATCH_HAS_CUDA
#include "fake_cuda/fake_cuda.h"
#endif
#include "expect_error.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

using namespace std::chrono_literals;
using test::expect_error;

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

ArenaOptions async_small(std::size_t chunk_pages)
{
	ArenaOptions o;
	o.pages = PageKind::Small;
	o.async = true;
	o.chunk_bytes = chunk_pages * page;
	o.prefault_threads = 1;
	return o;
}

/* A gate the hook waits at before preparing chunk `held`. */
class Gate {
public:
	void hold(std::size_t chunk)
	{
		const std::lock_guard lock(m_);
		held_ = chunk;
	}
	void open()
	{
		{
			const std::lock_guard lock(m_);
			open_ = true;
		}
		cv_.notify_all();
	}
	void at(std::size_t chunk)
	{
		std::unique_lock lock(m_);
		if (chunk == held_) {
			reached_ = true;
			cv_.notify_all();
			cv_.wait(lock, [&] { return open_; });
		}
	}
	void until_reached()
	{
		std::unique_lock lock(m_);
		cv_.wait(lock, [&] { return reached_; });
	}

private:
	std::mutex m_;
	std::condition_variable cv_;
	std::size_t held_ = SIZE_MAX;
	bool open_ = false;
	bool reached_ = false;
};

class ArenaAsyncTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		ctx_.emplace(test::make_context());
		pin_ = test::quiet_pinned_bytes();
	}
	void TearDown() override { detail::set_arena_chunk_hook(nullptr); }

	std::optional<Context> ctx_;
	std::uint64_t pin_ = 0;
};

TEST_F(ArenaAsyncTest, ChunksDoubleAndNoBlockCrossesOne)
{
	const std::size_t cap = 64 * page + 100;
	ArenaOptions sync_o = async_small(4);
	sync_o.async = false;
	Arena sync(*ctx_, cap, sync_o);
	Arena async(*ctx_, cap, async_small(4));

	EXPECT_TRUE(sync.ready());
	EXPECT_EQ(sync.chunks(), 1u);
	/* 65 pages: 4, 8, 16, then 32 and the 5-page tail as one chunk. */
	const std::vector<std::size_t> ends{4 * page, 12 * page, 28 * page, 65 * page};
	EXPECT_EQ(async.chunks(), ends.size());
	EXPECT_EQ(async.chunk_bytes(), 4 * page);
	EXPECT_EQ(async.mapped_bytes(), sync.mapped_bytes());
	std::mt19937 rng(7);
	std::vector<std::pair<char *, std::size_t>> live;
	std::size_t carved = 0;
	for (int i = 0; i < 300; ++i) {
		if (!live.empty() && rng() % 3 == 0) {
			const std::size_t k = rng() % live.size();
			async.deallocate(live[k].first);
			live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
			continue;
		}
		const std::size_t n = 1 + rng() % (6 * page);
		char *a = nullptr;
		try {
			a = static_cast<char *>(async.allocate(n));
		} catch (const ArenaFull &) {
			continue;
		}
		const auto off = static_cast<std::size_t>(a - async.base());
		const std::size_t end = *std::upper_bound(ends.begin(), ends.end(), off);
		ASSERT_LE(off + n, end) << "block " << off << "+" << n << " crosses a chunk's end";
		for (auto [q, m] : live)
			ASSERT_TRUE(a + n <= q || q + m <= a) << "blocks overlap";
		std::memset(a, 0x5a, n);
		live.emplace_back(a, n);
		++carved;
	}
	EXPECT_GT(carved, 100u);
	/* The largest block is the largest chunk, and the error says why. */
	for (auto [q, m] : live)
		async.deallocate(q);
	EXPECT_EQ(async.largest_free(), 36 * page + 100); /* the last chunk, up to cap */
	void *whole = async.allocate(36 * page);
	async.deallocate(whole);
	try {
		(void)async.allocate(37 * page);
		ADD_FAILURE() << "a block larger than every chunk was carved";
	} catch (const ArenaFull &full) {
		EXPECT_NE(std::string(full.what()).find("the largest chunk is"), std::string::npos)
			<< full.what();
	}
	void *all = sync.allocate(37 * page); /* a synchronous arena: one chunk */
	sync.deallocate(all);
	async.wait();
	EXPECT_TRUE(async.ready());
	EXPECT_EQ(async.used(), 0u);
	EXPECT_EQ(async.pages_registered(), 65u);
	EXPECT_EQ(async.pinned_pages(), sync.pinned_pages());
	EXPECT_EQ(expect_error([&] { (void)async.registration(); }).err(), EINVAL);
	EXPECT_EQ(sync.registration().pages(), 65u);
}

TEST_F(ArenaAsyncTest, ACarveWaitsOnlyForTheChunksItCovers)
{
	Gate gate;
	gate.hold(1);
	detail::set_arena_chunk_hook([&](std::size_t k) { gate.at(k); });
	Arena a(*ctx_, 16 * page, async_small(4)); /* chunks of 4 and 12 pages */

	gate.until_reached(); /* chunk 0 ready, chunk 1 held */
	void *first = a.allocate(page); /* inside chunk 0: no wait */
	EXPECT_EQ(first, a.base());
	EXPECT_FALSE(a.ready());
	EXPECT_EQ(a.pages_registered(), 4u);

	std::atomic<bool> done{false};
	void *second = nullptr;
	std::thread t([&] {
		second = a.allocate(4 * page); /* chunk 0 has 3 pages left: chunk 1 */
		done = true;
	});
	std::this_thread::sleep_for(100ms);
	EXPECT_FALSE(done) << "a carve covering a held chunk returned";
	gate.open();
	t.join();
	EXPECT_TRUE(done);
	EXPECT_EQ(second, a.base() + 4 * page);
	a.wait();
	EXPECT_TRUE(a.ready());
	EXPECT_EQ(a.pages_registered(), 16u);
}

TEST_F(ArenaAsyncTest, AFailedChunkSurfacesOnWaitAndOnTheCarvesThatNeedIt)
{
	detail::set_arena_chunk_hook([](std::size_t k) {
		if (k == 2)
			throw Error(ENOMEM, Step::Register, "injected at chunk 2");
	});
	std::optional<Arena> a;
	a.emplace(*ctx_, 32 * page, async_small(4)); /* chunks of 4, 8 and 20 pages */

	Error e = expect_error([&] { a->wait(); });
	EXPECT_EQ(e.err(), ENOMEM);
	EXPECT_EQ(e.step(), Step::Register);
	EXPECT_EQ(e.buffer_index(), 2u);
	const std::string what = e.what();
	EXPECT_NE(what.find("arena chunk 2 of 3"), std::string::npos) << what;
	EXPECT_NE(what.find("injected at chunk 2"), std::string::npos) << what;
	EXPECT_EQ(expect_error([&] { a->wait(); }).buffer_index(), 2u); /* every call */
	EXPECT_FALSE(a->ready());
	EXPECT_EQ(a->pages_registered(), 12u); /* chunks 0 and 1 */

	/* Chunks 0 and 1 stay usable. */
	char *p = static_cast<char *>(a->allocate(7 * page));
	EXPECT_EQ(p, a->base() + 4 * page); /* chunk 1: chunk 0 is too small */
	std::memset(p, 1, 7 * page);
	/* Only chunk 2 has room for the next block. */
	Error c = expect_error([&] { (void)a->allocate(5 * page); });
	EXPECT_EQ(c.err(), ENOMEM);
	EXPECT_EQ(c.step(), Step::Register);
	EXPECT_EQ(c.buffer_index(), 2u);
	EXPECT_EQ(a->used(), a->rounded(7 * page)); /* the refused block went back */
	EXPECT_EQ(a->live_blocks(), 1u);
	a->deallocate(p);
	if (ctx_->mode() == Mode::Kernel) {
		EXPECT_EQ(process_pinned_bytes() - pin_, 12 * page);
	}
	a.reset();
	EXPECT_EQ(test::settled_pinned_bytes(pin_), pin_);
}

TEST_F(ArenaAsyncTest, DestroyingItWhileChunksArePreparedUndoesThem)
{
	std::atomic<std::size_t> calls{0};
	detail::set_arena_chunk_hook([&](std::size_t) {
		++calls;
		std::this_thread::sleep_for(50ms);
	});
	std::size_t chunks = 0;
	{
		Arena a(*ctx_, 64 * page, async_small(2)); /* 2, 4, 8, 16, 34 pages */
		chunks = a.chunks();
		(void)a.allocate(page);
		EXPECT_FALSE(a.ready());
	}
	EXPECT_EQ(chunks, 5u);
	EXPECT_GE(calls.load(), 1u);
	EXPECT_LT(calls.load(), chunks) << "the destructor waited for every chunk";
	EXPECT_EQ(test::settled_pinned_bytes(pin_), pin_);
	calls = 0;
	{
		Arena b(*ctx_, 64 * page, async_small(2));
	} /* at once, before a chunk may be ready */
	EXPECT_LT(calls.load(), chunks);
	EXPECT_EQ(test::settled_pinned_bytes(pin_), pin_);
}

TEST_F(ArenaAsyncTest, ThreadsCarveWhileChunksArePrepared)
{
	const std::size_t pages = 128; /* chunks of 4, 8, 16, 32 and 68 pages */
	detail::set_arena_chunk_hook([](std::size_t) { std::this_thread::sleep_for(20ms); });
	Arena a(*ctx_, pages * page, async_small(4));
	const auto base = reinterpret_cast<std::uintptr_t>(a.base());
	const std::size_t threads = 4;
	std::atomic<std::size_t> before_ready{0};
	std::atomic<int> bad{0};
	std::vector<std::thread> ts;
	for (std::size_t t = 0; t < threads; ++t) {
		ts.emplace_back([&, t] {
			std::mt19937 rng(static_cast<unsigned>(t) + 1);
			std::vector<std::pair<char *, std::size_t>> mine;
			for (int i = 0; i < 60; ++i) {
				const std::size_t n = 1 + rng() % (2 * page);
				char *p = nullptr;
				try {
					p = static_cast<char *>(a.allocate(n));
				} catch (const ArenaFull &) {
					continue;
				}
				const bool was_ready = a.ready();
				/* Its chunk was prepared before it was handed out:
				 * chunks are prepared in order, so every page up to
				 * its last byte is registered. */
				const std::size_t end =
					reinterpret_cast<std::uintptr_t>(p) - base + n;
				if (a.pages_registered() * page < end ||
				    reinterpret_cast<std::uintptr_t>(p) % a.alignment() != 0)
					++bad;
				if (!was_ready)
					++before_ready;
				std::memset(p, static_cast<int>(t + 1), n);
				mine.emplace_back(p, n);
				if (rng() % 2 == 0) {
					auto [q, m] = mine.front();
					for (std::size_t b = 0; b < m; ++b)
						if (q[b] != static_cast<char>(t + 1)) {
							++bad;
							break;
						}
					a.deallocate(q);
					mine.erase(mine.begin());
				}
			}
			for (auto [q, m] : mine) {
				for (std::size_t b = 0; b < m; ++b)
					if (q[b] != static_cast<char>(t + 1)) {
						++bad;
						break;
					}
				a.deallocate(q);
			}
		});
	}
	for (auto &t : ts)
		t.join();
	EXPECT_EQ(bad.load(), 0);
	EXPECT_GT(before_ready.load(), 0u) << "no carve ran while the chunks were prepared";
	a.wait();
	EXPECT_EQ(a.used(), 0u);
	EXPECT_EQ(a.live_blocks(), 0u);
	EXPECT_EQ(a.pages_registered(), pages);
}

TEST_F(ArenaAsyncTest, OptionsAndRounding)
{
	ArenaOptions o = async_small(0); /* 0: the default chunk */
	Arena whole(*ctx_, 10 * page, o); /* smaller than one chunk */
	EXPECT_EQ(whole.chunks(), 1u);
	whole.wait();
	EXPECT_EQ(whole.registration().pages(), 10u); /* one chunk: one registration */
	o.chunk_bytes = 3 * page + 1; /* rounded up to 4 pages */
	Arena r(*ctx_, 10 * page, o);
	EXPECT_EQ(r.chunk_bytes(), 4 * page);
	EXPECT_EQ(r.chunks(), 2u); /* 4 pages, then the 6 left */
	r.wait();
	EXPECT_EQ(r.pages_registered(), 10u);
	Arena moved(std::move(r)); /* the preparing thread holds no pointer to the Arena */
	EXPECT_TRUE(moved.ready());
}

#if SVMBATCH_HAS_CUDA
TEST_F(ArenaAsyncTest, AGpuMappingFailingAtChunkKKeepsTheChunksBefore)
{
	fake_cuda_reset(1);
	CudaBackend cuda(CudaOptions{test::fake_cuda_library, 0});
	ArenaOptions o = async_small(4);
	o.backend = &cuda;
	fake_cuda_fail_register_after(2, 2); /* chunk 2: CUDA_ERROR_OUT_OF_MEMORY */
	{
		Arena a(*ctx_, 32 * page, o); /* chunks of 4, 8 and 20 pages */
		Error e = expect_error([&] { a.wait(); });
		EXPECT_EQ(e.step(), Step::GpuMap) << e.what();
		EXPECT_EQ(e.err(), ENOMEM) << e.what();
		EXPECT_EQ(e.buffer_index(), 2u);
		EXPECT_EQ(e.driver_status(), 2);
		EXPECT_EQ(fake_cuda_registered(), 2);
		EXPECT_TRUE(a.gpu_mapped());
		EXPECT_EQ(a.gpu_mapping(), nullptr); /* per chunk */
		char *p = static_cast<char *>(a.allocate(page));
		EXPECT_EQ(a.gpu_address(p + 5 * page),
			  reinterpret_cast<std::uintptr_t>(p + 5 * page));
		EXPECT_EQ(expect_error([&] { (void)a.gpu_address(p + 12 * page); }).buffer_index(),
			  2u);
		a.deallocate(p);
	}
	EXPECT_EQ(fake_cuda_registered(), 0);
	EXPECT_EQ(test::settled_pinned_bytes(pin_), pin_);
	fake_cuda_reset(1);
}

TEST_F(ArenaAsyncTest, ASynchronousArenaKeepsBlocksInsideOneRegistrationCall)
{
	/* Past the limit (64 GiB; 4 pages here) CUDA registers in several calls,
	 * and a copy cannot read across two: no block crosses a cut. */
	fake_cuda_reset(1);
	detail::set_host_register_chunk_bytes(4 * page);
	CudaBackend cuda(CudaOptions{test::fake_cuda_library, 0});
	ArenaOptions o = async_small(0);
	o.async = false;
	o.backend = &cuda;
	{
		Arena a(*ctx_, 10 * page, o);
		EXPECT_EQ(a.chunks(), 1u);
		EXPECT_EQ(fake_cuda_registered(), 3); /* 4, 4 and 2 pages */
		char *p = static_cast<char *>(a.allocate(page));
		char *q = static_cast<char *>(a.allocate(4 * page));
		/* A 4-page block is one whole call's pages, wherever p went. */
		EXPECT_EQ(static_cast<std::size_t>(q - a.base()) % (4 * page), 0u);
		EXPECT_THROW((void)a.allocate(5 * page), ArenaFull);
		a.deallocate(p);
		a.deallocate(q);
		o.backend = nullptr; /* no GPU mapping: no cut */
		Arena plain(*ctx_, 10 * page, o);
		plain.deallocate(plain.allocate(10 * page));
	}
	detail::set_host_register_chunk_bytes(0);
	EXPECT_EQ(fake_cuda_registered(), 0);
	fake_cuda_reset(1);
}
#endif

} // namespace
} // namespace svmbatch
