// SPDX-License-Identifier: MIT
// IoLoop's device reads (SVMBATCH_IO_READ_DEVICE) with CPU producers and
// CudaCopyEngine over the FAKE CUDA driver (fake_cuda/: its "device
// memory" is host memory it was told about, its copies memcpy at once,
// its events may answer "not ready" a few times): the staging cut in
// chunks and shared by many producers, hostile requests, the copy's own
// failures, the end of the file, and stop() with copies in flight.  Every
// completion is checked, not a sample.  The real copy engine runs on the
// H100 (tools/device/cuda_device_tests.cpp).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "fake_cuda/fake_cuda.h"
#include "io_loop_fixture.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

using test::expect_error;
using test::file_bytes;
using test::pattern_byte;

constexpr std::size_t chunk = 64 << 10;
constexpr char guard_byte = '\x5a';

/// "Device memory" for the fake: bytes with a guard either side.
struct DeviceMemory {
	static constexpr std::size_t guard = 256;
	explicit DeviceMemory(std::size_t n) : mem(n + 2 * guard, guard_byte), len(n)
	{
		fake_cuda_add_device(mem.data() + guard, n);
	}
	char *data() { return mem.data() + guard; }
	std::uint64_t address() { return reinterpret_cast<std::uintptr_t>(data()); }
	bool guards_intact() const
	{
		for (std::size_t k = 0; k < guard; k++)
			if (mem[k] != guard_byte || mem[mem.size() - 1 - k] != guard_byte)
				return false;
		return true;
	}
	std::vector<char> mem;
	std::size_t len;
};

bool holds_file(const char *p, std::uint64_t off, std::size_t n)
{
	for (std::size_t k = 0; k < n; k++)
		if (static_cast<std::uint8_t>(p[k]) != pattern_byte(off + k))
			return false;
	return true;
}

/// A copy engine that copies at once but holds each copy's end until the
/// test lets it go, and counts the most copies held at once: the staging
/// a loop has in use, since a piece keeps its chunk until its copy ends.
class HoldingEngine final : public GpuCopyEngine {
public:
	HoldingEngine() = default;
	HoldingEngine(const HoldingEngine &) = delete;
	HoldingEngine &operator=(const HoldingEngine &) = delete;
	HoldingEngine(HoldingEngine &&) = delete;
	HoldingEngine &operator=(HoldingEngine &&) = delete;
	~HoldingEngine() override
	{
		while (release_one()) {
		}
	}
	const char *name() const noexcept override { return "holding"; }
	int copy_to_device(std::uint64_t dst, const void *src, std::size_t n, unsigned /*lane*/,
			   Done done, void *arg) noexcept override
	{
		std::memcpy(reinterpret_cast<void *>(dst), src, n);
		try {
			std::lock_guard lock(mu_);
			held_.emplace_back(done, arg);
			most_ = std::max(most_, held_.size());
		} catch (const std::exception &) {
			return -ENOMEM;
		}
		return 0;
	}
	std::size_t held()
	{
		std::lock_guard lock(mu_);
		return held_.size();
	}
	std::size_t most()
	{
		std::lock_guard lock(mu_);
		return most_;
	}
	/// End the oldest copy held; false when none is.
	bool release_one()
	{
		std::pair<Done, void *> c;
		{
			std::lock_guard lock(mu_);
			if (held_.empty())
				return false;
			c = held_.front();
			held_.pop_front();
		}
		c.first(c.second, 0);
		return true;
	}

private:
	std::mutex mu_;
	std::deque<std::pair<Done, void *>> held_;
	std::size_t most_ = 0;
};

