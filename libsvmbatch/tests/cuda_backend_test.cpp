// SPDX-License-Identifier: MIT
// CudaBackend against the FAKE CUDA driver (fake_cuda/: no GPU here): the
// tests it shares with HipBackend (host_register_backend_tests.hpp: the
// loader's failure paths, classification of memory CUDA already knows,
// range-by-range rollback), with CUDA's own checks of the context balance
// and the primary context the mapping holds.  The real driver is tested
// on the H100 by tools/device/cuda_tests.cu.  Runs in both modes.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include <svmbatch/all.hpp>

#include "fake_cuda/fake_cuda.h"
#include "host_register_backend_tests.hpp"

namespace svmbatch::test {
namespace {

/// The fake driver, as the shared tests ask for it.
struct CudaFake {
	using Backend = CudaBackend;
	using Memory = CudaMemory;
	static constexpr const char *label = "fake";
	static constexpr RuntimeWords words{"cuda",
					    "CUDA",
					    "svmbatch fake CUDA device",
					    "libsvmbatch-no-such-cuda.so.1",
					    "no CUDA driver",
					    "cuInit",
					    "cuMemHostRegister",
					    "CUDA_ERROR_NO_DEVICE (100)",
					    "CUDA_ERROR_OUT_OF_MEMORY (2)",
					    "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED (712)"};
	/// PORTABLE | DEVICEMAP | READ_ONLY: the fake device supports it.
	static constexpr unsigned read_only_register_flags = 0x01u | 0x02u | 0x08u;
	/// Portable, mapped to the device.
	static constexpr unsigned register_flags = 0x1u | 0x2u;
	static constexpr int no_device_status = 100, out_of_memory_status = 2,
			     already_registered_status = 712;

	static void reset(int devices) { fake_cuda_reset(devices); }
	static CudaOptions options(int device = 0) { return {fake_cuda_library, device}; }
	static void fail_register_after(int ok_calls, int result)
	{
		fake_cuda_fail_register_after(ok_calls, result);
	}
	static void add_host_alloc(void *p, std::size_t len) { fake_cuda_add_host_alloc(p, len); }
	static void add_managed(void *p, std::size_t len) { fake_cuda_add_managed(p, len); }
	static void add_device(void *p, std::size_t len) { fake_cuda_add_device(p, len); }
	/// One MEMORY_TYPE query per address classified.
	static int classify_calls() { return fake_cuda_memory_type_calls(); }
	static int registered() { return fake_cuda_registered(); }
	static int register_calls() { return fake_cuda_register_calls(); }
	static std::size_t largest_register() { return fake_cuda_largest_register(); }
	static unsigned last_register_flags() { return fake_cuda_last_register_flags(); }
	static int primary_retained() { return fake_cuda_primary_retained(); }
	/// Unified addressing: the device pointer is the host address.
	static const char *device_address(const void *host)
	{
		return static_cast<const char *>(host);
	}
	static void expect_opened(const CudaBackend &cuda)
	{
		EXPECT_TRUE(cuda.unified_addressing());
		EXPECT_TRUE(cuda.read_only_register_supported());
		EXPECT_EQ(fake_cuda_primary_retained(), 1);
	}
	static void expect_balanced()
	{
		EXPECT_EQ(fake_cuda_context_depth(), 0) << "a context was left current";
		EXPECT_EQ(fake_cuda_calls_without_context(), 0);
	}
};

} // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, HostRegisterBackend, CudaFake, FakeLabel);

} // namespace svmbatch::test
