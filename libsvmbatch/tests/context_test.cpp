// SPDX-License-Identifier: MIT
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include <svmbatch/all.hpp>

#include "test_util.hpp"

namespace svmbatch {
namespace {

constexpr const char *missing = "/nonexistent/svmbatch";

/* Sets SVMBATCH_MODE for one test and restores it. */
class ScopedModeEnv {
public:
	explicit ScopedModeEnv(const char *value)
	{
		const char *old = std::getenv("SVMBATCH_MODE");

		had_ = old != nullptr;
		if (had_)
			old_ = old;
		::setenv("SVMBATCH_MODE", value, 1);
	}
	~ScopedModeEnv()
	{
		if (had_)
			::setenv("SVMBATCH_MODE", old_.c_str(), 1);
		else
			::unsetenv("SVMBATCH_MODE");
	}
	ScopedModeEnv(const ScopedModeEnv &) = delete;
	ScopedModeEnv &operator=(const ScopedModeEnv &) = delete;
	ScopedModeEnv(ScopedModeEnv &&) = delete;
	ScopedModeEnv &operator=(ScopedModeEnv &&) = delete;

private:
	bool had_ = false;
	std::string old_;
};

TEST(Context, UserspaceModeReportsTheModulesDefaultLimits)
{
	Context ctx(Mode::Userspace, missing);

	EXPECT_EQ(ctx.mode(), Mode::Userspace);
	EXPECT_EQ(ctx.info().abi_version, 0u);
	EXPECT_EQ(ctx.info().page_size, static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)));
	EXPECT_EQ(ctx.info().max_ranges, 16384u);
	EXPECT_EQ(ctx.info().max_range_bytes, std::uint64_t{64} << 30);
	EXPECT_NE(ctx.info().reason.find("requested"), std::string::npos);
}

TEST(Context, KernelModeWithoutTheDeviceFailsClearly)
{
	try {
		Context ctx(Mode::Kernel, missing);
		FAIL() << "kernel mode without a device";
	} catch (const Error &e) {
		EXPECT_EQ(e.err(), ENOENT);
		EXPECT_EQ(e.step(), Step::Open);
		EXPECT_EQ(e.buffer_index(), Error::no_index);
		EXPECT_NE(std::string(e.what()).find(missing), std::string::npos);
		EXPECT_NE(std::string(e.what()).find("svmbatch.ko"), std::string::npos);
	}
}

TEST(Context, AutoFallsBackToUserspaceAndSaysWhy)
{
	Context ctx(Mode::Auto, missing);

	EXPECT_EQ(ctx.mode(), Mode::Userspace);
	EXPECT_NE(ctx.info().reason.find(missing), std::string::npos);
}

TEST(Context, AutoPicksTheKernelWhenTheDeviceOpens)
{
	if (!test::kernel_available())
		GTEST_SKIP() << "no /dev/svmbatch (module not loaded)";
	Context ctx(Mode::Auto);

	EXPECT_EQ(ctx.mode(), Mode::Kernel);
	EXPECT_EQ(ctx.info().abi_version, 1u);
	EXPECT_GT(ctx.info().max_ranges, 0u);
}

TEST(Context, EnvironmentReplacesAuto)
{
	{
		ScopedModeEnv env("userspace");
		EXPECT_EQ(Context(Mode::Auto, missing).mode(), Mode::Userspace);
		EXPECT_NE(Context(Mode::Auto, missing).info().reason.find("SVMBATCH_MODE"),
			  std::string::npos);
	}
	{
		ScopedModeEnv env("kernel");
		EXPECT_THROW(Context(Mode::Auto, missing), Error);
		/* An explicit mode wins over the environment. */
		EXPECT_EQ(Context(Mode::Userspace, missing).mode(), Mode::Userspace);
	}
	{
		ScopedModeEnv env("bogus");
		try {
			Context ctx(Mode::Auto, missing);
			FAIL() << "SVMBATCH_MODE=bogus accepted";
		} catch (const Error &e) {
			EXPECT_EQ(e.err(), EINVAL);
		}
	}
}

TEST(Context, MovesKeepTheMode)
{
	Context a(Mode::Userspace, missing);
	Context b(std::move(a));
	Context c(Mode::Auto, missing);

	c = std::move(b);
	EXPECT_EQ(c.mode(), Mode::Userspace);
	EXPECT_STREQ(mode_name(Mode::Kernel), "kernel");
	EXPECT_STREQ(step_name(Step::IoUringRegister), "io_uring-register");
	EXPECT_STREQ(step_name(Step::IoUringSubmit), "io_uring-submit");
	EXPECT_STREQ(step_name(Step::RdmaOpen), "rdma-open");
	EXPECT_STREQ(step_name(Step::RdmaRegister), "rdma-register");
	EXPECT_STREQ(step_name(Step::Arena), "arena");
}

/* built_backends() and svmbatch/config.h say the same. */
TEST(Build, BuiltBackendsAreTheConfiguredOnes)
{
	std::string listed;

	for (const std::string &b : built_backends())
		listed += (listed.empty() ? "" : " ") + b;
	EXPECT_EQ(listed, SVMBATCH_BACKENDS);
	EXPECT_EQ(built_backends().size(),
		  std::size_t{SVMBATCH_HAS_CUDA + SVMBATCH_HAS_HIP + SVMBATCH_HAS_HSA +
			      SVMBATCH_HAS_AMDGPU + SVMBATCH_HAS_DRM + SVMBATCH_HAS_ZE});
}

} // namespace
} // namespace svmbatch
