// SPDX-License-Identifier: MIT
// io_uring fixed buffers over a registration, in the mode under test.
#include <gtest/gtest.h>

#include <liburing.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "test_util.hpp"

namespace svmbatch {
namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

/* Anonymous memory, unmapped on destruction. */
class Anon {
public:
	explicit Anon(std::size_t len, int extra_flags = 0) : len_(len)
	{
		void *p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);

		if (p == MAP_FAILED)
			throw std::runtime_error("mmap failed");
		addr_ = static_cast<char *>(p);
	}
	~Anon() { ::munmap(addr_, len_); }
	Anon(const Anon &) = delete;
	Anon &operator=(const Anon &) = delete;
	Anon(Anon &&) = delete;
	Anon &operator=(Anon &&) = delete;
	char *get() const { return addr_; }

private:
	char *addr_;
	std::size_t len_;
};

/* One READ_FIXED (or WRITE_FIXED) to completion: the CQE's res. */
int do_fixed(test::Ring &ring, bool read, int fd, void *addr, unsigned len, off_t off,
	     unsigned index)
{
	io_uring_sqe *sqe = io_uring_get_sqe(&ring.get());
	io_uring_cqe *cqe;

	if (read)
		io_uring_prep_read_fixed(sqe, fd, addr, len, off, static_cast<int>(index));
	else
		io_uring_prep_write_fixed(sqe, fd, addr, len, off, static_cast<int>(index));
	if (io_uring_submit(&ring.get()) != 1 || io_uring_wait_cqe(&ring.get(), &cqe))
		return -EIO;
	int res = cqe->res;
	io_uring_cqe_seen(&ring.get(), cqe);
	return res;
}

/*
 * io_uring charges RLIMIT_MEMLOCK to the user, shared by every process of
 * the uid: root's account moves with whatever else runs as root.  A forked
 * child takes a uid of its own (losing CAP_IPC_LOCK with it), or else just
 * drops CAP_IPC_LOCK.
 */
bool own_memlock_account()
{
	const auto uid = static_cast<uid_t>(200000 + ::getpid() % 100000);

	if (::setresgid(uid, uid, uid) == 0 && ::setresuid(uid, uid, uid) == 0)
		return true;
	return test::drop_cap_ipc_lock();
}

bool matches_file(const char *p, std::size_t len, off_t off)
{
	for (std::size_t k = 0; k < len; k++)
		if (static_cast<std::uint8_t>(p[k]) != test::pattern_byte(off + k))
			return false;
	return true;
}

class FixedBuffersTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		if (test::mode_under_test() == Mode::Kernel && !test::kernel_available())
			GTEST_SKIP() << "kernel mode: no /dev/svmbatch";
		pin_ = process_pinned_bytes();
	}
	/*
	 * The rings are gone: wait for their pages to be uncharged, so that
	 * a later test that compares VmPin does not see them drop.
	 */
	void TearDown() override
	{
		if (pin_) {
			EXPECT_LE(test::pinned_bytes_at_most(*pin_), *pin_)
				<< "io_uring pins left behind";
		}
	}
	Context ctx_ = test::make_context();
	std::optional<std::uint64_t> pin_;
};

