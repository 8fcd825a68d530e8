// SPDX-License-Identifier: MIT
// The C API of the Arena: options, errno and message, the registration's
// pages, and NULL and unknown arguments, in the mode under test.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <svmbatch/capi.h>
#include <svmbatch/diagnostics.hpp>
#include <svmbatch/error.hpp>

#include "arena/arena_prepare.hpp"
#include "test_util.hpp"

namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

class CApiArena : public ::testing::Test {
protected:
	void SetUp() override
	{
		svmbatch_mode m = svmbatch::test::mode_under_test() == svmbatch::Mode::Kernel ?
					  SVMBATCH_MODE_KERNEL :
					  SVMBATCH_MODE_USERSPACE;
		ASSERT_EQ(svmbatch_ctx_open(m, nullptr, &ctx_), 0) << svmbatch_last_error();
		kernel_ = m == SVMBATCH_MODE_KERNEL;
	}
	void TearDown() override { svmbatch_ctx_close(ctx_); }

	svmbatch_ctx *ctx_ = nullptr;
	bool kernel_ = false;
};

TEST_F(CApiArena, CreateAllocFreeDestroy)
{
	svmbatch_arena_options o{};
	o.pages = SVMBATCH_ARENA_PAGES_SMALL;
	o.alignment = 4096;
	svmbatch_arena *a = nullptr;
	ASSERT_EQ(svmbatch_arena_create(ctx_, 8 * page + 1, &o, &a), 0) << svmbatch_last_error();
	ASSERT_NE(a, nullptr);
	EXPECT_STREQ(svmbatch_last_error(), "");

	svmbatch_arena_info info{};
	ASSERT_EQ(svmbatch_arena_get_info(a, &info), 0);
	EXPECT_EQ(info.capacity, 8 * page + 1);
	EXPECT_EQ(info.mapped_bytes, 9 * page);
	EXPECT_EQ(info.alignment, 4096u);
	EXPECT_EQ(info.pages, SVMBATCH_ARENA_PAGES_SMALL);
	EXPECT_EQ(info.numa_node, -1);
	EXPECT_EQ(info.pages_registered, 9u);
	EXPECT_EQ(info.pinned_pages, kernel_ ? 9u : 0u);

	void *p = nullptr, *q = nullptr;
	ASSERT_EQ(svmbatch_arena_alloc(a, 5000, &p), 0);
	ASSERT_EQ(svmbatch_arena_alloc(a, 1, &q), 0);
	EXPECT_EQ(p, info.base);
	EXPECT_EQ(reinterpret_cast<std::uintptr_t>(q) % 4096, 0u);
	std::memset(p, 1, 5000);
	ASSERT_EQ(svmbatch_arena_get_info(a, &info), 0);
	EXPECT_EQ(info.used, std::size_t{3} * 4096);
	EXPECT_EQ(info.live_blocks, 2u);
	EXPECT_EQ(info.free_bytes, 8 * page + 1 - std::size_t{3} * 4096);

	EXPECT_EQ(svmbatch_arena_free(a, p), 0);
	EXPECT_EQ(svmbatch_arena_free(a, p), -EINVAL);
	EXPECT_NE(std::string(svmbatch_last_error()).find("given back already"), std::string::npos)
		<< svmbatch_last_error();
	EXPECT_EQ(svmbatch_arena_free(a, nullptr), -EINVAL);
	EXPECT_EQ(svmbatch_arena_free(a, q), 0);
	svmbatch_arena_destroy(a);
	svmbatch_arena_destroy(nullptr);
}

TEST_F(CApiArena, FullAndFragmentedAreENOMEM)
{
	svmbatch_arena_options o{};
	o.pages = SVMBATCH_ARENA_PAGES_SMALL;
	o.alignment = 1024;
	svmbatch_arena *a = nullptr;
	ASSERT_EQ(svmbatch_arena_create(ctx_, 4096, &o, &a), 0) << svmbatch_last_error();
	std::vector<void *> b(4);
	for (void *&p : b)
		ASSERT_EQ(svmbatch_arena_alloc(a, 1024, &p), 0);
	void *p = &b;
	EXPECT_EQ(svmbatch_arena_alloc(a, 1, &p), -ENOMEM);
	EXPECT_EQ(p, nullptr);
	EXPECT_NE(std::string(svmbatch_last_error()).find("arena full"), std::string::npos)
		<< svmbatch_last_error();
	ASSERT_EQ(svmbatch_arena_free(a, b[0]), 0);
	ASSERT_EQ(svmbatch_arena_free(a, b[2]), 0);
	EXPECT_EQ(svmbatch_arena_alloc(a, 2048, &p), -ENOMEM);
	EXPECT_NE(std::string(svmbatch_last_error()).find("fragmented"), std::string::npos)
		<< svmbatch_last_error();
	svmbatch_arena_info info{};
	ASSERT_EQ(svmbatch_arena_get_info(a, &info), 0);
	EXPECT_EQ(info.free_bytes, 2048u);
	EXPECT_EQ(info.largest_free, 1024u);
	svmbatch_arena_destroy(a); /* with live blocks: they die with it */
}

