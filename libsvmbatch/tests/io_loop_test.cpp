// SPDX-License-Identifier: MIT
// IoLoop with CPU threads playing the GPU's part of the protocol
// (IoLoopClient: the same ring, slots and fences as <svmbatch/gpu_io.cuh>):
// many producers and a ring smaller than the requests, hostile requests,
// the file's own errors, shutdown with requests in flight.  Every
// completion is checked, not a sample.  Runs under ASan and TSan on the
// host (userspace mode) and in the guests (kernel mode).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "io_loop_fixture.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

using test::expect_error;
using test::file_bytes;
using test::pattern_byte;

/// Caller buffers with guard bytes around each, registered together.
struct Guarded : test::LoopBuffers {
	Guarded(Context &ctx, const std::vector<std::size_t> &sizes,
		const std::vector<Access> &access = {})
		: LoopBuffers(ctx, sizes, access, 64)
	{}
};

/// Bytes of buffer at [at, at + n) equal the file's at off.
bool holds_file(const char *p, std::uint64_t off, std::size_t n)
{
	for (std::size_t k = 0; k < n; k++)
		if (static_cast<std::uint8_t>(p[k]) != pattern_byte(off + k))
			return false;
	return true;
}

IoLoopOptions small_ring(unsigned slots = 32)
{
	return test::loop_options(slots, 2);
}

class IoLoopTest : public test::IoLoopFixture {
protected:
	test::ScratchFile file_{file_bytes};
};

TEST_F(IoLoopTest, OneRequestReadsIntoItsBuffer)
{
	Guarded b(*ctx_, {10000});
	IoLoop loop(*ctx_, *b.reg, small_ring());
	std::uint32_t f = loop.add_file(file_.fd());
	IoLoopClient client(loop.host_queue());

	std::int64_t t = client.read(f, 12345, 8000, 0, 1000, 77);
	ASSERT_GE(t, 0);
	IoCompletion c = client.wait(t);
	EXPECT_EQ(c.status, 0);
	EXPECT_EQ(c.bytes, 8000u);
	EXPECT_EQ(c.tag, 77u);
	EXPECT_TRUE(holds_file(b.data(0) + 1000, 12345, 8000));
	EXPECT_TRUE(b.guards_intact(0));
	IoLoopStats s = loop.stats();
	EXPECT_EQ(s.requests, 1u);
	EXPECT_EQ(s.completed, 1u);
	EXPECT_EQ(s.bytes, 8000u);
}

/* top -H and ps -L tell the loop's threads apart: one pump, and an I/O
 * thread per ring: as many as asked with a ring per thread, one with
 * AsyncWorkers (io-wq's workers copy; Auto's choice where the kernel
 * cannot clone a buffer table, as 6.1); none once the loop is gone. */
TEST_F(IoLoopTest, ItsThreadsAreNamed)
{
	Guarded b(*ctx_, {4096});
	const std::size_t pumps = test::threads_named("svmbatch-pump"),
			  io = test::threads_named("svmbatch-io");
	for (const Parallelism p : {Parallelism::RingPerThread, Parallelism::AsyncWorkers}) {
		SCOPED_TRACE(p == Parallelism::AsyncWorkers ? "AsyncWorkers" : "RingPerThread");
		{
			IoLoopOptions o = test::loop_options(32, 3);
			o.io.parallelism = p;
			o.io.clone_buffers = false; // a ring per thread on every kernel
			IoLoop loop(*ctx_, *b.reg, o);
			EXPECT_EQ(test::threads_named("svmbatch-pump"), pumps + 1);
			EXPECT_EQ(test::threads_named("svmbatch-io"),
				  io + (p == Parallelism::AsyncWorkers ? 1 : 3));
		}
		EXPECT_EQ(test::threads_named("svmbatch-pump"), pumps);
		EXPECT_EQ(test::threads_named("svmbatch-io"), io);
	}
}

/* A loop of one I/O thread and a 30 s spin with a read of len bytes of
 * an empty pipe in flight: check(loop) runs while it waits; then the
 * pipe's writer closes and the read ends with -ENODATA. */
