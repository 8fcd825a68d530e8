// SPDX-License-Identifier: MIT
// Loading libamdhip64, naming its errors, and its per-thread device.
#include "shim/libhip.hpp"

#include <cerrno>
#include <memory>

#include <svmbatch/error.hpp>

#include "shim/dynamic_library.hpp"
#include "shim/runtime_status.hpp"

namespace svmbatch::detail {

namespace {

/// The newest runtime first: a program built with an older hipcc still
/// runs on a newer ROCm's library, and only these entry points are used.
constexpr const char *runtimes[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"};

/// The hipError_ts that an errno says better than EIO.
constexpr StatusErrno hip_errnos[] = {
	{hip::error_invalid_value, EINVAL},
	{hip::error_out_of_memory, ENOMEM},
	{hip::error_host_memory_already_registered, EEXIST},
	{hip::error_host_memory_not_registered, ENOENT},
	{hip::error_not_supported, EOPNOTSUPP},
	{hip::error_no_device, ENODEV},
	{hip::error_invalid_device, ENODEV},
	{hip::error_insufficient_driver, ENODEV},
	{hip::error_not_initialized, ENODEV},
};

std::unique_ptr<DynamicLibrary> load(const std::string &library, std::string &loaded)
{
	if (!library.empty()) {
		loaded = library;
		return std::make_unique<DynamicLibrary>(library, "HIP runtime");
	}
	std::string why;
	for (const char *name : runtimes) {
		try {
			auto lib = std::make_unique<DynamicLibrary>(name, "HIP runtime");
			loaded = name;
			return lib;
		} catch (const Error &e) {
			why += why.empty() ? "" : "; ";
			why += e.what();
		}
	}
	throw Error(ENODEV, Step::GpuOpen, why);
}

} // namespace

LibHip::LibHip(const std::string &name)
{
	std::unique_ptr<DynamicLibrary> lib = load(name, library);

	lib->resolve(Symbol(get_device_count, "hipGetDeviceCount"),
		     Symbol(runtime_get_version, "hipRuntimeGetVersion"),
		     Symbol(get_device, "hipGetDevice"), Symbol(set_device, "hipSetDevice"),
		     Symbol(device_get, "hipDeviceGet"),
		     Symbol(device_get_name, "hipDeviceGetName"),
		     Symbol(device_get_attribute, "hipDeviceGetAttribute"),
		     Symbol(host_register, "hipHostRegister"),
		     Symbol(host_unregister, "hipHostUnregister"),
		     Symbol(host_get_device_pointer, "hipHostGetDevicePointer"),
		     Symbol(pointer_get_attributes, "hipPointerGetAttributes"),
		     Symbol(get_error_name, "hipGetErrorName"));
}

std::string LibHip::error_name(hip::Error e) const
{
	return status_name(get_error_name(e), "hipErrorUnknown", e);
}

int hip_errno(hip::Error e)
{
	return status_errno(e, hip_errnos);
}

HipDeviceScope::HipDeviceScope(const LibHip &hip, int device) : hip_(hip)
{
	hip::Error r = hip_.get_device(&previous_);

	if (r == hip::success && previous_ != device)
		r = hip_.set_device(device);
	else
		previous_ = -1; // already current: nothing to restore
	if (r != hip::success)
		throw Error(hip_errno(r), Step::GpuMap,
			    "hipSetDevice(" + std::to_string(device) + "): " + hip_.error_name(r),
			    Error::no_index, r);
}

HipDeviceScope::~HipDeviceScope()
{
	if (previous_ >= 0)
		hip_.set_device(previous_);
}

} // namespace svmbatch::detail