/// Another engine's copies, whose ends it holds, once hold_until_closed()
/// was called, until the loop's ring is closed (stop() began): the copies
/// those ends belong to are then in flight when stop() begins, as many as
/// held_at_close() says.
class StopGateEngine final : public GpuCopyEngine {
public:
	explicit StopGateEngine(GpuCopyEngine &inner) : inner_(inner) {}
	StopGateEngine(const StopGateEngine &) = delete;
	StopGateEngine &operator=(const StopGateEngine &) = delete;
	StopGateEngine(StopGateEngine &&) = delete;
	StopGateEngine &operator=(StopGateEngine &&) = delete;
	~StopGateEngine() override
	{
		quit_ = true;
		if (releaser_.joinable())
			releaser_.join();
		release();
	}
	const char *name() const noexcept override { return "stop-gate"; }
	int copy_to_device(std::uint64_t dst, const void *src, std::size_t n, unsigned lane,
			   Done done, void *arg) noexcept override
	{
		auto *c = new (std::nothrow) Copy{this, done, arg, 0};
		if (!c)
			return -ENOMEM;
		const int r = inner_.copy_to_device(dst, src, n, lane, &StopGateEngine::ended, c);
		if (r != 0)
			delete c;
		return r;
	}
	/// Hold every copy's end from now until queue's ring is closed.
	void hold_until_closed(const svmbatch_io_queue &queue)
	{
		{
			std::lock_guard lock(mu_);
			holding_ = true;
			held_.reserve(256); /* no allocation in ended() */
		}
		releaser_ = std::thread([this, header = queue.header] {
			std::atomic_ref<std::uint32_t> closed(header->closed);
			while (!closed.load(std::memory_order_acquire) && !quit_)
				std::this_thread::sleep_for(std::chrono::microseconds(100));
			release();
		});
	}
	std::size_t held()
	{
		std::lock_guard lock(mu_);
		return held_.size();
	}
	/// How many copies were held when the ring was closed.
	std::size_t held_at_close()
	{
		std::lock_guard lock(mu_);
		return held_at_close_;
	}

private:
	struct Copy {
		StopGateEngine *gate;
		Done done;
		void *arg;
		int status;
	};
	static void ended(void *p, int status) noexcept
	{
		std::unique_ptr<Copy> c(static_cast<Copy *>(p));
		c->status = status;
		{
			std::lock_guard lock(c->gate->mu_);
			if (c->gate->holding_) {
				c->gate->held_.push_back(*c);
				return;
			}
		}
		c->done(c->arg, status);
	}
	void release()
	{
		std::vector<Copy> ends;
		{
			std::lock_guard lock(mu_);
			if (holding_)
				held_at_close_ = held_.size();
			holding_ = false;
			ends.swap(held_);
		}
		for (const Copy &c : ends)
			c.done(c.arg, c.status);
	}

	GpuCopyEngine &inner_;
	std::mutex mu_;
	bool holding_ = false;
	std::vector<Copy> held_;
	std::size_t held_at_close_ = 0;
	std::atomic<bool> quit_{false};
	std::thread releaser_;
};

class IoLoopDeviceTest : public test::IoLoopFixture {
protected:
	void SetUp() override
	{
		test::IoLoopFixture::SetUp();
		fake_cuda_reset(1);
		cuda_.emplace(CudaOptions{test::fake_cuda_library, 0});
		engine_.emplace(*cuda_, 3);
	}
	void TearDown() override
	{
		engine_.reset();
		cuda_.reset();
		EXPECT_EQ(fake_cuda_live_streams(), 0);
		EXPECT_EQ(fake_cuda_live_events(), 0);
		EXPECT_EQ(fake_cuda_context_depth(), 0) << "a context was left current";
		EXPECT_EQ(fake_cuda_calls_without_context(), 0);
	}

	/// Staging of `chunks` chunks as buffer 0, host buffers after it.
	test::LoopBuffers buffers(std::size_t chunks, std::vector<std::size_t> more = {})
	{
		more.insert(more.begin(), chunks * chunk);
		return {*ctx_, more, {}, 64};
	}
	IoLoopOptions options(std::span<const IoLoopDeviceBuffer> device, unsigned slots = 64,
			      GpuCopyEngine *engine = nullptr)
	{
		IoLoopOptions o = test::loop_options(slots, 2);
		o.device.engine = engine ? engine : &*engine_;
		o.device.buffers = device;
		o.device.staging = 0;
		o.device.chunk_bytes = chunk;
		return o;
	}

