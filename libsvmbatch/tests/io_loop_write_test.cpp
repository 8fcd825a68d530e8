// SPDX-License-Identifier: MIT
// IoLoop's writes (and requests cut in pieces), with CPU threads playing
// the GPU's part (IoLoopClient: the same ring and orderings as
// <svmbatch/gpu_io/device.cuh>'s svmbatch_write()): what lands in the file
// is checked byte for byte, and so is what must not have changed around
// it.  Runs under ASan and TSan on the host (userspace mode) and in the
// guests (kernel mode).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <svmbatch/all.hpp>

#include "io_loop_fixture.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

using test::file_bytes;
using test::pattern_byte;

constexpr char blank = '\x00';

/// Buffers filled with pattern bytes (buffer i's byte k is
/// pattern_byte(i * 2^32 + k)), registered together.
struct Sources : test::LoopBuffers {
	Sources(Context &ctx, const std::vector<std::size_t> &sizes,
		const std::vector<Access> &access = {})
		: LoopBuffers(ctx, sizes, access, 0, [](std::size_t i, char *p, std::size_t n) {
			  for (std::size_t k = 0; k < n; k++)
				  p[k] = static_cast<char>(pattern_byte(origin(i) + k));
		  })
	{}
	static std::uint64_t origin(std::size_t i) { return std::uint64_t{i} << 32; }
};

/// A file of file_bytes zero bytes, removed on destruction.
class BlankFile {
public:
	BlankFile()
	{
		const char *dir = std::getenv("TMPDIR");
		std::string tmpl =
			std::string(dir && *dir ? dir : "/tmp") + "/svmbatch-write-XXXXXX";
		fd_ = ::mkstemp(tmpl.data());
		if (fd_ < 0 || ::ftruncate(fd_, file_bytes) != 0)
			throw std::runtime_error("BlankFile: mkstemp/ftruncate failed");
		path_ = tmpl;
	}
	BlankFile(const BlankFile &) = delete;
	BlankFile &operator=(const BlankFile &) = delete;
	BlankFile(BlankFile &&) = delete;
	BlankFile &operator=(BlankFile &&) = delete;
	~BlankFile()
	{
		::close(fd_);
		::unlink(path_.c_str());
	}
	int fd() const { return fd_; }
	const std::string &path() const { return path_; }
	std::vector<char> contents() const
	{
		std::vector<char> v(file_bytes);
		EXPECT_EQ(::pread(fd_, v.data(), v.size(), 0), static_cast<ssize_t>(v.size()));
		return v;
	}

private:
	int fd_ = -1;
	std::string path_;
};

IoLoopOptions options(unsigned slots = 32, std::size_t max_io_bytes = std::size_t{1} << 20)
{
	IoLoopOptions o = test::loop_options(slots, 3);
	o.io.max_io_bytes = max_io_bytes;
	return o;
}

class IoLoopWriteTest : public test::IoLoopFixture {};

/* One write: exactly its range of the buffer lands at its offset of the
 * file; the bytes around it stay zero; every piece (4 KiB pieces, on the
 * one thread that writes the file) ends before the one completion. */
TEST_F(IoLoopWriteTest, OneWriteLandsExactlyWhereAsked)
{
	Sources s(*ctx_, {64 << 10});
	BlankFile file;

	for (std::size_t max_io : {std::size_t{1} << 20, std::size_t{4096}}) {
		ASSERT_EQ(::ftruncate(file.fd(), 0), 0);
		ASSERT_EQ(::ftruncate(file.fd(), file_bytes), 0);
		IoLoop loop(*ctx_, *s.reg, options(32, max_io));
		std::uint32_t f = loop.add_file(file.fd());
		IoLoopClient client(loop.host_queue());

		std::int64_t t = client.write(f, 123457, 50001, 0, 1001, 9);
		ASSERT_GE(t, 0);
		IoCompletion c = client.wait(t);
		EXPECT_EQ(c.status, 0) << max_io;
		EXPECT_EQ(c.bytes, 50001u) << max_io;
		EXPECT_EQ(c.tag, 9u);
		std::vector<char> got = file.contents();
		for (std::size_t k = 0; k < file_bytes; k++) {
			const bool inside = k >= 123457 && k < 123457 + 50001;
			const char want = inside ? s.data(0)[1001 + k - 123457] : blank;
			ASSERT_EQ(got[k], want) << "file byte " << k << ", pieces of " << max_io;
		}
		IoLoopStats st = loop.stats();
		EXPECT_EQ(st.completed, 1u);
		EXPECT_EQ(st.bytes, 50001u);
	}
}