void read_empty_pipe(Context &ctx, std::uint64_t len, const std::function<void(IoLoop &)> &check)
{
	int fds[2];
	ASSERT_EQ(::pipe(fds), 0);
	Guarded b(ctx, {std::max<std::size_t>(len, 1 << 20)});
	IoLoopOptions o = test::loop_options(32, 1);
	o.spin = std::chrono::seconds(30);
	IoLoop loop(ctx, *b.reg, o);
	const std::uint32_t f = loop.add_file(fds[0]);
	IoLoopClient client(loop.host_queue());
	const std::int64_t t = client.read(f, 0, len, 0, 0);
	ASSERT_GE(t, 0);
	check(loop);
	::close(fds[1]); // the read ends: no data
	const IoCompletion c = client.wait(t);
	EXPECT_EQ(c.status, -ENODATA) << len;
	EXPECT_EQ(c.bytes, 0u);
	::close(fds[0]);
}

/* An I/O thread with a large transfer in flight that io_uring did not
 * finish inline (here a pipe's read, armed on poll; a buffered read of
 * tmpfs goes to an io-wq worker) sleeps on its ring, leaving the core to
 * whoever copies; with a small one in flight it spins, as one small
 * request's latency wants.  Both with a spin time longer than the test,
 * so that only the bytes in flight decide. */
TEST_F(IoLoopTest, AnIoThreadSleepsOnLargeTransfersAndSpinsOnSmallOnes)
{
	for (const std::uint64_t len : {std::uint64_t{1} << 20, std::uint64_t{4096}})
		read_empty_pipe(*ctx_, len, [len](IoLoop &) {
			const std::vector<int> io = test::thread_ids_named("svmbatch-io");
			ASSERT_EQ(io.size(), 1u) << "another loop's I/O threads are alive";
			std::this_thread::sleep_for(std::chrono::milliseconds(50));
			const int running =
				test::times_running(io[0], 200, std::chrono::microseconds(500));
			if (len > (256 << 10))
				EXPECT_LT(running, 100) << len << " B in flight: spins";
			else
				EXPECT_GT(running, 180) << len << " B in flight: sleeps";
		});
}

/* Likewise the pump: with much handed to the I/O threads (here a 4 MiB
 * read of an empty pipe) it parks at once, leaving the cores to the
 * copies; with one small request in flight it spins, ready for the next.
 * A spin time longer than the test, so that only the bytes decide: the
 * parks counted over 100 ms say which.  (Not the thread's state: a pump
 * parked 50 us at a time under ASan or TCG is running about half the
 * time.) */
TEST_F(IoLoopTest, APumpParksWhileMuchIsWithTheIoThreadsAndSpinsOtherwise)
{
	for (const std::uint64_t len : {std::uint64_t{4} << 20, std::uint64_t{4096}})
		read_empty_pipe(*ctx_, len, [len](IoLoop &loop) {
			std::this_thread::sleep_for(std::chrono::milliseconds(20));
			const std::uint64_t parks = loop.stats().parks;
			std::this_thread::sleep_for(std::chrono::milliseconds(100));
			if (len > (2 << 20))
				EXPECT_GT(loop.stats().parks, parks)
					<< len << " B with the I/O threads: spins";
			else
				EXPECT_EQ(loop.stats().parks, parks)
					<< len << " B with the I/O threads: parks";
		});
}

/* One I/O thread keeping at most thread_bytes in flight: three 64 KiB
 * reads of an empty pipe published together, 64 KiB allowed.  The
 * second goes to io_uring only once the first ended, the third once the
 * second did; without the cap all three are submitted at once, long
 * before the writer, 50 ms later, lets any end.  The trace says which. */
TEST_F(IoLoopTest, AnIoThreadKeepsAtMostThreadBytesInFlight)
{
	constexpr std::uint64_t piece = 64 << 10;
	int fds[2];
	ASSERT_EQ(::pipe(fds), 0);
	Guarded b(*ctx_, {3 * piece});
	std::vector<IoLoopTimes> trace(3);
	IoLoopOptions o = test::loop_options(32, 1);
	o.thread_bytes = piece;
	o.trace = trace;
	std::vector<std::int64_t> t;
	{
		IoLoop loop(*ctx_, *b.reg, o);
		const std::uint32_t f = loop.add_file(fds[0]);
		IoLoopClient client(loop.host_queue());
		for (std::uint64_t k = 0; k < 3; k++)
			t.push_back(client.read(f, 0, piece, 0, k * piece, k));
		std::this_thread::sleep_for(std::chrono::milliseconds(50));
		const std::vector<char> data(3 * piece, 'x');
		/* Blocks while the pipe is full: the loop's reads drain it. */
		ASSERT_EQ(::write(fds[1], data.data(), data.size()),
			  static_cast<ssize_t>(data.size()));
		for (std::uint64_t k = 0; k < 3; k++) {
			ASSERT_GE(t[k], 0);
			const IoCompletion c = client.wait(t[k]);
			EXPECT_EQ(c.status, 0) << k;
			EXPECT_EQ(c.bytes, piece) << k;
			EXPECT_EQ(c.tag, k);
		}
		loop.stop();
	}
	for (std::size_t k = 1; k < 3; k++) {
		const IoLoopTimes &prev = trace[static_cast<std::size_t>(t[k - 1])];
		const IoLoopTimes &cur = trace[static_cast<std::size_t>(t[k])];
		ASSERT_NE(cur.submitted_ns, 0u) << k;
		EXPECT_GE(cur.submitted_ns, prev.done_ns)
			<< "read " << k << " went to io_uring before read " << k - 1 << " ended";
	}
	EXPECT_EQ(std::count(b.data(0), b.data(0) + 3 * piece, 'x'),
		  static_cast<std::ptrdiff_t>(3 * piece));
	::close(fds[0]);
	::close(fds[1]);
}

