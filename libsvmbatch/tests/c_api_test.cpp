// SPDX-License-Identifier: MIT
// The C API over the C++ core: errno, failed index and message, in the mode
// under test (userspace on the host, kernel in the guests).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <svmbatch/config.h>
#include <svmbatch/capi.h>

#include "test_util.hpp"

/* c_api_compile_check.c */
extern "C" int svmbatch_c_api_userspace_roundtrip(void);
extern "C" int svmbatch_c_api_open_mode(int mode);
extern "C" int svmbatch_c_api_deprecated_names(void);

namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

svmbatch_mode c_mode()
{
	return svmbatch::test::mode_under_test() == svmbatch::Mode::Kernel ?
		       SVMBATCH_MODE_KERNEL :
		       SVMBATCH_MODE_USERSPACE;
}

/* Page-aligned anonymous memory, so that page and range counts are exact. */
class Pages {
public:
	explicit Pages(std::size_t n) : len_(n * page)
	{
		void *p = ::mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				 -1, 0);
		if (p != MAP_FAILED)
			mem_ = static_cast<char *>(p);
	}
	~Pages()
	{
		if (mem_)
			::munmap(mem_, len_);
	}
	Pages(const Pages &) = delete;
	Pages &operator=(const Pages &) = delete;
	Pages(Pages &&) = delete;
	Pages &operator=(Pages &&) = delete;
	char *get() const { return mem_; }

private:
	std::size_t len_;
	char *mem_ = nullptr;
};

/* One READ_FIXED of len bytes at file offset off; the cqe's res. */
int read_fixed(svmbatch::test::Ring &ring, int fd, const svmbatch_fixed_slice &s, unsigned len,
	       std::uint64_t off)
{
	io_uring_sqe *sqe = io_uring_get_sqe(&ring.get());
	io_uring_cqe *cqe = nullptr;

	io_uring_prep_read_fixed(sqe, fd, s.addr, len, off, static_cast<int>(s.index));
	if (io_uring_submit(&ring.get()) != 1 || io_uring_wait_cqe(&ring.get(), &cqe))
		return -EPROTO;
	int res = cqe->res;
	io_uring_cqe_seen(&ring.get(), cqe);
	return res;
}

::testing::AssertionResult matches_file(const void *addr, std::size_t len, std::uint64_t off)
{
	const auto *p = static_cast<const std::uint8_t *>(addr);
	for (std::size_t k = 0; k < len; k++)
		if (p[k] != svmbatch::test::pattern_byte(off + k))
			return ::testing::AssertionFailure() << "byte " << k << " differs";
	return ::testing::AssertionSuccess();
}

class CApiTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		if (c_mode() == SVMBATCH_MODE_KERNEL && !svmbatch::test::kernel_available())
			GTEST_SKIP() << "kernel mode: no /dev/svmbatch";
		ASSERT_EQ(svmbatch_ctx_open(c_mode(), nullptr, &ctx_), 0) << svmbatch_last_error();
	}
	void TearDown() override { svmbatch_ctx_close(ctx_); }

	svmbatch_ctx *ctx_ = nullptr;
};

TEST(CApi, CallableFromC)
{
	EXPECT_EQ(svmbatch_c_api_userspace_roundtrip(), 0) << svmbatch_last_error();
}

TEST(CApi, KernelModeWithoutTheDeviceIsEnoent)
{
	auto *ctx = reinterpret_cast<svmbatch_ctx *>(1);

	EXPECT_EQ(svmbatch_ctx_open(SVMBATCH_MODE_KERNEL, "/nonexistent/svmbatch", &ctx), -ENOENT);
	EXPECT_EQ(ctx, nullptr);
	EXPECT_NE(std::string(svmbatch_last_error()).find("/nonexistent/svmbatch"),
		  std::string::npos);
}

