// SPDX-License-Identifier: MIT
// page_cache_residency(): what it counts, over which pages, by which
// method; the mincore() path on its own, so that it is covered on every
// kernel (the 6.1 guest has no cachestat() and takes it anyway).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <svmbatch/capi.h>
#include <svmbatch/page_cache.hpp>

#include "core/page_cache_count.hpp"
#include "expect_error.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

using test::expect_error;
using test::ScratchFile;

const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));

/* Both ways of counting, over the same range: they must agree. */
struct Counts {
	PageCacheResidency any; /* page_cache_residency(): cachestat where the kernel has it */
	PageCacheResidency mincore;
};

Counts count(int fd, std::uint64_t offset = 0, std::uint64_t length = 0)
{
	return {page_cache_residency(fd, offset, length),
		detail::residency_by_mincore(fd, offset, length)};
}

void read_all(int fd, std::uint64_t bytes)
{
	std::vector<char> buf(1 << 16);

	for (std::uint64_t off = 0; off < bytes;) {
		ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off));
		ASSERT_GT(n, 0) << "pread at " << off;
		off += static_cast<std::uint64_t>(n);
	}
}

/* Write back and drop the file's pages: what is read after is all that
 * is resident (on tmpfs and ramfs nothing drops: keeps_its_pages()). */
::testing::AssertionResult drop_pages(int fd)
{
	if (::fdatasync(fd) != 0)
		return ::testing::AssertionFailure() << "fdatasync: " << std::strerror(errno);
	const int err = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if (err != 0)
		return ::testing::AssertionFailure()
		       << "posix_fadvise(DONTNEED): " << std::strerror(err);
	return ::testing::AssertionSuccess();
}

/* Read the byte at offset with readahead off: its page comes back alone. */
::testing::AssertionResult read_page_alone(int fd, std::uint64_t offset)
{
	const int err = ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	if (err != 0)
		return ::testing::AssertionFailure()
		       << "posix_fadvise(RANDOM): " << std::strerror(err);
	char byte;
	const ssize_t n = ::pread(fd, &byte, 1, static_cast<off_t>(offset));
	if (n != 1)
		return ::testing::AssertionFailure() << "pread at " << offset << ": " << n;
	return ::testing::AssertionSuccess();
}

/* Whether the file system keeps clean pages that DONTNEED asks to drop:
 * tmpfs and ramfs hold a file's only copy in its page cache. */
std::string keeps_its_pages(int fd)
{
	struct statfs fs {};

	if (::fstatfs(fd, &fs) != 0)
		return "";
	if (fs.f_type == TMPFS_MAGIC)
		return "tmpfs";
	if (fs.f_type == RAMFS_MAGIC)
		return "ramfs";
	return "";
}

/* The running kernel's version as major * 1000 + minor. */
int kernel_version()
{
	struct utsname u {};
	int major = 0, minor = 0;

	if (::uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &major, &minor) != 2)
		return 0;
	return major * 1000 + minor;
}

TEST(PageCache, AFileJustReadIsResident)
{
	const std::uint64_t bytes = 10 * page + 123; /* 11 pages, the last one partly */
	ScratchFile f(bytes);

	read_all(f.fd(), bytes);
	Counts c = count(f.fd());
	EXPECT_EQ(c.any.total_pages, 11u);
	EXPECT_EQ(c.any.resident_pages, 11u);
	EXPECT_EQ(c.any.page_size, page);
	EXPECT_EQ(c.mincore.total_pages, 11u);
	EXPECT_EQ(c.mincore.resident_pages, 11u);
	EXPECT_EQ(c.mincore.method, ResidencyMethod::Mincore);
}

TEST(PageCache, TheMethodIsCachestatWhereTheKernelHasIt)
{
	ScratchFile f(page);
	const bool has_cachestat = detail::residency_by_cachestat(f.fd(), 0, 0).has_value();
	const PageCacheResidency r = page_cache_residency(f.fd());

	std::printf("# page_cache_residency() counts by %s on %d.%d\n",
		    residency_method_name(r.method), kernel_version() / 1000,
		    kernel_version() % 1000);
	EXPECT_EQ(r.method, has_cachestat ? ResidencyMethod::Cachestat : ResidencyMethod::Mincore);
	/* cachestat() came in 6.5: older kernels must take the fallback. */
	if (kernel_version() < 6005) {
		EXPECT_EQ(r.method, ResidencyMethod::Mincore);
	}
	EXPECT_STREQ(residency_method_name(ResidencyMethod::Cachestat), "cachestat");
	EXPECT_STREQ(residency_method_name(ResidencyMethod::Mincore), "mincore");
}

