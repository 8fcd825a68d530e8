// SPDX-License-Identifier: MIT
// Loading libamdhip64, naming its errors, and its per-thread device.
#include "shim/libhip.hpp"

#include <cerrno>
#include <memory>

#include <svmbatch/error.hpp>

#include "shim/dynamic_library.hpp"

namespace svmbatch::detail {

namespace {

/// The newest runtime first: a program built with an older hipcc still
/// runs on a newer ROCm's library, and only these entry points are used.
constexpr const char *runtimes[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"};

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
	const char *name = get_error_name(e);

	return std::string(name ? name : "hipErrorUnknown") + " (" + std::to_string(e) + ")";
}

int hip_errno(hip::Error e)
{
	switch (e) {
	case hip::success:
		return 0;
	case hip::error_invalid_value:
		return EINVAL;
	case hip::error_out_of_memory:
		return ENOMEM;
	case hip::error_host_memory_already_registered:
		return EEXIST;
	case hip::error_host_memory_not_registered:
		return ENOENT;
	case hip::error_not_supported:
		return EOPNOTSUPP;
	case hip::error_no_device:
	case hip::error_invalid_device:
	case hip::error_insufficient_driver:
	case hip::error_not_initialized:
		return ENODEV;
	default:
		return EIO;
	}
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