TEST_F(CApiArena, BadArgumentsAreEINVAL)
{
	/* Not NULL: a failed create must clear it. */
	alignas(16) unsigned char junk[16] = {};
	auto *a = reinterpret_cast<svmbatch_arena *>(junk);
	EXPECT_EQ(svmbatch_arena_create(nullptr, page, nullptr, &a), -EINVAL);
	EXPECT_EQ(svmbatch_arena_create(ctx_, page, nullptr, nullptr), -EINVAL);
	EXPECT_EQ(svmbatch_arena_create(ctx_, 0, nullptr, &a), -EINVAL);
	EXPECT_EQ(a, nullptr);
	svmbatch_arena_options o{};
	o.alignment = 3;
	EXPECT_EQ(svmbatch_arena_create(ctx_, page, &o, &a), -EINVAL);
	EXPECT_NE(std::string(svmbatch_last_error()).find("power of two"), std::string::npos);
	o = {};
	std::memset(&o.pages, 0x7f, sizeof(o.pages)); /* not an enumerator */
	EXPECT_EQ(svmbatch_arena_create(ctx_, page, &o, &a), -EINVAL);
	o = {};
	o.flags = 1U << 5;
	EXPECT_EQ(svmbatch_arena_create(ctx_, page, &o, &a), -EINVAL);
	o = {};
	o.flags = SVMBATCH_ARENA_BIND_NODE;
	o.numa_node = -2;
	EXPECT_EQ(svmbatch_arena_create(ctx_, page, &o, &a), -EINVAL);
	EXPECT_EQ(a, nullptr);

	void *p = nullptr;
	EXPECT_EQ(svmbatch_arena_alloc(nullptr, 1, &p), -EINVAL);
	EXPECT_EQ(svmbatch_arena_free(nullptr, p), -EINVAL);
	EXPECT_EQ(svmbatch_arena_get_info(nullptr, nullptr), -EINVAL);
}

TEST_F(CApiArena, DefaultOptionsGiveATwoMebibyteAlignedThpArena)
{
	svmbatch_arena *a = nullptr;
	ASSERT_EQ(svmbatch_arena_create(ctx_, 1, nullptr, &a), 0) << svmbatch_last_error();
	svmbatch_arena_info info{};
	ASSERT_EQ(svmbatch_arena_get_info(a, &info), 0);
	EXPECT_EQ(info.pages, SVMBATCH_ARENA_PAGES_THP);
	EXPECT_EQ(info.mapped_bytes, std::size_t{2} << 20);
	EXPECT_EQ(reinterpret_cast<std::uintptr_t>(info.base) % (std::size_t{2} << 20), 0u);
	EXPECT_EQ(info.alignment, 256u);
	EXPECT_EQ(info.capacity, 1u);
	svmbatch_arena_destroy(a);
}

/*
 * Kernel mode, without CAP_IPC_LOCK: an arena over RLIMIT_MEMLOCK is
 * -ENOMEM before anything is mapped, and the message says so in the C++
 * API's words (step validate, the limit, the request, what to change).
 */
