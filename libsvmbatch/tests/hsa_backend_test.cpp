// SPDX-License-Identifier: MIT
// HsaBackend.  No AMD GPU exists on any machine here: the no-device path
// runs against Debian's real libhsa-runtime64 (no /dev/kfd), the mapping
// logic against the FAKE HSA runtime (fake_hsa/), and HsaHardware only
// where /dev/kfd exists.  Documentation/amd.rst lists what is unverified.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include <hsa.h>
#include <hsa_ext_amd.h>

#include "expect_error.hpp"
#include "fake_hsa/fake_hsa.h"
#include "shim/libhsa.hpp"
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

HsaOptions fake(bool prefer_dmabuf = true, std::vector<std::size_t> gpus = {})
{
	return {test::fake_hsa_library, prefer_dmabuf, std::move(gpus)};
}

HsaOptions library(const std::string &path)
{
	HsaOptions o;
	o.library = path;
	return o;
}

bool contains(const Error &e, const std::string &text)
{
	return std::string(e.what()).find(text) != std::string::npos;
}

TEST(HsaBackendOpen, NoRuntimeLibraryIsENODEVNamingIt)
{
	Error e = expect_error([] { HsaBackend b(library("libsvmbatch-no-such-hsa.so.1")); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_EQ(e.driver_status(), 0);
	/* dlerror() names the file it could not open */
	EXPECT_TRUE(contains(e, "libsvmbatch-no-such-hsa.so.1")) << e.what();
	EXPECT_TRUE(contains(e, "no HSA runtime")) << e.what();
}

TEST(HsaBackendOpen, ALibraryThatIsNotHsaIsENODEV)
{
	Error e = expect_error([] { HsaBackend b(library("libc.so.6")); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_TRUE(contains(e, "has no hsa_init")) << e.what();
}

/* Debian's real runtime: without /dev/kfd its hsa_init fails (ROCR's
 * Runtime::Acquire reports any failed load as OUT_OF_RESOURCES). */
TEST(HsaBackendOpen, TheRealRuntimeWithoutKfdIsENODEVWithItsStatus)
{
	if (have_kfd())
		GTEST_SKIP() << "/dev/kfd exists: HsaHardware covers this machine";
	std::string probed;
	const std::string file = test::find_library("libhsa-runtime64.so.1", &probed);
	if (file.empty())
		SVMBATCH_SKIP_ABSENT("hsa",
				     "libhsa-runtime64.so.1 is not installed: not in " + probed);
	/* It is installed: a load failure is a failure, not an absence. */
	void *lib = ::dlopen("libhsa-runtime64.so.1", RTLD_NOW | RTLD_LOCAL);
	ASSERT_NE(lib, nullptr) << file << " is installed but does not load: "
				<< ::dlerror(); // NOLINT(concurrency-mt-unsafe)
	::dlclose(lib);

	Error e = expect_error([] { HsaBackend b; });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_NE(e.driver_status(), HSA_STATUS_SUCCESS) << e.what();
	EXPECT_TRUE(contains(e, "hsa_init: HSA_STATUS_ERROR")) << e.what();
	/* a second try fails the same way: the failed hsa_init left no state */
	Error again = expect_error([] { HsaBackend b; });
	EXPECT_EQ(again.driver_status(), e.driver_status());
}

TEST(HsaErrno, TheTable)
{
	using detail::hsa_errno;
	EXPECT_EQ(hsa_errno(HSA_STATUS_SUCCESS), 0);
	EXPECT_EQ(hsa_errno(HSA_STATUS_ERROR_OUT_OF_RESOURCES), ENOMEM);
	EXPECT_EQ(hsa_errno(HSA_STATUS_ERROR_INVALID_ARGUMENT), EINVAL);
	EXPECT_EQ(hsa_errno(static_cast<hsa_status_t>(HSA_STATUS_ERROR_INVALID_MEMORY_POOL)),
		  EINVAL);
	EXPECT_EQ(hsa_errno(HSA_STATUS_ERROR_INVALID_ALLOCATION), EFAULT);
	EXPECT_EQ(hsa_errno(HSA_STATUS_ERROR_INVALID_AGENT), ENODEV);
	EXPECT_EQ(hsa_errno(HSA_STATUS_ERROR_NOT_INITIALIZED), ENODEV);
	EXPECT_EQ(hsa_errno(HSA_STATUS_ERROR), EIO);
	EXPECT_EQ(hsa_errno(HSA_STATUS_ERROR_EXCEPTION), EIO);
}

class HsaFake : public ::testing::Test {
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

TEST_F(HsaFake, InitFailureIsENODEVWithTheStatus)
{
	fake_hsa_reset(1, HSA_STATUS_ERROR_OUT_OF_RESOURCES);
	Error e = expect_error([] { HsaBackend b(fake()); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_EQ(e.driver_status(), HSA_STATUS_ERROR_OUT_OF_RESOURCES);
	EXPECT_TRUE(contains(e, "hsa_init: HSA_STATUS_ERROR_OUT_OF_RESOURCES")) << e.what();
}

TEST_F(HsaFake, NoGpuAgentIsENODEVAndShutsDown)
{
	fake_hsa_reset(0, 0);
	Error e = expect_error([] { HsaBackend b(fake()); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_TRUE(contains(e, "no GPU agent")) << e.what();
	/* TearDown: hsa_init was balanced although the constructor threw */
}

TEST_F(HsaFake, ChoosesTheGpuAgents)
{
	fake_hsa_reset(3, 0);
	std::vector<char> a(page);
	Buffer bufs[] = {{a.data(), a.size()}};
	Registration r = ctx_->register_buffers(bufs);
	{
		HsaBackend all(fake(false));
		EXPECT_EQ(all.gpu_agents(),
			  (std::vector<std::string>{"gfx-fake0", "gfx-fake1", "gfx-fake2"}));
		GpuMapping m = all.map(r);
		EXPECT_EQ(fake_hsa_lock_agents(), 3);
		EXPECT_EQ(fake_hsa_last_agent_mask(), 7u);
	}
	{
		HsaBackend some(fake(false, {2, 0}));
		EXPECT_EQ(some.gpu_agents(), (std::vector<std::string>{"gfx-fake2", "gfx-fake0"}));
		GpuMapping m = some.map(r);
		EXPECT_EQ(fake_hsa_lock_agents(), 2);
		EXPECT_EQ(fake_hsa_last_agent_mask(), 5u);
	}
	Error e = expect_error([] { HsaBackend b(fake(false, {3})); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_TRUE(contains(e, "no GPU agent 3 (the HSA runtime has 3)")) << e.what();
	e = expect_error([] { HsaBackend b(fake(false, {1, 1})); });
	EXPECT_EQ(e.err(), EINVAL);
}

/* The pool: a CPU agent's global pool, fine-grained before the kernarg
 * pool before coarse-grained, whatever order the runtime lists them in. */
TEST_F(HsaFake, LocksIntoTheCpuAgentsFineGrainedGlobalPool)
{
	constexpr unsigned fine = HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
	constexpr unsigned kernarg = fine | HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT;
	constexpr unsigned coarse = HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED;
	constexpr int global = HSA_AMD_SEGMENT_GLOBAL, group = HSA_AMD_SEGMENT_GROUP;
	std::vector<char> a(page);
	Buffer bufs[] = {{a.data(), a.size()}};
	Registration r = ctx_->register_buffers(bufs);
	auto locked_into = [&](std::vector<int> seg, std::vector<unsigned> flags) {
		fake_hsa_set_pools(seg.data(), flags.data(), static_cast<int>(seg.size()));
		HsaBackend hsa(fake(false));
		GpuMapping m = hsa.map(r);
		return fake_hsa_last_pool_flags();
	};

	EXPECT_EQ(locked_into({global, global, global}, {fine, kernarg, coarse}), fine);
	EXPECT_EQ(locked_into({global, global, global}, {kernarg, coarse, fine}), fine);
	EXPECT_EQ(locked_into({global, global}, {coarse, kernarg}), kernarg);
	EXPECT_EQ(locked_into({group, global}, {fine, coarse}), coarse);

	/* no global pool: the backend opens, map() says why it cannot lock */
	int seg[] = {group};
	unsigned flags[] = {fine};
	fake_hsa_set_pools(seg, flags, 1);
	HsaBackend hsa(fake(false));
	Error e = expect_error([&] { (void)hsa.map(r); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuMap);
	EXPECT_TRUE(contains(e, "no CPU agent has a global memory pool")) << e.what();
}

TEST_F(HsaFake, LocksEveryRangeForEveryGpuAndUnlocksOnDestruction)
{
	std::vector<char> a(3 * page), b(100);
	std::vector<Buffer> bufs{{a.data() + 5, 2 * page}, {b.data(), b.size()}};
	Registration r = ctx_->register_buffers(bufs);
	HsaBackend hsa(fake(false));
	EXPECT_STREQ(hsa.name(), "hsa");
	GpuMapping m = hsa.map(r);
	EXPECT_EQ(m.backend(), "hsa");
	EXPECT_EQ(m.kind(), GpuAddressKind::DevicePointer);
	EXPECT_EQ(hsa.last_path(), "lock");
	EXPECT_EQ(fake_hsa_locked(), static_cast<int>(r.ranges().size()));
	EXPECT_EQ(fake_hsa_lock_agents(), 2);
	ASSERT_EQ(m.size(), bufs.size());
	for (std::size_t i = 0; i < bufs.size(); i++) /* the fake's agent pointers */
		EXPECT_EQ(m.device_pointer<void>(i), bufs[i].ptr);
	m.reset();
	EXPECT_EQ(fake_hsa_locked(), 0);
}

TEST_F(HsaFake, RangeKFailingUnlocksRangesBeforeIt)
{
	test::MappedPages mem(15);
	ASSERT_NE(mem.p, nullptr);
	std::vector<Buffer> bufs;
	for (std::size_t i = 0; i < 5; i++) /* a page apart: 5 ranges */
		bufs.push_back({mem.p + 3 * i * page, 2 * page});
	Registration r = ctx_->register_buffers(bufs);
	HsaBackend hsa(fake(false));
	ASSERT_EQ(r.ranges().size(), 5u);
	for (int k : {0, 2, 4}) {
		fake_hsa_fail_lock_after(k, HSA_STATUS_ERROR_OUT_OF_RESOURCES);
		Error e = expect_error([&] { (void)hsa.map(r); });
		EXPECT_EQ(e.err(), ENOMEM);
		EXPECT_EQ(e.step(), Step::GpuMap);
		EXPECT_EQ(e.driver_status(), HSA_STATUS_ERROR_OUT_OF_RESOURCES);
		EXPECT_EQ(e.buffer_index(), static_cast<std::size_t>(k));
		EXPECT_TRUE(contains(e, "range " + std::to_string(k) + " (")) << e.what();
		EXPECT_TRUE(contains(e, "from caller buffer " + std::to_string(k))) << e.what();
		EXPECT_TRUE(contains(e, "HSA_STATUS_ERROR_OUT_OF_RESOURCES")) << e.what();
		EXPECT_EQ(fake_hsa_locked(), 0) << "k=" << k << ": not rolled back";
	}
	fake_hsa_fail_lock_after(1, HSA_STATUS_ERROR_INVALID_ARGUMENT);
	EXPECT_EQ(expect_error([&] { (void)hsa.map(r); }).err(), EINVAL);
	fake_hsa_fail_lock_after(3, HSA_STATUS_ERROR);
	EXPECT_EQ(expect_error([&] { (void)hsa.map(r); }).err(), EIO);
	EXPECT_EQ(fake_hsa_locked(), 0);

	GpuMapping m = hsa.map(r);
	EXPECT_EQ(fake_hsa_locked(), 5);
}

/* Range k's buffer index is the first caller buffer in it, in the
 * caller's order, not the range order. */
TEST_F(HsaFake, TheFailingRangeNamesItsFirstCallerBuffer)
{
	test::MappedPages mem(6);
	ASSERT_NE(mem.p, nullptr);
	std::vector<Buffer> bufs{{mem.p + 4 * page, 100}, /* range 1 */
				 {mem.p, 100}, /* range 0 */
				 {mem.p + 4 * page + 200, 100}}; /* range 1 */
	Registration r = ctx_->register_buffers(bufs);
	ASSERT_EQ(r.ranges().size(), 2u);
	HsaBackend hsa(fake(false));
	fake_hsa_fail_lock_after(1, HSA_STATUS_ERROR_OUT_OF_RESOURCES);
	Error e = expect_error([&] { (void)hsa.map(r); });
	EXPECT_EQ(e.buffer_index(), 0u);
	EXPECT_TRUE(contains(e, "range 1 (")) << e.what();
	EXPECT_EQ(fake_hsa_locked(), 0);
}

/* The mapping keeps the runtime initialized (and loaded) after the backend
 * is gone; hsa_shut_down comes with the last of them. */
TEST_F(HsaFake, AMappingOutlivesItsBackend)
{
	std::vector<char> a(page);
	Buffer bufs[] = {{a.data(), a.size()}};
	Registration r = ctx_->register_buffers(bufs);
	GpuMapping m;
	{
		HsaBackend hsa(fake(false));
		m = hsa.map(r);
	}
	EXPECT_EQ(fake_hsa_init_balance(), 1);
	EXPECT_EQ(fake_hsa_locked(), 1);
	m.reset();
	EXPECT_EQ(fake_hsa_locked(), 0);
	EXPECT_EQ(fake_hsa_init_balance(), 0);
}

TEST_F(HsaFake, UserspaceModeLocksEvenWhenDmabufIsPreferred)
{
	if (ctx_->mode() != Mode::Userspace)
		GTEST_SKIP() << "the userspace-mode case (the host run)";
	fake_hsa_accept_interop(1);
	std::vector<char> a(page);
	Buffer bufs[] = {{a.data(), a.size()}};
	Registration r = ctx_->register_buffers(bufs);
	HsaBackend hsa(fake(true));
	GpuMapping m = hsa.map(r);
	EXPECT_EQ(hsa.last_path(), "lock");
	EXPECT_EQ(fake_hsa_interop_mapped(), 0);
}

/* Kernel mode (the guests): the dma-buf path, bytes read through it. */
TEST_F(HsaFake, KernelModeMapsTheDmabufAndFallsBackToLocking)
{
	if (ctx_->mode() != Mode::Kernel)
		GTEST_SKIP() << "needs the module (kernel mode runs in the guests)";
	std::vector<char> a(3 * page, 'a'), b(5000, 'b');
	std::vector<Buffer> bufs{{b.data(), b.size()}, {a.data() + 7, 2 * page}};
	Registration r = ctx_->register_buffers(bufs);
	HsaBackend hsa(fake(true, {1}));

	fake_hsa_accept_interop(1);
	{
		GpuMapping m = hsa.map(r);
		EXPECT_EQ(hsa.last_path(), "dmabuf");
		EXPECT_EQ(fake_hsa_interop_mapped(), 1);
		EXPECT_EQ(fake_hsa_last_agent_mask(), 2u);
		EXPECT_EQ(fake_hsa_locked(), 0);
		for (std::size_t i = 0; i < bufs.size(); i++)
			EXPECT_EQ(std::memcmp(m.device_pointer<char>(i), bufs[i].ptr, bufs[i].len),
				  0)
				<< "buffer " << i;
	}
	EXPECT_EQ(fake_hsa_interop_mapped(), 0);

	fake_hsa_accept_interop(0); /* what KFD does with a foreign dma-buf */
	GpuMapping m = hsa.map(r);
	EXPECT_EQ(hsa.last_path(), "lock");
	EXPECT_EQ(fake_hsa_locked(), static_cast<int>(r.ranges().size()));
	m.reset();

	fake_hsa_fail_lock_after(0, HSA_STATUS_ERROR_OUT_OF_RESOURCES);
	Error e = expect_error([&] { (void)hsa.map(r); });
	EXPECT_TRUE(contains(e, "the dma-buf interop was refused first: HSA_STATUS_ERROR"))
		<< e.what();
}

/* Only on a machine with the AMD kernel driver (none here). */
TEST(HsaHardware, LocksScatteredBuffersForEveryGpu)
{
	if (!have_kfd())
		GTEST_SKIP() << "no /dev/kfd: no AMD GPU with the amdkfd driver here";
	Context ctx = test::make_context();
	test::MappedPages mem(8);
	ASSERT_NE(mem.p, nullptr);
	std::memset(mem.p, 0x5a, mem.len);
	std::vector<Buffer> bufs{{mem.p + 5 * page + 3, 1000},
				 {mem.p, 2 * page},
				 {mem.p + 5 * page + 2000, 64}};
	Registration r = ctx.register_buffers(bufs);
	HsaBackend hsa;
	ASSERT_FALSE(hsa.gpu_agents().empty());
	{
		GpuMapping m = hsa.map(r);
		ASSERT_EQ(m.size(), bufs.size());
		for (std::size_t i = 0; i < bufs.size(); i++)
			EXPECT_NE(m.address(i), 0u) << i;
		/* buffers 0 and 2 share a range: their agent pointers do too */
		EXPECT_EQ(m.address(2) - m.address(0), 2000u - 3u);
		RecordProperty("path", hsa.last_path());
	}
	GpuMapping again = hsa.map(r); /* everything was unlocked/unmapped */
	EXPECT_EQ(again.size(), bufs.size());
}

} // namespace
} // namespace svmbatch
