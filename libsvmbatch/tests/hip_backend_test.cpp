// SPDX-License-Identifier: MIT
// HipBackend against the FAKE HIP runtime (fake_hip/: no AMD GPU here), in
// both of ROCm's pointer-attribute dialects: the tests it shares with
// CudaBackend (host_register_backend_tests.hpp: the loader's failure
// paths, classification, range-by-range rollback), then HIP's own: gating
// on hipGetDeviceCount, device pointers failing, device memory, read-only
// memory, the current device.  Debian's real runtime is tested by
// hip_runtime_test.cpp.  Runs in both modes.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "fake_hip/fake_hip.h"
#include "host_register_backend_tests.hpp"

namespace svmbatch::test {
namespace {

/// The fake runtime, as the shared tests ask for it, reporting version
/// (hipRuntimeGetVersion's number) and speaking that ROCm's dialect.
template <int version> struct HipFake {
	using Backend = HipBackend;
	using Memory = HipMemory;
	static constexpr const char *label = version / 10000000 == 5 ? "v5" : "v6";
	static constexpr RuntimeWords words{"hip",
					    "HIP",
					    "svmbatch fake HIP device",
					    "libsvmbatch-no-such-hip.so.5",
					    "no HIP runtime",
					    "hipGetDeviceCount",
					    "hipHostRegister",
					    "hipErrorNoDevice (100)",
					    "hipErrorOutOfMemory (2)",
					    "hipErrorHostMemoryAlreadyRegistered (712)"};
	/// Portable | Mapped: 0x08 is hipExtHostRegisterCoarseGrained on AMD,
	/// never passed.
	static constexpr unsigned read_only_register_flags = 0x1u | 0x2u;
	/// Portable, mapped to the device.
	static constexpr unsigned register_flags = 0x1u | 0x2u;
	static constexpr int no_device_status = 100, out_of_memory_status = 2,
			     already_registered_status = 712;

	static void reset(int devices) { fake_hip_reset(devices, version); }
	static HipOptions options(int device = 0) { return {fake_hip_library, device}; }
	static void fail_register_after(int ok_calls, int result)
	{
		fake_hip_fail_register_after(ok_calls, result);
	}
	static void add_host_alloc(void *p, std::size_t len) { fake_hip_add_host_alloc(p, len); }
	static void add_managed(void *p, std::size_t len) { fake_hip_add_managed(p, len); }
	static void add_device(void *p, std::size_t len) { fake_hip_add_device(p, len); }
	static int classify_calls() { return fake_hip_pointer_attribute_calls(); }
	static int registered() { return fake_hip_registered(); }
	static int register_calls() { return fake_hip_register_calls(); }
	static std::size_t largest_register() { return fake_hip_largest_register(); }
	static unsigned last_register_flags() { return fake_hip_last_register_flags(); }
	/// Not the host address, so that an identity mapping would show.
	static const char *device_address(const void *host)
	{
		return reinterpret_cast<const char *>(reinterpret_cast<std::uintptr_t>(host) +
						      FAKE_HIP_DEVICE_OFFSET);
	}
	static void expect_opened(const HipBackend &hip)
	{
		EXPECT_EQ(hip.library(), fake_hip_library);
		EXPECT_EQ(hip.runtime_version(), version);
	}
	static void expect_balanced()
	{
		EXPECT_EQ(fake_hip_current_device(), 0) << "the current device was not restored";
		EXPECT_EQ(fake_hip_calls_before_device_count(), 0)
			<< "HIP was called before hipGetDeviceCount";
	}
};

constexpr int rocm5 = 50221153; // Debian 12's HIP 5.2.3
constexpr int rocm6 = 60443483;
using HipFakes = ::testing::Types<HipFake<rocm5>, HipFake<rocm6>>;

} // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(Hip, HostRegisterBackend, HipFakes, FakeLabel);

namespace {

template <typename F> class FakeHip : public FakeRuntimeTest<F> {};
TYPED_TEST_SUITE(FakeHip, HipFakes, FakeLabel);

TYPED_TEST(FakeHip, ADeviceThatCannotMapHostMemoryIsENODEV)
{
	fake_hip_set_can_map_host_memory(0);
	Error e = expect_error([] { HipBackend b(TypeParam::options()); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_TRUE(contains(e, "cannot map host memory")) << e.what();
}

TYPED_TEST(FakeHip, DevicePointerFailingAtRangeKUnregistersRangesUpToIt)
{
	HipBackend hip(TypeParam::options());
	SixRanges six(*this->ctx_);
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

TYPED_TEST(FakeHip, HostMemoryWithoutADevicePointerRollsBack)
{
	HipBackend hip(TypeParam::options());
	MappedPages plain(2), hip_host(2);
	fake_hip_add_host_alloc(hip_host.p, hip_host.len);
	Buffer bufs[] = {{plain.p, 100}, {hip_host.p, 100}};
	Registration r = this->ctx_->register_buffers(bufs);

	fake_hip_fail_device_pointer_after(1, 1); /* the plain range's, then this one */
	Error e = expect_error([&] { (void)hip.map(r); });
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_TRUE(contains(e, "of HIP host memory")) << e.what();
	EXPECT_EQ(fake_hip_registered(), 0);
}

TYPED_TEST(FakeHip, DeviceMemoryIsEINVALBeforeAnythingIsRegistered)
{
	HipBackend hip(TypeParam::options());
	MappedPages plain(2), device(2);
	fake_hip_add_device(device.p, device.len);
	Buffer bufs[] = {{plain.p, 100}, {device.p, 100}};
	Registration r = this->ctx_->register_buffers(bufs);

	EXPECT_EQ(hip.classify(device.p), HipMemory::Device);
	Error e = expect_error([&] { (void)hip.map(r); });
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_TRUE(contains(e, "HIP device memory is not host memory")) << e.what();
	EXPECT_EQ(fake_hip_registered(), 0);
}

TYPED_TEST(FakeHip, ReadOnlyMemoryIsEACCESBeforeAnythingIsRegistered)
{
	HipBackend hip(TypeParam::options());
	MappedPages writable(2), readonly(3);
	ASSERT_NE(readonly.p, nullptr);
	std::memset(readonly.p, 7, readonly.len);
	ASSERT_EQ(::mprotect(readonly.p, readonly.len, PROT_READ), 0);
	Buffer bufs[] = {{writable.p, 100},
			 {readonly.p, 10, Access::ReadOnly},
			 {readonly.p + page, page, Access::ReadOnly}};
	Registration r = this->ctx_->register_buffers(bufs);

	Error e = expect_error([&] { (void)hip.map(r); });
	EXPECT_EQ(e.err(), EACCES);
	EXPECT_EQ(e.step(), Step::GpuMap);
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_TRUE(contains(e, "read-only memory")) << e.what();
	EXPECT_EQ(fake_hip_registered(), 0);
}

TYPED_TEST(FakeHip, TheDeviceIsMadeCurrentAndRestored)
{
	TypeParam::reset(2);
	HipBackend hip(TypeParam::options(1));
	MappedPages a(2);
	Buffer bufs[] = {{a.p, 100}};
	Registration r = this->ctx_->register_buffers(bufs);
	GpuMapping m = hip.map(r);

	EXPECT_EQ(fake_hip_last_register_device(), 1);
	EXPECT_EQ(fake_hip_current_device(), 0) << "the caller's device";
	m.reset();
	EXPECT_EQ(fake_hip_registered(), 0);
	EXPECT_EQ(fake_hip_current_device(), 0);
}

} // namespace
} // namespace svmbatch::test