TEST_F(IoLoopTest, BadOptionsAreEINVAL)
{
	Guarded b(*ctx_, {4096});
	for (unsigned slots : {0u, 16u, 48u, 1000u}) {
		IoLoopOptions o;
		o.slots = slots;
		Error e = expect_error([&] { IoLoop loop(*ctx_, *b.reg, o); });
		EXPECT_EQ(e.err(), EINVAL) << slots;
		EXPECT_EQ(e.step(), Step::Validate);
	}
	IoLoopOptions o;
	o.thread_bytes = 0;
	Error e = expect_error([&] { IoLoop loop(*ctx_, *b.reg, o); });
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_EQ(e.step(), Step::Validate);
}

/* 8 producers, 1500 requests each, 4 outstanding per producer, through
 * 32 slots: every request completes once, with its own tag, and its bytes
 * land where it asked, nowhere else. */
TEST_F(IoLoopTest, ManyProducersThroughFewerSlotsThanRequests)
{
	constexpr int producers = 8, per_producer = 1500, window = 4;
	constexpr std::size_t buf_len = 64 << 10;
	Guarded b(*ctx_, std::vector<std::size_t>(producers, buf_len));
	IoLoop loop(*ctx_, *b.reg, small_ring(32));
	std::uint32_t f = loop.add_file(file_.fd());
	IoLoopClient client(loop.host_queue());
	std::atomic<int> bad{0};

	auto produce = [&](int p) {
		std::mt19937_64 rng(static_cast<std::uint64_t>(p) + 1);
		struct Out {
			std::int64_t ticket;
			std::uint64_t off, boff, len, tag;
		};
		std::vector<Out> pending;
		auto finish = [&](const Out &o) {
			IoCompletion c = client.wait(o.ticket);
			if (c.status != 0 || c.bytes != o.len || c.tag != o.tag ||
			    !holds_file(b.data(static_cast<std::size_t>(p)) + o.boff, o.off, o.len))
				bad++;
		};
		for (int i = 0; i < per_producer; i++) {
			/* Disjoint slices of the producer's buffer per window entry. */
			std::uint64_t slice = buf_len / window;
			std::uint64_t len = 1 + rng() % slice;
			std::uint64_t boff = (static_cast<std::uint64_t>(i) % window) * slice +
					     rng() % (slice - len + 1);
			std::uint64_t off = rng() % (file_bytes - len);
			std::uint64_t tag = (static_cast<std::uint64_t>(p) << 32) |
					    static_cast<std::uint64_t>(i);
			if (pending.size() == window) {
				finish(pending.front());
				pending.erase(pending.begin());
			}
			std::int64_t t =
				client.read(f, off, len, static_cast<std::uint32_t>(p), boff, tag);
			if (t < 0) {
				bad++;
				return;
			}
			pending.push_back({t, off, boff, len, tag});
		}
		for (const Out &o : pending)
			finish(o);
	};
	test::on_threads(producers, produce);

	EXPECT_EQ(bad.load(), 0);
	IoLoopStats s = loop.stats();
	constexpr std::uint64_t total = std::uint64_t{producers} * per_producer;
	EXPECT_EQ(s.requests, total);
	EXPECT_EQ(s.completed, total);
	EXPECT_EQ(s.failed, 0u);
	for (int p = 0; p < producers; p++)
		EXPECT_TRUE(b.guards_intact(static_cast<std::size_t>(p))) << p;
}