TEST(CApi, NullArgumentsAreEinval)
{
	svmbatch_reg *reg = nullptr;
	svmbatch_fixed_slice s{};
	svmbatch_buffer b{&s, 1, SVMBATCH_ACCESS_READ_WRITE};
	size_t bad = 0;

	EXPECT_EQ(svmbatch_ctx_open(SVMBATCH_MODE_USERSPACE, nullptr, nullptr), -EINVAL);
	/* Any int, as C may pass (in C++ the enum would be out of range). */
	for (int raw : {3, 7, -1})
		EXPECT_EQ(svmbatch_c_api_open_mode(raw), -EINVAL) << raw;
	EXPECT_NE(std::string(svmbatch_last_error()).find("mode"), std::string::npos);
	EXPECT_EQ(svmbatch_reg_create(nullptr, &b, 1, &reg, &bad), -EINVAL);
	EXPECT_EQ(bad, SVMBATCH_LIB_NO_INDEX);
	EXPECT_EQ(svmbatch_ctx_get_info(nullptr, nullptr), -EINVAL);
	EXPECT_EQ(svmbatch_reg_get_info(nullptr, nullptr), -EINVAL);
	EXPECT_EQ(svmbatch_fixed_create(nullptr, nullptr, nullptr, nullptr), -EINVAL);
	EXPECT_EQ(svmbatch_fixed_get(nullptr, 0, &s), -EINVAL);
	EXPECT_STRNE(svmbatch_last_error(), "");
	svmbatch_ctx_close(nullptr);
	svmbatch_reg_destroy(nullptr);
	svmbatch_fixed_destroy(nullptr);
}

TEST_F(CApiTest, NullArgumentsWithAContextAreEinval)
{
	svmbatch_buffer b{&ctx_, 1, SVMBATCH_ACCESS_READ_WRITE};
	svmbatch_reg *reg = nullptr;
	size_t bad = 0;

	EXPECT_EQ(svmbatch_ctx_get_info(ctx_, nullptr), -EINVAL);
	EXPECT_EQ(svmbatch_reg_create(ctx_, nullptr, 1, &reg, &bad), -EINVAL);
	EXPECT_EQ(svmbatch_reg_create(ctx_, &b, 1, nullptr, &bad), -EINVAL);
	EXPECT_EQ(bad, SVMBATCH_LIB_NO_INDEX);
	ASSERT_EQ(svmbatch_reg_create(ctx_, &b, 1, &reg, &bad), 0) << svmbatch_last_error();
	EXPECT_EQ(svmbatch_reg_get_info(reg, nullptr), -EINVAL);
	svmbatch_fixed *fixed = nullptr;
	EXPECT_EQ(svmbatch_fixed_create(reg, nullptr, nullptr, &fixed), -EINVAL);
	EXPECT_EQ(fixed, nullptr);
	svmbatch_reg_destroy(reg);
}

TEST_F(CApiTest, InfoAndMergedRegistration)
{
	svmbatch_ctx_info info{};
	ASSERT_EQ(svmbatch_ctx_get_info(ctx_, &info), 0);
	EXPECT_EQ(info.mode, c_mode());
	EXPECT_EQ(info.page_size, page);
	EXPECT_GT(info.max_ranges, 0u);
	EXPECT_GT(info.max_registrations, 0u);
	EXPECT_GE(info.max_range_bytes, page);
	EXPECT_EQ(info.abi_version != 0, c_mode() == SVMBATCH_MODE_KERNEL);

	/* Page 0 (two overlapping buffers), pages 2-3 (one straddling), page 10. */
	Pages mem(16);
	ASSERT_NE(mem.get(), nullptr);
	svmbatch_buffer b[4] = {{mem.get(), 100, SVMBATCH_ACCESS_READ_WRITE},
				{mem.get() + 50, 100, SVMBATCH_ACCESS_READ_ONLY},
				{mem.get() + 3 * page - 10, 20, SVMBATCH_ACCESS_READ_WRITE},
				{mem.get() + 10 * page, page, SVMBATCH_ACCESS_READ_WRITE}};
	svmbatch_reg *reg = nullptr;
	size_t bad = 0;
	ASSERT_EQ(svmbatch_reg_create(ctx_, b, 4, &reg, &bad), 0) << svmbatch_last_error();
	EXPECT_EQ(bad, SVMBATCH_LIB_NO_INDEX);
	EXPECT_STREQ(svmbatch_last_error(), "");
	svmbatch_reg_info ri{};
	ASSERT_EQ(svmbatch_reg_get_info(reg, &ri), 0);
	EXPECT_EQ(ri.nr_buffers, 4u);
	EXPECT_EQ(ri.nr_ranges, 3u);
	EXPECT_EQ(ri.pages, 4u);
	EXPECT_EQ(ri.pinned_pages, c_mode() == SVMBATCH_MODE_KERNEL ? 4u : 0u);
	EXPECT_EQ(ri.handle != 0, c_mode() == SVMBATCH_MODE_KERNEL);
	svmbatch_reg_destroy(reg);
}

