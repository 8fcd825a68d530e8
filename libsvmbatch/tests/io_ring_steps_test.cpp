// SPDX-License-Identifier: MIT
// The protocol steps of <svmbatch/gpu_io/ring.h> as the GPU device header
// (<svmbatch/gpu_io/device.cuh>, CUDA and HIP alike) takes them, played by
// CPU threads: warps of lanes that claim their tickets with one add to a
// counter of their own (the GPU's is in device memory, not the ring's
// host_tail), wait for their slots, fill and publish reads and writes,
// wait for their completions and free the slots, through a ring with
// fewer slots than lanes; and the poll schedule a waiting warp sleeps by.
// What a GPU adds (its votes, its sleep, its fences over PCIe) needs one:
// Documentation/amd.rst and gpu_io.rst say which run proves what.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include <svmbatch/all.hpp>

#include "io_loop_fixture.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

using test::pattern_byte;

TEST(IoRingSteps, ThePollScheduleIsFastThenBacksOffToItsCap)
{
	constexpr std::uint32_t fast = 20000, max = 8192;
	/* The fast phase: always the shortest sleep. */
	std::uint32_t ns = 0;
	std::uint64_t waited = 0;
	while (waited < fast) {
		ns = svmbatch_io_poll_sleep_ns(waited, ns, fast, max);
		EXPECT_EQ(ns, SVMBATCH_IO_POLL_MIN_NS) << waited;
		waited += ns + SVMBATCH_IO_POLL_ROUND_TRIP_NS;
	}
	/* Then doubling, up to the cap, and there it stays. */
	std::vector<std::uint32_t> seen;
	for (int i = 0; i < 12; i++) {
		ns = svmbatch_io_poll_sleep_ns(waited, ns, fast, max);
		seen.push_back(ns);
		waited += ns + SVMBATCH_IO_POLL_ROUND_TRIP_NS;
	}
	const std::vector<std::uint32_t> want{128,  256,  512,	1024, 2048, 4096,
					      8192, 8192, 8192, 8192, 8192, 8192};
	EXPECT_EQ(seen, want);
	/* A cap under the minimum is the minimum; no fast phase starts at once
	 * from the minimum; a cap that is not a power of two is reached. */
	EXPECT_EQ(svmbatch_io_poll_sleep_ns(1 << 20, 64, 0, 10), SVMBATCH_IO_POLL_MIN_NS);
	EXPECT_EQ(svmbatch_io_poll_sleep_ns(0, 0, 0, 8192), SVMBATCH_IO_POLL_MIN_NS);
	EXPECT_EQ(svmbatch_io_poll_sleep_ns(1 << 20, 4096, 0, 6000), 6000u);
	EXPECT_EQ(svmbatch_io_poll_sleep_ns(1 << 20, 6000, 0, 6000), 6000u);
	/* The defaults of svmbatch_gpu_queue_create(). */
	EXPECT_GE(SVMBATCH_GPU_MAX_POLL_NS, SVMBATCH_IO_POLL_MIN_NS);
	EXPECT_GT(SVMBATCH_GPU_FAST_POLL_NS, 0u);
}

