// SPDX-License-Identifier: MIT
// Compiled, never linked: holds the library's copies of Level Zero's
// constants and structure layouts (src/shim/libze.hpp) against the
// installed ze_api.h (Debian's libze-dev, 1.8.12), so that a mistake there
// breaks the build instead of a user's GPU mapping.  The zex host-pointer
// import is Intel's driver's, not in the loader's headers: its signatures
// follow compute-runtime's zex_driver.h.
#include <level_zero/ze_api.h>

#include <cstddef>

#include "shim/libze.hpp"

namespace ze = svmbatch::detail::ze;

static_assert(ZE_RESULT_SUCCESS == ze::success);
static_assert(ZE_RESULT_ERROR_DEVICE_LOST == ze::error_device_lost);
static_assert(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY == ze::error_out_of_host_memory);
static_assert(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY == ze::error_out_of_device_memory);
static_assert(ZE_RESULT_ERROR_UNINITIALIZED == ze::error_uninitialized);
static_assert(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE == ze::error_unsupported_feature);
static_assert(ZE_RESULT_ERROR_INVALID_ARGUMENT == ze::error_invalid_argument);
static_assert(ZE_RESULT_ERROR_INVALID_NULL_HANDLE == ze::error_invalid_null_handle);
static_assert(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE == ze::error_handle_object_in_use);
static_assert(ZE_RESULT_ERROR_INVALID_NULL_POINTER == ze::error_invalid_null_pointer);
static_assert(ZE_RESULT_ERROR_INVALID_SIZE == ze::error_invalid_size);
static_assert(ZE_RESULT_ERROR_UNSUPPORTED_SIZE == ze::error_unsupported_size);
static_assert(ZE_RESULT_ERROR_INVALID_ENUMERATION == ze::error_invalid_enumeration);
static_assert(ZE_RESULT_ERROR_OVERLAPPING_REGIONS == ze::error_overlapping_regions);
static_assert(ZE_RESULT_ERROR_UNKNOWN == ze::error_unknown);
static_assert(sizeof(ze_result_t) == sizeof(ze::Result));
// Every ze_result_t is a non-negative int: the shim's Result holds it.
static_assert(static_cast<long>(ZE_RESULT_ERROR_UNKNOWN) <= 0x7fffffffL);

static_assert(sizeof(ze_driver_handle_t) == sizeof(ze::Driver));
static_assert(sizeof(ze_device_handle_t) == sizeof(ze::Device));
static_assert(sizeof(ze_context_handle_t) == sizeof(ze::Context));

static_assert(ZE_INIT_FLAG_GPU_ONLY == ze::init_flag_gpu_only);
static_assert(ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES == ze::structure_type_device_properties);
static_assert(ZE_STRUCTURE_TYPE_CONTEXT_DESC == ze::structure_type_context_desc);
static_assert(ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC == ze::structure_type_device_mem_alloc_desc);
static_assert(ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES ==
	      ze::structure_type_memory_allocation_properties);
static_assert(ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMPORT_FD ==
	      ze::structure_type_external_memory_import_fd);
static_assert(ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF == ze::external_memory_type_flag_dma_buf);
static_assert(ZE_MEMORY_TYPE_UNKNOWN == ze::memory_type_unknown);
static_assert(ZE_MEMORY_TYPE_HOST == ze::memory_type_host);
static_assert(ZE_MEMORY_TYPE_DEVICE == ze::memory_type_device);
static_assert(ZE_MEMORY_TYPE_SHARED == ze::memory_type_shared);
static_assert(ZE_MAX_DEVICE_NAME == ze::max_device_name);

// The enum-typed fields are read through unsigned: the same size.
static_assert(sizeof(ze_structure_type_t) == sizeof(unsigned));
static_assert(sizeof(ze_memory_type_t) == sizeof(unsigned));
static_assert(sizeof(ze_device_type_t) == sizeof(unsigned));

// Field by field: the header's name, then ours.
template <typename Theirs, typename Ours> constexpr bool same_size = sizeof(Theirs) == sizeof(Ours);

static_assert(same_size<ze_device_properties_t, ze::DeviceProperties>);
static_assert(offsetof(ze_device_properties_t, stype) == offsetof(ze::DeviceProperties, stype));
static_assert(offsetof(ze_device_properties_t, pNext) == offsetof(ze::DeviceProperties, next));
static_assert(offsetof(ze_device_properties_t, type) == offsetof(ze::DeviceProperties, type));
static_assert(offsetof(ze_device_properties_t, maxMemAllocSize) ==
	      offsetof(ze::DeviceProperties, max_mem_alloc_size));
static_assert(offsetof(ze_device_properties_t, timerResolution) ==
	      offsetof(ze::DeviceProperties, timer_resolution));
static_assert(offsetof(ze_device_properties_t, uuid) == offsetof(ze::DeviceProperties, uuid));
static_assert(offsetof(ze_device_properties_t, name) == offsetof(ze::DeviceProperties, name));

static_assert(same_size<ze_context_desc_t, ze::ContextDesc>);
static_assert(offsetof(ze_context_desc_t, pNext) == offsetof(ze::ContextDesc, next));
static_assert(offsetof(ze_context_desc_t, flags) == offsetof(ze::ContextDesc, flags));

static_assert(same_size<ze_device_mem_alloc_desc_t, ze::DeviceMemAllocDesc>);
static_assert(offsetof(ze_device_mem_alloc_desc_t, pNext) ==
	      offsetof(ze::DeviceMemAllocDesc, next));
static_assert(offsetof(ze_device_mem_alloc_desc_t, flags) ==
	      offsetof(ze::DeviceMemAllocDesc, flags));
static_assert(offsetof(ze_device_mem_alloc_desc_t, ordinal) ==
	      offsetof(ze::DeviceMemAllocDesc, ordinal));

static_assert(same_size<ze_external_memory_import_fd_t, ze::ExternalMemoryImportFd>);
static_assert(offsetof(ze_external_memory_import_fd_t, pNext) ==
	      offsetof(ze::ExternalMemoryImportFd, next));
static_assert(offsetof(ze_external_memory_import_fd_t, flags) ==
	      offsetof(ze::ExternalMemoryImportFd, flags));
static_assert(offsetof(ze_external_memory_import_fd_t, fd) ==
	      offsetof(ze::ExternalMemoryImportFd, fd));

static_assert(same_size<ze_memory_allocation_properties_t, ze::MemoryAllocationProperties>);
static_assert(offsetof(ze_memory_allocation_properties_t, pNext) ==
	      offsetof(ze::MemoryAllocationProperties, next));
static_assert(offsetof(ze_memory_allocation_properties_t, type) ==
	      offsetof(ze::MemoryAllocationProperties, type));
static_assert(offsetof(ze_memory_allocation_properties_t, id) ==
	      offsetof(ze::MemoryAllocationProperties, id));
static_assert(offsetof(ze_memory_allocation_properties_t, pageSize) ==
	      offsetof(ze::MemoryAllocationProperties, page_size));
