// SPDX-License-Identifier: MIT
// The C API of the ExtentReader: host destinations byte for byte, the end
// of the file, errno, failed index and message for bad arguments (with
// nothing read and nothing left behind), and, where the build has CUDA, a
// reader for the FAKE CUDA driver's device.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include <svmbatch/config.h>
#include <svmbatch/capi.h>

#include "extent_fixture.hpp"
#include "test_util.hpp"

#if SVMBATCH_HAS_CUDA
#include "fake_cuda/fake_cuda.h"
#endif

/* c_api_compile_check.c */
extern "C" int svmbatch_c_api_extent_read(int fd, void *dst, size_t len);

namespace {

using svmbatch::test::Destinations;
using svmbatch::test::kib;

svmbatch_mode c_mode()
{
	return svmbatch::test::mode_under_test() == svmbatch::Mode::Kernel ?
		       SVMBATCH_MODE_KERNEL :
		       SVMBATCH_MODE_USERSPACE;
}

std::string last_error()
{
	return svmbatch_last_error();
}

class CApiExtent : public ::testing::Test {
protected:
	void SetUp() override
	{
		if (c_mode() == SVMBATCH_MODE_KERNEL && !svmbatch::test::kernel_available())
			GTEST_SKIP() << "kernel mode: no /dev/svmbatch";
		ASSERT_EQ(svmbatch_ctx_open(c_mode(), nullptr, &ctx_), 0) << svmbatch_last_error();
	}
	void TearDown() override { svmbatch_ctx_close(ctx_); }

	/// Small chunks: the extents below pass through the staging many times.
	static svmbatch_extent_reader_options small()
	{
		svmbatch_extent_reader_options o{};
		o.staging_bytes = 64 * kib;
		o.chunk_bytes = 16 * kib;
		o.threads = 2;
		o.max_io_bytes = 8 * kib;
		return o;
	}

