// SPDX-License-Identifier: MIT
// The Reader and the Writer on several cores: every parallelism, byte-exact
// results, short transfers, errors per request, cancellation, batches in
// flight, and what each way of sharing the buffer table costs in VmPin.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/capability.h>
#include <liburing.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "ring_fixture.hpp"
#include "test_util.hpp"
#include "uring/io_plan.hpp"

namespace svmbatch {
namespace {

using test::expect_error;
using test::pattern_byte;

/// Scattered heap buffers, registered, as the fixed buffers of a ring.
class Buffers {
public:
	Buffers(Context &ctx, ::io_uring &ring, std::size_t n, std::size_t max_len,
		std::uint64_t seed)
	{
		std::mt19937_64 rng(seed);
		for (std::size_t i = 0; i < n; i++) {
			mem_.emplace_back(1 + rng() % max_len, std::uint8_t{0});
			list_.push_back({mem_.back().data(), mem_.back().size()});
		}
		reg_.emplace(ctx.register_buffers(list_));
		fixed_.emplace(register_fixed(*reg_, ring));
	}
	std::vector<std::uint8_t> &operator[](std::size_t i) { return mem_[i]; }
	std::size_t size() const { return mem_.size(); }
	const FixedBuffers &fixed() const { return *fixed_; }
	void clear()
	{
		for (auto &m : mem_)
			std::fill(m.begin(), m.end(), std::uint8_t{0});
	}

private:
	std::vector<std::vector<std::uint8_t>> mem_;
	std::vector<Buffer> list_;
	std::optional<Registration> reg_;
	std::optional<FixedBuffers> fixed_;
};

/// An open file descriptor, closed on destruction.
struct Fd {
	int fd;
	explicit Fd(int f) : fd(f) {}
	~Fd()
	{
		if (fd >= 0)
			::close(fd);
	}
	Fd(const Fd &) = delete;
	Fd &operator=(const Fd &) = delete;
	Fd(Fd &&) = delete;
	Fd &operator=(Fd &&) = delete;
};

/// A pipe whose read end nobody writes to: a read from it blocks in flight.
struct Pipe {
	int fds[2] = {-1, -1};
	Pipe() { EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0); }
	~Pipe()
	{
		::close(fds[0]);
		::close(fds[1]);
	}
	Pipe(const Pipe &) = delete;
	Pipe &operator=(const Pipe &) = delete;
	Pipe(Pipe &&) = delete;
	Pipe &operator=(Pipe &&) = delete;
};

/// What a batch may take at most before the test calls it a hang.
constexpr auto hang = std::chrono::seconds(60);

/// fn() on another thread; fails the test instead of hanging it.
template <typename Fn> auto within_deadline(Fn fn)
{
	auto f = std::async(std::launch::async, std::move(fn));
	if (f.wait_for(hang) != std::future_status::ready) {
		ADD_FAILURE() << "no result within " << hang.count() << " s: a hang";
		std::abort(); /* the stuck thread cannot be joined */
	}
	return f.get();
}

class ParallelIoTest : public test::RingFixture {};

/// (parallelism, threads, clone_buffers)
using ModeParam = std::tuple<Parallelism, unsigned, bool>;

class ParallelIoModeTest : public ParallelIoTest, public ::testing::WithParamInterface<ModeParam> {
protected:
	WriterOptions options(unsigned depth, std::size_t max_io) const
	{
		WriterOptions o;
		o.parallelism = std::get<0>(GetParam());
		o.threads = std::get<1>(GetParam());
		o.clone_buffers = std::get<2>(GetParam());
		o.queue_depth = depth;
		o.max_io_bytes = max_io;
		return o;
	}
};

TEST_P(ParallelIoModeTest, ReportsWhatItResolvedTo)
{
	Buffers b(*ctx_, ring_->get(), 4, 8192, 1);
	WriterOptions o = options(8, 4096);
	Reader r(ring_->get(), b.fixed(), o);
	Writer w(ring_->get(), b.fixed(), o);

	for (auto [par, threads, sharing] :
	     {std::tuple{r.parallelism(), r.threads(), r.buffer_sharing()},
	      std::tuple{w.parallelism(), w.threads(), w.buffer_sharing()}}) {
		EXPECT_NE(par, Parallelism::Auto);
		EXPECT_EQ(threads, o.threads);
		if (o.threads == 1) {
			EXPECT_EQ(sharing, BufferSharing::None);
			continue;
		}
		if (o.parallelism != Parallelism::Auto) {
			EXPECT_EQ(par, o.parallelism);
		}
		if (par == Parallelism::AsyncWorkers)
			EXPECT_EQ(sharing, BufferSharing::None);
		else if (!o.clone_buffers)
			EXPECT_EQ(sharing, BufferSharing::Registered);
		else
			EXPECT_NE(sharing, BufferSharing::None);
	}
}

/*
 * Random requests (sizes, offsets, pieces, depths) written from scattered
 * buffers into a file, read back into the cleared buffers: every byte of
 * every request, both ways, and the file itself.
 */
TEST_P(ParallelIoModeTest, RandomRequestsRoundTripByteForByte)
{
	std::mt19937_64 rng(7 + std::get<1>(GetParam()));
	Buffers b(*ctx_, ring_->get(), 96, 48 << 10, 3);
	for (std::size_t i = 0; i < b.size(); i++)
		for (std::size_t k = 0; k < b[i].size(); k++)
			b[i][k] = static_cast<std::uint8_t>(i * 131 + k * 7);
	test::ScratchFile file(0);
	std::vector<IoRequest> rq;
	std::uint64_t off = 0;
	for (std::size_t i = 0; i < b.size(); i++) {
		std::size_t boff = rng() % b[i].size();
		std::size_t len = 1 + rng() % (b[i].size() - boff);
		rq.push_back({file.fd(), off, len, i, boff});
		off += len + rng() % 100;
	}
	const unsigned depth = 1 + static_cast<unsigned>(rng() % 16);
	const std::size_t max_io = 512 + rng() % (8 << 10);
	WriterOptions o = options(depth, max_io);
	Writer w(ring_->get(), b.fixed(), o);
	std::vector<IoResult> wres = w.write(rq);
	ASSERT_EQ(wres.size(), rq.size());
	for (std::size_t i = 0; i < rq.size(); i++) {
		ASSERT_EQ(wres[i].err, 0) << "write " << i << ": " << std::strerror(wres[i].err);
		ASSERT_EQ(wres[i].bytes, rq[i].length) << "write " << i;
		std::vector<std::uint8_t> got(rq[i].length);
		ASSERT_EQ(::pread(file.fd(), got.data(), got.size(),
				  static_cast<off_t>(rq[i].file_offset)),
			  static_cast<ssize_t>(got.size()));
		ASSERT_EQ(std::memcmp(got.data(), b[i].data() + rq[i].buffer_offset, got.size()), 0)
			<< "file at request " << i;
	}
	EXPECT_GE(w.submitted(), rq.size());

	std::vector<std::vector<std::uint8_t>> want;
	for (std::size_t i = 0; i < b.size(); i++)
		want.push_back(b[i]);
	b.clear();
	Reader r(ring_->get(), b.fixed(), o);
	std::vector<IoResult> rres = r.read(rq);
	ASSERT_EQ(rres.size(), rq.size());
	for (std::size_t i = 0; i < rq.size(); i++) {
		ASSERT_EQ(rres[i].err, 0) << "read " << i << ": " << std::strerror(rres[i].err);
		ASSERT_EQ(rres[i].bytes, rq[i].length) << "read " << i;
		for (std::size_t k = 0; k < b[i].size(); k++) {
			bool inside = k >= rq[i].buffer_offset &&
				      k < rq[i].buffer_offset + rq[i].length;
			ASSERT_EQ(b[i][k], inside ? want[i][k] : 0)
				<< "buffer " << i << " byte " << k;
		}
	}
}

/* A file shorter than the requests: the bytes that exist, then ENODATA. */
TEST_P(ParallelIoModeTest, ShortFileGivesTheBytesThereAndEnodata)
{
	const std::size_t file_len = 100000;
	test::ScratchFile file(file_len);
	Buffers b(*ctx_, ring_->get(), 8, 64 << 10, 5);
	std::vector<IoRequest> rq;
	for (std::size_t i = 0; i < b.size(); i++)
		rq.push_back({file.fd(), i * 20000, b[i].size(), i, 0});
	Reader r(ring_->get(), b.fixed(), options(4, 4096));
	std::vector<IoResult> res = r.read(rq);
	for (std::size_t i = 0; i < rq.size(); i++) {
		std::size_t there = rq[i].file_offset >= file_len ?
					    0 :
					    std::min(rq[i].length, file_len - rq[i].file_offset);
		EXPECT_EQ(res[i].bytes, there) << "request " << i;
		EXPECT_EQ(res[i].err, there == rq[i].length ? 0 : ENODATA) << "request " << i;
		for (std::size_t k = 0; k < there; k++)
			ASSERT_EQ(b[i][k], pattern_byte(rq[i].file_offset + k))
				<< "request " << i << " byte " << k;
	}
}

/* Errors are per request: the others complete, and the rings go on. */
TEST_P(ParallelIoModeTest, BadFdsFailTheirRequestsOnly)
{
	test::ScratchFile file(1 << 20);
	Buffers b(*ctx_, ring_->get(), 6, 32 << 10, 9);
	/* The Reader and Writer first: their private rings take fd numbers. */
	Reader r(ring_->get(), b.fixed(), options(4, 8192));
	Writer w(ring_->get(), b.fixed(), options(4, 8192));
	Fd read_only(::open(file.path().c_str(), O_RDONLY | O_CLOEXEC));
	ASSERT_GE(read_only.fd, 0);
	int closed = ::dup(file.fd()); /* a number that is not open */
	ASSERT_GE(closed, 0);
	::close(closed);
	std::vector<IoRequest> rq;
	for (std::size_t i = 0; i < b.size(); i++)
		rq.push_back({i % 3 == 1 ? closed : file.fd(), i * 4096, b[i].size(), i, 0});

	std::vector<IoResult> res = r.read(rq);
	for (std::size_t i = 0; i < rq.size(); i++) {
		EXPECT_EQ(res[i].err, i % 3 == 1 ? EBADF : 0) << "read " << i;
		EXPECT_EQ(res[i].bytes, i % 3 == 1 ? 0 : rq[i].length) << "read " << i;
	}
	/* Writing through a descriptor opened read-only. */
	rq[0].fd = read_only.fd;
	res = w.write(rq);
	for (std::size_t i = 0; i < rq.size(); i++)
		EXPECT_EQ(res[i].err, i == 0 || i % 3 == 1 ? EBADF : 0) << "write " << i;
	res = r.read(std::span(rq).subspan(2, 1));
	EXPECT_EQ(res[0].err, 0) << "the reader goes on working";
}

/* /dev/full: every write fails with ENOSPC, and nothing is stranded. */
TEST_P(ParallelIoModeTest, EnospcIsPerRequest)
{
	Fd full(::open("/dev/full", O_WRONLY | O_CLOEXEC));
	if (full.fd < 0)
		GTEST_SKIP() << "no /dev/full: " << std::strerror(errno);
	test::ScratchFile file(0);
	Buffers b(*ctx_, ring_->get(), 8, 16 << 10, 11);
	std::vector<IoRequest> rq;
	for (std::size_t i = 0; i < b.size(); i++)
		rq.push_back({i % 2 ? full.fd : file.fd(), i << 16, b[i].size(), i, 0});
	Writer w(ring_->get(), b.fixed(), options(3, 4096));
	std::vector<IoResult> res = w.write(rq);
	for (std::size_t i = 0; i < rq.size(); i++) {
		EXPECT_EQ(res[i].err, i % 2 ? ENOSPC : 0) << "write " << i;
		EXPECT_EQ(res[i].bytes, i % 2 ? 0 : rq[i].length) << "write " << i;
	}
}

std::string mode_name(const ::testing::TestParamInfo<ModeParam> &info)
{
	const Parallelism par = std::get<0>(info.param);
	std::string name = par == Parallelism::Auto	    ? "Auto" :
			   par == Parallelism::AsyncWorkers ? "AsyncWorkers" :
							      "RingPerThread";
	return name + std::to_string(std::get<1>(info.param)) +
	       (std::get<2>(info.param) ? "" : "NoClone");
}

INSTANTIATE_TEST_SUITE_P(Modes, ParallelIoModeTest,
			 ::testing::Values(ModeParam{Parallelism::Auto, 1, true},
					   ModeParam{Parallelism::Auto, 3, true},
					   ModeParam{Parallelism::Auto, 3, false},
					   ModeParam{Parallelism::AsyncWorkers, 2, true},
					   ModeParam{Parallelism::AsyncWorkers, 4, true},
					   ModeParam{Parallelism::RingPerThread, 2, true},
					   ModeParam{Parallelism::RingPerThread, 4, true},
					   ModeParam{Parallelism::RingPerThread, 3, false}),
			 mode_name);

/*
 * A file truncated by another thread while a parallel read runs: each
 * request either arrived whole, or ended with ENODATA after the bytes
 * that were still there; every byte that arrived is the file's.
 */
TEST_F(ParallelIoTest, FileTruncatedDuringTheReadEndsEveryRequestCleanly)
{
	const std::size_t file_len = 8 << 20;
	test::ScratchFile file(file_len);
	Buffers b(*ctx_, ring_->get(), 128, 64 << 10, 13);
	std::vector<IoRequest> rq;
	for (std::size_t i = 0; i < b.size(); i++)
		rq.push_back({file.fd(), i * (64 << 10), b[i].size(), i, 0});
	ReaderOptions o;
	o.threads = 4;
	o.max_io_bytes = 4096;
	Reader r(ring_->get(), b.fixed(), o);
	IoBatch batch = r.start(rq);
	std::thread cut([&] { EXPECT_EQ(::ftruncate(file.fd(), 3 << 20), 0); });
	std::vector<IoResult> res = within_deadline([&] { return batch.wait(); });
	cut.join();
	for (std::size_t i = 0; i < rq.size(); i++) {
		if (res[i].err == 0) {
			EXPECT_EQ(res[i].bytes, rq[i].length) << "request " << i;
		} else {
			EXPECT_EQ(res[i].err, ENODATA) << "request " << i;
			EXPECT_LT(res[i].bytes, rq[i].length) << "request " << i;
		}
		/* The pieces that arrived may not be the first ones: check each
		 * byte that differs from zero (what was there before). */
		for (std::size_t k = 0; k < b[i].size(); k++) {
			if (b[i][k] != 0) {
				ASSERT_EQ(b[i][k], pattern_byte(rq[i].file_offset + k))
					<< "request " << i << " byte " << k;
			}
		}
		if (rq[i].file_offset + rq[i].length <= (3 << 20)) {
			EXPECT_EQ(res[i].err, 0) << "request " << i << " lies before the cut";
		}
	}
}

/// Whether this process lives in the initial user namespace, whose
/// /proc/self/uid_map maps every uid to itself ("0 0 4294967295").
bool initial_user_namespace()
{
	std::ifstream map("/proc/self/uid_map");
	unsigned long inside = 1, outside = 1, count = 0;
	return map >> inside >> outside >> count && inside == 0 && outside == 0 &&
	       count == 4294967295UL;
}

/* A full tmpfs: a write that fits in part is short, then ENOSPC. */
TEST_F(ParallelIoTest, SmallTmpfsGivesShortWritesThenEnospc)
{
	char dir[] = "/tmp/svmbatch-tmpfs-XXXXXX";
	ASSERT_NE(::mkdtemp(dir), nullptr);
	if (::mount("tmpfs", dir, "tmpfs", 0, "size=256k") != 0) {
		int err = errno;
		::rmdir(dir);
		/* Only a process without the privilege may skip: root fails. */
		if (!test::has_capability(CAP_SYS_ADMIN))
			SVMBATCH_SKIP_ABSENT(
				"mounts",
				std::string("cannot mount a small tmpfs (") + std::strerror(err) +
					"): capget says this process lacks CAP_SYS_ADMIN");
		if (err == EPERM && !initial_user_namespace())
			SVMBATCH_SKIP_ABSENT("mounts",
					     std::string("cannot mount a small tmpfs (") +
						     std::strerror(err) +
						     "): CAP_SYS_ADMIN only in a user namespace "
						     "(/proc/self/uid_map is not the identity)");
		FAIL() << "mount -t tmpfs -o size=256k at " << dir
		       << " with CAP_SYS_ADMIN: " << std::strerror(err);
	}
	std::string path = std::string(dir) + "/f";
	{
		Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
		ASSERT_GE(fd.fd, 0);
		std::vector<std::uint8_t> big(200 << 10, 0x5a), more(200 << 10, 0xa5);
		Buffer bufs[] = {{big.data(), big.size()}, {more.data(), more.size()}};
		Registration reg = ctx_->register_buffers(bufs);
		test::Ring ring(16);
		FixedBuffers fixed = register_fixed(reg, ring.get());
		WriterOptions o;
		o.threads = 2;
		o.max_io_bytes = 16 << 10;
		Writer w(ring.get(), fixed, o);
		std::vector<IoRequest> rq{{fd.fd, 0, big.size(), 0, 0},
					  {fd.fd, big.size(), more.size(), 1, 0}};
		std::vector<IoResult> res = w.write(rq);
		std::size_t total = res[0].bytes + res[1].bytes;
		EXPECT_LE(total, std::size_t{256} << 10);
		EXPECT_GT(total, std::size_t{200} << 10) << "the first fits whole";
		EXPECT_EQ(res[0].err, 0);
		EXPECT_EQ(res[1].err, ENOSPC);
		EXPECT_LT(res[1].bytes, more.size());
		EXPECT_EQ(io_uring_cq_ready(&ring.get()), 0u);
	}
	::umount(dir);
	::rmdir(dir);
}

/* fsync of something that cannot sync (a pipe) is its requests' error. */
TEST_F(ParallelIoTest, FailedSyncIsTheErrorOfItsFilesRequests)
{
	test::ScratchFile file(0);
	Pipe p;
	Buffers b(*ctx_, ring_->get(), 4, 512, 17);
	std::vector<IoRequest> rq;
	for (std::size_t i = 0; i < b.size(); i++)
		rq.push_back({i == 2 ? p.fds[1] : file.fd(), i * 512, b[i].size(), i, 0});
	for (SyncMode sync : {SyncMode::Fsync, SyncMode::Fdatasync}) {
		WriterOptions o;
		o.threads = 2;
		o.sync = sync;
		Writer w(ring_->get(), b.fixed(), o);
		std::vector<IoResult> res = w.write(rq);
		for (std::size_t i = 0; i < rq.size(); i++) {
			EXPECT_EQ(res[i].bytes, rq[i].length) << "request " << i;
			EXPECT_EQ(res[i].err, i == 2 ? EINVAL : 0) << "request " << i;
		}
		char drain[4096];
		(void)!::read(p.fds[0], drain, sizeof(drain));
	}
}

TEST_F(ParallelIoTest, InvalidRequestsSubmitNothing)
{
	test::ScratchFile file(0);
	Buffers b(*ctx_, ring_->get(), 2, 4096, 19);
	WriterOptions o;
	o.threads = 3;
	Writer w(ring_->get(), b.fixed(), o);
	std::vector<IoRequest> rq{{file.fd(), 0, 10, 0, 0}, {file.fd(), 0, 10, 5, 0}};
	Error e = expect_error([&] { (void)w.write(rq); });
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_EQ(e.step(), Step::Validate);
	EXPECT_NE(std::string(e.what()).find("request 1"), std::string::npos) << e.what();
	rq[1] = {file.fd(), 0, b[1].size() + 1, 1, 0};
	e = expect_error([&] { (void)w.start(rq); });
	EXPECT_EQ(e.buffer_index(), 1u);
	struct stat st {};
	ASSERT_EQ(::fstat(file.fd(), &st), 0);
	EXPECT_EQ(st.st_size, 0) << "nothing was written";
}

TEST_F(ParallelIoTest, ODirectWritesAlignedRequestsAndRefusesOthers)
{
	/* On the guests' ext4 where set: their /tmp, a tmpfs, has no O_DIRECT
	 * before Linux 6.6. */
	test::ScratchFile file(1 << 20, test::writeback_dir());
	Fd fd(::open(file.path().c_str(), O_RDWR | O_DIRECT | O_CLOEXEC));
	if (fd.fd < 0 && errno == EINVAL)
		SVMBATCH_SKIP_ABSENT("odirect",
				     "this filesystem (" + file.path() + ") has no O_DIRECT");
	ASSERT_GE(fd.fd, 0) << std::strerror(errno);
	test::MappedPages pages(16);
	ASSERT_NE(pages.p, nullptr);
	auto *p = reinterpret_cast<std::uint8_t *>(pages.p);
	std::memset(p, 0x3c, std::size_t{16} * 4096);
	Buffer bufs[] = {{p, std::size_t{16} * 4096}};
	Registration reg = ctx_->register_buffers(bufs);
	FixedBuffers fixed = register_fixed(reg, ring_->get());
	WriterOptions o;
	o.threads = 4;
	o.max_io_bytes = 8192;
	o.direct_alignment = 4096;
	Writer w(ring_->get(), fixed, o);
	std::vector<IoRequest> ok{{fd.fd, 4096, std::size_t{12} * 4096, 0, 4096}};
	std::vector<IoResult> res = w.write(ok);
	ASSERT_EQ(res[0].err, 0) << std::strerror(res[0].err);
	std::vector<std::uint8_t> got(std::size_t{12} * 4096);
	ASSERT_EQ(::pread(file.fd(), got.data(), got.size(), 4096),
		  static_cast<ssize_t>(got.size()));
	EXPECT_EQ(got, std::vector<std::uint8_t>(got.size(), 0x3c));
	std::vector<IoRequest> bad{{fd.fd, 4096, 100, 0, 0}};
	Error e = expect_error([&] { (void)w.write(bad); });
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_NE(std::string(e.what()).find("O_DIRECT"), std::string::npos) << e.what();
}

/*
 * cancel(): reads blocked on a pipe, each shown to be in flight by a byte
 * it took, end with ECANCELED, the file's requests complete or are
 * cancelled, nothing hangs, and the Reader works again afterwards.
 */
TEST_F(ParallelIoTest, CancelEndsBlockedReadsAndTheReaderGoesOn)
{
	test::ScratchFile file(1 << 20);
	Buffers b(*ctx_, ring_->get(), 6, 8192, 21);
	for (Parallelism par : {Parallelism::AsyncWorkers, Parallelism::RingPerThread}) {
		Pipe p;
		ReaderOptions o;
		o.threads = 3;
		o.parallelism = par;
		Reader r(ring_->get(), b.fixed(), o);
		std::vector<IoRequest> rq;
		for (std::size_t i = 0; i < b.size(); i++)
			rq.push_back({i % 2 ? p.fds[0] : file.fd(), i * 8192, b[i].size(), i, 0});
		IoBatch batch = r.start(rq);
		/* Proof that the pipe reads are in flight, not merely queued: a
		 * byte written into the pipe is taken (FIONREAD drops back to 0)
		 * only by a read the kernel holds.  One byte per pipe request,
		 * each waited for (bounded); a short read goes on for the rest,
		 * so every pipe request stays unfinished. */
		const std::size_t pipe_requests = rq.size() / 2;
		for (std::size_t k = 0; k < pipe_requests; k++) {
			ASSERT_EQ(::write(p.fds[1], "x", 1), 1);
			int queued = 1;
			for (int waited = 0; queued > 0 && waited < 10000; waited++) {
				ASSERT_EQ(::ioctl(p.fds[0], FIONREAD, &queued), 0);
				if (queued > 0)
					std::this_thread::sleep_for(std::chrono::milliseconds(1));
			}
			ASSERT_EQ(queued, 0) << "byte " << k << " not taken within 10 s: "
					     << "no read of the pipe was in flight";
		}
		EXPECT_FALSE(batch.done()) << "the pipe reads cannot have completed";
		batch.cancel();
		std::vector<IoResult> res = within_deadline([&] { return batch.wait(); });
		std::size_t piped = 0;
		for (std::size_t i = 0; i < rq.size(); i++) {
			if (i % 2) {
				EXPECT_EQ(res[i].err, ECANCELED) << "pipe read " << i;
				piped += res[i].bytes;
			} else {
				EXPECT_TRUE(res[i].err == 0 || res[i].err == ECANCELED)
					<< "file read " << i << ": " << std::strerror(res[i].err);
			}
		}
		EXPECT_EQ(piped, pipe_requests)
			<< "every byte the pipe reads took is in their results";
		EXPECT_THROW((void)batch.wait(), std::logic_error);
		std::vector<IoRequest> again{{file.fd(), 100, 200, 0, 0}};
		res = r.read(again);
		EXPECT_EQ(res[0].err, 0);
		EXPECT_EQ(b[0][0], pattern_byte(100));
	}
}

/*
 * AsyncWorkers hands io-wq only what a worker can copy: transfers of a
 * regular file.  A pipe read keeps the usual poll path (IOSQE_ASYNC on a
 * pipe could spin the driver in the kernel on 6.1 once data arrived).
 */
TEST_F(ParallelIoTest, OnlyStorageTransfersGoToTheWorkers)
{
	test::ScratchFile file(1 << 20);
	Buffers b(*ctx_, ring_->get(), 2, 8192, 24);
	Pipe p;
	std::vector<IoRequest> rq{{file.fd(), 0, b[0].size(), 0, 0},
				  {p.fds[0], 0, b[1].size(), 1, 0}};
	std::vector<detail::Piece> pieces = detail::plan_pieces(rq, b.fixed(), IoOptions{}, true);
	ASSERT_FALSE(pieces.empty());
	for (const detail::Piece &piece : pieces)
		EXPECT_EQ(piece.offload, piece.request == 0) << "request " << piece.request;
}

/*
 * Destroying a batch, and a Reader/Writer, with reads still blocked in
 * flight: no hang, the caller's ring and fixed buffers work for a new
 * Reader, and no pin is left behind.
 */
TEST_F(ParallelIoTest, DestructionWithIoInFlightWaitsAndLeavesNothing)
{
	test::ScratchFile file(1 << 20);
	const std::uint64_t before = test::quiet_pinned_bytes();
	{
		Buffers b(*ctx_, ring_->get(), 4, 8192, 23);
		for (bool clone : {true, false}) {
			Pipe p;
			ReaderOptions o;
			o.threads = 3;
			o.parallelism = Parallelism::RingPerThread;
			o.clone_buffers = clone;
			std::vector<IoRequest> rq{{p.fds[0], 0, 1, 0, 0}, {p.fds[0], 0, 1, 1, 0}};
			within_deadline([&] {
				Reader r(ring_->get(), b.fixed(), o);
				IoBatch lost = r.start(rq); /* destroyed first, in flight */
				IoBatch kept = r.start(rq); /* ends with the Reader */
				(void)lost;
				return 0;
			});
			within_deadline([&] {
				Writer w(ring_->get(), b.fixed(), WriterOptions{o});
				IoBatch blocked =
					w.start(std::vector<IoRequest>{{p.fds[0], 0, 1, 0, 0}});
				return 0; /* EBADF or blocked: either way it must end */
			});
			Reader fresh(ring_->get(), b.fixed(), o);
			std::vector<IoRequest> ok{{file.fd(), 0, b[0].size(), 0, 0}};
			EXPECT_EQ(fresh.read(ok)[0].err, 0) << "clone " << clone;
			EXPECT_EQ(b[0][0], pattern_byte(0));
		}
	}
	EXPECT_LE(test::pinned_bytes_at_most(before), before) << "a pin was left behind";
}

/* Batches started while another runs complete independently, in order. */
TEST_F(ParallelIoTest, SeveralBatchesInFlight)
{
	test::ScratchFile file(4 << 20);
	Buffers b(*ctx_, ring_->get(), 64, 32 << 10, 25);
	ReaderOptions o;
	o.threads = 3;
	o.max_io_bytes = 8192;
	Reader r(ring_->get(), b.fixed(), o);
	std::vector<IoBatch> batches;
	for (std::size_t j = 0; j < 4; j++) {
		std::vector<IoRequest> rq;
		for (std::size_t i = j * 16; i < (j + 1) * 16; i++)
			rq.push_back({file.fd(), i * (32 << 10), b[i].size(), i, 0});
		batches.push_back(r.start(rq));
	}
	for (std::size_t j = 0; j < batches.size(); j++) {
		std::vector<IoResult> res = batches[j].wait();
		ASSERT_EQ(res.size(), 16u);
		for (std::size_t n = 0; n < res.size(); n++) {
			std::size_t i = j * 16 + n;
			ASSERT_EQ(res[n].err, 0) << "batch " << j << " request " << n;
			for (std::size_t k = 0; k < b[i].size(); k++)
				ASSERT_EQ(b[i][k], pattern_byte(i * (32 << 10) + k))
					<< "buffer " << i << " byte " << k;
		}
	}
	/* And read() after them runs inline again. */
	std::vector<IoRequest> one{{file.fd(), 7, 9, 0, 0}};
	EXPECT_EQ(r.read(one)[0].err, 0);
	EXPECT_EQ(b[0][0], pattern_byte(7));
}

/*
 * The price of a ring per thread without the clone: every private ring
 * pins the buffers again (VmPin grows), until the Reader goes.  With the
 * clone (where the kernel has it) nothing is pinned again.
 */
TEST_F(ParallelIoTest, RegisteredSharingPinsPerRingAndGivesItBack)
{
	Buffers b(*ctx_, ring_->get(), 8, 64 << 10, 27);
	std::size_t bytes = 0;
	for (std::size_t i = 0; i < b.size(); i++)
		bytes += b[i].size();
	const std::uint64_t before = test::quiet_pinned_bytes();
	for (bool clone : {false, true}) {
		ReaderOptions o;
		o.threads = 3;
		o.parallelism = Parallelism::RingPerThread;
		o.clone_buffers = clone;
		{
			Reader r(ring_->get(), b.fixed(), o);
			std::uint64_t with = test::quiet_pinned_bytes();
			if (r.buffer_sharing() == BufferSharing::Registered)
				/* Two private rings, each at least the buffers' bytes. */
				EXPECT_GE(with, before + 2 * bytes)
					<< "the documented cost of registering again";
			else
				EXPECT_EQ(with, before) << "a cloned table pins nothing again";
		}
		EXPECT_LE(test::pinned_bytes_at_most(before), before) << "clone " << clone;
	}
}

} // namespace
} // namespace svmbatch
