// SPDX-License-Identifier: MIT
// RegisterOptions::notify_stale: the registration's eventfd becomes
// readable when a registered address is unmapped, and only then.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

using test::expect_error;

/// Is fd readable within timeout_ms?
bool readable(int fd, int timeout_ms)
{
	pollfd p{fd, POLLIN, 0};

	return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

TEST(StaleNotify, OffByDefault)
{
	test::MappedPages a(2);
	Context ctx = test::make_context();
	Buffer b{a.p, a.len};
	Registration reg = ctx.register_buffers({&b, 1});

	EXPECT_EQ(reg.stale_fd(), -1);
}

TEST(StaleNotify, UserspaceModeIsEOPNOTSUPP)
{
	test::MappedPages a(2);
	Context ctx(Mode::Userspace);
	Buffer b{a.p, a.len};
	std::uint64_t pinned = process_pinned_bytes();

	Error e = expect_error([&] {
		(void)ctx.register_buffers({&b, 1}, RegisterOptions{.notify_stale = true});
	});
	EXPECT_EQ(e.err(), EOPNOTSUPP);
	EXPECT_EQ(e.step(), Step::Validate);
	EXPECT_EQ(process_pinned_bytes(), pinned);
}

using test::open_fds;

TEST(StaleNotify, AFailedRegistrationLeavesNoEventfdBehind)
{
	SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
	test::MappedPages good(1), gone(1);
	Context ctx = test::make_context();
	ASSERT_EQ(::munmap(gone.p, gone.len), 0);
	const Buffer b[] = {{good.p, good.len}, {gone.p, gone.len}};
	const std::size_t fds = open_fds();
	const std::uint64_t pinned = process_pinned_bytes();

	Error e = expect_error(
		[&] { (void)ctx.register_buffers(b, RegisterOptions{.notify_stale = true}); });
	gone.p = nullptr; // unmapped already
	EXPECT_EQ(e.err(), EFAULT);
	EXPECT_EQ(e.buffer_index(), 1U);
	EXPECT_EQ(open_fds(), fds) << "the eventfd of the failed registration stayed open";
	EXPECT_EQ(process_pinned_bytes(), pinned);
}

TEST(StaleNotify, UnmapSignalsTheEventfdOnce)
{
	SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
	test::MappedPages keep(2);
	auto *gone = static_cast<char *>(::mmap(nullptr, keep.len, PROT_READ | PROT_WRITE,
						MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	ASSERT_NE(gone, MAP_FAILED);
	Context ctx = test::make_context();
	const Buffer b[] = {{keep.p, keep.len}, {gone, keep.len}};
	Registration reg = ctx.register_buffers(b, RegisterOptions{.notify_stale = true});
	const int fd = reg.stale_fd();

	ASSERT_GE(fd, 0);
	EXPECT_FALSE(readable(fd, 0));
	EXPECT_FALSE(reg.stale());
	// Touching registered memory is no change of the address space.
	keep.p[0] = 1;
	gone[0] = 1;
	EXPECT_FALSE(readable(fd, 0));

	ASSERT_EQ(::munmap(gone, keep.len), 0);
	EXPECT_TRUE(readable(fd, 5000));
	EXPECT_TRUE(reg.stale());
	std::uint64_t count = 0;
	ASSERT_EQ(::read(fd, &count, sizeof(count)), static_cast<ssize_t>(sizeof(count)));
	EXPECT_EQ(count, 1U);
	// Once: a second change of the address space signals nothing more.
	ASSERT_EQ(::munmap(keep.p, keep.len), 0);
	keep.p = nullptr;
	EXPECT_FALSE(readable(fd, 100));
}

TEST(StaleNotify, TheEventfdClosesWithTheRegistration)
{
	SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
	test::MappedPages a(1);
	Context ctx = test::make_context();
	Buffer b{a.p, a.len};
	Registration reg = ctx.register_buffers({&b, 1}, RegisterOptions{.notify_stale = true});
	const int fd = reg.stale_fd();

	ASSERT_GE(fd, 0);
	EXPECT_NE(::fcntl(fd, F_GETFD), -1);
	reg.reset();
	EXPECT_EQ(reg.stale_fd(), -1);
	EXPECT_EQ(::fcntl(fd, F_GETFD), -1);
	EXPECT_EQ(errno, EBADF);
}

} // namespace
} // namespace svmbatch