TEST_F(FixedBuffersTest, ReadAndWriteFixedThroughEverySlice)
{
	Anon mem(64 * page);
	/* Three scattered buffers; the read-only one is a WRITE_FIXED source. */
	std::vector<Buffer> b{{mem.get() + 10 * page + 100, 3000},
			      {mem.get() + 100, 2 * page},
			      {mem.get() + 40 * page, 5 * page, Access::ReadOnly}};
	test::ScratchFile file(16 * page);
	Registration reg = ctx_.register_buffers(b);
	test::Ring ring;
	FixedBuffers fixed = register_fixed(reg, ring.get());

	ASSERT_EQ(fixed.size(), 3u);
	EXPECT_EQ(fixed.nr_slots(), 3u);
	for (std::size_t i = 0; i < 2; i++) {
		const FixedSlice &s = fixed[i];

		EXPECT_EQ(s.addr, b[i].ptr);
		EXPECT_EQ(s.len, b[i].len);
		ASSERT_EQ(do_fixed(ring, true, file.fd(), s.addr, static_cast<unsigned>(s.len),
				   static_cast<off_t>(i * 777), s.index),
			  static_cast<int>(s.len));
		EXPECT_TRUE(matches_file(static_cast<char *>(b[i].ptr), b[i].len,
					 static_cast<off_t>(i * 777)));
	}
	std::memset(b[2].ptr, 0x5a, b[2].len);
	const FixedSlice &w = fixed[2];
	ASSERT_EQ(do_fixed(ring, false, file.fd(), w.addr, static_cast<unsigned>(w.len), 0,
			   w.index),
		  static_cast<int>(w.len));
	char c = 0;
	ASSERT_EQ(::pread(file.fd(), &c, 1, static_cast<off_t>(w.len - 1)), 1);
	EXPECT_EQ(c, 0x5a);
}

TEST_F(FixedBuffersTest, TouchingBuffersShareSlots)
{
	Anon mem(16 * page);
	std::vector<Buffer> b;
	for (std::size_t i = 0; i < 8; i++) /* 8 buffers, 2 per page */
		b.push_back({mem.get() + i * page / 2, page / 2});
	Registration reg = ctx_.register_buffers(b);
	test::Ring ring;
	FixedBuffers fixed = register_fixed(reg, ring.get());

	EXPECT_EQ(fixed.nr_slots(), 1u);
	for (std::size_t i = 0; i < b.size(); i++) {
		EXPECT_EQ(fixed[i].index, 0u);
		EXPECT_EQ(fixed.slices(i).size(), 1u);
	}
	EXPECT_THROW(fixed[b.size()], std::out_of_range);
}

TEST_F(FixedBuffersTest, BufferOverOneGibSplitsIntoSlices)
{
	/* io_uring pins every page: 2.5 GiB must really be there. */
	long avail_kb = 0;
	std::ifstream meminfo("/proc/meminfo");
	std::string key;
	long value;
	std::string unit;
	while (meminfo >> key >> value >> unit)
		if (key == "MemAvailable:")
			avail_kb = value;
	if (test::mode_under_test() == Mode::Kernel || avail_kb < (6L << 20))
		GTEST_SKIP() << "needs 6 GiB available (io_uring pins 2.5 GiB), have "
			     << avail_kb / 1024 << " MiB";

	const std::size_t len = (std::size_t{5} << 29) + 3 * page; /* 2.5 GiB + 3 pages */
	Anon mem(len, MAP_NORESERVE);
	std::vector<Buffer> b{{mem.get(), len}};
	Registration reg = ctx_.register_buffers(b);
	test::Ring ring;
	FixedBuffers fixed = register_fixed(reg, ring.get());

	ASSERT_EQ(fixed.nr_slots(), 3u);
	auto s = fixed.slices(0);
	ASSERT_EQ(s.size(), 3u);
	EXPECT_EQ(s[0].len, io_uring_max_buffer_bytes);
	EXPECT_EQ(s[1].index, 1u);
	EXPECT_EQ(static_cast<char *>(s[2].addr), mem.get() + 2 * io_uring_max_buffer_bytes);
	EXPECT_EQ(s[2].len, len - 2 * io_uring_max_buffer_bytes);
	test::ScratchFile file(page);
	EXPECT_EQ(do_fixed(ring, true, file.fd(), s[2].addr, static_cast<unsigned>(page), 0,
			   s[2].index),
		  static_cast<int>(page));
}