/* The drop tests' file: on SVMBATCH_WRITEBACK_DIR where set (the guests'
 * ext4, since their /tmp is a tmpfs that keeps every page), else in /tmp. */
TEST(PageCache, DroppedPagesAreNotResident)
{
	const std::uint64_t bytes = 16 * page;
	ScratchFile f(bytes, test::writeback_dir());

	read_all(f.fd(), bytes);
	ASSERT_TRUE(drop_pages(f.fd()));
	Counts dropped = count(f.fd());
	EXPECT_EQ(dropped.any.resident_pages, dropped.mincore.resident_pages);
	EXPECT_EQ(dropped.any.total_pages, 16u);
	std::string fs = keeps_its_pages(f.fd());
	if (!fs.empty())
		SVMBATCH_SKIP_ABSENT("writeback",
				     f.path() + " is on " + fs +
					     ", which keeps a file's pages: DONTNEED dropped none (" +
					     std::to_string(dropped.any.resident_pages) +
					     " of 16 resident); set SVMBATCH_WRITEBACK_DIR");
	EXPECT_LT(dropped.any.resident_pages, 16u);

	/* Read back page 5 alone: that page is resident again. */
	ASSERT_TRUE(read_page_alone(f.fd(), 5 * page + 7));
	Counts one = count(f.fd(), 5 * page, page);
	EXPECT_EQ(one.any.total_pages, 1u);
	EXPECT_EQ(one.any.resident_pages, 1u);
	EXPECT_EQ(one.mincore.resident_pages, 1u);
	Counts all = count(f.fd());
	EXPECT_EQ(all.any.resident_pages, all.mincore.resident_pages);
	EXPECT_LT(all.any.resident_pages, 16u);
	EXPECT_GE(all.any.resident_pages, 1u);
}

TEST(PageCache, RangesCountThePagesThatHoldTheirBytes)
{
	const std::uint64_t bytes = 8 * page + 100;
	ScratchFile f(bytes);

	read_all(f.fd(), bytes);
	struct Case {
		std::uint64_t offset, length, pages;
	} cases[] = {
		{0, 0, 9}, /* to the end of the file */
		{0, 1, 1},
		{page - 1, 2, 2}, /* two bytes across a page boundary */
		{page + 1, 2 * page, 3},
		{3 * page, 0, 6},
		{8 * page, 0, 1}, /* the partial last page */
		{8 * page + 99, 1, 1},
		{2 * page, 100 * page, 7}, /* clipped at the end of the file */
		{page, UINT64_MAX, 8}, /* offset + length wraps: to the end */
		{bytes, 0, 0}, /* at the end */
		{bytes, page, 0},
		{100 * page, page, 0}, /* past the end */
		{UINT64_MAX, 1, 0},
	};
	for (const Case &c : cases) {
		SCOPED_TRACE("offset " + std::to_string(c.offset) + " length " +
			     std::to_string(c.length));
		Counts r = count(f.fd(), c.offset, c.length);
		EXPECT_EQ(r.any.total_pages, c.pages);
		EXPECT_EQ(r.any.resident_pages, c.pages);
		EXPECT_EQ(r.mincore.total_pages, c.pages);
		EXPECT_EQ(r.mincore.resident_pages, c.pages);
	}
}

TEST(PageCache, AnEmptyFileHasNoPages)
{
	ScratchFile f(0);
	Counts c = count(f.fd());

	EXPECT_EQ(c.any.total_pages, 0u);
	EXPECT_EQ(c.any.resident_pages, 0u);
	EXPECT_EQ(c.mincore.total_pages, 0u);
}

