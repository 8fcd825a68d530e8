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

TEST_F(ArenaAsyncTest, CarvesTheSameBlocksAsASynchronousArena)
{
	const std::size_t cap = 64 * page + 100;
	ArenaOptions sync_o = async_small(4);
	sync_o.async = false;
	Arena sync(*ctx_, cap, sync_o);
	Arena async(*ctx_, cap, async_small(4));

	EXPECT_TRUE(sync.ready());
	EXPECT_EQ(sync.chunks(), 1u);
	EXPECT_EQ(async.chunks(), 17u); /* 65 pages in chunks of 4 */
	EXPECT_EQ(async.chunk_bytes(), 4 * page);
	EXPECT_EQ(async.mapped_bytes(), sync.mapped_bytes());
	std::mt19937 rng(7);
	std::vector<std::pair<void *, void *>> live;
	for (int i = 0; i < 200; ++i) {
		if (!live.empty() && rng() % 3 == 0) {
			const std::size_t k = rng() % live.size();
			sync.deallocate(live[k].first);
			async.deallocate(live[k].second);
			live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
			continue;
		}
		const std::size_t n = 1 + rng() % (3 * page);
		void *s = nullptr;
		try {
			s = sync.allocate(n);
		} catch (const ArenaFull &) {
			EXPECT_THROW((void)async.allocate(n), ArenaFull);
			continue;
		}
		void *a = async.allocate(n);
		ASSERT_EQ(static_cast<char *>(s) - sync.base(),
			  static_cast<char *>(a) - async.base());
		std::memset(a, 0x5a, n);
		live.emplace_back(s, a);
	}
	async.wait();
	EXPECT_TRUE(async.ready());
	EXPECT_EQ(async.used(), sync.used());
	EXPECT_EQ(async.largest_free(), sync.largest_free());
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
	Arena a(*ctx_, 16 * page, async_small(4));

	gate.until_reached(); /* chunk 0 ready, chunk 1 held */
	void *first = a.allocate(page); /* inside chunk 0: no wait */
	EXPECT_EQ(first, a.base());
	EXPECT_FALSE(a.ready());
	EXPECT_EQ(a.pages_registered(), 4u);

	std::atomic<bool> done{false};
	void *second = nullptr;
	std::thread t([&] {
		second = a.allocate(4 * page); /* pages 1 to 4: chunks 0 and 1 */
		done = true;
	});
	std::this_thread::sleep_for(100ms);
	EXPECT_FALSE(done) << "a carve covering a held chunk returned";
	gate.open();
	t.join();
	EXPECT_TRUE(done);
	EXPECT_EQ(second, a.base() + page);
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
	a.emplace(*ctx_, 16 * page, async_small(4));

	Error e = expect_error([&] { a->wait(); });
	EXPECT_EQ(e.err(), ENOMEM);
	EXPECT_EQ(e.step(), Step::Register);
	EXPECT_EQ(e.buffer_index(), 2u);
	const std::string what = e.what();
	EXPECT_NE(what.find("arena chunk 2 of 4"), std::string::npos) << what;
	EXPECT_NE(what.find("injected at chunk 2"), std::string::npos) << what;
	EXPECT_EQ(expect_error([&] { a->wait(); }).buffer_index(), 2u); /* every call */
	EXPECT_FALSE(a->ready());
	EXPECT_EQ(a->pages_registered(), 8u); /* chunks 0 and 1 */

	/* Chunks 0 and 1 stay usable. */
	char *p = static_cast<char *>(a->allocate(7 * page));
	EXPECT_EQ(p, a->base());
	std::memset(p, 1, 7 * page);
	/* The next block would start in chunk 1 and end in chunk 2. */
	Error c = expect_error([&] { (void)a->allocate(2 * page); });
	EXPECT_EQ(c.err(), ENOMEM);
	EXPECT_EQ(c.step(), Step::Register);
	EXPECT_EQ(c.buffer_index(), 2u);
	EXPECT_EQ(a->used(), a->rounded(7 * page)); /* the refused block went back */
	EXPECT_EQ(a->live_blocks(), 1u);
	a->deallocate(p);
	if (ctx_->mode() == Mode::Kernel) {
		EXPECT_EQ(process_pinned_bytes() - pin_, 8 * page);
	}
	a.reset();
	EXPECT_EQ(test::settled_pinned_bytes(pin_), pin_);
}

TEST_F(ArenaAsyncTest, DestroyingItWhileChunksArePreparedUndoesThem)
{
	std::atomic<std::size_t> calls{0};
	detail::set_arena_chunk_hook([&](std::size_t) {
		++calls;
		std::this_thread::sleep_for(10ms);
	});
	{
		Arena a(*ctx_, 64 * page, async_small(2)); /* 32 chunks: 320 ms */
		(void)a.allocate(page);
		EXPECT_FALSE(a.ready());
	}
	EXPECT_GE(calls.load(), 1u);
	EXPECT_LT(calls.load(), 32u) << "the destructor waited for every chunk";
	EXPECT_EQ(test::settled_pinned_bytes(pin_), pin_);
	calls = 0;
	{
		Arena b(*ctx_, 64 * page, async_small(2));
	} /* at once, before a chunk may be ready */
	EXPECT_LT(calls.load(), 32u);
	EXPECT_EQ(test::settled_pinned_bytes(pin_), pin_);
}

TEST_F(ArenaAsyncTest, ThreadsCarveWhileChunksArePrepared)
{
	const std::size_t chunk_pages = 4;
	const std::size_t chunks = 32;
	detail::set_arena_chunk_hook([](std::size_t) { std::this_thread::sleep_for(3ms); });
	Arena a(*ctx_, chunks * chunk_pages * page, async_small(chunk_pages));
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
				/* Its chunks were prepared before it was handed out:
				 * every chunk up to its last byte registered. */
				const std::size_t end =
					reinterpret_cast<std::uintptr_t>(p) - base + n;
				const std::size_t need = (end + chunk_pages * page - 1) /
							 (chunk_pages * page) * chunk_pages;
				if (a.pages_registered() < need ||
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
	EXPECT_EQ(a.pages_registered(), chunks * chunk_pages);
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
	EXPECT_EQ(r.chunks(), 3u);
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
		Arena a(*ctx_, 16 * page, o);
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
		EXPECT_EQ(expect_error([&] { (void)a.gpu_address(p + 8 * page); }).buffer_index(),
			  2u);
		a.deallocate(p);
	}
	EXPECT_EQ(fake_cuda_registered(), 0);
	EXPECT_EQ(test::settled_pinned_bytes(pin_), pin_);
	fake_cuda_reset(1);
}
#endif

} // namespace
} // namespace svmbatch