TEST_F(IoLoopTest, HostileRequestsCompleteWithAnErrorAndWriteNothing)
{
	Guarded b(*ctx_, {4096, 4096}, {Access::ReadWrite, Access::ReadOnly});
	std::vector<char> before0(b.data(0), b.data(0) + 4096);
	std::vector<char> before1(b.data(1), b.data(1) + 4096);
	IoLoop loop(*ctx_, *b.reg, small_ring());
	std::uint32_t f = loop.add_file(file_.fd());
	IoLoopClient client(loop.host_queue());
	struct Case {
		const char *what;
		std::uint32_t file, buffer;
		std::uint64_t boff, len;
		int want;
	};
	const Case cases[] = {
		{"unknown buffer", f, 2, 0, 10, -EINVAL},
		{"huge buffer index", f, UINT32_MAX, 0, 10, -EINVAL},
		{"offset past the end", f, 0, 4097, 1, -EINVAL},
		{"range past the end", f, 0, 4000, 97, -EINVAL},
		{"length wrapping around", f, 0, 1, UINT64_MAX, -EINVAL},
		{"read-only buffer", f, 1, 0, 10, -EACCES},
		{"unknown file", f + 1, 0, 0, 10, -EBADF},
		{"huge file index", UINT32_MAX, 0, 0, 10, -EBADF},
		{"nothing to read", f, 0, 4096, 0, 0},
	};
	for (const Case &k : cases) {
		std::int64_t t = client.read(k.file, 0, k.len, k.buffer, k.boff);
		ASSERT_GE(t, 0);
		IoCompletion c = client.wait(t);
		EXPECT_EQ(c.status, k.want) << k.what;
		EXPECT_EQ(c.bytes, 0u) << k.what;
	}
	EXPECT_TRUE(b.guards_intact(0));
	EXPECT_TRUE(b.guards_intact(1));
	EXPECT_TRUE(std::equal(before0.begin(), before0.end(), b.data(0)));
	EXPECT_TRUE(std::equal(before1.begin(), before1.end(), b.data(1)));
	EXPECT_EQ(loop.stats().failed, std::size(cases) - 1);
}

TEST_F(IoLoopTest, TheFilesOwnErrorsAreTheStatus)
{
	Guarded b(*ctx_, {64 << 10});
	IoLoop loop(*ctx_, *b.reg, small_ring());
	IoLoopClient client(loop.host_queue());
	std::uint32_t f = loop.add_file(file_.fd());

	/* The end of the file: the bytes before it, and ENODATA. */
	IoCompletion c = client.wait(client.read(f, file_bytes - 1000, 3000, 0, 0));
	EXPECT_EQ(c.status, -ENODATA);
	EXPECT_EQ(c.bytes, 1000u);
	EXPECT_TRUE(holds_file(b.data(0), file_bytes - 1000, 1000));
	c = client.wait(client.read(f, file_bytes + 4096, 10, 0, 0));
	EXPECT_EQ(c.status, -ENODATA);
	EXPECT_EQ(c.bytes, 0u);

	/* A file closed after it was added. */
	int fd = ::dup(file_.fd());
	ASSERT_GE(fd, 0);
	std::uint32_t closed = loop.add_file(fd);
	::close(fd);
	c = client.wait(client.read(closed, 0, 10, 0, 0));
	EXPECT_EQ(c.status, -EBADF);

	/* EIO from the file: /proc/self/mem where nothing is mapped. */
	int mem = ::open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
	ASSERT_GE(mem, 0);
	std::uint32_t m = loop.add_file(mem);
	c = client.wait(client.read(m, 4096, 100, 0, 0));
	EXPECT_EQ(c.status, -EIO);
	EXPECT_EQ(c.bytes, 0u);
	::close(mem);
	EXPECT_TRUE(b.guards_intact(0));
}

/* One producer takes more tickets than there are completion slots before
 * waiting: the pump defers completions until their slots are free, and
 * every one arrives. */