	/// What the tests of device reads share: a loop over b whose one device
	/// buffer is dev, a client of it, and file_ added to it as f.
	struct DeviceLoop {
		DeviceLoop(IoLoopDeviceTest &t, DeviceMemory &dev, const test::LoopBuffers &b,
			   unsigned slots = 64, GpuCopyEngine *engine = nullptr)
			: d{dev.address(), dev.len},
			  loop(*t.ctx_, *b.reg, t.options({&d, 1}, slots, engine)),
			  client(loop.host_queue()), f(loop.add_file(t.file_.fd()))
		{}
		/// Read len bytes of f from off to byte at of the device buffer,
		/// and wait for the completion.
		IoCompletion read_device(std::uint64_t off, std::uint64_t len, std::uint64_t at,
					 std::uint64_t tag = 0) const
		{
			return client.wait(client.read_device(f, off, len, 0, at, tag));
		}

		const IoLoopDeviceBuffer d;
		IoLoop loop;
		IoLoopClient client;
		const std::uint32_t f;
	};

	test::ScratchFile file_{file_bytes};
	std::optional<CudaBackend> cuda_;
	std::optional<CudaCopyEngine> engine_;
};

/* The engine's polling thread is named, and goes with the engine. */
TEST_F(IoLoopDeviceTest, TheCopyThreadIsNamed)
{
	const std::size_t before = test::threads_named("svmbatch-copy");
	{
		CudaCopyEngine engine(*cuda_, 2);
		EXPECT_EQ(test::threads_named("svmbatch-copy"), before + 1);
	}
	EXPECT_EQ(test::threads_named("svmbatch-copy"), before);
}

TEST_F(IoLoopDeviceTest, OneReadLandsInDeviceMemoryThroughTheStaging)
{
	DeviceMemory dev(1 << 20);
	test::LoopBuffers b = buffers(4);
	GpuMapping staging = cuda_->map(*b.reg); // DMA-able, as on a GPU
	DeviceLoop l(*this, dev, b);

	const IoCompletion c = l.read_device(12345, 300000, 1000, 9);
	EXPECT_EQ(c.status, 0);
	EXPECT_EQ(c.bytes, 300000u);
	EXPECT_EQ(c.tag, 9u);
	EXPECT_TRUE(holds_file(dev.data() + 1000, 12345, 300000));
	EXPECT_EQ(dev.data()[999], guard_byte) << "wrote before the range";
	EXPECT_EQ(dev.data()[301000], guard_byte) << "wrote past the range";
	EXPECT_TRUE(dev.guards_intact());
	EXPECT_EQ(fake_cuda_copies(), 5) << "one copy per 64 KiB chunk";
	EXPECT_EQ(l.loop.stats().bytes, 300000u);
}

/* 6 producers, 300 requests each of up to 200 KB through 4 chunks of
 * staging, events that need polling: each completes once, whole, its
 * bytes where it asked. */