TEST_F(FixedBuffersTest, WindowCoexistsWithTheApplicationsBuffers)
{
	Anon app(page), mem(8 * page);
	test::ScratchFile file(4 * page);
	test::Ring ring;
	::iovec app_iov{app.get(), page};
	__u64 tag = 0;

	ASSERT_EQ(io_uring_register_buffers_sparse(&ring.get(), 64), 0);
	ASSERT_EQ(io_uring_register_buffers_update_tag(&ring.get(), 3, &app_iov, &tag, 1), 1);
	std::vector<Buffer> b{{mem.get(), page}, {mem.get() + 4 * page, page}};
	Registration reg = ctx_.register_buffers(b);
	{
		FixedOptions opt;
		opt.window_first = 10;
		opt.window_size = 4;
		FixedBuffers fixed = register_fixed(reg, ring.get(), opt);

		EXPECT_EQ(fixed.first_slot(), 10u);
		EXPECT_EQ(fixed[0].index, 10u);
		EXPECT_EQ(fixed[1].index, 11u);
		EXPECT_EQ(do_fixed(ring, true, file.fd(), fixed[1].addr, 100, 5, fixed[1].index),
			  100);
		EXPECT_TRUE(matches_file(mem.get() + 4 * page, 100, 5));
		EXPECT_EQ(do_fixed(ring, true, file.fd(), app.get(), 64, 0, 3), 64);
	}
	/* The window is cleared, the application's slot 3 is intact. */
	EXPECT_EQ(do_fixed(ring, true, file.fd(), mem.get(), 64, 0, 10), -EFAULT);
	EXPECT_EQ(do_fixed(ring, true, file.fd(), app.get(), 64, 64, 3), 64);
	EXPECT_TRUE(matches_file(app.get(), 64, 64));
}

TEST_F(FixedBuffersTest, TooFewSlotsIsEnospcAndChangesNothing)
{
	Anon mem(8 * page);
	std::vector<Buffer> b{{mem.get(), page},
			      {mem.get() + 2 * page, page},
			      {mem.get() + 4 * page, page}};
	Registration reg = ctx_.register_buffers(b);
	test::Ring ring;

	ASSERT_EQ(io_uring_register_buffers_sparse(&ring.get(), 16), 0);
	for (auto [first, size] : {std::pair{0u, 2u}, std::pair{io_uring_max_slots - 2, 0u}}) {
		FixedOptions opt;
		opt.window_first = first;
		opt.window_size = size;
		try {
			FixedBuffers f = register_fixed(reg, ring.get(), opt);
			ADD_FAILURE() << "3 buffers fit in 2 slots";
		} catch (const Error &e) {
			EXPECT_EQ(e.err(), ENOSPC);
			EXPECT_EQ(e.step(), Step::IoUringRegister);
			EXPECT_NE(std::string(e.what()).find("3 fixed buffers"), std::string::npos);
		}
	}
	test::ScratchFile file(page);
	EXPECT_EQ(do_fixed(ring, true, file.fd(), mem.get(), 8, 0, 0), -EFAULT);
}

TEST_F(FixedBuffersTest, SecondWholeTableIsEbusy)
{
	Anon mem(page);
	Registration reg = ctx_.register_buffers(std::vector<Buffer>{{mem.get(), page}});
	test::Ring ring;
	FixedBuffers first = register_fixed(reg, ring.get());

	try {
		FixedBuffers second = register_fixed(reg, ring.get());
		FAIL() << "two whole tables on one ring";
	} catch (const Error &e) {
		EXPECT_EQ(e.err(), EBUSY);
	}
}

/*
 * The k-th entry of a window update fails (RLIMIT_MEMLOCK, charged by
 * io_uring without CAP_IPC_LOCK): the k entries before it are undone and
 * the error names the caller's buffer of entry k.  k = 0 is the kernel's
 * plain -errno (nothing done), k = 3 its partial count.  The half piece of
 * slack in the limit covers the ring's own memory (6.18 charges it) and
 * the reuse check at the end.
 */