	svmbatch_ctx *ctx_ = nullptr;
};

TEST(CApiExtentC, CallableFromC)
{
	svmbatch::test::ScratchFile file(100 * kib);
	std::vector<std::uint8_t> mem(50 * kib);
	EXPECT_EQ(svmbatch_c_api_extent_read(file.fd(), mem.data(), mem.size()), 0)
		<< svmbatch_last_error();
	for (std::size_t k = 0; k < mem.size(); k++)
		ASSERT_EQ(mem[k], svmbatch::test::pattern_byte(1000 + k)) << "byte " << k;
}

TEST_F(CApiExtent, ExtentsLandInHostMemory)
{
	const std::size_t size = 1 << 20;
	svmbatch::test::ScratchFile file(size), other(300 * kib);
	svmbatch_extent_reader *r = nullptr;
	const svmbatch_extent_reader_options o = small();
	ASSERT_EQ(svmbatch_extent_reader_create(ctx_, &o, -1, &r), 0) << svmbatch_last_error();
	ASSERT_NE(r, nullptr);
	EXPECT_EQ(last_error(), "");

	std::vector<svmbatch_extent> e{
		{file.fd(), 0, 0, 400 * kib, 0}, // a run of two
		{file.fd(), 0, 400 * kib, 123457, 0},
		{other.fd(), 0, 5, 299 * kib, 0},
		{file.fd(), 0, 77, 0, 0}, // empty: no destination needed
		{file.fd(), 0, size - 100, 1000, 0}, // past the end: ENODATA
		{other.fd(), 0, 1, 1, 0},
	};
	Destinations dst({e[0].length, e[1].length, e[2].length, 0, e[4].length, 1});
	for (std::size_t i = 0; i < e.size(); i++)
		if (e[i].length)
			e[i].dst = dst.address(i);
	std::vector<svmbatch_extent_result> res(e.size(), {1, 7, 9});
	size_t bad = 0;
	ASSERT_EQ(svmbatch_extent_read(r, e.data(), e.size(), 0, res.data(), &bad), 0)
		<< svmbatch_last_error();
	EXPECT_EQ(bad, SVMBATCH_LIB_NO_INDEX);
	const int status[] = {0, 0, 0, 0, -ENODATA, 0};
	// The extent past the end is one piece that did not arrive whole: not copied.
	const std::uint64_t bytes[] = {400 * kib, 123457, 299 * kib, 0, 0, 1};
	for (std::size_t i = 0; i < e.size(); i++) {
		SCOPED_TRACE("extent " + std::to_string(i));
		EXPECT_EQ(res[i].status, status[i]);
		EXPECT_EQ(res[i].flags, 0u);
		EXPECT_EQ(res[i].bytes, bytes[i]);
		EXPECT_TRUE(dst.holds(i, e[i].file_offset, bytes[i]));
	}
	EXPECT_TRUE(dst.guards_intact());

	// No extents at all, NULL arrays included.
	EXPECT_EQ(svmbatch_extent_read(r, nullptr, 0, 0, nullptr, nullptr), 0);
	svmbatch_extent_reader_destroy(r);
	svmbatch_extent_reader_destroy(nullptr);
}

/* The reader does not need its context: closed first, the reader reads. */
TEST_F(CApiExtent, TheReaderOutlivesItsContext)
{
	svmbatch::test::ScratchFile file(100 * kib);
	svmbatch_ctx *ctx = nullptr;
	ASSERT_EQ(svmbatch_ctx_open(c_mode(), nullptr, &ctx), 0) << svmbatch_last_error();
	svmbatch_extent_reader *r = nullptr;
	const svmbatch_extent_reader_options o = small();
	ASSERT_EQ(svmbatch_extent_reader_create(ctx, &o, -1, &r), 0) << svmbatch_last_error();
	svmbatch_ctx_close(ctx);
	Destinations dst({90 * kib});
	const svmbatch_extent e{file.fd(), 0, 10 * kib, 90 * kib, dst.address(0)};
	svmbatch_extent_result res{};
	ASSERT_EQ(svmbatch_extent_read(r, &e, 1, 0, &res, nullptr), 0) << svmbatch_last_error();
	EXPECT_EQ(res.status, 0);
	EXPECT_EQ(res.bytes, 90 * kib);
	EXPECT_TRUE(dst.holds(0, 10 * kib, 90 * kib));
	EXPECT_TRUE(dst.guards_intact());
	svmbatch_extent_reader_destroy(r);
}

/* NULL and bad arguments: the precise errno, message and index; nothing
 * read, no result written, no handle and no fd left behind. */
TEST_F(CApiExtent, BadArgumentsArePreciseAndLeaveNothing)
{
	svmbatch::test::ScratchFile file(64 * kib);
	const std::size_t fds = svmbatch::test::open_fds();
	auto *r = reinterpret_cast<svmbatch_extent_reader *>(1);
	const svmbatch_extent_reader_options o = small();

	EXPECT_EQ(svmbatch_extent_reader_create(nullptr, &o, -1, &r), -EINVAL);
	EXPECT_EQ(r, reinterpret_cast<svmbatch_extent_reader *>(1)) << "no out pointer written";
	EXPECT_NE(last_error().find("NULL"), std::string::npos) << last_error();
	EXPECT_EQ(svmbatch_extent_reader_create(ctx_, &o, -1, nullptr), -EINVAL);
	EXPECT_EQ(svmbatch_extent_reader_create(ctx_, &o, -2, &r), -EINVAL);
	EXPECT_EQ(r, nullptr);
	EXPECT_NE(last_error().find("cuda_device"), std::string::npos) << last_error();

	struct Options {
		const char *what;
		std::size_t staging, chunk, alignment;
		const char *message;
	};
	const Options bad_options[] = {
		{"chunks not a multiple of 4096", 0, 4096 + 1, 0, "chunk_bytes"},
		{"chunks not a multiple of the alignment", 0, 12 * kib, 8192, "chunk_bytes"},
		{"less than two chunks", 16 * kib - 1, 8 * kib, 0, "staging_bytes"},
		{"a staging of one byte", 1, 0, 0, "staging_bytes"},
	};
	for (const Options &b : bad_options) {
		svmbatch_extent_reader_options bo{};
		bo.staging_bytes = b.staging;
		bo.chunk_bytes = b.chunk;
		bo.direct_alignment = b.alignment;
		r = reinterpret_cast<svmbatch_extent_reader *>(1);
		EXPECT_EQ(svmbatch_extent_reader_create(ctx_, &bo, -1, &r), -EINVAL) << b.what;
		EXPECT_EQ(r, nullptr) << b.what;
		EXPECT_NE(last_error().find(b.message), std::string::npos) << last_error();
	}
	EXPECT_EQ(svmbatch::test::open_fds(), fds);

	ASSERT_EQ(svmbatch_extent_reader_create(ctx_, &o, -1, &r), 0) << svmbatch_last_error();
	Destinations dst({100, 100});
	const int closed = ::dup(file.fd());
	ASSERT_GE(closed, 0);
	::close(closed);
	svmbatch_extent good{file.fd(), 0, 0, 100, dst.address(0)};
	struct Case {
		const char *what;
		svmbatch_extent bad;
		int err;
		const char *message;
	};
	const Case cases[] = {
		{"reserved", {file.fd(), 1, 0, 10, dst.address(1)}, -EINVAL, "reserved"},
		{"fd -1", {-1, 0, 0, 10, dst.address(1)}, -EINVAL, "extent 1"},
		{"no destination", {file.fd(), 0, 0, 10, 0}, -EINVAL, "extent 1"},
		{"an fd not open", {closed, 0, 0, 10, dst.address(1)}, -EBADF, "extent 1"},
		{"an offset past 2^62",
		 {file.fd(), 0, (1ULL << 62) + 1, 1, dst.address(1)},
		 -EINVAL,
		 "extent 1"},
	};
	for (const Case &c : cases) {
		SCOPED_TRACE(c.what);
		const svmbatch_extent e[] = {good, c.bad};
		svmbatch_extent_result res[2] = {{1, 7, 9}, {1, 7, 9}};
		size_t bad = 0;
		EXPECT_EQ(svmbatch_extent_read(r, e, 2, 0, res, &bad), c.err);
		EXPECT_EQ(bad, 1u);
		EXPECT_NE(last_error().find(c.message), std::string::npos) << last_error();
		for (const svmbatch_extent_result &x : res)
			EXPECT_TRUE(x.status == 1 && x.flags == 7 && x.bytes == 9)
				<< "a result was written";
		EXPECT_TRUE(dst.holds(0, 0, 0)) << "something was read";
		EXPECT_TRUE(dst.guards_intact());
		// failed_index may be NULL.
		EXPECT_EQ(svmbatch_extent_read(r, e, 2, 0, res, nullptr), c.err);
	}
	svmbatch_extent_result one{};
	size_t bad = 0;
	EXPECT_EQ(svmbatch_extent_read(nullptr, &good, 1, 0, &one, &bad), -EINVAL);
	EXPECT_EQ(bad, SVMBATCH_LIB_NO_INDEX);
	EXPECT_EQ(svmbatch_extent_read(r, nullptr, 1, 0, &one, &bad), -EINVAL);
	EXPECT_EQ(svmbatch_extent_read(r, &good, 1, 0, nullptr, &bad), -EINVAL);
	EXPECT_EQ(svmbatch_extent_read(r, &good, SIZE_MAX, 0, &one, &bad), -ENOMEM);
	EXPECT_TRUE(dst.holds(0, 0, 0));

	// And the reader still reads; a success clears the message.
	ASSERT_EQ(svmbatch_extent_read(r, &good, 1, 0, &one, &bad), 0) << svmbatch_last_error();
	EXPECT_EQ(last_error(), "");
	EXPECT_EQ(one.status, 0);
	EXPECT_EQ(one.bytes, 100u);
	EXPECT_TRUE(dst.holds(0, 0, 100));
	svmbatch_extent_reader_destroy(r);
	EXPECT_EQ(svmbatch::test::open_fds(), fds);
}

#if SVMBATCH_HAS_CUDA
/* A reader for the fake's device: its staging mapped, copies on the
 * default stream into its device memory, all gone with the reader. */
TEST_F(CApiExtent, ACudaDeviceReaderCopiesToTheDevice)
{
	fake_cuda_reset(1);
	svmbatch::test::ScratchFile file(1 << 20);
	svmbatch_extent_reader_options o = small();
	o.cuda_library = svmbatch::test::fake_cuda_library;
	svmbatch_extent_reader *r = nullptr;
	ASSERT_EQ(svmbatch_extent_reader_create(ctx_, &o, 0, &r), 0) << svmbatch_last_error();
	EXPECT_EQ(fake_cuda_registered(), 1) << "the staging, mapped for the device";

	std::vector<svmbatch_extent> e{{file.fd(), 0, 12345, 500 * kib, 0},
				       {file.fd(), 0, 999 * kib, 25 * kib, 0}};
	Destinations dst({e[0].length, e[1].length});
	fake_cuda_add_device(dst.memory(), dst.memory_bytes());
	for (std::size_t i = 0; i < e.size(); i++)
		e[i].dst = dst.address(i);
	fake_cuda_defer_copies(1);
	svmbatch_extent_result res[2] = {};
	for (int round = 0; round < 2; round++) { // the second reuses the copier
		dst.reset();
		ASSERT_EQ(svmbatch_extent_read(r, e.data(), e.size(), 0, res, nullptr), 0)
			<< svmbatch_last_error();
		EXPECT_EQ(fake_cuda_deferred_pending(), 0u);
		for (std::size_t i = 0; i < e.size(); i++) {
			EXPECT_EQ(res[i].status, 0);
			EXPECT_EQ(res[i].bytes, e[i].length);
			EXPECT_TRUE(dst.holds(i, e[i].file_offset, e[i].length));
		}
		EXPECT_TRUE(dst.guards_intact());
	}
	EXPECT_EQ(fake_cuda_live_events(), 4);

	// A copy the driver refuses: the extent's status, flagged as the copy's.
	fake_cuda_fail_copies(2); // CUDA_ERROR_OUT_OF_MEMORY
	ASSERT_EQ(svmbatch_extent_read(r, e.data(), 1, 0, res, nullptr), 0);
	fake_cuda_fail_copies(0);
	EXPECT_EQ(res[0].status, -ENOMEM);
	EXPECT_EQ(res[0].flags, SVMBATCH_EXTENT_COPY_FAILED);
	EXPECT_EQ(res[0].bytes, 0u);

	fake_cuda_defer_copies(0);
	svmbatch_extent_reader_destroy(r);
	EXPECT_EQ(fake_cuda_registered(), 0);
	EXPECT_EQ(fake_cuda_live_events(), 0);
	EXPECT_EQ(fake_cuda_context_depth(), 0);
}

/* No such driver: -ENODEV, and nothing made. */
TEST_F(CApiExtent, ACudaDeviceWithoutTheDriverIsEnodev)
{
	fake_cuda_reset(1);
	const std::size_t fds = svmbatch::test::open_fds();
	svmbatch_extent_reader_options o{};
	o.cuda_library = "libsvmbatch_no_such_driver.so";
	auto *r = reinterpret_cast<svmbatch_extent_reader *>(1);
	EXPECT_EQ(svmbatch_extent_reader_create(ctx_, &o, 0, &r), -ENODEV);
	EXPECT_EQ(r, nullptr);
	EXPECT_NE(last_error().find("libsvmbatch_no_such_driver.so"), std::string::npos)
		<< last_error();
	EXPECT_EQ(svmbatch::test::open_fds(), fds);
	// The fake without a device.
	fake_cuda_reset(0);
	o.cuda_library = svmbatch::test::fake_cuda_library;
	EXPECT_EQ(svmbatch_extent_reader_create(ctx_, &o, 0, &r), -ENODEV);
	EXPECT_EQ(r, nullptr);
	EXPECT_EQ(fake_cuda_registered(), 0);
	EXPECT_EQ(svmbatch::test::open_fds(), fds);
}
#else
TEST_F(CApiExtent, ACudaDeviceWithoutCudaIsEopnotsupp)
{
	auto *r = reinterpret_cast<svmbatch_extent_reader *>(1);
	EXPECT_EQ(svmbatch_extent_reader_create(ctx_, nullptr, 0, &r), -EOPNOTSUPP);
	EXPECT_EQ(r, nullptr);
	EXPECT_NE(last_error().find("without CUDA"), std::string::npos) << last_error();
}
#endif

} // namespace
