// SPDX-License-Identifier: MIT
// ZeBackend against the real Level Zero loader (Debian's libze1, 1.8.12,
// where installed).  Without an Intel GPU driver (here, the guests, CI)
// the loader must fail cleanly: ENODEV carrying zeInit's own result, no
// crash, and nothing left behind (file descriptors, threads, pinned
// memory, the registration it was asked to map).  With an Intel GPU and
// its driver (compute-runtime) the same binary maps scattered buffers for
// real.  The tests skip only where no loader is installed (the probe
// names where it looked); one that is installed and does not load fails.
// A process of its own: the fake loader of svmbatch_lib_tests exports the
// same ze* symbols, to which the real loader's calls would bind.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "runtime_attempt.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

/// The number of this process's threads.
std::size_t threads()
{
	std::size_t n = 0;
	for ([[maybe_unused]] const auto &e :
	     std::filesystem::directory_iterator("/proc/self/task"))
		n++;
	return n;
}

using Attempt = test::Attempt<ZeBackend>;

Attempt open_ze()
{
	return test::try_open<ZeBackend>();
}

/// The loader file the dynamic loader would find, or "" with *probed
/// saying where it looked: only then is the loader absent.
std::string installed_loader(std::string *probed)
{
	std::string where;
	std::string path = test::find_library("libze_loader.so.1", &where);
	if (path.empty())
		*probed = "no libze_loader.so.1 in " + where;
	return path;
}

/// The render nodes of Intel's GPU drivers (i915, xe).
std::vector<std::string> intel_render_nodes()
{
	std::vector<std::string> nodes;
	std::error_code ec;
	for (const auto &e : std::filesystem::directory_iterator("/sys/class/drm", ec)) {
		const std::string name = e.path().filename();
		if (name.rfind("renderD", 0) != 0)
			continue;
		std::string driver =
			std::filesystem::read_symlink(e.path() / "device/driver", ec).filename();
		if (!ec && (driver == "i915" || driver == "xe")) {
			std::string node = name;
			node += " (" + driver + ")";
			nodes.push_back(node);
		}
	}
	return nodes;
}

TEST(ZeRuntime, WithoutADriverItIsENODEVWithZeInitsResultAndLeavesNothing)
{
	Context ctx = test::make_context();
	std::vector<char> mem(3 * 4096 + 17, 'x');
	Buffer buf{mem.data() + 5, mem.size() - 5};
	Registration reg = ctx.register_buffers({&buf, 1});
	const std::uint64_t pinned = test::quiet_pinned_bytes();
	const std::size_t fds = test::open_fds(), tasks = threads();

	Attempt a = open_ze();
	std::string probed;
	const std::string loader = installed_loader(&probed);
	if (loader.empty()) {
		ASSERT_TRUE(a.error)
			<< "Level Zero loaded, yet the probe found no loader: " << probed;
		SVMBATCH_SKIP_ABSENT("ze", "the Level Zero loader is not installed: " + probed);
	}
	if (a.backend)
		GTEST_SKIP() << "a Level Zero device is present (" << a.backend->device_name()
			     << "): ZeRuntime.MapsScatteredBuffersOnADevice tests it";
	const Error &e = *a.error;
	/* It is installed: it must load, and fail only for want of a driver,
	 * the same way twice, at no cost. */
	test::expect_no_device<ZeBackend>(e, loader, "no Level Zero loader", fds, pinned);
	EXPECT_NE(std::string(e.what()).find("zeInit (libze_loader.so.1): ZE_RESULT_"),
		  std::string::npos)
		<< e.what();
	EXPECT_EQ(threads(), tasks) << "the loader left a thread running";
	std::printf("# no driver: %s\n", e.what());
	EXPECT_EQ(reg.buffers().size(), 1u);
	EXPECT_EQ(reg.ranges().size(), 1u);
}

TEST(ZeRuntime, MapsScatteredBuffersOnADevice)
{
	Attempt a = open_ze();
	if (a.error) {
		std::string probed;
		if (installed_loader(&probed).empty())
			SVMBATCH_SKIP_ABSENT("ze",
					     "the Level Zero loader is not installed: " + probed);
		if (intel_render_nodes().empty())
			GTEST_SKIP() << "no Intel GPU render node (i915, xe) here (Level Zero: "
				     << a.error->what() << ")";
		FAIL() << "an Intel GPU is here (" << intel_render_nodes().front()
		       << "), yet Level Zero opened no device: " << a.error->what();
	}
	ZeBackend &ze = *a.backend; // kernel mode imports the dma-buf, not the buffers
	test::expect_maps_scattered_buffers(ze, false);
}

} // namespace
} // namespace svmbatch