TEST_F(CApiTest, BadBuffersReportErrnoAndIndex)
{
	Pages mem(1);
	/* PROT_NONE and kept mapped: an unmapped hole could be taken by an
	 * allocation (the library's, the sanitizer's) between the calls. */
	void *hole = ::mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(hole, MAP_FAILED);
	std::unique_ptr<void, std::function<void(void *)>> unmap(hole, [](void *p) {
		::munmap(p, page);
	});
	svmbatch_buffer b[3] = {{mem.get(), 10, SVMBATCH_ACCESS_READ_WRITE},
				{mem.get() + 20, 0, SVMBATCH_ACCESS_READ_WRITE},
				{hole, 10, SVMBATCH_ACCESS_READ_WRITE}};
	svmbatch_reg *reg = nullptr;
	size_t bad = 0;

	EXPECT_EQ(svmbatch_reg_create(ctx_, b, 3, &reg, &bad), -EINVAL);
	EXPECT_EQ(bad, 1u);
	EXPECT_EQ(reg, nullptr);
	EXPECT_STRNE(svmbatch_last_error(), "");
	b[1].len = 10;
	EXPECT_EQ(svmbatch_reg_create(ctx_, b, 3, &reg, &bad), -EFAULT);
	EXPECT_EQ(bad, 2u);
	EXPECT_EQ(reg, nullptr);
	EXPECT_NE(std::string(svmbatch_last_error()).find("buffer 2"), std::string::npos)
		<< svmbatch_last_error();
	EXPECT_EQ(svmbatch_reg_create(ctx_, b, 3, &reg, nullptr), -EFAULT);

	/* A success clears the message and the index. */
	ASSERT_EQ(svmbatch_reg_create(ctx_, b, 2, &reg, &bad), 0) << svmbatch_last_error();
	EXPECT_EQ(bad, SVMBATCH_LIB_NO_INDEX);
	EXPECT_STREQ(svmbatch_last_error(), "");
	svmbatch_reg_destroy(reg);
}

TEST_F(CApiTest, UnknownAccessIsEinvalWithIndex)
{
	Pages mem(1);
	svmbatch_buffer b[2] = {{mem.get(), 10, SVMBATCH_ACCESS_READ_WRITE},
				{mem.get() + 20, 10, SVMBATCH_ACCESS_READ_WRITE}};
	int raw = 7;
	static_assert(sizeof(raw) == sizeof(b[1].access));
	std::memcpy(&b[1].access, &raw, sizeof(raw)); /* as a C caller could */
	svmbatch_reg *reg = nullptr;
	size_t bad = 0;

	EXPECT_EQ(svmbatch_reg_create(ctx_, b, 2, &reg, &bad), -EINVAL);
	EXPECT_EQ(bad, 1u);
	EXPECT_NE(std::string(svmbatch_last_error()).find("access"), std::string::npos);
}

TEST_F(CApiTest, AbsurdBufferCountIsEnomem)
{
	svmbatch_buffer b{&ctx_, 1, SVMBATCH_ACCESS_READ_WRITE};
	svmbatch_reg *reg = nullptr;
	size_t bad = 0;

	/* Refused before anything is read past b. */
	EXPECT_EQ(svmbatch_reg_create(ctx_, &b, SIZE_MAX / 2, &reg, &bad), -ENOMEM);
	EXPECT_EQ(bad, SVMBATCH_LIB_NO_INDEX);
	EXPECT_EQ(reg, nullptr);
}