/* 6 producers write 800 pieces each of random sizes into disjoint slices
 * of the file from disjoint ranges of their buffers, 4 outstanding each,
 * through 32 slots, cut into pieces of 8 KiB; then the file is read back
 * through the loop in 200 KiB reads cut into 8 KiB pieces over 3 threads.  Every completion is
 * exactly once with its tag, and the file is what the writes said, byte
 * for byte, zero elsewhere. */
TEST_F(IoLoopWriteTest, ManyProducersWriteAndReadBackInPieces)
{
	constexpr int producers = 6, per_producer = 800, window = 4;
	constexpr std::size_t buf_len = 256 << 10;
	constexpr std::size_t slice = file_bytes / producers / per_producer; /* ~873 B */
	std::vector<std::size_t> sizes(producers, buf_len);
	sizes.push_back(buf_len); /* the readers' destination */
	Sources s(*ctx_, sizes);
	BlankFile file;
	IoLoop loop(*ctx_, *s.reg, options(32, 8 << 10));
	std::uint32_t f = loop.add_file(file.fd());
	IoLoopClient client(loop.host_queue());
	std::atomic<int> bad{0};
	struct Written {
		std::uint64_t off, len, boff;
	};
	std::vector<std::vector<Written>> written(producers);

	auto produce = [&](int p) {
		std::mt19937_64 rng(static_cast<std::uint64_t>(p) + 7);
		struct Out {
			std::int64_t ticket;
			std::uint64_t tag, len;
		};
		std::vector<Out> pending;
		auto finish = [&](const Out &o) {
			IoCompletion c = client.wait(o.ticket);
			if (c.status != 0 || c.bytes != o.len || c.tag != o.tag)
				bad++;
		};
		for (int i = 0; i < per_producer; i++) {
			const std::uint64_t off =
				(static_cast<std::uint64_t>(p) * per_producer + i) * slice;
			/* Some long enough for several pieces: the slices of
			 * producer p's 8 last writes are merged. */
			std::uint64_t len = 1 + rng() % slice;
			const std::uint64_t boff = rng() % (buf_len - len);
			const std::uint64_t tag = (static_cast<std::uint64_t>(p) << 32) | i;
			if (pending.size() == window) {
				finish(pending.front());
				pending.erase(pending.begin());
			}
			std::int64_t t =
				client.write(f, off, len, static_cast<std::uint32_t>(p), boff, tag);
			if (t < 0) {
				bad++;
				return;
			}
			pending.push_back({t, tag, len});
			written[static_cast<std::size_t>(p)].push_back({off, len, boff});
		}
		for (const Out &o : pending)
			finish(o);
	};
	test::on_threads(producers, produce);
	ASSERT_EQ(bad.load(), 0);

	std::vector<char> want(file_bytes, blank);
	for (std::size_t p = 0; p < written.size(); p++)
		for (const Written &w : written[p])
			std::memcpy(want.data() + w.off, s.data(p) + w.boff, w.len);
	std::vector<char> got = file.contents();
	ASSERT_EQ(std::memcmp(got.data(), want.data(), file_bytes), 0);

	/* Back through the loop: 200 KiB reads in 8 KiB pieces. */
	const auto reader = static_cast<std::uint32_t>(producers);
	for (std::uint64_t off = 0; off + (200 << 10) <= file_bytes; off += 200 << 10) {
		IoCompletion c = client.wait(client.read(f, off, 200 << 10, reader, 0));
		ASSERT_EQ(c.status, 0);
		ASSERT_EQ(c.bytes, 200u << 10);
		ASSERT_EQ(std::memcmp(s.data(producers), want.data() + off, 200 << 10), 0) << off;
	}
	IoLoopStats st = loop.stats();
	EXPECT_EQ(st.failed, 0u);
	EXPECT_EQ(st.completed, st.requests);
}

/* Refused writes complete with their errno and change no byte of the file;
 * a read-only buffer is a fine source. */