TEST_F(IoLoopDeviceTest, ManyProducersShareFewChunks)
{
	constexpr int producers = 6, per_producer = 300;
	constexpr std::size_t region = 256 << 10;
	DeviceMemory dev(producers * region);
	test::LoopBuffers b = buffers(4);
	GpuMapping staging = cuda_->map(*b.reg);
	fake_cuda_event_polls(3);
	DeviceLoop l(*this, dev, b, 32);
	std::atomic<int> wrong{0};

	test::on_threads(producers, [&](int p) {
		std::mt19937_64 rng(static_cast<unsigned>(p));
		char *mine = dev.data() + static_cast<std::size_t>(p) * region;
		for (int i = 0; i < per_producer; i++) {
			const std::uint64_t len = 1 + rng() % 200000;
			const std::uint64_t off = rng() % (file_bytes - len);
			const std::uint64_t at = rng() % (region - len);
			const auto tag = static_cast<std::uint64_t>(p) << 32 |
					 static_cast<unsigned>(i);
			const IoCompletion c =
				l.read_device(off, len, static_cast<std::uint64_t>(p) * region + at,
					      tag);
			if (c.status || c.bytes != len || c.tag != tag ||
			    !holds_file(mine + at, off, len))
				wrong++;
		}
	});
	EXPECT_EQ(wrong.load(), 0);
	EXPECT_TRUE(dev.guards_intact());
	const IoLoopStats s = l.loop.stats();
	EXPECT_EQ(s.completed, std::uint64_t{producers} * per_producer);
	EXPECT_EQ(s.failed, 0u);
}

/* Requests outside what the loop may touch complete with an error, and
 * nothing reaches device memory or the staging. */
TEST_F(IoLoopDeviceTest, HostileRequestsAreRefusedAndWriteNothing)
{
	DeviceMemory dev(64 << 10);
	test::LoopBuffers b = buffers(2, {4096});
	std::fill_n(b.data(0), 2 * chunk, guard_byte);
	DeviceLoop l(*this, dev, b);
	const IoLoopClient &client = l.client;
	const std::uint32_t f = l.f;
	const int wronly = ::open(file_.path().c_str(), O_WRONLY);
	ASSERT_GE(wronly, 0);
	const std::uint32_t w = l.loop.add_file(wronly);
	struct Case {
		const char *what;
		std::int64_t ticket;
		int status;
	};
	const Case cases[] = {
		{"no such device buffer", client.read_device(f, 0, 10, 1, 0), -EINVAL},
		{"past the device buffer", client.read_device(f, 0, 10, 0, (64 << 10) - 9),
		 -EINVAL},
		{"an offset past it", client.read_device(f, 0, 1, 0, ~0ull), -EINVAL},
		{"a host read into the staging", client.read(f, 0, 10, 0, 0), -EINVAL},
		{"a write from the staging", client.write(w, 0, 10, 0, 0), -EINVAL},
		{"a file not open for reading", client.read_device(w, 0, 10, 0, 0), -EACCES},
		{"no such file", client.read_device(77, 0, 10, 0, 0), -EBADF},
	};
	for (const Case &c : cases) {
		const IoCompletion got = client.wait(c.ticket);
		EXPECT_EQ(got.status, c.status) << c.what;
		EXPECT_EQ(got.bytes, 0u) << c.what;
	}
	EXPECT_EQ(std::count(dev.mem.begin(), dev.mem.end(), guard_byte),
		  static_cast<std::ptrdiff_t>(dev.mem.size()));
	EXPECT_EQ(std::count(b.data(0), b.data(0) + 2 * chunk, guard_byte),
		  static_cast<std::ptrdiff_t>(2 * chunk));
	EXPECT_EQ(fake_cuda_copies(), 0);
	::close(wronly);
}

/* Without an engine a device read is an unknown operation. */
TEST_F(IoLoopDeviceTest, ALoopWithoutDeviceReadsRefusesThem)
{
	DeviceMemory dev(4096);
	test::LoopBuffers b = buffers(1);
	IoLoop loop(*ctx_, *b.reg, test::loop_options(32, 1));
	IoLoopClient client(loop.host_queue());
	const std::uint32_t f = loop.add_file(file_.fd());

	EXPECT_EQ(client.wait(client.read_device(f, 0, 10, 0, 0)).status, -EINVAL);
	EXPECT_EQ(client.wait(client.read(f, 0, 10, 0, 0)).status, 0)
		<< "buffer 0 is an ordinary buffer here";
}

