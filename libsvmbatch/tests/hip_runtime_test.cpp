// SPDX-License-Identifier: MIT
// HipBackend against the real HIP runtime (Debian's libamdhip64, ROCm
// 5.2.3, where installed).  Without an AMD GPU (no /dev/kfd: here, the
// guests, CI) the runtime must fail cleanly: ENODEV carrying HIP's own
// status from hipGetDeviceCount, no crash, and nothing left behind (file
// descriptors, pinned memory, the registration it was asked to map).
// With a GPU the same test maps scattered buffers for real.  The tests
// skip only where no runtime file is installed (the probe names where it
// looked); one that is installed and does not load fails.
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

using test::open_fds;
using Attempt = test::Attempt<HipBackend>;

Attempt open_hip()
{
	return test::try_open<HipBackend>();
}

/// The runtimes HipBackend tries (shim/libhip.cpp), newest first.
constexpr const char *runtimes[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"};

/// The first runtime file the loader would find, or "" with *probed
/// saying which sonames were looked for where: only then is the runtime
/// absent.  A runtime that is there and does not load is a failure.
std::string installed_runtime(std::string *probed)
{
	std::string where;
	for (const char *soname : runtimes) {
		std::string path = test::find_library(soname, &where);
		if (!path.empty())
			return path;
	}
	*probed = std::string("no libamdhip64.so.{7,6,5} in ") + where;
	return "";
}

bool have_kfd()
{
	std::error_code ec;
	return std::filesystem::exists("/dev/kfd", ec);
}

TEST(HipRuntime, WithoutADeviceItIsENODEVWithHipsStatusAndLeavesNothing)
{
	Context ctx = test::make_context();
	std::vector<char> mem(3 * 4096 + 17, 'x');
	Buffer buf{mem.data(), mem.size()};
	Registration reg = ctx.register_buffers({&buf, 1});
	const std::uint64_t pinned = test::quiet_pinned_bytes();
	const std::size_t fds = open_fds();

	Attempt a = open_hip();
	std::string probed;
	const std::string runtime = installed_runtime(&probed);
	if (runtime.empty()) {
		ASSERT_TRUE(a.error) << "HIP loaded, yet the probe found no runtime: " << probed;
		SVMBATCH_SKIP_ABSENT("hip", "the HIP runtime is not installed: " + probed);
	}
	if (a.backend)
		GTEST_SKIP() << "a HIP device is present (" << a.backend->device_name()
			     << "): HipRuntime.MapsScatteredBuffersOnADevice tests it";
	const Error &e = *a.error;
	/* It is installed: it must load, and fail only for want of a device,
	 * the same way twice, at no cost. */
	test::expect_no_device<HipBackend>(e, runtime, "no HIP runtime", fds, pinned);
	EXPECT_NE(std::string(e.what()).find("hipGetDeviceCount (libamdhip64.so."),
		  std::string::npos)
		<< e.what();
	EXPECT_NE(std::string(e.what()).find("hipError"), std::string::npos) << e.what();
	std::printf("# no device: %s\n", e.what());
	EXPECT_EQ(reg.buffers().size(), 1u);
	EXPECT_EQ(reg.ranges().size(), 1u);
}

TEST(HipRuntime, MapsScatteredBuffersOnADevice)
{
	Attempt a = open_hip();
	if (a.error) {
		std::string probed;
		if (installed_runtime(&probed).empty())
			SVMBATCH_SKIP_ABSENT("hip", "the HIP runtime is not installed: " + probed);
		if (!have_kfd())
			GTEST_SKIP()
				<< "no /dev/kfd: no AMD GPU here (HIP: " << a.error->what() << ")";
		FAIL() << "/dev/kfd exists, yet HIP opened no device: " << a.error->what();
	}
	HipBackend &hip = *a.backend;
	test::expect_maps_scattered_buffers(hip, true);
}

} // namespace
} // namespace svmbatch