TEST_F(CApiTest, FixedBuffersReadFixed)
{
	Pages mem(8);
	ASSERT_NE(mem.get(), nullptr);
	svmbatch_buffer b[2] = {{mem.get() + 3, 1000, SVMBATCH_ACCESS_READ_WRITE},
				{mem.get() + 5 * page, 2000, SVMBATCH_ACCESS_READ_WRITE}};
	svmbatch_reg *reg = nullptr;
	ASSERT_EQ(svmbatch_reg_create(ctx_, b, 2, &reg, nullptr), 0) << svmbatch_last_error();
	svmbatch::test::Ring ring;
	svmbatch::test::ScratchFile file(4 * page);
	svmbatch_fixed *fixed = nullptr;
	ASSERT_EQ(svmbatch_fixed_create(reg, &ring.get(), nullptr, &fixed), 0)
		<< svmbatch_last_error();

	svmbatch_fixed_slice s{};
	ASSERT_EQ(svmbatch_fixed_get(fixed, 0, &s), 0);
	EXPECT_EQ(s.addr, b[0].ptr);
	EXPECT_EQ(s.len, 1000u);
	EXPECT_EQ(read_fixed(ring, file.fd(), s, 1000, 7), 1000);
	EXPECT_TRUE(matches_file(s.addr, 1000, 7));
	ASSERT_EQ(svmbatch_fixed_get(fixed, 1, &s), 0);
	EXPECT_EQ(s.addr, b[1].ptr);
	EXPECT_EQ(s.len, 2000u);
	EXPECT_EQ(read_fixed(ring, file.fd(), s, 2000, 4096), 2000);
	EXPECT_TRUE(matches_file(s.addr, 2000, 4096));

	EXPECT_EQ(svmbatch_fixed_get(fixed, 2, &s), -ERANGE);
	EXPECT_EQ(svmbatch_fixed_get(fixed, SIZE_MAX, &s), -ERANGE);
	EXPECT_NE(std::string(svmbatch_last_error()).find("out of range"), std::string::npos);
	/* A second whole table on the same ring. */
	svmbatch_fixed *again = nullptr;
	EXPECT_EQ(svmbatch_fixed_create(reg, &ring.get(), nullptr, &again), -EBUSY);
	EXPECT_EQ(again, nullptr);
	svmbatch_fixed_destroy(fixed);
	svmbatch_reg_destroy(reg);
}

TEST_F(CApiTest, FixedBuffersInAWindowOfASparseTable)
{
	Pages mem(8);
	ASSERT_NE(mem.get(), nullptr);
	svmbatch_buffer b[2] = {{mem.get() + 4 * page, page, SVMBATCH_ACCESS_READ_WRITE},
				{mem.get(), 300, SVMBATCH_ACCESS_READ_WRITE}};
	svmbatch_reg *reg = nullptr;
	ASSERT_EQ(svmbatch_reg_create(ctx_, b, 2, &reg, nullptr), 0) << svmbatch_last_error();
	svmbatch::test::Ring ring;
	svmbatch::test::ScratchFile file(2 * page);
	ASSERT_EQ(io_uring_register_buffers_sparse(&ring.get(), 16), 0);

	/* Too small a window: nothing registered, the index says nothing. */
	svmbatch_fixed_options opt{1, 6, 1};
	svmbatch_fixed *fixed = nullptr;
	EXPECT_EQ(svmbatch_fixed_create(reg, &ring.get(), &opt, &fixed), -ENOSPC);
	EXPECT_EQ(fixed, nullptr);

	opt.window_size = 4;
	ASSERT_EQ(svmbatch_fixed_create(reg, &ring.get(), &opt, &fixed), 0)
		<< svmbatch_last_error();
	svmbatch_fixed_slice s{};
	for (size_t i = 0; i < 2; i++) {
		ASSERT_EQ(svmbatch_fixed_get(fixed, i, &s), 0);
		EXPECT_GE(s.index, 6u);
		EXPECT_LT(s.index, 10u);
		EXPECT_EQ(s.addr, b[i].ptr);
	}
	EXPECT_EQ(read_fixed(ring, file.fd(), s, 300, 123), 300);
	EXPECT_TRUE(matches_file(s.addr, 300, 123));
	svmbatch_fixed_destroy(fixed);
	/* The window is cleared again. */
	EXPECT_EQ(read_fixed(ring, file.fd(), s, 300, 0), -EFAULT);
	svmbatch_reg_destroy(reg);
}

/*
 * The names of 0.1 (svmbatch_register() and friends) are the same
 * functions: a program written against them still builds, with a
 * deprecation warning, and links.
 */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_F(CApiTest, TheDeprecatedNamesStillWork)
{
	Pages mem(2);
	ASSERT_NE(mem.get(), nullptr);
	svmbatch_buffer b{mem.get(), 2 * page, SVMBATCH_ACCESS_READ_WRITE};
	svmbatch_reg *reg = nullptr;
	size_t bad = 0;

	ASSERT_EQ(svmbatch_register(ctx_, &b, 1, &reg, &bad), 0) << svmbatch_last_error();
	svmbatch_reg_info info{};
	ASSERT_EQ(svmbatch_reg_get_info(reg, &info), 0);
	EXPECT_EQ(info.pages, 2u);
	svmbatch::test::Ring ring;
	svmbatch_fixed *fixed = nullptr;
	ASSERT_EQ(svmbatch_register_fixed(reg, &ring.get(), nullptr, &fixed), 0)
		<< svmbatch_last_error();
	svmbatch_fixed_slice s{};
	EXPECT_EQ(svmbatch_fixed_get(fixed, 0, &s), 0);
	EXPECT_EQ(s.addr, mem.get());
	svmbatch_unregister_fixed(fixed);
	svmbatch_unregister(reg);
	EXPECT_EQ(svmbatch_register(nullptr, &b, 1, &reg, &bad), -EINVAL);
	EXPECT_EQ(svmbatch_c_api_deprecated_names(), 0);
}
#pragma GCC diagnostic pop

} // namespace