TEST(PageCache, MincoreCountsWindowByWindow)
{
	const std::uint64_t bytes = 20 * page + 1;
	ScratchFile f(bytes, test::writeback_dir());

	read_all(f.fd(), bytes);
	ASSERT_TRUE(drop_pages(f.fd()));
	for (std::uint64_t p : {0, 4, 7, 20})
		ASSERT_TRUE(read_page_alone(f.fd(), p * page));
	const PageCacheResidency whole = detail::residency_by_mincore(f.fd(), 0, 0);
	EXPECT_EQ(whole.total_pages, 21u);
	/* Windows of 1, 3 and 7 pages (the last one short) count the same. */
	for (std::uint64_t window : {1, 3, 7, 21, 64}) {
		SCOPED_TRACE("window of " + std::to_string(window) + " pages");
		PageCacheResidency r = detail::residency_by_mincore(f.fd(), 0, 0, window);
		EXPECT_EQ(r.total_pages, 21u);
		EXPECT_EQ(r.resident_pages, whole.resident_pages);
		r = detail::residency_by_mincore(f.fd(), 2 * page + 5, 15 * page, window);
		EXPECT_EQ(r.total_pages, 16u);
		EXPECT_EQ(r.resident_pages,
			  detail::residency_by_mincore(f.fd(), 2 * page + 5, 15 * page)
				  .resident_pages);
	}
	const std::string fs = keeps_its_pages(f.fd());
	if (!fs.empty()) /* nothing was dropped: every page is resident */
		SVMBATCH_SKIP_ABSENT("writeback", f.path() + " is on " + fs +
							  ", which keeps a file's pages; set "
							  "SVMBATCH_WRITEBACK_DIR");
	EXPECT_EQ(whole.resident_pages, 4u);
	EXPECT_EQ(detail::residency_by_mincore(f.fd(), page, 6 * page, 2).resident_pages, 1u);
}

TEST(PageCache, ABadFdIsEBADF)
{
	int fds[2];

	ASSERT_EQ(::pipe(fds), 0);
	::close(fds[0]);
	::close(fds[1]);
	for (int fd : {-1, fds[0]}) {
		Error e = expect_error([&] { page_cache_residency(fd); });
		EXPECT_EQ(e.err(), EBADF);
		EXPECT_EQ(e.step(), Step::Diagnostics);
		EXPECT_NE(std::string(e.what()).find("fd " + std::to_string(fd)), std::string::npos)
			<< e.what();
		EXPECT_EQ(expect_error([&] { detail::residency_by_mincore(fd, 0, 0); }).err(),
			  EBADF);
	}
}

TEST(PageCache, OnlyRegularFilesAreCounted)
{
	int fds[2];

	ASSERT_EQ(::pipe(fds), 0);
	Error e = expect_error([&] { page_cache_residency(fds[0]); });
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_EQ(e.step(), Step::Diagnostics);
	::close(fds[0]);
	::close(fds[1]);
	int dir = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ASSERT_GE(dir, 0);
	EXPECT_EQ(expect_error([&] { page_cache_residency(dir); }).err(), EINVAL);
	::close(dir);
}

TEST(PageCache, MincoreNeedsAnFdOpenForReading)
{
	ScratchFile f(2 * page);
	int wronly = ::open(f.path().c_str(), O_WRONLY | O_CLOEXEC);

	ASSERT_GE(wronly, 0);
	Error e = expect_error([&] { detail::residency_by_mincore(wronly, 0, 0); });
	EXPECT_EQ(e.err(), EACCES);
	EXPECT_EQ(e.step(), Step::Diagnostics);
	::close(wronly);
}

TEST(PageCache, TheCApiSaysTheSame)
{
	const std::uint64_t bytes = 3 * page + 1;
	ScratchFile f(bytes);
	svmbatch_file_residency r{};

	read_all(f.fd(), bytes);
	ASSERT_EQ(svmbatch_file_get_residency(f.fd(), page, 0, &r), 0) << svmbatch_last_error();
	EXPECT_STREQ(svmbatch_last_error(), "");
	const PageCacheResidency want = page_cache_residency(f.fd(), page, 0);
	EXPECT_EQ(r.total_pages, 3u);
	EXPECT_EQ(r.resident_pages, want.resident_pages);
	EXPECT_EQ(r.page_size, page);
	EXPECT_EQ(r.method, want.method == ResidencyMethod::Cachestat ?
				    SVMBATCH_RESIDENCY_CACHESTAT :
				    SVMBATCH_RESIDENCY_MINCORE);

	EXPECT_EQ(svmbatch_file_get_residency(f.fd(), 0, 0, nullptr), -EINVAL);
	EXPECT_NE(std::string(svmbatch_last_error()).find("NULL"), std::string::npos);
	EXPECT_EQ(svmbatch_file_get_residency(-1, 0, 0, &r), -EBADF);
	EXPECT_NE(std::string(svmbatch_last_error()).find("diagnostics"), std::string::npos)
		<< svmbatch_last_error();
	EXPECT_EQ(r.total_pages, 0u); /* zeroed on failure */
}

} // namespace
} // namespace svmbatch