TEST(IoRingSteps, TheStoppedFlagIsReadAtDoublingIntervalsUpToTheCap)
{
	constexpr std::uint32_t fast = 20000;
	/* As a waiting warp counts: every poll adds its sleep and a round
	 * trip; it looks at the flag once waited reaches the next look. */
	std::uint64_t waited = 0, look = fast;
	std::uint32_t ns = 0;
	std::vector<std::uint64_t> looks;
	while (waited < 8'000'000) {
		ns = svmbatch_io_poll_sleep_ns(waited, ns, fast, SVMBATCH_GPU_MAX_POLL_NS);
		waited += ns + SVMBATCH_IO_POLL_ROUND_TRIP_NS;
		if (waited < look)
			continue;
		const std::uint64_t next = svmbatch_io_next_stop_check_ns(waited, fast);
		/* Never later than the cap after this look, never sooner than
		 * the wait so far (or fast_ns) unless capped. */
		EXPECT_LE(next - waited, SVMBATCH_IO_STOP_CHECK_MAX_NS) << waited;
		EXPECT_GE(next - waited,
			  std::min<std::uint64_t>(std::max<std::uint64_t>(waited, fast),
						  SVMBATCH_IO_STOP_CHECK_MAX_NS))
			<< waited;
		looks.push_back(waited);
		look = next;
	}
	/* 8 ms of waiting: the doubling to 1 ms takes about six looks, then
	 * one a millisecond; polls of the warp's own slot were thousands. */
	EXPECT_GE(looks.size(), 10u);
	EXPECT_LE(looks.size(), 16u);
	EXPECT_GE(looks.front(), fast);
	/* A wait that starts without a fast phase looks at once and then
	 * no sooner than a round trip later. */
	EXPECT_EQ(svmbatch_io_next_stop_check_ns(0, 0), SVMBATCH_IO_POLL_ROUND_TRIP_NS);
	EXPECT_EQ(svmbatch_io_next_stop_check_ns(5'000'000, 0),
		  5'000'000u + SVMBATCH_IO_STOP_CHECK_MAX_NS);
	EXPECT_EQ(svmbatch_io_next_stop_check_ns(30'000, 20'000), 60'000u);
	EXPECT_EQ(svmbatch_io_next_stop_check_ns(1'000, 20'000), 21'000u);
}

/// One lane of a CPU "warp", taking device.cuh's steps with ring.h's
/// functions and C++ atomics where the header has system-scope ones.
struct Lane {
	const svmbatch_io_queue &q;

	/// publish(): the slot of ticket t free, fill, publish (release).
	void publish(std::uint64_t t, std::uint32_t op, std::uint32_t file, std::uint64_t off,
		     std::uint64_t len, std::uint32_t buffer, std::uint64_t boff) const
	{
		svmbatch_io_request *slot = svmbatch_io_request_slot(&q, t);
		std::atomic_ref seq(slot->seq);
		while (seq.load(std::memory_order_acquire) != svmbatch_io_seq_free(t))
			std::this_thread::yield();
		svmbatch_io_fill(slot, op, file, off, len, buffer, boff, t);
		seq.store(svmbatch_io_seq_published(t), std::memory_order_release);
	}
	/// publish() as device.cuh takes it, reading no header flag: false
	/// when the slot says closed (ticket t given up, the pump passes it)
	/// or the pump ended.
	bool publish_unless_closed(std::uint64_t t, std::uint32_t file, std::uint64_t off,
				   std::uint64_t len, std::uint64_t boff) const
	{
		svmbatch_io_request *slot = svmbatch_io_request_slot(&q, t);
		std::atomic_ref seq(slot->seq);
		std::uint64_t v = 0;
		while (svmbatch_io_seq_open(v = seq.load(std::memory_order_acquire)) !=
		       svmbatch_io_seq_free(t)) {
			if (std::atomic_ref(q.header->stopped).load(std::memory_order_acquire))
				return false;
			std::this_thread::yield();
		}
		if (svmbatch_io_seq_closed(v)) {
			seq.store(svmbatch_io_seq_given_up(t), std::memory_order_release);
			return false;
		}
		svmbatch_io_fill(slot, SVMBATCH_IO_READ, file, off, len, 0, boff, t);
		seq.store(svmbatch_io_seq_published(t), std::memory_order_release);
		return true;
	}
	/// svmbatch_wait(): the completion of t (acquire), its slot freed.
	svmbatch_io_completion wait(std::uint64_t t) const
	{
		svmbatch_io_completion *c = svmbatch_io_completion_slot(&q, t);
		std::atomic_ref seq(c->seq);
		while (seq.load(std::memory_order_acquire) != svmbatch_io_seq_published(t))
			std::this_thread::yield();
		svmbatch_io_completion out = *c;
		seq.store(svmbatch_io_seq_next_lap(q.mask, t), std::memory_order_release);
		return out;
	}
};

/* 4 warps of 32 CPU lanes, 32 slots: each round, a warp's leader claims 32
 * tickets with one add and the lanes take base + rank (device.cuh's
 * publish()); each lane writes a piece of its own from its slice of the
 * source buffer to the file, then reads it back into its slice of the
 * destination buffer, waiting for each ticket in the order it took it.
 * Every completion has its ticket as tag, status 0 and all its bytes;
 * the file and the destination hold the source's bytes. */
TEST(IoRingSteps, WarpsOfCpuLanesWriteAndReadThroughFewerSlots)
{
	constexpr unsigned warps = 4, lanes = 32, rounds = 25;
	constexpr std::size_t piece = 1000;
	constexpr std::size_t lane_bytes = rounds * piece;
	constexpr std::size_t buf_len = std::size_t{warps} * lanes * lane_bytes;
	std::optional<Context> ctx;
	ctx.emplace(test::make_context());
	std::vector<char> src(buf_len), dst(buf_len, 0);
	for (std::size_t k = 0; k < buf_len; k++)
		src[k] = static_cast<char>(pattern_byte(k * 3));
	Buffer bufs[] = {{src.data(), buf_len, Access::ReadOnly}, {dst.data(), buf_len}};
	Registration reg = ctx->register_buffers(bufs);
	test::ScratchFile file(buf_len);
	IoLoopOptions o;
	o.slots = 32;
	o.io.threads = 2;
	IoLoop loop(*ctx, reg, o);
	const std::uint32_t f = loop.add_file(file.fd());
	const svmbatch_io_queue q = loop.host_queue();
	std::atomic<std::uint64_t> device_tail{0}; /* the GPU's counter, not the ring's */
	std::atomic<unsigned> bad{0};

	auto warp = [&](unsigned w) {
		std::barrier meet(lanes);
		std::uint64_t base = 0; /* the leader's, read after the barrier */
		auto lane = [&](unsigned l) {
			const Lane me{q};
			for (unsigned r = 0; r < rounds; r++) {
				const std::size_t at =
					(std::size_t{w} * lanes + l) * lane_bytes + r * piece;
				std::uint64_t tw = 0, tr = 0;
				for (std::uint32_t op : {SVMBATCH_IO_WRITE, SVMBATCH_IO_READ}) {
					if (l == 0)
						base = device_tail.fetch_add(lanes);
					meet.arrive_and_wait();
					const std::uint64_t t = base + l;
					meet.arrive_and_wait(); /* base read by all */
					me.publish(t, op, f, at, piece,
						   op == SVMBATCH_IO_WRITE ? 0 : 1, at);
					(op == SVMBATCH_IO_WRITE ? tw : tr) = t;
					if (op == SVMBATCH_IO_WRITE) {
						/* The read must follow the write: wait first. */
						svmbatch_io_completion c = me.wait(tw);
						if (c.status || c.bytes != piece || c.tag != tw)
							bad++;
					}
				}
				svmbatch_io_completion c = me.wait(tr);
				if (c.status || c.bytes != piece || c.tag != tr)
					bad++;
			}
		};
		test::on_threads(lanes, lane);
	};
	test::on_threads(warps, warp);

	EXPECT_EQ(bad.load(), 0u);
	EXPECT_EQ(std::memcmp(dst.data(), src.data(), buf_len), 0);
	std::vector<char> back(buf_len);
	ASSERT_EQ(::pread(file.fd(), back.data(), buf_len, 0), static_cast<ssize_t>(buf_len));
	EXPECT_EQ(std::memcmp(back.data(), src.data(), buf_len), 0);
	const IoLoopStats st = loop.stats();
	EXPECT_EQ(st.completed, std::uint64_t{2} * warps * lanes * rounds);
	EXPECT_EQ(st.failed, 0u);
}

/* A GPU-like producer (no look at the header's flag) that claims after
 * stop() finds its slot closed and gets -1, before the pump ended as
 * after: stop() marked the free slots, without waiting for anyone. */
TEST(IoRingSteps, AClosedLoopRefusesProducersThroughTheirSlot)
{
	std::optional<Context> ctx;
	ctx.emplace(test::make_context());
	std::vector<char> dst(4096, 0);
	Buffer bufs[] = {{dst.data(), dst.size()}};
	Registration reg = ctx->register_buffers(bufs);
	test::ScratchFile file(4096);
	IoLoopOptions o;
	o.slots = 32;
	IoLoop loop(*ctx, reg, o);
	const std::uint32_t f = loop.add_file(file.fd());
	const svmbatch_io_queue q = loop.host_queue();
	const Lane me{q};
	/* One read first, so that the slots are not all at their first lap. */
	ASSERT_TRUE(me.publish_unless_closed(0, f, 0, 4096, 0));
	EXPECT_EQ(me.wait(0).status, 0);
	loop.stop();
	for (std::uint64_t t = 1; t <= 32; t++)
		EXPECT_FALSE(me.publish_unless_closed(t, f, 0, 4096, 0)) << t;
	EXPECT_EQ(loop.stats().requests, 1u);
	EXPECT_EQ(dst[0], static_cast<char>(pattern_byte(0)));
}

/* stop() while 16 GPU-like producers (tickets from a counter of their own,
 * no look at the header's closed flag: device.cuh's publish()) read
 * through 32 slots, each holding two tickets: the pump marks the free
 * slots closed, a producer that finds its slot closed gives its ticket up
 * and the pump passes it.  Every published request completes once, read
 * or cancelled, or, where a producer that claimed before it reached its
 * slot only after the pump ended (a slow guest), ends -ESHUTDOWN, never
 * completed; every producer ends by a give-up; nothing undelivered. */
TEST(IoRingSteps, StopMarksTheSlotsClosedAndGivenUpTicketsArePassed)
{
	constexpr unsigned producers = 16;
	constexpr std::size_t piece = 4096, npieces = 512;
	for (int attempt = 0; attempt < 20 && !::testing::Test::HasFailure(); attempt++) {
		std::optional<Context> ctx;
		ctx.emplace(test::make_context());
		std::vector<char> dst(std::size_t{producers} * 2 * piece, 0);
		Buffer bufs[] = {{dst.data(), dst.size()}};
		Registration reg = ctx->register_buffers(bufs);
		test::ScratchFile file(npieces * piece);
		IoLoopOptions o;
		o.slots = 32;
		o.io.threads = 2;
		IoLoop loop(*ctx, reg, o);
		const std::uint32_t f = loop.add_file(file.fd());
		const svmbatch_io_queue q = loop.host_queue();
		std::atomic<std::uint64_t> device_tail{0}, published{0}, ok{0}, cancelled{0},
			other{0}, shutdown{0}, gave_up{0};

		auto produce = [&](unsigned p) {
			const Lane me{q};
			std::uint64_t held[2] = {0, 0};
			unsigned nheld = 0;
			auto finish = [&](std::uint64_t t) {
				svmbatch_io_completion *c = svmbatch_io_completion_slot(&q, t);
				std::atomic_ref seq(c->seq);
				while (seq.load(std::memory_order_acquire) !=
				       svmbatch_io_seq_published(t)) {
					if (std::atomic_ref(q.header->stopped)
						    .load(std::memory_order_acquire) &&
					    seq.load(std::memory_order_acquire) !=
						    svmbatch_io_seq_published(t)) {
						shutdown++; /* -ESHUTDOWN */
						return;
					}
					std::this_thread::yield();
				}
				const svmbatch_io_completion got = me.wait(t);
				if (got.status == 0 && got.bytes == piece)
					ok++;
				else if (got.status == -ECANCELED)
					cancelled++;
				else
					other++;
			};
			for (std::uint64_t i = 0;; i++) {
				const std::uint64_t t = device_tail.fetch_add(1);
				const bool in = me.publish_unless_closed(
					t, f, ((i * producers + p) % npieces) * piece, piece,
					(std::size_t{p} * 2 + i % 2) * piece);
				if (!in)
					gave_up++;
				else
					published++;
				if (nheld == 2) {
					finish(held[0]);
					held[0] = held[1];
					nheld = 1;
				}
				if (!in)
					break;
				held[nheld++] = t;
			}
			for (unsigned k = 0; k < nheld; k++)
				finish(held[k]);
		};
		std::vector<std::thread> ts;
		for (unsigned p = 0; p < producers; p++)
			ts.emplace_back(produce, p);
		while (loop.stats().completed < 300)
			std::this_thread::yield();
		loop.stop(std::chrono::milliseconds(2000));
		for (auto &t : ts)
			t.join();

		EXPECT_EQ(other.load(), 0u) << "attempt " << attempt;
		EXPECT_EQ(gave_up.load(), producers) << "attempt " << attempt;
		EXPECT_EQ(ok + cancelled + shutdown, published.load()) << "attempt " << attempt;
		const IoLoopStats st = loop.stats();
		EXPECT_EQ(st.requests, ok + cancelled) << "attempt " << attempt;
		EXPECT_EQ(st.completed, ok + cancelled) << "attempt " << attempt;
		EXPECT_EQ(st.undelivered, 0u) << "attempt " << attempt;
	}
}

/* The benchmark kernel's double-buffering (examples/gpu_io_kernels.cu),
 * played by 4 warps of 32 CPU lanes through 32 slots, 8 requests moving at
 * most: each warp takes 32 pieces at a time from a shared counter and its
 * active lanes claim their tickets with one add; it asks for its next
 * batch into one half of its buffer before it waits for the batch in the
 * other half, so each lane holds two tickets at once, far more than the
 * ring has slots.  After the warp's barrier each lane checks a neighbour's
 * piece (the kernel's copy), and the half is asked for again only after
 * the next barrier.  Every piece arrives once with all its bytes. */
TEST(IoRingSteps, DoubleBufferedWarpsHoldTwoTicketsALaneThroughFewerSlots)
{
	constexpr unsigned warps = 4, lanes = 32;
	constexpr std::size_t piece = 1000, npieces = 3001;
	constexpr std::size_t buf_len = std::size_t{warps} * 2 * lanes * piece;
	std::optional<Context> ctx;
	ctx.emplace(test::make_context());
	std::vector<char> dst(buf_len, 0);
	Buffer bufs[] = {{dst.data(), buf_len}};
	Registration reg = ctx->register_buffers(bufs);
	test::ScratchFile file(npieces * piece);
	IoLoopOptions o;
	o.slots = 32;
	o.max_in_flight = 8;
	o.io.threads = 2;
	IoLoop loop(*ctx, reg, o);
	const std::uint32_t f = loop.add_file(file.fd());
	const svmbatch_io_queue q = loop.host_queue();
	std::atomic<std::uint64_t> device_tail{0}, next{0};
	std::vector<std::atomic<unsigned>> seen(npieces);
	std::atomic<unsigned> bad{0};

	auto warp = [&](unsigned w) {
		std::barrier meet(lanes);
		std::uint64_t shared_first = 0, shared_base = 0; /* the leader's */
		auto lane = [&](unsigned l) {
			const Lane me{q};
			struct Batch {
				std::uint64_t first, ticket;
				unsigned active;
			};
			auto slice = [&](unsigned half, unsigned of) {
				return ((std::size_t{w} * 2 + half) * lanes + of) * piece;
			};
			/* ask_batch(): pieces from the counter, tickets for the
			 * active lanes with one add, each lane's read published. */
			auto ask = [&](unsigned half) {
				if (l == 0) {
					shared_first = next.fetch_add(lanes);
					const std::uint64_t n =
						shared_first < npieces ?
							std::min<std::uint64_t>(
								lanes, npieces - shared_first) :
							0;
					shared_base = device_tail.fetch_add(n);
				}
				meet.arrive_and_wait();
				Batch b{shared_first, shared_base + l, 0};
				meet.arrive_and_wait(); /* read by all */
				if (b.first < npieces)
					b.active = static_cast<unsigned>(
						std::min<std::uint64_t>(lanes, npieces - b.first));
				if (l < b.active)
					me.publish(b.ticket, SVMBATCH_IO_READ, f,
						   (b.first + l) * piece, piece, 0, slice(half, l));
				return b;
			};
			unsigned half = 0;
			Batch cur = ask(half);
			while (cur.first < npieces) {
				const Batch nxt = ask(half ^ 1);
				if (l < cur.active) {
					svmbatch_io_completion c = me.wait(cur.ticket);
					if (c.status || c.bytes != piece || c.tag != cur.ticket)
						bad++;
				}
				meet.arrive_and_wait(); /* every lane's completion seen */
				if (l < cur.active) {
					const unsigned of = (l + 1) % cur.active;
					const std::uint64_t i = cur.first + of;
					const char *p = dst.data() + slice(half, of);
					for (std::size_t k = 0; k < piece; k++)
						if (static_cast<std::uint8_t>(p[k]) !=
						    pattern_byte(i * piece + k)) {
							bad++;
							break;
						}
					seen[i]++;
				}
				meet.arrive_and_wait(); /* the half checked: ask again */
				cur = nxt;
				half ^= 1;
			}
		};
		test::on_threads(lanes, lane);
	};
	test::on_threads(warps, warp);

	EXPECT_EQ(bad.load(), 0u);
	for (std::size_t i = 0; i < npieces; i++)
		ASSERT_EQ(seen[i].load(), 1u) << i;
	const IoLoopStats st = loop.stats();
	EXPECT_EQ(st.completed, npieces);
	EXPECT_EQ(st.failed, 0u);
}

} // namespace
} // namespace svmbatch