namespace {

TEST_F(CApiTest, StaleNotificationGivesAnEventfdInKernelModeOnly)
{
	Pages mem(2);
	ASSERT_NE(mem.get(), nullptr);
	svmbatch_buffer b = {mem.get(), page, SVMBATCH_ACCESS_READ_WRITE};
	svmbatch_reg_options opt = {SVMBATCH_REG_NOTIFY_STALE};
	svmbatch_reg *reg = nullptr;
	int fd = 0;

	// Without the option: no eventfd.
	ASSERT_EQ(svmbatch_reg_create_with(ctx_, &b, 1, nullptr, &reg, nullptr), 0);
	ASSERT_EQ(svmbatch_reg_get_stale_fd(reg, &fd), 0);
	EXPECT_EQ(fd, -1);
	svmbatch_reg_destroy(reg);

	svmbatch_reg_options unknown = {1U << 7};
	EXPECT_EQ(svmbatch_reg_create_with(ctx_, &b, 1, &unknown, &reg, nullptr), -EINVAL);
	EXPECT_EQ(reg, nullptr);
	EXPECT_EQ(svmbatch_reg_get_stale_fd(nullptr, &fd), -EINVAL);

	const int rc = svmbatch_reg_create_with(ctx_, &b, 1, &opt, &reg, nullptr);
	if (c_mode() != SVMBATCH_MODE_KERNEL) {
		EXPECT_EQ(rc, -EOPNOTSUPP);
		EXPECT_EQ(reg, nullptr);
		EXPECT_NE(std::string(svmbatch_last_error()).find("kernel mode"),
			  std::string::npos);
		return;
	}
	ASSERT_EQ(rc, 0) << svmbatch_last_error();
	ASSERT_EQ(svmbatch_reg_get_stale_fd(reg, &fd), 0);
	EXPECT_GE(fd, 0);
	svmbatch_reg_destroy(reg);
}

TEST_F(CApiTest, NoPrefaultChecksButLeavesThePagesOut)
{
	Pages mem(4), none(1);
	ASSERT_NE(mem.get(), nullptr);
	ASSERT_NE(none.get(), nullptr);
	ASSERT_EQ(::mprotect(none.get(), page, PROT_NONE), 0);
	svmbatch_buffer b[] = {{mem.get(), 3 * page, SVMBATCH_ACCESS_READ_WRITE},
			       {none.get(), 10, SVMBATCH_ACCESS_READ_WRITE}};
	svmbatch_reg_options opt = {SVMBATCH_REG_NO_PREFAULT};
	svmbatch_reg *reg = nullptr;
	size_t failed = 0;

	EXPECT_EQ(svmbatch_reg_create_with(ctx_, b, 2, &opt, &reg, &failed), -EFAULT);
	EXPECT_EQ(failed, 1u);
	ASSERT_EQ(svmbatch_reg_create_with(ctx_, b, 1, &opt, &reg, nullptr), 0)
		<< svmbatch_last_error();
	std::vector<unsigned char> vec(3);
	ASSERT_EQ(::mincore(mem.get(), 3 * page, vec.data()), 0);
	int resident = 0;
	for (unsigned char v : vec)
		resident += v & 1;
	/* Kernel mode pins, which faults the pages in. */
	EXPECT_EQ(resident, c_mode() == SVMBATCH_MODE_KERNEL ? 3 : 0);
	svmbatch_reg_destroy(reg);
}

#if !SVMBATCH_HAS_RDMA
TEST_F(CApiTest, RdmaWithoutTheBackendIsEopnotsupp)
{
	Pages mem(1);
	svmbatch_buffer b = {mem.get(), page, SVMBATCH_ACCESS_READ_WRITE};
	svmbatch_reg *reg = nullptr;
	svmbatch_rdma *rdma = nullptr;
	int not_a_pd = 0;

	ASSERT_EQ(svmbatch_reg_create(ctx_, &b, 1, &reg, nullptr), 0);
	EXPECT_EQ(svmbatch_rdma_create(reg, reinterpret_cast<ibv_pd *>(&not_a_pd), 0, nullptr,
				       &rdma, nullptr),
		  -EOPNOTSUPP);
	EXPECT_EQ(rdma, nullptr);
	svmbatch_reg_destroy(reg);
}
#endif

/* The IoLoop from C: a CPU producer reads through the queue's host
 * pointers; bad arguments and options are -EINVAL; a closed loop says
 * -ESHUTDOWN to the next producer. */
TEST_F(CApiTest, IoLoopReadsThroughTheRing)
{
	Pages mem(4);
	svmbatch::test::ScratchFile file(1 << 20);
	svmbatch_buffer buf{mem.get(), 4 * page, SVMBATCH_ACCESS_READ_WRITE};
	svmbatch_reg *reg = nullptr;
	ASSERT_EQ(svmbatch_reg_create(ctx_, &buf, 1, &reg, nullptr), 0) << svmbatch_last_error();

	svmbatch_io_loop *loop = nullptr;
	svmbatch_io_loop_options bad{};
	bad.slots = 48;
	EXPECT_EQ(svmbatch_io_loop_create(ctx_, reg, &bad, &loop), -EINVAL);
	EXPECT_EQ(loop, nullptr);
	EXPECT_NE(std::string(svmbatch_last_error()).find("power of two"), std::string::npos);
	EXPECT_EQ(svmbatch_io_loop_create(nullptr, reg, nullptr, &loop), -EINVAL);

	svmbatch_io_loop_options opt{};
	opt.slots = 64;
	opt.io_threads = 2;
	ASSERT_EQ(svmbatch_io_loop_create(ctx_, reg, &opt, &loop), 0) << svmbatch_last_error();
	std::uint32_t f = 99;
	ASSERT_EQ(svmbatch_io_loop_add_file(loop, file.fd(), &f), 0);
	EXPECT_EQ(f, 0u);
	void *ring = nullptr;
	std::size_t ring_bytes = 0;
	ASSERT_EQ(svmbatch_io_loop_get_ring(loop, &ring, &ring_bytes), 0);
	EXPECT_NE(ring, nullptr);
	EXPECT_EQ(ring_bytes % page, 0u);
	svmbatch_io_queue q{};
	ASSERT_EQ(svmbatch_io_loop_get_queue(loop, 0, &q), 0);
	EXPECT_EQ(static_cast<void *>(q.header), ring);
	EXPECT_EQ(q.mask, 63u);
	svmbatch_io_queue dev{};
	ASSERT_EQ(svmbatch_io_loop_get_queue(loop, 0x7000000000ULL, &dev), 0);
	EXPECT_EQ(reinterpret_cast<std::uintptr_t>(dev.header), 0x7000000000ULL);
	EXPECT_EQ(reinterpret_cast<std::uintptr_t>(dev.requests) - 0x7000000000ULL,
		  reinterpret_cast<std::uintptr_t>(q.requests) -
			  reinterpret_cast<std::uintptr_t>(ring));

	std::int64_t t = svmbatch_io_read(&q, f, 4096, 3 * page, 0, 100, 7);
	ASSERT_GE(t, 0);
	svmbatch_io_done done{};
	ASSERT_EQ(svmbatch_io_wait(&q, t, &done), 0);
	EXPECT_EQ(done.status, 0);
	EXPECT_EQ(done.bytes, 3 * page);
	EXPECT_EQ(done.tag, 7u);
	EXPECT_TRUE(matches_file(mem.get() + 100, 3 * page, 4096));
	t = svmbatch_io_read(&q, f, 0, 10, 1, 0, 0); /* no buffer 1 */
	ASSERT_EQ(svmbatch_io_wait(&q, t, &done), 0);
	EXPECT_EQ(done.status, -EINVAL);
	EXPECT_EQ(svmbatch_io_wait(&q, -1, &done), -EINVAL);
	EXPECT_NE(std::string(svmbatch_last_error()), "");
	/* Like every call, a read and a wait clear the previous message. */
	t = svmbatch_io_read(&q, f, 0, 10, 0, 0, 0);
	EXPECT_STREQ(svmbatch_last_error(), "");
	EXPECT_EQ(svmbatch_io_wait(&q, -1, &done), -EINVAL);
	ASSERT_EQ(svmbatch_io_wait(&q, t, &done), 0);
	EXPECT_STREQ(svmbatch_last_error(), "");
	EXPECT_EQ(done.status, 0);

	svmbatch_io_loop_stats st{};
	ASSERT_EQ(svmbatch_io_loop_get_stats(loop, &st), 0);
	EXPECT_EQ(st.requests, 3u);
	EXPECT_EQ(st.completed, 3u);
	EXPECT_EQ(st.failed, 1u);
	EXPECT_EQ(st.bytes, 3 * page + 10);
	EXPECT_EQ(svmbatch_io_loop_stop(loop, 10), 0);
	EXPECT_EQ(svmbatch_io_read(&q, f, 0, 10, 0, 0, 0), -ESHUTDOWN);
	EXPECT_NE(std::string(svmbatch_last_error()).find("closed"), std::string::npos);
	svmbatch_io_loop_destroy(loop);
	svmbatch_io_loop_destroy(nullptr);
	svmbatch_reg_destroy(reg);
}

/* Writes from C: a buffer's bytes land in the file; a read-only
 * descriptor is -EACCES; a closed loop says -ESHUTDOWN. */
TEST_F(CApiTest, IoLoopWritesThroughTheRing)
{
	Pages mem(2);
	svmbatch::test::ScratchFile file(1 << 20);
	for (std::size_t k = 0; k < 2 * page; k++)
		mem.get()[k] = static_cast<char>(k * 7 + 1);
	svmbatch_buffer buf{mem.get(), 2 * page, SVMBATCH_ACCESS_READ_WRITE};
	svmbatch_reg *reg = nullptr;
	ASSERT_EQ(svmbatch_reg_create(ctx_, &buf, 1, &reg, nullptr), 0) << svmbatch_last_error();
	svmbatch_io_loop_options opt{};
	opt.slots = 32;
	opt.io_threads = 2;
	svmbatch_io_loop *loop = nullptr;
	ASSERT_EQ(svmbatch_io_loop_create(ctx_, reg, &opt, &loop), 0) << svmbatch_last_error();
	std::uint32_t f = 0, ro = 0;
	ASSERT_EQ(svmbatch_io_loop_add_file(loop, file.fd(), &f), 0);
	int ro_fd = ::open(file.path().c_str(), O_RDONLY | O_CLOEXEC);
	ASSERT_GE(ro_fd, 0);
	ASSERT_EQ(svmbatch_io_loop_add_file(loop, ro_fd, &ro), 0);
	svmbatch_io_queue q{};
	ASSERT_EQ(svmbatch_io_loop_get_queue(loop, 0, &q), 0);

	std::int64_t t = svmbatch_io_write(&q, f, 5000, page + 3, 0, 17, 5);
	ASSERT_GE(t, 0);
	EXPECT_STREQ(svmbatch_last_error(), "");
	svmbatch_io_done done{};
	ASSERT_EQ(svmbatch_io_wait(&q, t, &done), 0);
	EXPECT_EQ(done.status, 0);
	EXPECT_EQ(done.bytes, page + 3);
	EXPECT_EQ(done.tag, 5u);
	std::vector<char> back(page + 3);
	ASSERT_EQ(::pread(file.fd(), back.data(), back.size(), 5000),
		  static_cast<ssize_t>(back.size()));
	EXPECT_EQ(std::memcmp(back.data(), mem.get() + 17, back.size()), 0);
	t = svmbatch_io_write(&q, ro, 0, 10, 0, 0, 0);
	ASSERT_EQ(svmbatch_io_wait(&q, t, &done), 0);
	EXPECT_EQ(done.status, -EACCES);
	EXPECT_EQ(svmbatch_io_write(nullptr, f, 0, 1, 0, 0, 0), -EINVAL);
	EXPECT_EQ(svmbatch_io_loop_stop(loop, 10), 0);
	EXPECT_EQ(svmbatch_io_write(&q, f, 0, 10, 0, 0, 0), -ESHUTDOWN);
	EXPECT_NE(std::string(svmbatch_last_error()).find("closed"), std::string::npos);
	svmbatch_io_loop_destroy(loop);
	::close(ro_fd);
	svmbatch_reg_destroy(reg);
}

} // namespace
