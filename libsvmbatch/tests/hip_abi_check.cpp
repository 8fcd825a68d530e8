// SPDX-License-Identifier: MIT
// Compiled, never linked: holds the library's copies of HIP's constants
// and pointer-attribute layout (src/shim/libhip.hpp) against the installed
// hip_runtime_api.h (Debian's libamdhip64-dev, ROCm 5.2.3), so that a
// mistake there breaks the build instead of a user's GPU mapping.
#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>

#include <cstddef>

#include "shim/libhip.hpp"

namespace hip = svmbatch::detail::hip;

static_assert(hipSuccess == hip::success);
static_assert(hipErrorInvalidValue == hip::error_invalid_value);
static_assert(hipErrorOutOfMemory == hip::error_out_of_memory);
static_assert(hipErrorNotInitialized == hip::error_not_initialized);
static_assert(hipErrorInsufficientDriver == hip::error_insufficient_driver);
static_assert(hipErrorNoDevice == hip::error_no_device);
static_assert(hipErrorInvalidDevice == hip::error_invalid_device);
static_assert(hipErrorHostMemoryAlreadyRegistered == hip::error_host_memory_already_registered);
static_assert(hipErrorHostMemoryNotRegistered == hip::error_host_memory_not_registered);
static_assert(hipErrorNotSupported == hip::error_not_supported);
static_assert(sizeof(hipError_t) == sizeof(hip::Error));
static_assert(sizeof(hipDevice_t) == sizeof(hip::Device));

static_assert(hipHostRegisterPortable == hip::host_register_portable);
static_assert(hipHostRegisterMapped == hip::host_register_mapped);
static_assert(hipDeviceAttributeCanMapHostMemory == hip::device_attribute_can_map_host_memory);

static_assert(sizeof(hipPointerAttribute_t) == sizeof(hip::PointerAttributes));
static_assert(offsetof(hipPointerAttribute_t, device) == offsetof(hip::PointerAttributes, device));
static_assert(offsetof(hipPointerAttribute_t, devicePointer) ==
	      offsetof(hip::PointerAttributes, device_pointer));
static_assert(offsetof(hipPointerAttribute_t, hostPointer) ==
	      offsetof(hip::PointerAttributes, host_pointer));
static_assert(offsetof(hipPointerAttribute_t, isManaged) ==
	      offsetof(hip::PointerAttributes, is_managed));
static_assert(offsetof(hipPointerAttribute_t, allocationFlags) ==
	      offsetof(hip::PointerAttributes, allocation_flags));

// The memory types, decoded in the dialect of the header's version.
static_assert(hip::memory_type(hipMemoryTypeHost, HIP_VERSION) == hip::MemoryType::Host);
static_assert(hip::memory_type(hipMemoryTypeDevice, HIP_VERSION) == hip::MemoryType::Device);
static_assert(hip::memory_type(hipMemoryTypeArray, HIP_VERSION) == hip::MemoryType::Other);
#if HIP_VERSION_MAJOR >= 6
static_assert(hip::memory_type(hipMemoryTypeUnregistered, HIP_VERSION) ==
	      hip::MemoryType::Unregistered);
static_assert(hip::memory_type(hipMemoryTypeManaged, HIP_VERSION) == hip::MemoryType::Managed);
#endif
