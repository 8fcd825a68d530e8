// SPDX-License-Identifier: MIT
// The few oneAPI Level Zero entry points ZeBackend uses, loaded with dlopen
// so that libsvmbatch builds and runs without the loader.  The types and
// constants mirror ze_api.h; tests/ze_abi_check.cpp static_asserts them
// against the real header where it is installed (libze-dev).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace svmbatch::detail {

namespace ze {
using Result = int; // ze_result_t: an enum whose codes all fit an int
using Driver = struct OpaqueDriver *; // ze_driver_handle_t
using Device = struct OpaqueDevice *; // ze_device_handle_t
using Context = struct OpaqueContext *; // ze_context_handle_t

constexpr Result success = 0;
constexpr Result error_device_lost = 0x70000001;
constexpr Result error_out_of_host_memory = 0x70000002;
constexpr Result error_out_of_device_memory = 0x70000003;
constexpr Result error_uninitialized = 0x78000001;
constexpr Result error_unsupported_feature = 0x78000003;
constexpr Result error_invalid_argument = 0x78000004;
constexpr Result error_invalid_null_handle = 0x78000005;
constexpr Result error_handle_object_in_use = 0x78000006;
constexpr Result error_invalid_null_pointer = 0x78000007;
constexpr Result error_invalid_size = 0x78000008;
constexpr Result error_unsupported_size = 0x78000009;
constexpr Result error_invalid_enumeration = 0x7800000c;
constexpr Result error_overlapping_regions = 0x7800001a;
constexpr Result error_unknown = 0x7ffffffe;

constexpr unsigned init_flag_gpu_only = 0x1;

constexpr unsigned structure_type_device_properties = 0x3;
constexpr unsigned structure_type_context_desc = 0xd;
constexpr unsigned structure_type_device_mem_alloc_desc = 0x15;
constexpr unsigned structure_type_memory_allocation_properties = 0x17;
constexpr unsigned structure_type_external_memory_import_fd = 0x19;

constexpr unsigned external_memory_type_flag_dma_buf = 0x2;

// ze_memory_type_t.
constexpr unsigned memory_type_unknown = 0;
constexpr unsigned memory_type_host = 1;
constexpr unsigned memory_type_device = 2;
constexpr unsigned memory_type_shared = 3;

constexpr std::size_t max_device_name = 256;

/// ze_device_properties_t (the 1.0 layout, which later versions extend
/// only through pNext).
struct DeviceProperties {
	unsigned stype;
	void *next;
	unsigned type;
	std::uint32_t vendor_id;
	std::uint32_t device_id;
	std::uint32_t flags;
	std::uint32_t subdevice_id;
	std::uint32_t core_clock_rate;
	std::uint64_t max_mem_alloc_size;
	std::uint32_t max_hardware_contexts;
	std::uint32_t max_command_queue_priority;
	std::uint32_t num_threads_per_eu;
	std::uint32_t physical_eu_simd_width;
	std::uint32_t num_eus_per_subslice;
	std::uint32_t num_subslices_per_slice;
	std::uint32_t num_slices;
	std::uint64_t timer_resolution;
	std::uint32_t timestamp_valid_bits;
	std::uint32_t kernel_timestamp_valid_bits;
	std::uint8_t uuid[16];
	char name[max_device_name];
};

/// ze_context_desc_t.
struct ContextDesc {
	unsigned stype;
	const void *next;
	std::uint32_t flags;
};

/// ze_device_mem_alloc_desc_t.
struct DeviceMemAllocDesc {
	unsigned stype;
	const void *next;
	std::uint32_t flags;
	std::uint32_t ordinal;
};

/// ze_external_memory_import_fd_t: chained to a DeviceMemAllocDesc, it
/// makes zeMemAllocDevice import the fd instead of allocating.
struct ExternalMemoryImportFd {
	unsigned stype;
	const void *next;
	std::uint32_t flags;
	int fd;
};

/// ze_memory_allocation_properties_t.
struct MemoryAllocationProperties {
	unsigned stype;
	void *next;
	unsigned type;
	std::uint64_t id;
	std::uint64_t page_size;
};
} // namespace ze

/// The Level Zero loader (libze_loader), loaded.  Never unloaded
/// (RTLD_NODELETE): the loader and its drivers keep process-wide state.
struct LibZe {
	/// library: a file name for dlopen ("" is libze_loader.so.1).
	explicit LibZe(const std::string &library);

	std::string library; ///< the one that loaded
	ze::Result (*init)(unsigned flags) = nullptr;
	ze::Result (*driver_get)(std::uint32_t *count, ze::Driver *drivers) = nullptr;
	ze::Result (*device_get)(ze::Driver driver, std::uint32_t *count,
				 ze::Device *devices) = nullptr;
	ze::Result (*device_get_properties)(ze::Device device,
					    ze::DeviceProperties *properties) = nullptr;
	ze::Result (*context_create)(ze::Driver driver, const ze::ContextDesc *desc,
				     ze::Context *context) = nullptr;
	ze::Result (*context_destroy)(ze::Context context) = nullptr;
	ze::Result (*mem_alloc_device)(ze::Context context, const ze::DeviceMemAllocDesc *desc,
				       std::size_t size, std::size_t alignment, ze::Device device,
				       void **ptr) = nullptr;
	ze::Result (*mem_free)(ze::Context context, void *ptr) = nullptr;
	ze::Result (*mem_get_alloc_properties)(ze::Context context, const void *ptr,
					       ze::MemoryAllocationProperties *properties,
					       ze::Device *device) = nullptr;
	ze::Result (*driver_get_extension_function_address)(ze::Driver driver, const char *name,
							    void **function) = nullptr;
};

/// The host-pointer import of Intel's driver (zex_driver.h): entry points
/// the driver, not the loader, gives through
/// zeDriverGetExtensionFunctionAddress; null where it has none.
struct ZexDriver {
	ze::Result (*import_external_pointer)(ze::Driver driver, void *ptr,
					      std::size_t size) = nullptr;
	ze::Result (*release_imported_pointer)(ze::Driver driver, void *ptr) = nullptr;
	ze::Result (*get_host_pointer_base_address)(ze::Driver driver, void *ptr,
						    void **base) = nullptr;

	/// Ask driver for the three; leaves them null if any is missing.
	void resolve(const LibZe &ze, ze::Driver driver);
	explicit operator bool() const noexcept
	{
		return import_external_pointer && release_imported_pointer &&
		       get_host_pointer_base_address;
	}
};

/// "ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)": Level Zero 1.8 has no
/// call that names its results, so the shim does.
std::string ze_result_name(ze::Result r);

/// The errno that best says what a ze_result_t means (EIO when nothing does).
int ze_errno(ze::Result r);

} // namespace svmbatch::detail