TEST_F(IoLoopWriteTest, RefusedWritesChangeNothing)
{
	Sources s(*ctx_, {4096, 4096}, {Access::ReadWrite, Access::ReadOnly});
	BlankFile file;
	int ro = ::open(file.path().c_str(), O_RDONLY | O_CLOEXEC);
	int app = ::open(file.path().c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
	ASSERT_GE(ro, 0);
	ASSERT_GE(app, 0);
	IoLoop loop(*ctx_, *s.reg, options());
	std::uint32_t f = loop.add_file(file.fd());
	std::uint32_t f_ro = loop.add_file(ro);
	std::uint32_t f_app = loop.add_file(app);
	IoLoopClient client(loop.host_queue());
	struct Case {
		const char *what;
		std::uint32_t file, buffer;
		std::uint64_t boff, len;
		int want;
	};
	const Case cases[] = {
		{"read-only file", f_ro, 0, 0, 10, -EACCES},
		{"O_APPEND file", f_app, 0, 0, 10, -EACCES},
		{"unknown buffer", f, 2, 0, 10, -EINVAL},
		{"range past the buffer", f, 0, 4000, 97, -EINVAL},
		{"length wrapping around", f, 0, 1, UINT64_MAX, -EINVAL},
		{"unknown file", f_app + 1, 0, 0, 10, -EBADF},
	};
	for (const Case &k : cases) {
		IoCompletion c = client.wait(client.write(k.file, 100, k.len, k.buffer, k.boff));
		EXPECT_EQ(c.status, k.want) << k.what;
		EXPECT_EQ(c.bytes, 0u) << k.what;
	}
	/* An operation the loop does not know, straight into the ring. */
	svmbatch_io_queue q = loop.host_queue();
	const std::uint64_t t = std::atomic_ref(q.header->host_tail).fetch_add(1);
	svmbatch_io_request *slot = svmbatch_io_request_slot(&q, t);
	while (std::atomic_ref(slot->seq).load(std::memory_order_acquire) != t)
		std::this_thread::yield();
	svmbatch_io_fill(slot, 7, f, 0, 10, 0, 0, 0);
	std::atomic_ref(slot->seq).store(svmbatch_io_seq_published(t), std::memory_order_release);
	EXPECT_EQ(client.wait(static_cast<std::int64_t>(t)).status, -EINVAL);

	std::vector<char> got = file.contents();
	EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](char c) { return c == blank; }));

	/* From the read-only buffer: allowed. */
	IoCompletion c = client.wait(client.write(f, 0, 4096, 1, 0));
	EXPECT_EQ(c.status, 0);
	EXPECT_EQ(c.bytes, 4096u);
	got = file.contents();
	EXPECT_EQ(std::memcmp(got.data(), s.data(1), 4096), 0);
	::close(ro);
	::close(app);
}

/* The file's own errors are the status: -ENOSPC (/dev/full), -EIO
 * (/proc/self/mem where nothing is mapped), -EBADF (closed after it was
 * added); the loop goes on. */
TEST_F(IoLoopWriteTest, TheFilesOwnErrorsAreTheStatus)
{
	Sources s(*ctx_, {64 << 10});
	IoLoop loop(*ctx_, *s.reg, options(32, 16 << 10));
	IoLoopClient client(loop.host_queue());

	int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
	ASSERT_GE(full, 0);
	std::uint32_t f_full = loop.add_file(full);
	IoCompletion c = client.wait(client.write(f_full, 0, 4096, 0, 0));
	EXPECT_EQ(c.status, -ENOSPC);
	EXPECT_EQ(c.bytes, 0u);
	/* In 4 pieces: every one fails, the first one's errno is the status. */
	c = client.wait(client.write(f_full, 0, 64 << 10, 0, 0));
	EXPECT_EQ(c.status, -ENOSPC);
	EXPECT_EQ(c.bytes, 0u);
	::close(full);

	int mem = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
	ASSERT_GE(mem, 0);
	std::uint32_t f_mem = loop.add_file(mem);
	c = client.wait(client.write(f_mem, 4096, 100, 0, 0));
	EXPECT_EQ(c.status, -EIO);
	EXPECT_EQ(c.bytes, 0u);
	::close(mem);

	BlankFile file;
	int fd = ::dup(file.fd());
	ASSERT_GE(fd, 0);
	std::uint32_t closed = loop.add_file(fd);
	::close(fd);
	c = client.wait(client.write(closed, 0, 10, 0, 0));
	EXPECT_EQ(c.status, -EBADF);

	std::uint32_t f = loop.add_file(file.fd());
	c = client.wait(client.write(f, 0, 64 << 10, 0, 0));
	EXPECT_EQ(c.status, 0);
	EXPECT_EQ(c.bytes, 64u << 10);
	EXPECT_EQ(loop.stats().failed, 4u);
}

