// SPDX-License-Identifier: MIT
#include <gtest/gtest.h>

#include <liburing.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <svmbatch/svmbatch.h>

#include "test_util.hpp"

extern "C" int svmbatch_c_api_userspace_roundtrip(void);

namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

svmbatch_mode c_mode()
{
	return svmbatch::test::mode_under_test() == svmbatch::Mode::Kernel
		       ? SVMBATCH_MODE_KERNEL
		       : SVMBATCH_MODE_USERSPACE;
}

class CApiTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		if (c_mode() == SVMBATCH_MODE_KERNEL && !svmbatch::test::kernel_available())
			GTEST_SKIP() << "kernel mode: no /dev/svmbatch";
		ASSERT_EQ(svmbatch_ctx_open(c_mode(), nullptr, &ctx_), 0)
			<< svmbatch_last_error();
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
	svmbatch_ctx *ctx = reinterpret_cast<svmbatch_ctx *>(1);

	EXPECT_EQ(svmbatch_ctx_open(SVMBATCH_MODE_KERNEL, "/nonexistent/svmbatch", &ctx),
		  -ENOENT);
	EXPECT_EQ(ctx, nullptr);
	EXPECT_NE(std::string(svmbatch_last_error()).find("/nonexistent/svmbatch"),
		  std::string::npos);
}

TEST(CApi, NullArgumentsAreEinval)
{
	svmbatch_ctx *ctx = nullptr;
	svmbatch_reg *reg = nullptr;
	svmbatch_fixed_slice s{};
	size_t bad = 0;

	EXPECT_EQ(svmbatch_ctx_open(SVMBATCH_MODE_USERSPACE, nullptr, nullptr), -EINVAL);
	EXPECT_EQ(svmbatch_ctx_open(static_cast<svmbatch_mode>(3), nullptr, &ctx), -EINVAL);
	EXPECT_EQ(svmbatch_register(nullptr, nullptr, 0, &reg, &bad), -EINVAL);
	EXPECT_EQ(bad, SVMBATCH_LIB_NO_INDEX);
	EXPECT_EQ(svmbatch_ctx_get_info(nullptr, nullptr), -EINVAL);
	EXPECT_EQ(svmbatch_reg_get_info(nullptr, nullptr), -EINVAL);
	EXPECT_EQ(svmbatch_register_fixed(nullptr, nullptr, nullptr, nullptr), -EINVAL);
	EXPECT_EQ(svmbatch_fixed_get(nullptr, 0, &s), -EINVAL);
	EXPECT_STRNE(svmbatch_last_error(), "");
	svmbatch_ctx_close(nullptr);
	svmbatch_unregister(nullptr);
	svmbatch_unregister_fixed(nullptr);
}

TEST_F(CApiTest, InfoAndMergedRegistration)
{
	svmbatch_ctx_info info{};
	ASSERT_EQ(svmbatch_ctx_get_info(ctx_, &info), 0);
	EXPECT_EQ(info.mode, c_mode());
	EXPECT_EQ(info.page_size, page);
	EXPECT_GT(info.max_ranges, 0u);

	std::vector<char> mem(16 * page);
	svmbatch_buffer b[3] = {{mem.data(), 100, SVMBATCH_ACCESS_READ_WRITE},
				{mem.data() + 50, 100, SVMBATCH_ACCESS_READ_ONLY},
				{mem.data() + 10 * page, page, SVMBATCH_ACCESS_READ_WRITE}};
	svmbatch_reg *reg = nullptr;
	size_t bad = 0;
	ASSERT_EQ(svmbatch_register(ctx_, b, 3, &reg, &bad), 0) << svmbatch_last_error();
	EXPECT_STREQ(svmbatch_last_error(), "");
	svmbatch_reg_info ri{};
	ASSERT_EQ(svmbatch_reg_get_info(reg, &ri), 0);
	EXPECT_EQ(ri.nr_buffers, 3u);
	EXPECT_EQ(ri.nr_ranges, 2u);
	EXPECT_EQ(ri.pinned_pages, c_mode() == SVMBATCH_MODE_KERNEL ? ri.pages : 0u);
	EXPECT_EQ(ri.handle != 0, c_mode() == SVMBATCH_MODE_KERNEL);
	svmbatch_unregister(reg);
}

