// SPDX-License-Identifier: MIT
// Compiled (never run) on the GPU machine: the constants and entry-point
// names that libsvmbatch's CUDA loader (src/shim/libcuda.hpp) copies from
// cuda.h must match the real header.
#include <cuda.h>

#include "shim/libcuda.hpp"

namespace cu = svmbatch::detail::cu;

static_assert(sizeof(CUdeviceptr) == sizeof(cu::DevicePtr));
static_assert(sizeof(CUresult) == sizeof(cu::Result));
static_assert(sizeof(CUdevice) == sizeof(cu::Device));
static_assert(CUDA_SUCCESS == cu::success);
static_assert(CUDA_ERROR_INVALID_VALUE == cu::error_invalid_value);
static_assert(CUDA_ERROR_OUT_OF_MEMORY == cu::error_out_of_memory);
static_assert(CUDA_ERROR_NOT_INITIALIZED == cu::error_not_initialized);
static_assert(CUDA_ERROR_STUB_LIBRARY == cu::error_stub_library);
static_assert(CUDA_ERROR_NO_DEVICE == cu::error_no_device);
static_assert(CUDA_ERROR_INVALID_DEVICE == cu::error_invalid_device);
static_assert(CUDA_ERROR_OPERATING_SYSTEM == cu::error_operating_system);
static_assert(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED ==
	      cu::error_host_memory_already_registered);
static_assert(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED == cu::error_host_memory_not_registered);
static_assert(CUDA_ERROR_NOT_PERMITTED == cu::error_not_permitted);
static_assert(CUDA_ERROR_NOT_SUPPORTED == cu::error_not_supported);
static_assert(CUDA_ERROR_NOT_READY == cu::error_not_ready);
static_assert(CU_STREAM_NON_BLOCKING == cu::stream_non_blocking);
static_assert(CU_EVENT_DISABLE_TIMING == cu::event_disable_timing);
static_assert(sizeof(CUstream) == sizeof(cu::Stream));
static_assert(sizeof(CUevent) == sizeof(cu::Event));
static_assert(CU_MEMHOSTREGISTER_PORTABLE == cu::host_register_portable);
static_assert(CU_MEMHOSTREGISTER_DEVICEMAP == cu::host_register_devicemap);
static_assert(CU_MEMHOSTREGISTER_READ_ONLY == cu::host_register_read_only);
static_assert(CU_POINTER_ATTRIBUTE_MEMORY_TYPE == cu::pointer_attribute_memory_type);
static_assert(CU_POINTER_ATTRIBUTE_IS_MANAGED == cu::pointer_attribute_is_managed);
static_assert(CU_MEMORYTYPE_HOST == cu::memorytype_host);
static_assert(CU_MEMORYTYPE_DEVICE == cu::memorytype_device);
static_assert(CU_MEMORYTYPE_ARRAY == cu::memorytype_array);
static_assert(CU_MEMORYTYPE_UNIFIED == cu::memorytype_unified);
static_assert(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY == cu::device_attribute_can_map_host_memory);
static_assert(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING == cu::device_attribute_unified_addressing);
static_assert(CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM ==
	      cu::device_attribute_can_use_host_pointer_for_registered_mem);
static_assert(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED ==
	      cu::device_attribute_read_only_host_register_supported);

// The versioned symbols the loader asks dlsym for first.
[[maybe_unused]] static const void *const versioned[] = {
	reinterpret_cast<const void *>(&cuMemHostRegister_v2),
	reinterpret_cast<const void *>(&cuMemHostGetDevicePointer_v2),
	reinterpret_cast<const void *>(&cuDevicePrimaryCtxRelease_v2),
	reinterpret_cast<const void *>(&cuCtxPushCurrent_v2),
	reinterpret_cast<const void *>(&cuCtxPopCurrent_v2),
	reinterpret_cast<const void *>(&cuInit),
	reinterpret_cast<const void *>(&cuDeviceGetCount),
	reinterpret_cast<const void *>(&cuDeviceGet),
	reinterpret_cast<const void *>(&cuDeviceGetName),
	reinterpret_cast<const void *>(&cuDeviceGetAttribute),
	reinterpret_cast<const void *>(&cuDevicePrimaryCtxRetain),
	reinterpret_cast<const void *>(&cuMemHostUnregister),
	reinterpret_cast<const void *>(&cuPointerGetAttribute),
	reinterpret_cast<const void *>(&cuGetErrorName),
};