TEST_F(FixedBuffersTest, FailureOfTheKthUpdateUndoesTheOthers)
{
	const std::size_t piece = 16 * page;
	Anon mem(16 * piece);
	std::vector<Buffer> b;
	for (std::size_t i = 0; i < 6; i++) /* caller order: reversed */
		b.push_back({mem.get() + (5 - i) * 2 * piece, piece});
	Registration reg = ctx_.register_buffers(b);

	for (std::size_t k : {std::size_t{0}, std::size_t{3}}) {
		int status = test::run_in_child([&]() -> int {
			if (!own_memlock_account())
				return 10;
			rlimit lim{k * piece + piece / 2, k * piece + piece / 2};
			if (::setrlimit(RLIMIT_MEMLOCK, &lim))
				return 11;
			std::uint64_t pin = process_pinned_bytes();
			{
				test::Ring ring; /* created without CAP_IPC_LOCK: it charges */
				if (io_uring_register_buffers_sparse(&ring.get(), 16))
					return 12;
				FixedOptions opt;
				opt.window_first = 4;
				try {
					FixedBuffers f = register_fixed(reg, ring.get(), opt);
					return 13;
				} catch (const Error &e) {
					/* Piece k (address order) is caller buffer 5 - k. */
					if (e.err() != ENOMEM ||
					    e.step() != Step::IoUringRegister) {
						std::fprintf(stderr, "unexpected: %s\n", e.what());
						return 14;
					}
					if (e.buffer_index() != 5 - k)
						return 15;
				}
				/*
				 * All k + 1 slots are free again: a page each.
				 * 6.1 uncharges cleared slots lazily, so these
				 * must fit in the slack too.
				 */
				for (unsigned slot = 4; slot < 4 + k + 1; slot++) {
					::iovec iov{mem.get(), page};
					__u64 tag = 0;

					if (io_uring_register_buffers_update_tag(&ring.get(), slot,
										 &iov, &tag,
										 1) != 1)
						return 17;
				}
			}
			/* io_uring uncharges from a worker once the ring is gone. */
			return test::settled_pinned_bytes(pin) == pin ? 0 : 16;
		});
		EXPECT_EQ(status, 0) << "k = " << k << ": child check " << status << " failed";
	}
}

/* Errors about the table itself name no caller buffer and leave no slot. */
TEST_F(FixedBuffersTest, WindowPastTheTableOrWithoutOneNamesNoBuffer)
{
	Anon mem(8 * page);
	std::vector<Buffer> b{{mem.get(), page},
			      {mem.get() + 2 * page, page},
			      {mem.get() + 4 * page, page}};
	Registration reg = ctx_.register_buffers(b);
	test::Ring ring;
	FixedOptions opt;
	opt.window_first = 14; /* 3 pieces from slot 14 of 16 */

	for (int want : {ENXIO, EINVAL}) {
		if (want == EINVAL) {
			ASSERT_EQ(io_uring_register_buffers_sparse(&ring.get(), 16), 0);
		}
		try {
			FixedBuffers f = register_fixed(reg, ring.get(), opt);
			ADD_FAILURE() << "3 pieces from slot 14 of " << (want == EINVAL ? 16 : 0);
		} catch (const Error &e) {
			EXPECT_EQ(e.err(), want) << e.what();
			EXPECT_EQ(e.step(), Step::IoUringRegister);
			EXPECT_EQ(e.buffer_index(), Error::no_index);
		}
	}
	test::ScratchFile file(page);
	for (int slot : {14, 15})
		EXPECT_EQ(do_fixed(ring, true, file.fd(), mem.get(), 8, 0,
				   static_cast<unsigned>(slot)),
			  -EFAULT);
	opt.window_first = 13; /* the same registration fits from slot 13 */
	FixedBuffers f = register_fixed(reg, ring.get(), opt);
	EXPECT_EQ(do_fixed(ring, true, file.fd(), f[2].addr, 8, 0, f[2].index), 8);
}

/*
 * A registration has at most 16384 ranges, but one over 1 GiB becomes
 * several io_uring pieces: past io_uring's 16384 slots the whole-table
 * register is ENOSPC before the ring is touched.
 */