TEST_F(IoLoopTest, CompletionsWaitForTheirSlotNotLost)
{
	Guarded b(*ctx_, {64 << 10});
	IoLoop loop(*ctx_, *b.reg, small_ring(32));
	IoLoopClient client(loop.host_queue());
	std::uint32_t f = loop.add_file(file_.fd());
	std::vector<std::int64_t> tickets;

	tickets.reserve(100);
	for (int i = 0; i < 100; i++)
		tickets.push_back(client.read(f, static_cast<std::uint64_t>(i) * 512, 512, 0,
					      static_cast<std::uint64_t>(i) * 512));
	/* Nobody waits yet: 32 completions fit, 68 wait for their slots. */
	while (loop.stats().completed + loop.stats().deferred < 100)
		std::this_thread::yield();
	EXPECT_EQ(loop.stats().completed, 32u);
	EXPECT_EQ(loop.stats().deferred, 68u);
	for (std::size_t i = 0; i < tickets.size(); i++) {
		IoCompletion c = client.wait(tickets[i]);
		EXPECT_EQ(c.status, 0) << i;
		EXPECT_EQ(c.bytes, 512u) << i;
	}
	EXPECT_TRUE(holds_file(b.data(0), 0, std::size_t{100} * 512));
	EXPECT_EQ(loop.stats().completed, 100u);
}

/* stop() while 4 producers keep publishing: each request they published
 * completes exactly once (read, or -ECANCELED), none is lost, and the
 * producers learn that the loop closed.  The race is the point, so it must
 * have happened: the scenario runs again (a new loop) until stop() caught
 * at least one request before its read ended (-ECANCELED), at most
 * max_attempts times; never is a failure. */
TEST_F(IoLoopTest, StopWithRequestsInFlightCompletesEveryOne)
{
	constexpr int producers = 4;
	constexpr int max_attempts = 50;
	Guarded b(*ctx_, std::vector<std::size_t>(producers, 256 << 10));
	std::uint64_t cancelled_total = 0;
	int attempts = 0;

	while (cancelled_total == 0 && attempts < max_attempts && !HasFailure()) {
		attempts++;
		IoLoop loop(*ctx_, *b.reg, small_ring(64));
		IoLoopClient client(loop.host_queue());
		std::uint32_t f = loop.add_file(file_.fd());

		const test::StopRace race = test::stop_while_producing(
			loop, client, producers, 200, 256 << 10, [&](int p, std::uint64_t i) {
				return client.read(f, (i * 4096) % (file_bytes - (256 << 10)),
						   256 << 10, static_cast<std::uint32_t>(p), 0);
			});

		EXPECT_TRUE(loop.stopped()) << "attempt " << attempts;
		EXPECT_EQ(race.other, 0u) << "attempt " << attempts;
		EXPECT_EQ(race.whole + race.cancelled, race.published) << "attempt " << attempts;
		IoLoopStats s = loop.stats();
		EXPECT_EQ(s.completed, race.published) << "attempt " << attempts;
		EXPECT_EQ(s.undelivered, 0u) << "attempt " << attempts;
		EXPECT_EQ(client.read(f, 0, 1, 0, 0), -1) << "a closed loop takes nothing";
		cancelled_total += race.cancelled;
	}
	EXPECT_GT(cancelled_total, 0u)
		<< "in " << attempts << " runs stop() never caught a request before its read "
		<< "ended (no -ECANCELED): the race under test did not happen";
	RecordProperty("attempts", attempts);
	RecordProperty("cancelled", static_cast<int>(cancelled_total));
}

/* A parked loop wakes up for the next request. */
TEST_F(IoLoopTest, AParkedLoopWakesUp)
{
	Guarded b(*ctx_, {4096});
	IoLoopOptions o = small_ring();
	o.spin = std::chrono::microseconds(0);
	o.park = std::chrono::microseconds(500);
	IoLoop loop(*ctx_, *b.reg, o);
	IoLoopClient client(loop.host_queue());
	std::uint32_t f = loop.add_file(file_.fd());

	while (loop.stats().parks < 3)
		std::this_thread::yield();
	IoCompletion c = client.wait(client.read(f, 100, 4096, 0, 0));
	EXPECT_EQ(c.status, 0);
	EXPECT_TRUE(holds_file(b.data(0), 100, 4096));
}

/* Nothing stays pinned once the loop and the registration are gone. */
TEST_F(IoLoopTest, LeavesNothingPinned)
{
	const std::uint64_t before = test::quiet_pinned_bytes();
	{
		Guarded b(*ctx_, {1 << 20});
		IoLoop loop(*ctx_, *b.reg, small_ring());
		IoLoopClient client(loop.host_queue());
		std::uint32_t f = loop.add_file(file_.fd());
		EXPECT_EQ(client.wait(client.read(f, 0, 1 << 20, 0, 0)).status, 0);
	}
	EXPECT_EQ(test::pinned_bytes_at_most(before), before);
}

} // namespace
} // namespace svmbatch