/* The copy's own failures are the request's status, with no bytes; the
 * next copies work again, and every chunk came back. */
TEST_F(IoLoopDeviceTest, TheCopysFailuresAreTheStatus)
{
	DeviceMemory dev(1 << 20);
	test::LoopBuffers b = buffers(2);
	DeviceLoop l(*this, dev, b);

	fake_cuda_fail_copies(2); // CUDA_ERROR_OUT_OF_MEMORY
	IoCompletion c = l.read_device(0, 3 * chunk, 0);
	EXPECT_EQ(c.status, -ENOMEM);
	EXPECT_EQ(c.bytes, 0u);
	fake_cuda_fail_copies(0);
	fake_cuda_fail_events(999); // CUDA_ERROR_UNKNOWN
	c = l.read_device(0, 3 * chunk, 0);
	EXPECT_EQ(c.status, -EIO);
	EXPECT_EQ(c.bytes, 0u);
	fake_cuda_fail_events(0);
	for (int i = 0; i < 20; i++) { // more chunks than there are: all came back
		c = l.read_device(4096, 3 * chunk, 0);
		ASSERT_EQ(c.status, 0) << i;
		ASSERT_EQ(c.bytes, 3 * chunk);
	}
	EXPECT_TRUE(holds_file(dev.data(), 4096, 3 * chunk));
}

/* A read meeting the end of the file: -ENODATA, and the bytes it read are
 * in device memory. */
TEST_F(IoLoopDeviceTest, EndOfFileIsENODATAWithTheBytesRead)
{
	DeviceMemory dev(1 << 20);
	test::LoopBuffers b = buffers(2);
	DeviceLoop l(*this, dev, b);

	const IoCompletion c = l.read_device(file_bytes - 1000, 200000, 0);
	EXPECT_EQ(c.status, -ENODATA);
	EXPECT_EQ(c.bytes, 1000u);
	EXPECT_TRUE(holds_file(dev.data(), file_bytes - 1000, 1000));
	EXPECT_EQ(dev.data()[1000], guard_byte);
}

TEST_F(IoLoopDeviceTest, BadStagingIsEINVAL)
{
	DeviceMemory dev(4096);
	const IoLoopDeviceBuffer d{dev.address(), dev.len};
	test::LoopBuffers small(*ctx_, {chunk - 1}, {}, 64);
	test::LoopBuffers ro(*ctx_, {chunk}, {Access::ReadOnly}, 64);
	test::LoopBuffers ok = buffers(1);
	struct Case {
		const char *what;
		const test::LoopBuffers &b;
		std::uint32_t staging;
		std::size_t chunk_bytes;
	};
	const Case cases[] = {{"smaller than a chunk", small, 0, chunk},
			      {"read-only", ro, 0, chunk},
			      {"no such buffer", ok, 1, chunk},
			      {"chunks of 0 bytes", ok, 0, 0}};
	for (const Case &c : cases) {
		IoLoopOptions o = options({&d, 1});
		o.device.staging = c.staging;
		o.device.chunk_bytes = c.chunk_bytes;
		const Error e = expect_error([&] { IoLoop loop(*ctx_, *c.b.reg, o); });
		EXPECT_EQ(e.err(), EINVAL) << c.what;
		EXPECT_EQ(e.step(), Step::Validate) << c.what;
	}
}

/* device.staged_bytes bounds the staging in use, in whole chunks and one
 * at least: with six reads of a chunk published at once and the copies
 * held, only that many chunks are read into and copied; the others wait
 * for a chunk, then every read completes whole. */