TEST_F(CApiTest, BadBuffersReportErrnoAndIndex)
{
	std::vector<char> mem(page);
	void *hole = ::mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(hole, MAP_FAILED);
	ASSERT_EQ(::munmap(hole, page), 0);
	svmbatch_buffer b[3] = {{mem.data(), 10, SVMBATCH_ACCESS_READ_WRITE},
				{mem.data() + 20, 0, SVMBATCH_ACCESS_READ_WRITE},
				{hole, 10, SVMBATCH_ACCESS_READ_WRITE}};
	svmbatch_reg *reg = nullptr;
	size_t bad = 0;

	EXPECT_EQ(svmbatch_register(ctx_, b, 3, &reg, &bad), -EINVAL);
	EXPECT_EQ(bad, 1u);
	EXPECT_EQ(reg, nullptr);
	b[1].len = 10;
	EXPECT_EQ(svmbatch_register(ctx_, b, 3, &reg, &bad), -EFAULT);
	EXPECT_EQ(bad, 2u);
	EXPECT_NE(std::string(svmbatch_last_error()).find("buffer 2"), std::string::npos);
	EXPECT_EQ(svmbatch_register(ctx_, b, 3, &reg, nullptr), -EFAULT);
}

TEST_F(CApiTest, FixedBuffersReadFixed)
{
	std::vector<char> mem(8 * page);
	svmbatch_buffer b[2] = {{mem.data() + 3, 1000, SVMBATCH_ACCESS_READ_WRITE},
				{mem.data() + 5 * page, 2000, SVMBATCH_ACCESS_READ_WRITE}};
	svmbatch_reg *reg = nullptr;
	ASSERT_EQ(svmbatch_register(ctx_, b, 2, &reg, nullptr), 0) << svmbatch_last_error();
	svmbatch::test::Ring ring;
	svmbatch::test::ScratchFile file(4 * page);
	svmbatch_fixed *fixed = nullptr;
	ASSERT_EQ(svmbatch_register_fixed(reg, &ring.get(), nullptr, &fixed), 0)
		<< svmbatch_last_error();

	svmbatch_fixed_slice s{};
	ASSERT_EQ(svmbatch_fixed_get(fixed, 1, &s), 0);
	EXPECT_EQ(s.addr, b[1].ptr);
	EXPECT_EQ(s.len, 2000u);
	io_uring_sqe *sqe = io_uring_get_sqe(&ring.get());
	io_uring_prep_read_fixed(sqe, file.fd(), s.addr, static_cast<unsigned>(s.len), 4096,
				 static_cast<int>(s.index));
	ASSERT_EQ(io_uring_submit(&ring.get()), 1);
	io_uring_cqe *cqe;
	ASSERT_EQ(io_uring_wait_cqe(&ring.get(), &cqe), 0);
	EXPECT_EQ(cqe->res, 2000);
	io_uring_cqe_seen(&ring.get(), cqe);
	const auto *p = static_cast<const std::uint8_t *>(s.addr);
	for (std::size_t k = 0; k < 2000; k++)
		ASSERT_EQ(p[k], svmbatch::test::pattern_byte(4096 + k)) << k;

	EXPECT_EQ(svmbatch_fixed_get(fixed, 2, &s), -ERANGE);
	/* A second whole table on the same ring. */
	svmbatch_fixed *again = nullptr;
	EXPECT_EQ(svmbatch_register_fixed(reg, &ring.get(), nullptr, &again), -EBUSY);
	EXPECT_EQ(again, nullptr);
	svmbatch_unregister_fixed(fixed);
	svmbatch_unregister(reg);
}

} // namespace