/* A read in pieces that meets the end of the file: the bytes before it,
 * -ENODATA, once. */
TEST_F(IoLoopWriteTest, AReadInPiecesMeetsTheEndOfTheFile)
{
	Sources s(*ctx_, {64 << 10});
	test::ScratchFile scratch(file_bytes);
	IoLoop loop(*ctx_, *s.reg, options(32, 4096));
	IoLoopClient client(loop.host_queue());
	std::uint32_t f = loop.add_file(scratch.fd());

	IoCompletion c = client.wait(client.read(f, file_bytes - 10000, 30000, 0, 0));
	EXPECT_EQ(c.status, -ENODATA);
	EXPECT_EQ(c.bytes, 10000u);
	for (std::size_t k = 0; k < 10000; k++)
		ASSERT_EQ(static_cast<std::uint8_t>(s.data(0)[k]),
			  pattern_byte(file_bytes - 10000 + k));
	EXPECT_EQ(loop.stats().completed, 1u);
}

/* stop() while 4 producers write: each write they published completes
 * exactly once, written or -ECANCELED; a closed loop takes no write.  As
 * for reads, the race must have happened (an -ECANCELED) within
 * max_attempts runs. */
TEST_F(IoLoopWriteTest, StopWithWritesInFlightCompletesEveryOne)
{
	constexpr int producers = 4;
	constexpr int max_attempts = 50;
	Sources s(*ctx_, std::vector<std::size_t>(producers, 256 << 10));
	BlankFile file;
	std::uint64_t cancelled_total = 0;
	int attempts = 0;

	while (cancelled_total == 0 && attempts < max_attempts && !HasFailure()) {
		attempts++;
		IoLoop loop(*ctx_, *s.reg, options(64, 64 << 10));
		IoLoopClient client(loop.host_queue());
		std::uint32_t f = loop.add_file(file.fd());

		const test::StopRace race = test::stop_while_producing(
			loop, client, producers, 100, 256 << 10, [&](int p, std::uint64_t i) {
				const std::uint64_t off = (static_cast<std::uint64_t>(p) << 20) +
							  (i * 4096) % (768 << 10);
				return client.write(f, off, 256 << 10,
						    static_cast<std::uint32_t>(p), 0);
			});

		EXPECT_EQ(race.other, 0u) << "attempt " << attempts;
		EXPECT_EQ(race.whole + race.cancelled, race.published) << "attempt " << attempts;
		IoLoopStats st = loop.stats();
		EXPECT_EQ(st.completed, race.published) << "attempt " << attempts;
		EXPECT_EQ(st.undelivered, 0u) << "attempt " << attempts;
		EXPECT_EQ(client.write(f, 0, 1, 0, 0), -1) << "a closed loop takes nothing";
		cancelled_total += race.cancelled;
	}
	EXPECT_GT(cancelled_total, 0u)
		<< "in " << attempts << " runs stop() never caught a write before it ended";
	RecordProperty("attempts", attempts);
}

/* The times a trace keeps are in the order the request went. */
TEST_F(IoLoopWriteTest, TheTraceKeepsEachStepInOrder)
{
	Sources s(*ctx_, {64 << 10});
	BlankFile file;
	std::vector<IoLoopTimes> times(8);
	IoLoopOptions o = options();
	o.trace = times;
	IoLoop loop(*ctx_, *s.reg, o);
	IoLoopClient client(loop.host_queue());
	std::uint32_t f = loop.add_file(file.fd());

	for (int i = 0; i < 10; i++)
		ASSERT_EQ(client.wait(client.write(f, 0, 4096, 0, 0)).status, 0);
	loop.stop();
	for (const IoLoopTimes &t : times) {
		EXPECT_GT(t.seen_ns, 0u);
		EXPECT_LE(t.seen_ns, t.submitted_ns);
		EXPECT_LE(t.submitted_ns, t.done_ns);
		EXPECT_LE(t.done_ns, t.completed_ns);
	}
}

} // namespace
} // namespace svmbatch