TEST_F(CApiArena, OverTheMemlockLimitIsENOMEMBeforeAnyWork)
{
	SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
	int status = svmbatch::test::run_in_child([]() -> int {
		if (!svmbatch::test::drop_cap_ipc_lock())
			return 10;
		rlimit lim{1 << 20, 1 << 20};
		if (::setrlimit(RLIMIT_MEMLOCK, &lim))
			return 11;
		svmbatch_ctx *ctx = nullptr;
		if (svmbatch_ctx_open(SVMBATCH_MODE_KERNEL, nullptr, &ctx))
			return 12;
		const std::uint64_t pin = svmbatch::process_pinned_bytes();
		svmbatch_arena_options o{};
		o.pages = SVMBATCH_ARENA_PAGES_SMALL;
		alignas(16) unsigned char junk[16] = {};
		auto *a = reinterpret_cast<svmbatch_arena *>(junk);
		int ret = svmbatch_arena_create(ctx, std::size_t{16} << 20, &o, &a);
		const std::string msg = svmbatch_last_error();
		svmbatch_ctx_close(ctx);
		if (ret != -ENOMEM || a != nullptr)
			return 13;
		for (const char *what :
		     {"svmbatch validate: arena: pinning 16 MiB", "RLIMIT_MEMLOCK, 1 MiB",
		      "CAP_IPC_LOCK", "ulimit -l 16384", "LimitMEMLOCK=16777216",
		      "--ulimit memlock=16777216:16777216"})
			if (msg.find(what) == std::string::npos) {
				std::fprintf(stderr, "no \"%s\" in: %s\n", what, msg.c_str());
				return 14;
			}
		return svmbatch::process_pinned_bytes() == pin ? 0 : 15;
	});
	EXPECT_EQ(status, 0);
}

TEST_F(CApiArena, AsyncArenaWaitsAndReportsAFailedChunk)
{
	svmbatch_arena_options o{};
	o.pages = SVMBATCH_ARENA_PAGES_SMALL;
	o.flags = SVMBATCH_ARENA_ASYNC;
	o.chunk_bytes = 4 * page;
	svmbatch_arena *a = nullptr;
	ASSERT_EQ(svmbatch_arena_create(ctx_, 16 * page, &o, &a), 0) << svmbatch_last_error();
	void *b = nullptr;
	/* Chunks of 4 and 12 pages: no block crosses one. */
	void *too_big = nullptr;
	EXPECT_EQ(svmbatch_arena_alloc(a, 13 * page, &too_big), -ENOMEM);
	ASSERT_EQ(svmbatch_arena_alloc(a, 12 * page, &b), 0) << svmbatch_last_error();
	EXPECT_EQ(svmbatch_arena_ready(a), 1); /* chunk 1, prepared after chunk 0 */
	EXPECT_EQ(svmbatch_arena_wait(a), 0);
	svmbatch_arena_info info{};
	ASSERT_EQ(svmbatch_arena_get_info(a, &info), 0);
	EXPECT_EQ(info.pages_registered, 16u);
	EXPECT_EQ(info.pinned_pages, kernel_ ? 16u : 0u);
	EXPECT_EQ(svmbatch_arena_free(a, b), 0);
	svmbatch_arena_destroy(a);

	svmbatch::detail::set_arena_chunk_hook([](std::size_t k) {
		if (k == 1)
			throw svmbatch::Error(EFAULT, svmbatch::Step::Register, "injected");
	});
	a = nullptr;
	ASSERT_EQ(svmbatch_arena_create(ctx_, 16 * page, &o, &a), 0) << svmbatch_last_error();
	svmbatch::detail::set_arena_chunk_hook(nullptr);
	EXPECT_EQ(svmbatch_arena_wait(a), -EFAULT);
	EXPECT_NE(std::string(svmbatch_last_error()).find("arena chunk 1 of 2"), std::string::npos)
		<< svmbatch_last_error();
	EXPECT_EQ(svmbatch_arena_ready(a), 0);
	ASSERT_EQ(svmbatch_arena_alloc(a, page, &b), 0) << svmbatch_last_error(); /* chunk 0 */
	void *c = nullptr;
	EXPECT_EQ(svmbatch_arena_alloc(a, 4 * page, &c), -EFAULT); /* only chunk 1 fits it */
	EXPECT_EQ(c, nullptr);
	ASSERT_EQ(svmbatch_arena_get_info(a, &info), 0);
	EXPECT_EQ(info.pages_registered, 4u);
	EXPECT_EQ(info.live_blocks, 1u);
	svmbatch_arena_destroy(a);

	EXPECT_EQ(svmbatch_arena_wait(nullptr), -EINVAL);
	EXPECT_EQ(svmbatch_arena_ready(nullptr), -EINVAL);
	o.flags = 1U << 2;
	EXPECT_EQ(svmbatch_arena_create(ctx_, page, &o, &a), -EINVAL);
}

} // namespace
