// SPDX-License-Identifier: MIT
// HipBackend against the FAKE HIP runtime (fake_hip/: no AMD GPU here): the
// loader's failure paths, gating on hipGetDeviceCount, classification of
// memory HIP already knows in both of ROCm's pointer-attribute dialects,
// range-by-range rollback, read-only memory, the current device.  Debian's
// real runtime is tested by hip_runtime_test.cpp.  Runs in both modes.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "fake_hip/fake_hip.h"
#include "expect_error.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
constexpr int rocm5 = 50221153; // Debian 12's HIP 5.2.3
constexpr int rocm6 = 60443483;

HipOptions fake(int device = 0)
{
	return {test::fake_hip_library, device};
}

using test::expect_error;
using Pages = test::MappedPages;

char *device_address(const void *host)
{
	return reinterpret_cast<char *>(reinterpret_cast<std::uintptr_t>(host) +
					FAKE_HIP_DEVICE_OFFSET);
}

bool contains(const Error &e, const std::string &what)
{
	return std::string(e.what()).find(what) != std::string::npos;
}

TEST(HipBackendLoad, NoRuntimeLibraryIsENODEV)
{
	Error e = expect_error([] { HipBackend b({"libsvmbatch-no-such-hip.so.5", 0}); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_TRUE(contains(e, "no HIP runtime")) << e.what();
	EXPECT_TRUE(contains(e, "libsvmbatch-no-such-hip.so.5")) << e.what();
}

TEST(HipBackendLoad, ALibraryThatIsNotHipIsENODEV)
{
	Error e = expect_error([] { HipBackend b({"libc.so.6", 0}); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_TRUE(contains(e, "has no hipGetDeviceCount")) << e.what();
}

class FakeHip : public ::testing::TestWithParam<int> {
protected:
	void SetUp() override
	{
		fake_hip_reset(1, GetParam());
		ctx_.emplace(test::make_context());
	}
	void TearDown() override
	{
		EXPECT_EQ(fake_hip_current_device(), 0) << "the current device was not restored";
		EXPECT_EQ(fake_hip_calls_before_device_count(), 0)
			<< "HIP was called before hipGetDeviceCount";
	}
	std::optional<Context> ctx_;
};

INSTANTIATE_TEST_SUITE_P(Rocm, FakeHip, ::testing::Values(rocm5, rocm6), [](const auto &info) {
	return "v" + std::to_string(info.param / 10000000);
});

TEST_P(FakeHip, NoDeviceIsENODEVWithHipsStatusAndNothingElseCalled)
{
	fake_hip_reset(0, GetParam());
	Error e = expect_error([] { HipBackend b(fake()); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_EQ(e.driver_status(), 100);
	EXPECT_TRUE(contains(e, "hipErrorNoDevice (100)")) << e.what();
	EXPECT_EQ(fake_hip_calls_before_device_count(), 0);

	fake_hip_reset(1, GetParam());
	e = expect_error([] { HipBackend b(fake(3)); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_TRUE(contains(e, "no HIP device 3 (1 present)")) << e.what();
}

TEST_P(FakeHip, ADeviceThatCannotMapHostMemoryIsENODEV)
{
	fake_hip_set_can_map_host_memory(0);
	Error e = expect_error([] { HipBackend b(fake()); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_TRUE(contains(e, "cannot map host memory")) << e.what();
}

TEST_P(FakeHip, MapsEveryBufferOnceAndUnregistersOnDestruction)
{
	HipBackend hip(fake());
	EXPECT_STREQ(hip.name(), "hip");
	EXPECT_EQ(hip.device_name(), "svmbatch fake HIP device");
	EXPECT_EQ(hip.library(), test::fake_hip_library);
	EXPECT_EQ(hip.runtime_version(), GetParam());

	std::vector<std::vector<char>> scattered(50);
	std::vector<Buffer> bufs;
	for (std::size_t i = 0; i < scattered.size(); i++) {
		scattered[i].resize(1000 + 300 * i);
		bufs.push_back({scattered[i].data(), scattered[i].size()});
	}
	Pages touching(4); /* two buffers sharing a page: one range */
	bufs.push_back({touching.p, 2 * page + 10});
	bufs.push_back({touching.p + 2 * page + 10, page});
	Registration r = ctx_->register_buffers(bufs);
	GpuMapping m = hip.map(r);

	EXPECT_EQ(m.backend(), "hip");
	EXPECT_EQ(m.kind(), GpuAddressKind::DevicePointer);
	EXPECT_EQ(fake_hip_registered(), static_cast<int>(r.ranges().size()));
	EXPECT_EQ(fake_hip_last_register_flags(), 0x1u | 0x2u) << "Portable | Mapped";
	ASSERT_EQ(m.size(), bufs.size());
	for (std::size_t i = 0; i < bufs.size(); i++) /* each at its offset in its range */
		EXPECT_EQ(m.device_pointer<char>(i), device_address(bufs[i].ptr)) << "buffer " << i;
	EXPECT_EQ(hip.classify(bufs[3].ptr), HipMemory::Host);

	GpuMapping moved = std::move(m);
	EXPECT_EQ(fake_hip_registered(), static_cast<int>(r.ranges().size()));
	moved.reset();
	EXPECT_EQ(fake_hip_registered(), 0);
	EXPECT_EQ(hip.classify(bufs[3].ptr), HipMemory::Unknown);
}

TEST_P(FakeHip, RegistersTheBuffersBytesNotTheirWholePages)
{
	HipBackend hip(fake());
	Pages pages(3);
	char *first = pages.p + 100, *second = pages.p + page + 50;
	Buffer bufs[] = {{first, page - 200}, {second, 1000}}; /* touching pages: one range */
	Registration r = ctx_->register_buffers(bufs);
	ASSERT_EQ(r.ranges().size(), 1u);
	GpuMapping m = hip.map(r);

	EXPECT_EQ(m.device_pointer<char>(0), device_address(first));
	EXPECT_EQ(m.device_pointer<char>(1), device_address(second));
	EXPECT_EQ(hip.classify(first), HipMemory::Host);
	EXPECT_EQ(hip.classify(second + 999), HipMemory::Host);
	EXPECT_EQ(hip.classify(pages.p), HipMemory::Unknown) << "before the first buffer";
	EXPECT_EQ(hip.classify(second + 1000), HipMemory::Unknown) << "after the last one";
	Buffer neighbour{pages.p, 100}; /* the rest of the page is free for another */
	Registration other = ctx_->register_buffers({&neighbour, 1});
	GpuMapping m2 = hip.map(other);
	EXPECT_EQ(m2.device_pointer<char>(0), device_address(pages.p));
}

/* Six ranges, a page apart. */
struct SixRanges {
	explicit SixRanges(Context &ctx) : mem(18)
	{
		for (std::size_t i = 0; i < 6; i++)
			bufs.push_back({mem.p + 3 * i * page + 5, page});
		reg.emplace(ctx.register_buffers(bufs));
	}
	Pages mem;
	std::vector<Buffer> bufs;
	std::optional<Registration> reg;
};

TEST_P(FakeHip, RegisterFailingAtRangeKUnregistersRangesBeforeIt)
{
	HipBackend hip(fake());
	SixRanges six(*ctx_);
	const Registration &r = *six.reg;
	ASSERT_EQ(r.ranges().size(), 6u);

	for (int k = 0; k < 6; k++) {
		fake_hip_fail_register_after(k, 2); /* hipErrorOutOfMemory */
		Error e = expect_error([&] { (void)hip.map(r); });
		EXPECT_EQ(e.err(), ENOMEM) << "k=" << k;
		EXPECT_EQ(e.step(), Step::GpuMap);
		EXPECT_EQ(e.driver_status(), 2);
		EXPECT_TRUE(contains(e, "hipHostRegister of range " + std::to_string(k)))
			<< e.what();
		EXPECT_TRUE(contains(e, "hipErrorOutOfMemory (2)")) << e.what();
		ASSERT_NE(e.buffer_index(), Error::no_index);
		EXPECT_EQ(r.location(e.buffer_index()).range, static_cast<std::size_t>(k));
		EXPECT_EQ(fake_hip_registered(), 0) << "k=" << k << ": not rolled back";
		EXPECT_EQ(fake_hip_current_device(), 0);
	}
	GpuMapping m = hip.map(r); /* nothing stuck: it works now */
	EXPECT_EQ(fake_hip_registered(), 6);
}

TEST_P(FakeHip, DevicePointerFailingAtRangeKUnregistersRangesUpToIt)
{
	HipBackend hip(fake());
	SixRanges six(*ctx_);
	const Registration &r = *six.reg;

	for (int k = 0; k < 6; k++) {
		fake_hip_fail_device_pointer_after(k, 999); /* hipErrorUnknown */
		Error e = expect_error([&] { (void)hip.map(r); });
		EXPECT_EQ(e.err(), EIO) << "k=" << k;
		EXPECT_EQ(e.driver_status(), 999);
		EXPECT_TRUE(contains(e, "hipHostGetDevicePointer of range " + std::to_string(k)))
			<< e.what();
		EXPECT_TRUE(contains(e, "hipErrorUnknown (999)")) << e.what();
		EXPECT_EQ(e.buffer_index(), static_cast<std::size_t>(k));
		EXPECT_EQ(fake_hip_registered(), 0) << "k=" << k << ": range k stayed registered";
	}
}

TEST_P(FakeHip, HostMemoryHipAllocatedIsUsedNotRegisteredAgain)
{
	HipBackend hip(fake());
	Pages hip_host(3), plain(2);
	fake_hip_add_host_alloc(hip_host.p, hip_host.len);
	Buffer bufs[] = {{plain.p, 100}, {hip_host.p + 64, 2 * page}};
	Registration r = ctx_->register_buffers(bufs);

	EXPECT_EQ(hip.classify(hip_host.p + page), HipMemory::Host);
	{
		GpuMapping m = hip.map(r);
		EXPECT_EQ(fake_hip_registered(), 1) << "only the plain range is registered";
		EXPECT_EQ(m.device_pointer<char>(1), device_address(hip_host.p + 64));
	}
	EXPECT_EQ(fake_hip_registered(), 0);
	EXPECT_EQ(hip.classify(hip_host.p), HipMemory::Host) << "not ours to unregister";
}

TEST_P(FakeHip, HostMemoryWithoutADevicePointerRollsBack)
{
	HipBackend hip(fake());
	Pages plain(2), hip_host(2);
	fake_hip_add_host_alloc(hip_host.p, hip_host.len);
	Buffer bufs[] = {{plain.p, 100}, {hip_host.p, 100}};
	Registration r = ctx_->register_buffers(bufs);

	fake_hip_fail_device_pointer_after(1, 1); /* the plain range's, then this one */
	Error e = expect_error([&] { (void)hip.map(r); });
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_TRUE(contains(e, "of HIP host memory")) << e.what();
	EXPECT_EQ(fake_hip_registered(), 0);
}

TEST_P(FakeHip, ManagedMemoryIsItsOwnDevicePointer)
{
	HipBackend hip(fake());
	Pages managed(2);
	fake_hip_add_managed(managed.p, managed.len);
	Buffer bufs[] = {{managed.p + 8, 100}};
	Registration r = ctx_->register_buffers(bufs);
	GpuMapping m = hip.map(r);

	EXPECT_EQ(hip.classify(managed.p), HipMemory::Managed);
	EXPECT_EQ(fake_hip_registered(), 0);
	EXPECT_EQ(m.device_pointer<char>(0), managed.p + 8);
}

TEST_P(FakeHip, DeviceMemoryIsEINVALBeforeAnythingIsRegistered)
{
	HipBackend hip(fake());
	Pages plain(2), device(2);
	fake_hip_add_device(device.p, device.len);
	Buffer bufs[] = {{plain.p, 100}, {device.p, 100}};
	Registration r = ctx_->register_buffers(bufs);

	EXPECT_EQ(hip.classify(device.p), HipMemory::Device);
	Error e = expect_error([&] { (void)hip.map(r); });
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_TRUE(contains(e, "HIP device memory is not host memory")) << e.what();
	EXPECT_EQ(fake_hip_registered(), 0);
}

TEST_P(FakeHip, ARangeMixingHipHostAndPlainMemoryIsEEXIST)
{
	HipBackend hip(fake());
	Pages mem(6);
	fake_hip_add_host_alloc(mem.p + 2 * page, 2 * page);
	/* Touching buffers: one merged range, half of it HIP's. */
	Buffer bufs[] = {{mem.p, 10}, {mem.p + 2 * page, 2 * page}, {mem.p + 4 * page, page}};
	Registration r = ctx_->register_buffers(bufs);

	Error e = expect_error([&] { (void)hip.map(r); });
	EXPECT_EQ(e.err(), EEXIST);
	EXPECT_EQ(e.buffer_index(), 2u);
	EXPECT_TRUE(contains(e, "mixes HIP host memory")) << e.what();
	EXPECT_EQ(fake_hip_registered(), 0) << "refused before registering anything";
}

TEST_P(FakeHip, MemoryRegisteredInsideARangeFailsItAndRollsBack)
{
	HipBackend hip(fake());
	Pages mem(11);
	char *big = mem.p + 3 * page;
	/* HIP knows a page in the middle, where classification does not look. */
	fake_hip_add_host_alloc(big + 4 * page, page);
	Buffer bufs[] = {{mem.p, page}, {big, 8 * page}};
	Registration r = ctx_->register_buffers(bufs);

	Error e = expect_error([&] { (void)hip.map(r); });
	EXPECT_EQ(e.err(), EEXIST);
	EXPECT_EQ(e.driver_status(), 712);
	EXPECT_TRUE(contains(e, "hipErrorHostMemoryAlreadyRegistered (712)")) << e.what();
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_EQ(fake_hip_registered(), 0);
}

TEST_P(FakeHip, ReadOnlyBuffersInWritableMemoryRegisterWithoutAReadOnlyFlag)
{
	HipBackend hip(fake());
	Pages a(1);
	Buffer ro[] = {{a.p, page, Access::ReadOnly}};
	Registration r = ctx_->register_buffers(ro);
	GpuMapping m = hip.map(r);

	/* 0x08 is hipExtHostRegisterCoarseGrained on AMD: never passed. */
	EXPECT_EQ(fake_hip_last_register_flags(), 0x1u | 0x2u);
	EXPECT_EQ(fake_hip_registered(), 1);
}

TEST_P(FakeHip, ReadOnlyMemoryIsEACCESBeforeAnythingIsRegistered)
{
	HipBackend hip(fake());
	Pages writable(2), readonly(3);
	ASSERT_NE(readonly.p, nullptr);
	std::memset(readonly.p, 7, readonly.len);
	ASSERT_EQ(::mprotect(readonly.p, readonly.len, PROT_READ), 0);
	Buffer bufs[] = {{writable.p, 100},
			 {readonly.p, 10, Access::ReadOnly},
			 {readonly.p + page, page, Access::ReadOnly}};
	Registration r = ctx_->register_buffers(bufs);

	Error e = expect_error([&] { (void)hip.map(r); });
	EXPECT_EQ(e.err(), EACCES);
	EXPECT_EQ(e.step(), Step::GpuMap);
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_TRUE(contains(e, "read-only memory")) << e.what();
	EXPECT_EQ(fake_hip_registered(), 0);
}

TEST_P(FakeHip, TheDeviceIsMadeCurrentAndRestored)
{
	fake_hip_reset(2, GetParam());
	HipBackend hip(fake(1));
	Pages a(2);
	Buffer bufs[] = {{a.p, 100}};
	Registration r = ctx_->register_buffers(bufs);
	GpuMapping m = hip.map(r);

	EXPECT_EQ(fake_hip_last_register_device(), 1);
	EXPECT_EQ(fake_hip_current_device(), 0) << "the caller's device";
	m.reset();
	EXPECT_EQ(fake_hip_registered(), 0);
	EXPECT_EQ(fake_hip_current_device(), 0);
}

TEST_P(FakeHip, TheMappingOutlivesTheBackendAndTheRegistration)
{
	GpuMapping m;
	Pages a(2);
	{
		HipBackend hip(fake());
		Buffer bufs[] = {{a.p, a.len}};
		Registration r = ctx_->register_buffers(bufs);
		m = hip.map(r);
	}
	EXPECT_EQ(fake_hip_registered(), 1);
	m.reset();
	EXPECT_EQ(fake_hip_registered(), 0);
}

} // namespace
} // namespace svmbatch
