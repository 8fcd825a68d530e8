// SPDX-License-Identifier: MIT
// CudaBackend: the host-register skeleton over the CUDA driver API.
#include <svmbatch/error.hpp>
#include <svmbatch/gpu/cuda_backend.hpp>
#include <svmbatch/registration.hpp>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/host_register_map.hpp"
#include "shim/libcuda.hpp"

namespace svmbatch {

using detail::cuda_errno;
using detail::CudaContext;
using detail::CudaCurrent;
using detail::LibCuda;
namespace cu = detail::cu;

namespace {

/// The driver's calls and codes for the skeleton, with the context current.
struct CudaRuntime {
	using Status = cu::Result;
	using Memory = CudaMemory;
	static constexpr detail::HostRuntimeNames names{"CUDA", "cuMemHostAlloc",
							"cuMemHostRegister",
							"cuMemHostGetDevicePointer"};
	static constexpr Status success = cu::success;
	static constexpr Status already_registered = cu::error_host_memory_already_registered;

	std::shared_ptr<const CudaContext> ctx;
	bool read_only = false; ///< the device takes READ_ONLY registrations

	const LibCuda &driver() const { return ctx->driver(); }
	CudaCurrent current() const { return CudaCurrent(*ctx); }

	Memory classify(const void *ptr) const
	{
		unsigned type = 0;
		auto addr = static_cast<cu::DevicePtr>(reinterpret_cast<std::uintptr_t>(ptr));
		cu::Result r = driver().pointer_get_attribute(&type,
							      cu::pointer_attribute_memory_type,
							      addr);

		if (r != cu::success)
			return CudaMemory::Unknown; // CUDA_ERROR_INVALID_VALUE: not CUDA's
		int managed = 0;
		if (driver().pointer_get_attribute(&managed, cu::pointer_attribute_is_managed,
						   addr) == cu::success &&
		    managed)
			return CudaMemory::Managed;
		return type == cu::memorytype_host ? CudaMemory::Host : CudaMemory::Device;
	}

	unsigned register_flags(Access access) const
	{
		unsigned flags = cu::host_register_portable | cu::host_register_devicemap;

		if (access == Access::ReadOnly && read_only)
			flags |= cu::host_register_read_only;
		return flags;
	}

	Status host_register(void *p, std::size_t len, unsigned flags) const
	{
		return driver().mem_host_register(p, len, flags);
	}

	void host_unregister(void *p) const { driver().mem_host_unregister(p); }

	Status device_pointer(std::uint64_t *dptr, void *p) const
	{
		cu::DevicePtr d = 0;
		Status r = driver().mem_host_get_device_pointer(&d, p, 0);

		*dptr = d;
		return r;
	}

	std::string error_name(Status r) const { return driver().error_name(r); }
	static int to_errno(Status r) { return cuda_errno(r); }

	/// CUDA takes read-only memory (READ_ONLY where the device can):
	/// nothing to refuse before registering.
	void refuse_before_register(const Registration & /*registration*/,
				    const std::vector<KernelRange> & /*spans*/,
				    const std::vector<Memory> & /*kind*/) const
	{}
};

} // namespace

CudaBackend::CudaBackend(const CudaOptions &options) : ordinal_(options.device)
{
	auto driver = std::make_shared<const LibCuda>(options.library);
	ctx_ = std::make_shared<const CudaContext>(driver, options.device);

	char name[256] = {};
	if (driver->device_get_name(name, sizeof(name) - 1, ctx_->device()) == cu::success)
		device_name_ = name;
	int value = 0;
	if (driver->device_get_attribute(&value, cu::device_attribute_can_map_host_memory,
					 ctx_->device()) == cu::success &&
	    !value)
		throw Error(ENODEV, Step::GpuOpen, device_name_ + " cannot map host memory");
	uva_ = driver->device_get_attribute(&value, cu::device_attribute_unified_addressing,
					    ctx_->device()) == cu::success &&
	       value;
	read_only_ =
		driver->device_get_attribute(&value,
					     cu::device_attribute_read_only_host_register_supported,
					     ctx_->device()) == cu::success &&
		value;
}

CudaBackend::~CudaBackend() = default;

CudaMemory CudaBackend::classify(const void *ptr) const
{
	return detail::classify_current(CudaRuntime{ctx_, read_only_}, ptr);
}

GpuMapping CudaBackend::map(const Registration &registration)
{
	return detail::map_host_memory(CudaRuntime{ctx_, read_only_}, name(), registration);
}

} // namespace svmbatch