TEST_F(IoLoopDeviceTest, StagedBytesBoundsTheChunksInUse)
{
	constexpr int reads = 6;
	const std::pair<std::size_t, std::size_t> cases[] = {{2 * chunk + chunk / 2, 2},
							     {1, 1},
							     {0, reads}};
	for (const auto &[staged, in_use] : cases) {
		SCOPED_TRACE("staged_bytes " + std::to_string(staged));
		DeviceMemory dev(reads * chunk);
		test::LoopBuffers b = buffers(8);
		HoldingEngine held;
		const IoLoopDeviceBuffer d{dev.address(), dev.len};
		IoLoopOptions o = options({&d, 1});
		o.device.engine = &held;
		o.device.staged_bytes = staged;
		IoLoop loop(*ctx_, *b.reg, o);
		const IoLoopClient client(loop.host_queue());
		const std::uint32_t f = loop.add_file(file_.fd());
		std::vector<std::int64_t> tickets(reads);
		for (int i = 0; i < reads; i++)
			tickets[static_cast<std::size_t>(i)] =
				client.read_device(f, i * chunk, chunk, 0, i * chunk,
						   static_cast<std::uint64_t>(i));
		const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
		while (held.held() < in_use && std::chrono::steady_clock::now() < deadline)
			std::this_thread::yield();
		// What a third chunk would have had the time to start.
		std::this_thread::sleep_for(std::chrono::milliseconds(20));
		EXPECT_EQ(held.held(), in_use);
		for (int released = 0;
		     released < reads && std::chrono::steady_clock::now() < deadline;)
			if (held.release_one())
				released++;
			else
				std::this_thread::yield();
		for (int i = 0; i < reads; i++) {
			const IoCompletion c = client.wait(tickets[static_cast<std::size_t>(i)]);
			EXPECT_EQ(c.status, 0) << "read " << i;
			EXPECT_EQ(c.bytes, chunk) << "read " << i;
			EXPECT_EQ(c.tag, static_cast<std::uint64_t>(i));
			EXPECT_TRUE(holds_file(dev.data() + i * chunk, i * chunk, chunk))
				<< "read " << i;
		}
		EXPECT_EQ(held.most(), in_use);
		EXPECT_TRUE(dev.guards_intact());
	}
}

/* stop() while producers read into device memory: every request ends
 * whole or cancelled, none lost, and the copies all ended before it
 * returned.  The race is made, not hoped for: the copies' ends are held
 * from before stop() until it began, so that copies are in flight then. */
TEST_F(IoLoopDeviceTest, StopWithCopiesInFlightCompletesEveryOne)
{
	constexpr int producers = 4;
	constexpr std::uint64_t len = 192 << 10;
	DeviceMemory dev(producers * len);
	test::LoopBuffers b = buffers(3);
	fake_cuda_event_polls(2);
	std::uint64_t published = 0;

	for (int attempt = 0; attempt < 5 && !HasFailure(); attempt++) {
		StopGateEngine gate(*engine_);
		DeviceLoop l(*this, dev, b, 64, &gate);
		const test::StopRace race = test::stop_while_producing(
			l.loop, l.client, producers, 50, len,
			[&](int p, std::uint64_t i) {
				return l.client.read_device(l.f, (i * 4096) % (file_bytes - len),
							    len, 0,
							    static_cast<std::uint64_t>(p) * len);
			},
			[&] {
				gate.hold_until_closed(l.loop.host_queue());
				const auto deadline =
					std::chrono::steady_clock::now() + std::chrono::seconds(10);
				while (gate.held() == 0 &&
				       std::chrono::steady_clock::now() < deadline)
					std::this_thread::yield();
			});
		EXPECT_GE(gate.held_at_close(), 1u) << "no copy was in flight when stop() began";
		EXPECT_TRUE(l.loop.stopped());
		EXPECT_EQ(race.other, 0u);
		EXPECT_EQ(race.whole + race.cancelled, race.published);
		EXPECT_EQ(l.loop.stats().completed, race.published);
		EXPECT_EQ(l.loop.stats().undelivered, 0u);
		published += race.published;
	}
	EXPECT_GT(published, 0u);
	EXPECT_TRUE(dev.guards_intact());
}

} // namespace
} // namespace svmbatch
