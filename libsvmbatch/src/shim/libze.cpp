// SPDX-License-Identifier: MIT
// Loading the Level Zero loader, its driver's host-pointer import, and
// the names and errnos of its results.
#include "shim/libze.hpp"

#include <cerrno>
#include <cstdio>
#include <iterator>
#include <memory>

#include "shim/dynamic_library.hpp"
#include "shim/runtime_status.hpp"

namespace svmbatch::detail {

namespace {

/// The ze_result_ts that an errno says better than EIO.
constexpr StatusErrno ze_errnos[] = {
	{ze::error_uninitialized, ENODEV},
	{ze::error_device_lost, ENODEV},
	{ze::error_out_of_host_memory, ENOMEM},
	{ze::error_out_of_device_memory, ENOMEM},
	{ze::error_unsupported_feature, EOPNOTSUPP},
	{ze::error_invalid_argument, EINVAL},
	{ze::error_invalid_null_handle, EINVAL},
	{ze::error_invalid_null_pointer, EINVAL},
	{ze::error_invalid_size, EINVAL},
	{ze::error_unsupported_size, E2BIG},
	{ze::error_invalid_enumeration, EINVAL},
	// What Intel's driver says when an import overlaps an earlier one.
	{ze::error_overlapping_regions, EEXIST},
	{ze::error_handle_object_in_use, EEXIST},
};

struct ResultName {
	ze::Result result;
	const char *name;
};

constexpr ResultName ze_names[] = {
	{ze::success, "ZE_RESULT_SUCCESS"},
	{ze::error_device_lost, "ZE_RESULT_ERROR_DEVICE_LOST"},
	{ze::error_out_of_host_memory, "ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY"},
	{ze::error_out_of_device_memory, "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY"},
	{ze::error_uninitialized, "ZE_RESULT_ERROR_UNINITIALIZED"},
	{ze::error_unsupported_feature, "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE"},
	{ze::error_invalid_argument, "ZE_RESULT_ERROR_INVALID_ARGUMENT"},
	{ze::error_invalid_null_handle, "ZE_RESULT_ERROR_INVALID_NULL_HANDLE"},
	{ze::error_handle_object_in_use, "ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE"},
	{ze::error_invalid_null_pointer, "ZE_RESULT_ERROR_INVALID_NULL_POINTER"},
	{ze::error_invalid_size, "ZE_RESULT_ERROR_INVALID_SIZE"},
	{ze::error_unsupported_size, "ZE_RESULT_ERROR_UNSUPPORTED_SIZE"},
	{ze::error_invalid_enumeration, "ZE_RESULT_ERROR_INVALID_ENUMERATION"},
	{ze::error_overlapping_regions, "ZE_RESULT_ERROR_OVERLAPPING_REGIONS"},
	{ze::error_unknown, "ZE_RESULT_ERROR_UNKNOWN"},
};

constexpr const char *loader = "libze_loader.so.1";

} // namespace

LibZe::LibZe(const std::string &name) : library(name.empty() ? loader : name)
{
	auto lib = std::make_unique<DynamicLibrary>(library, "Level Zero loader");

	lib->resolve(Symbol(init, "zeInit"), Symbol(driver_get, "zeDriverGet"),
		     Symbol(device_get, "zeDeviceGet"),
		     Symbol(device_get_properties, "zeDeviceGetProperties"),
		     Symbol(context_create, "zeContextCreate"),
		     Symbol(context_destroy, "zeContextDestroy"),
		     Symbol(mem_alloc_device, "zeMemAllocDevice"), Symbol(mem_free, "zeMemFree"),
		     Symbol(mem_get_alloc_properties, "zeMemGetAllocProperties"),
		     Symbol(driver_get_extension_function_address,
			    "zeDriverGetExtensionFunctionAddress"));
}

void ZexDriver::resolve(const LibZe &ze, ze::Driver driver)
{
	void *fn[3] = {};
	const char *names[] = {"zexDriverImportExternalPointer", "zexDriverReleaseImportedPointer",
			       "zexDriverGetHostPointerBaseAddress"};

	for (std::size_t i = 0; i < std::size(names); i++)
		if (ze.driver_get_extension_function_address(driver, names[i], &fn[i]) !=
		    ze::success)
			return;
	import_external_pointer = reinterpret_cast<decltype(import_external_pointer)>(fn[0]);
	release_imported_pointer = reinterpret_cast<decltype(release_imported_pointer)>(fn[1]);
	get_host_pointer_base_address =
		reinterpret_cast<decltype(get_host_pointer_base_address)>(fn[2]);
}

std::string ze_result_name(ze::Result r)
{
	const char *name = "ze_result_t"; // a code this table does not know
	char code[16];

	for (const ResultName &n : ze_names)
		if (n.result == r)
			name = n.name;
	std::snprintf(code, sizeof(code), "0x%x", static_cast<unsigned>(r));
	return std::string(name) + " (" + code + ")";
}

int ze_errno(ze::Result r)
{
	return status_errno(r, ze_errnos);
}

} // namespace svmbatch::detail