TEST_F(FixedBuffersTest, MoreThanSixteenThousandPiecesIsEnospc)
{
	if (test::mode_under_test() == Mode::Kernel)
		GTEST_SKIP()
			<< "the module would pin the 2 GiB buffer (userspace mode checks the limit)";
	const std::size_t small = io_uring_max_slots - 1; /* one page each */
	const std::size_t big = 2 * io_uring_max_buffer_bytes + page; /* 3 pieces */
	if (ctx_.info().max_ranges < small + 1)
		GTEST_SKIP() << "max_ranges " << ctx_.info().max_ranges;
	/* Nothing is touched: MAP_NORESERVE keeps it virtual. */
	Anon mem(2 * small * page + big, MAP_NORESERVE);
	std::vector<Buffer> b;
	for (std::size_t i = 0; i < small; i++)
		b.push_back({mem.get() + 2 * i * page, page});
	b.push_back({mem.get() + 2 * small * page, big});
	Registration reg = ctx_.register_buffers(b);
	ASSERT_EQ(reg.ranges().size(), small + 1);
	test::Ring ring;

	try {
		FixedBuffers f = register_fixed(reg, ring.get());
		ADD_FAILURE() << "16386 pieces registered";
	} catch (const Error &e) {
		EXPECT_EQ(e.err(), ENOSPC);
		EXPECT_EQ(e.step(), Step::IoUringRegister);
		EXPECT_NE(std::string(e.what()).find(
				  "16386 fixed buffers needed, io_uring allows 16384"),
			  std::string::npos)
			<< e.what();
	}
	/* The ring still has no table. */
	Registration one = ctx_.register_buffers(std::vector<Buffer>{{mem.get(), page}});
	EXPECT_TRUE(register_fixed(one, ring.get()));
}

TEST_F(FixedBuffersTest, MovesTransferTheSlots)
{
	Anon mem(4 * page);
	Registration reg = ctx_.register_buffers(std::vector<Buffer>{{mem.get(), page}});
	test::Ring ring1, ring2;
	FixedBuffers a = register_fixed(reg, ring1.get());
	FixedBuffers b(std::move(a));

	EXPECT_FALSE(a); // NOLINT(bugprone-use-after-move): testing it
	EXPECT_EQ(a.size(), 0u); // NOLINT(clang-analyzer-cplusplus.Move): likewise
	EXPECT_TRUE(b);
	FixedBuffers c = register_fixed(reg, ring2.get());
	c = std::move(b); /* ring2's table goes, ring1's stays with c */
	EXPECT_EQ(c.size(), 1u);
	FixedBuffers again = register_fixed(reg, ring2.get()); /* ring2 is free */
	EXPECT_TRUE(again);
	c.reset();
	c.reset();
	EXPECT_FALSE(c);
	FixedBuffers ring1_again = register_fixed(reg, ring1.get());
	EXPECT_TRUE(ring1_again);
}

/*
 * io_uring drops its page accounting when the last request that used a
 * buffer is recycled, which may be after the unregister, and a ring's
 * teardown runs in a worker: VmPin is checked once the ring is gone and
 * its worker done.
 */
TEST_F(FixedBuffersTest, EitherMayBeDestroyedFirst)
{
	Anon mem(4 * page);
	test::ScratchFile file(page);
	std::uint64_t pin = process_pinned_bytes();

	for (bool registration_first : {true, false}) {
		std::optional<test::Ring> ring(std::in_place);
		std::optional<Registration> reg;
		reg.emplace(ctx_.register_buffers(std::vector<Buffer>{{mem.get(), 2 * page}}));
		std::optional<FixedBuffers> fixed;
		fixed.emplace(register_fixed(*reg, ring->get()));

		if (registration_first)
			reg.reset(); /* io_uring holds its own pins */
		EXPECT_EQ(do_fixed(*ring, true, file.fd(), mem.get(), 128, 0, 0), 128);
		EXPECT_TRUE(matches_file(mem.get(), 128, 0));
		fixed.reset();
		reg.reset();
		ring.reset();
		EXPECT_LE(test::pinned_bytes_at_most(pin), pin)
			<< "registration first: " << registration_first;
	}
}

} // namespace
} // namespace svmbatch
