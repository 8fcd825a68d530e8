// SPDX-License-Identifier: MIT
// The few HIP runtime entry points HipBackend uses, loaded with dlopen so
// that libsvmbatch builds and runs without ROCm.  The types and constants
// mirror hip_runtime_api.h; tests/hip_abi_check.cpp static_asserts them
// against the real header where it is installed (libamdhip64-dev).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace svmbatch::detail {

namespace hip {
using Error = int; // hipError_t
using Device = int; // hipDevice_t

constexpr Error success = 0;
constexpr Error error_invalid_value = 1;
constexpr Error error_out_of_memory = 2;
constexpr Error error_not_initialized = 3;
constexpr Error error_insufficient_driver = 35;
constexpr Error error_no_device = 100;
constexpr Error error_invalid_device = 101;
constexpr Error error_host_memory_already_registered = 712;
constexpr Error error_host_memory_not_registered = 713;
constexpr Error error_not_supported = 801;

// hipHostRegister's flags.  ROCm has no read-only registration: 0x08 is
// hipHostRegisterReadOnly only on NVIDIA; on AMD it is ignored (ROCm 6)
// and doubles as hipExtHostRegisterCoarseGrained, so it is never passed.
constexpr unsigned host_register_portable = 0x1;
constexpr unsigned host_register_mapped = 0x2;

constexpr int device_attribute_can_map_host_memory = 3;

/// hipPointerAttribute_t: the layout is the same in ROCm 5 and 6 (the
/// first field was renamed memoryType -> type); the values of the memory
/// type are not (see memory_type()).
struct PointerAttributes {
	int type;
	int device;
	void *device_pointer;
	void *host_pointer;
	int is_managed;
	unsigned allocation_flags;
};

/// hipRuntimeGetVersion's number: major * 10000000 + minor * 100000 + patch.
constexpr int version_major(int version) noexcept
{
	return version / 10000000;
}

/// hipMemoryType, decoded: ROCm 5 numbers it Host 0, Device 1, Array 2,
/// Unified 3; ROCm 6 (CUDA's numbering) Unregistered 0, Host 1, Device 2,
/// Managed 3, Array 10, Unified 11.
enum class MemoryType { Unregistered, Host, Device, Managed, Other };
constexpr MemoryType memory_type(int type, int runtime_version) noexcept
{
	if (version_major(runtime_version) >= 6)
		return type == 0 ? MemoryType::Unregistered :
		       type == 1 ? MemoryType::Host :
		       type == 2 ? MemoryType::Device :
		       type == 3 ? MemoryType::Managed :
				   MemoryType::Other;
	return type == 0 ? MemoryType::Host : type == 1 ? MemoryType::Device : MemoryType::Other;
}
} // namespace hip

/// libamdhip64, loaded.  Never unloaded (RTLD_NODELETE): the runtime keeps
/// process-wide state (its HSA runtime, threads) that outlives any object
/// of ours.
struct LibHip {
	/// library: a file name for dlopen, or "" for the newest of
	/// libamdhip64.so.7, .so.6 and .so.5 that loads.
	explicit LibHip(const std::string &library);

	std::string library; ///< the one that loaded
	int runtime_version = 0; ///< hipRuntimeGetVersion
	hip::Error (*get_device_count)(int *count) = nullptr;
	hip::Error (*runtime_get_version)(int *version) = nullptr;
	hip::Error (*get_device)(int *device) = nullptr;
	hip::Error (*set_device)(int device) = nullptr;
	hip::Error (*device_get)(hip::Device *device, int ordinal) = nullptr;
	hip::Error (*device_get_name)(char *name, int len, hip::Device device) = nullptr;
	hip::Error (*device_get_attribute)(int *value, int attribute, int device) = nullptr;
	hip::Error (*host_register)(void *p, std::size_t bytes, unsigned flags) = nullptr;
	hip::Error (*host_unregister)(void *p) = nullptr;
	hip::Error (*host_get_device_pointer)(void **dptr, void *p, unsigned flags) = nullptr;
	hip::Error (*pointer_get_attributes)(hip::PointerAttributes *attr, const void *p) = nullptr;
	const char *(*get_error_name)(hip::Error error) = nullptr;

	/// "hipErrorNoDevice (100)".
	std::string error_name(hip::Error e) const;
};

/// The errno that best says what a hipError_t means (EIO when nothing does).
int hip_errno(hip::Error e);

/// Makes a device the calling thread's current HIP device for a scope,
/// then restores the one that was (HIP's current device is per thread).
class HipDeviceScope {
public:
	HipDeviceScope(const LibHip &hip, int device);
	HipDeviceScope(const HipDeviceScope &) = delete;
	HipDeviceScope &operator=(const HipDeviceScope &) = delete;
	HipDeviceScope(HipDeviceScope &&) = delete;
	HipDeviceScope &operator=(HipDeviceScope &&) = delete;
	~HipDeviceScope();

private:
	const LibHip &hip_;
	int previous_ = -1;
};

} // namespace svmbatch::detail
