// SPDX-License-Identifier: MIT
// HsaBackend and AmdgpuBackend.  No AMD GPU exists on any machine here:
// the no-device paths run against the real libraries (Debian's
// libhsa-runtime64 without /dev/kfd, libdrm_amdgpu without an amdgpu
// node), and the mapping logic against the FAKE HSA runtime
// (fake_hsa/).  Documentation/amd.rst lists what is unverified.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include <svmbatch/svmbatch.hpp>

#include <hsa.h>

#include "fake_hsa/fake_hsa.h"
#include "expect_error.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

using test::expect_error;

bool have_kfd()
{
	std::error_code ec;
	return std::filesystem::exists("/dev/kfd", ec);
}

HsaOptions fake(bool prefer_dmabuf = true)
{
	return {SVMBATCH_FAKE_HSA_PATH, prefer_dmabuf};
}

TEST(HsaBackendOpen, NoRuntimeLibraryIsENODEV)
{
	Error e = expect_error([] { HsaBackend b({"libsvmbatch-no-such-hsa.so.1", true}); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_NE(std::string(e.what()).find("libsvmbatch-no-such-hsa.so.1"), std::string::npos);
}

TEST(HsaBackendOpen, ALibraryThatIsNotHsaIsENODEV)
{
	Error e = expect_error([] { HsaBackend b({"libc.so.6", true}); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_NE(std::string(e.what()).find("has no hsa_init"), std::string::npos) << e.what();
}

/* Debian's real runtime: on a machine without /dev/kfd hsa_init fails. */
TEST(HsaBackendOpen, TheRealRuntimeWithoutKfdIsENODEVWithItsStatus)
{
	if (have_kfd())
		GTEST_SKIP() << "/dev/kfd exists: this machine has the AMD kernel driver";
	Error e = expect_error([] { HsaBackend b; });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	if (std::string(e.what()).find("no HSA runtime") != std::string::npos)
		return;	// libhsa-runtime64 not installed: the dlopen path, said so
	EXPECT_NE(e.driver_status(), 0) << e.what();
	EXPECT_NE(std::string(e.what()).find("hsa_init"), std::string::npos) << e.what();
}

class FakeHsa : public ::testing::Test {
protected:
	void SetUp() override
	{
		fake_hsa_reset(2, 0);
		ctx_.emplace(test::make_context());
	}
	void TearDown() override
	{
		EXPECT_EQ(fake_hsa_locked(), 0);
		EXPECT_EQ(fake_hsa_interop_mapped(), 0);
		EXPECT_EQ(fake_hsa_init_balance(), 0) << "hsa_init not balanced by hsa_shut_down";
	}
	std::optional<Context> ctx_;
};

TEST_F(FakeHsa, InitFailureAndNoGpuAreENODEVAndShutDown)
{
	fake_hsa_reset(1, HSA_STATUS_ERROR_OUT_OF_RESOURCES);
	Error e = expect_error([] { HsaBackend b(fake()); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.driver_status(), HSA_STATUS_ERROR_OUT_OF_RESOURCES);
	EXPECT_NE(std::string(e.what()).find("HSA_STATUS_ERROR_OUT_OF_RESOURCES"), std::string::npos);

	fake_hsa_reset(0, 0);
	e = expect_error([] { HsaBackend b(fake()); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_NE(std::string(e.what()).find("no GPU agent"), std::string::npos);
}

TEST_F(FakeHsa, LocksEveryRangeForEveryGpuAndUnlocksOnDestruction)
{
	std::vector<char> a(3 * page), b(100);
	std::vector<Buffer> bufs{{a.data() + 5, 2 * page}, {b.data(), b.size()}};
	Registration r = ctx_->register_buffers(bufs);
	{
		HsaBackend hsa(fake(false));
		EXPECT_STREQ(hsa.name(), "hsa");
		EXPECT_EQ(hsa.gpu_agents(), (std::vector<std::string>{"gfx-fake", "gfx-fake"}));
		GpuMapping m = r.map(hsa);
		EXPECT_EQ(hsa.last_path(), "lock");
		EXPECT_EQ(fake_hsa_locked(), static_cast<int>(r.ranges().size()));
		EXPECT_EQ(fake_hsa_lock_agents(), 2);
		for (std::size_t i = 0; i < bufs.size(); i++)	/* the fake's agent pointers */
			EXPECT_EQ(m.device_pointer<void>(i), bufs[i].ptr);
		m.reset();
		EXPECT_EQ(fake_hsa_locked(), 0);
	}
}

TEST_F(FakeHsa, RangeKFailingUnlocksRangesBeforeIt)
{
	void *mem = ::mmap(nullptr, 15 * page, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(mem, MAP_FAILED);
	auto *p = static_cast<char *>(mem);
	std::vector<Buffer> bufs;
	for (std::size_t i = 0; i < 5; i++)	/* a page apart: 5 ranges */
		bufs.push_back({p + 3 * i * page, 2 * page});
	{
		Registration r = ctx_->register_buffers(bufs);
		HsaBackend hsa(fake(false));
		ASSERT_EQ(r.ranges().size(), 5u);
		for (int k : {0, 2, 4}) {
			fake_hsa_fail_lock_after(k, HSA_STATUS_ERROR_OUT_OF_RESOURCES);
			Error e = expect_error([&] { (void)r.map(hsa); });
			EXPECT_EQ(e.err(), ENOMEM);
			EXPECT_EQ(e.step(), Step::GpuMap);
			EXPECT_EQ(e.driver_status(), HSA_STATUS_ERROR_OUT_OF_RESOURCES);
			EXPECT_EQ(e.buffer_index(), static_cast<std::size_t>(k));
			EXPECT_NE(std::string(e.what()).find("range " + std::to_string(k)),
				  std::string::npos) << e.what();
			EXPECT_EQ(fake_hsa_locked(), 0) << "k=" << k << ": not rolled back";
		}
		GpuMapping m = r.map(hsa);
		EXPECT_EQ(fake_hsa_locked(), 5);
	}
	::munmap(mem, 15 * page);
}

TEST_F(FakeHsa, UserspaceModeLocksEvenWhenDmabufIsPreferred)
{
	if (ctx_->mode() != Mode::Userspace)
		GTEST_SKIP() << "the userspace-mode case (the host run)";
	fake_hsa_accept_interop(1);
	std::vector<char> a(page);
	Buffer bufs[] = {{a.data(), a.size()}};
	Registration r = ctx_->register_buffers(bufs);
	HsaBackend hsa(fake(true));
	GpuMapping m = r.map(hsa);
	EXPECT_EQ(hsa.last_path(), "lock");
	EXPECT_EQ(fake_hsa_interop_mapped(), 0);
}

/* Kernel mode (the guests): the dma-buf path, bytes read through it. */
TEST_F(FakeHsa, KernelModeMapsTheDmabufAndFallsBackToLocking)
{
	if (ctx_->mode() != Mode::Kernel)
		GTEST_SKIP() << "needs the module (kernel mode runs in the guests)";
	std::vector<char> a(3 * page, 'a'), b(5000, 'b');
	std::vector<Buffer> bufs{{b.data(), b.size()}, {a.data() + 7, 2 * page}};
	Registration r = ctx_->register_buffers(bufs);
	HsaBackend hsa(fake(true));

	fake_hsa_accept_interop(1);
	{
		GpuMapping m = r.map(hsa);
		EXPECT_EQ(hsa.last_path(), "dmabuf");
		EXPECT_EQ(fake_hsa_interop_mapped(), 1);
		EXPECT_EQ(fake_hsa_locked(), 0);
		for (std::size_t i = 0; i < bufs.size(); i++)
			EXPECT_EQ(std::memcmp(m.device_pointer<char>(i), bufs[i].ptr, bufs[i].len), 0)
				<< "buffer " << i;
	}
	EXPECT_EQ(fake_hsa_interop_mapped(), 0);

	fake_hsa_accept_interop(0);	/* a runtime that refuses foreign dma-bufs */
	GpuMapping m = r.map(hsa);
	EXPECT_EQ(hsa.last_path(), "lock");
	EXPECT_EQ(fake_hsa_locked(), static_cast<int>(r.ranges().size()));
}

TEST(AmdgpuBackendOpen, NoAmdgpuNodeIsENODEV)
{
	if (std::filesystem::exists("/sys/module/amdgpu"))
		GTEST_SKIP() << "the amdgpu driver is loaded on this machine";
	Error e = expect_error([] { AmdgpuBackend b; });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_NE(std::string(e.what()).find("no amdgpu"), std::string::npos) << e.what();
}

TEST(AmdgpuBackendOpen, NodesThatAreNotAmdgpu)
{
	Error e = expect_error([] { AmdgpuBackend b("/dev/dri/renderD999"); });
	EXPECT_EQ(e.err(), ENOENT);
	e = expect_error([] { AmdgpuBackend b("/dev/null"); });
	EXPECT_EQ(e.err(), ENODEV);
	/* In the guests: vgem is a DRM device, but not amdgpu. */
	std::error_code ec;
	for (const auto &n : std::filesystem::directory_iterator("/dev/dri", ec)) {
		e = expect_error([&] { AmdgpuBackend b(n.path()); });
		EXPECT_EQ(e.err(), ENODEV) << n.path();
		EXPECT_NE(std::string(e.what()).find("not amdgpu"), std::string::npos) << e.what();
	}
}

} // namespace
} // namespace svmbatch
