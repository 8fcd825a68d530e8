// SPDX-License-Identifier: MIT
// HipBackend: the host-register skeleton over the HIP runtime, which
// first gates every call on a device and refuses unwritable memory.
#include <svmbatch/error.hpp>
#include <svmbatch/gpu/hip_backend.hpp>
#include <svmbatch/registration.hpp>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/vma_check.hpp"
#include "gpu/host_register_map.hpp"
#include "shim/libhip.hpp"

namespace svmbatch {

using detail::hip_errno;
using detail::HipDeviceScope;
using detail::LibHip;
namespace hip = detail::hip;

namespace {

/// ROCm pins registered memory for writing (KFD's userptr BOs are never
/// read-only), so a read-only range in a mapping without write permission
/// would fail in the driver: refuse it first, naming the buffer.
void refuse_unwritable(const Registration &registration, const std::vector<KernelRange> &spans,
		       const std::vector<HipMemory> &kind)
{
	std::vector<KernelRange> probe;
	std::vector<std::size_t> which;

	for (std::size_t r = 0; r < spans.size(); r++) {
		if (kind[r] != HipMemory::Unknown || spans[r].access != Access::ReadOnly)
			continue;
		probe.push_back(spans[r]);
		probe.back().access = Access::ReadWrite; // as KFD asks for it
		which.push_back(r);
	}
	if (probe.empty())
		return;
	detail::VmaFault f = detail::check_vmas(probe);
	if (f.err != EFAULT)
		return;
	std::size_t r = which[f.range];
	std::size_t blame = registration.first_buffer(r);
	auto buffers = registration.buffers();
	for (std::size_t i = blame; i < buffers.size(); i++) {
		auto start = reinterpret_cast<std::uintptr_t>(buffers[i].ptr);
		if (start <= f.addr && f.addr < start + buffers[i].len) {
			blame = i;
			break;
		}
	}
	throw Error(EACCES, Step::GpuMap,
		    "range " + std::to_string(r) +
			    " is read-only memory: ROCm registers host memory only writable "
			    "(hipHostRegister has no read-only flag on AMD)",
		    blame);
}

/// The runtime's calls and codes for the skeleton, with the device current.
struct HipRuntime {
	using Status = hip::Error;
	using Memory = HipMemory;
	static constexpr detail::HostRuntimeNames names{"HIP", "hipHostMalloc", "hipHostRegister",
							"hipHostGetDevicePointer"};
	static constexpr Status success = hip::success;
	static constexpr Status already_registered = hip::error_host_memory_already_registered;

	std::shared_ptr<const LibHip> hip;
	int device = 0;

	HipDeviceScope current() const { return {*hip, device}; }

	Memory classify(const void *ptr) const
	{
		hip::PointerAttributes attr{};

		// ROCm 5 fails for memory it does not know (hipErrorInvalidValue);
		// ROCm 6 succeeds and says Unregistered.
		if (hip->pointer_get_attributes(&attr, ptr) != hip::success)
			return HipMemory::Unknown;
		if (attr.is_managed)
			return HipMemory::Managed;
		switch (hip::memory_type(attr.type, hip->runtime_version)) {
		case hip::MemoryType::Unregistered:
			return HipMemory::Unknown;
		case hip::MemoryType::Host:
			return HipMemory::Host;
		case hip::MemoryType::Managed:
			return HipMemory::Managed;
		default:
			return HipMemory::Device;
		}
	}

	unsigned register_flags(Access /*access*/) const
	{
		return hip::host_register_portable | hip::host_register_mapped;
	}

	Status host_register(void *p, std::size_t len, unsigned flags) const
	{
		return hip->host_register(p, len, flags);
	}

	void host_unregister(void *p) const { hip->host_unregister(p); }

	Status device_pointer(std::uint64_t *dptr, void *p) const
	{
		void *d = nullptr;
		Status r = hip->host_get_device_pointer(&d, p, 0);

		*dptr = reinterpret_cast<std::uintptr_t>(d);
		return r;
	}

	std::string error_name(Status r) const { return hip->error_name(r); }
	static int to_errno(Status r) { return hip_errno(r); }

	void refuse_before_register(const Registration &registration,
				    const std::vector<KernelRange> &spans,
				    const std::vector<Memory> &kind) const
	{
		refuse_unwritable(registration, spans, kind);
	}
};

/// The runtime, asked first how many devices there are: without one
/// nothing else is called.
std::shared_ptr<const LibHip> open_runtime(const HipOptions &options)
{
	auto h = std::make_shared<LibHip>(options.library);
	int count = 0;
	hip::Error r = h->get_device_count(&count);

	if (r != hip::success || count == 0)
		throw Error(ENODEV, Step::GpuOpen,
			    "hipGetDeviceCount (" + h->library + "): " +
				    (r == hip::success ? std::string("0 devices") :
							 h->error_name(r)),
			    Error::no_index, r == hip::success ? hip::error_no_device : r);
	if (options.device < 0 || options.device >= count)
		throw Error(ENODEV, Step::GpuOpen,
			    "no HIP device " + std::to_string(options.device) + " (" +
				    std::to_string(count) + " present)");
	r = h->runtime_get_version(&h->runtime_version);
	if (r != hip::success)
		throw Error(hip_errno(r), Step::GpuOpen,
			    "hipRuntimeGetVersion: " + h->error_name(r), Error::no_index, r);
	return h;
}

} // namespace

HipBackend::HipBackend(const HipOptions &options)
	: hip_(open_runtime(options)), device_(options.device)
{
	const LibHip &h = *hip_;
	hip::Device dev = 0;
	hip::Error r = h.device_get(&dev, device_);

	if (r != hip::success)
		throw Error(hip_errno(r) == EIO ? ENODEV : hip_errno(r), Step::GpuOpen,
			    "hipDeviceGet(" + std::to_string(device_) + "): " + h.error_name(r),
			    Error::no_index, r);
	char name[256] = {};
	if (h.device_get_name(name, sizeof(name) - 1, dev) == hip::success)
		device_name_ = name;
	int can_map = 0;
	r = h.device_get_attribute(&can_map, hip::device_attribute_can_map_host_memory, device_);
	if (r == hip::success && !can_map)
		throw Error(ENODEV, Step::GpuOpen, device_name_ + " cannot map host memory");
}

HipBackend::~HipBackend() = default;

const std::string &HipBackend::library() const noexcept
{
	return hip_->library;
}

int HipBackend::runtime_version() const noexcept
{
	return hip_->runtime_version;
}

HipMemory HipBackend::classify(const void *ptr) const
{
	return detail::classify_current(HipRuntime{hip_, device_}, ptr);
}

GpuMapping HipBackend::map(const Registration &registration)
{
	return detail::map_host_memory(HipRuntime{hip_, device_}, name(), registration);
}

} // namespace svmbatch
