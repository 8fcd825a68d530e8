// SPDX-License-Identifier: MIT
// ZeBackend: a registration's dma-buf imported into a Level Zero device
// (kernel mode), or the host-register skeleton over the driver's host
// pointer import (userspace mode).  Follows ze_api.h 1.8 (Debian's
// libze-dev) and Intel's zex_driver.h for the import.
#include <svmbatch/context.hpp>
#include <svmbatch/dmabuf.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/gpu/ze_backend.hpp>
#include <svmbatch/registration.hpp>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/range_plan.hpp"
#include "gpu/host_register_map.hpp"
#include "shim/libze.hpp"

namespace svmbatch {

namespace detail {

/// The loader, the chosen driver and device, and the context the backend
/// and every mapping it made work in: destroyed with the last of them.
struct ZeState {
	explicit ZeState(const std::string &library) : ze(library) {}
	ZeState(const ZeState &) = delete;
	ZeState &operator=(const ZeState &) = delete;
	ZeState(ZeState &&) = delete;
	ZeState &operator=(ZeState &&) = delete;
	~ZeState()
	{
		if (context)
			ze.context_destroy(context);
	}

	LibZe ze;
	ze::Driver driver = nullptr;
	ze::Device device = nullptr;
	ze::Context context = nullptr;
	ZexDriver zex;
};

} // namespace detail

using detail::ze_errno;
using detail::ze_result_name;
using detail::ZeState;
namespace ze = detail::ze;

namespace {

/// The driver's host-pointer import for the skeleton.
struct ZeRuntime {
	using Status = ze::Result;
	using Memory = ZeMemory;
	static constexpr detail::HostRuntimeNames names{"Level Zero", "zeMemAllocHost",
							"zexDriverImportExternalPointer",
							"zexDriverGetHostPointerBaseAddress"};
	static constexpr Status success = ze::success;
	/// Intel's driver, for an import whose both ends lie in earlier ones.
	static constexpr Status already_registered = ze::error_overlapping_regions;

	std::shared_ptr<const ZeState> s;

	/// Level Zero has no current device (every call names its context or
	/// device): the scope only holds the state for the calls it spans.
	std::shared_ptr<const ZeState> current() const { return s; }

	/// Whether the driver has imported a host pointer holding ptr.
	bool imported(const void *ptr) const
	{
		return s->zex &&
		       s->zex.get_host_pointer_base_address(s->driver, const_cast<void *>(ptr),
							    nullptr) == ze::success;
	}

	/// zeMemGetAllocProperties' ze_memory_type_t (unknown if it fails).
	unsigned allocation_type(const void *ptr) const
	{
		ze::MemoryAllocationProperties props{};
		props.stype = ze::structure_type_memory_allocation_properties;
		if (s->ze.mem_get_alloc_properties(s->context, ptr, &props, nullptr) != ze::success)
			return ze::memory_type_unknown;
		return props.type;
	}

	Memory classify(const void *ptr) const
	{
		switch (allocation_type(ptr)) {
		case ze::memory_type_host:
			return ZeMemory::Host;
		case ze::memory_type_device:
			return ZeMemory::Device;
		case ze::memory_type_shared:
			return ZeMemory::Managed;
		default:
			return imported(ptr) ? ZeMemory::Host : ZeMemory::Unknown;
		}
	}

	/// The import takes no flags: the device may read and write.
	unsigned register_flags(Access /*access*/) const { return 0; }

	Status host_register(void *p, std::size_t len, unsigned /*flags*/) const
	{
		return s->zex.import_external_pointer(s->driver, p, len);
	}

	void host_unregister(void *p) const { s->zex.release_imported_pointer(s->driver, p); }

	/// The device uses host memory the driver knows at its own address:
	/// an imported pointer's base is asked of the driver, so that a
	/// pointer it does not hold fails here.
	Status device_pointer(std::uint64_t *dptr, void *p) const
	{
		void *base = nullptr;
		Status r = ze::success;

		*dptr = 0;
		if (allocation_type(p) != ze::memory_type_host) { // not zeMemAllocHost's
			r = s->zex ? s->zex.get_host_pointer_base_address(s->driver, p, &base) :
				     ze::error_unsupported_feature;
			if (r == ze::success && base > p)
				r = ze::error_invalid_argument; // not an import holding p
		}
		if (r == ze::success)
			*dptr = reinterpret_cast<std::uintptr_t>(p);
		return r;
	}

	std::string error_name(Status r) const { return ze_result_name(r); }
	static int to_errno(Status r) { return ze_errno(r); }

	/// A driver without the host-pointer import cannot map host memory
	/// it did not allocate: refuse before importing anything.
	void refuse_before_register(const Registration & /*registration*/,
				    const std::vector<KernelRange> & /*spans*/,
				    const std::vector<Memory> &kind) const
	{
		if (s->zex)
			return;
		for (std::size_t r = 0; r < kind.size(); r++)
			if (kind[r] == ZeMemory::Unknown)
				throw Error(
					EOPNOTSUPP, Step::GpuMap,
					"the Level Zero driver has no "
					"zexDriverImportExternalPointer for range " +
						std::to_string(r) +
						": load the svmbatch module for the dma-buf path");
	}
};

/// A dma-buf imported into the device, freed when the mapping ends; the
/// fd stays open while the device holds the import.
class ZeDmabufImport final : public GpuMappingOwner {
public:
	ZeDmabufImport(std::shared_ptr<const ZeState> s, DmaBuf dmabuf)
		: s_(std::move(s)), dmabuf_(std::move(dmabuf))
	{}
	ZeDmabufImport(const ZeDmabufImport &) = delete;
	ZeDmabufImport &operator=(const ZeDmabufImport &) = delete;
	ZeDmabufImport(ZeDmabufImport &&) = delete;
	ZeDmabufImport &operator=(ZeDmabufImport &&) = delete;
	~ZeDmabufImport() override
	{
		if (ptr_)
			s_->ze.mem_free(s_->context, ptr_);
	}

	/// zeMemAllocDevice with the dma-buf chained as the memory to import.
	void import()
	{
		ze::ExternalMemoryImportFd fd{ze::structure_type_external_memory_import_fd, nullptr,
					      ze::external_memory_type_flag_dma_buf, dmabuf_.fd()};
		ze::DeviceMemAllocDesc desc{ze::structure_type_device_mem_alloc_desc, &fd, 0, 0};
		ze::Result r = s_->ze.mem_alloc_device(s_->context, &desc, dmabuf_.size(), 0,
						       s_->device, &ptr_);

		if (r != ze::success) {
			ptr_ = nullptr;
			throw Error(ze_errno(r), Step::GpuMap,
				    "zeMemAllocDevice importing the registration's dma-buf (" +
					    std::to_string(dmabuf_.size()) +
					    " bytes): " + ze_result_name(r),
				    Error::no_index, r);
		}
	}

	std::uintptr_t base() const noexcept { return reinterpret_cast<std::uintptr_t>(ptr_); }

private:
	std::shared_ptr<const ZeState> s_;
	DmaBuf dmabuf_;
	void *ptr_ = nullptr;
};

/// The loader, initialized: zeInit is the first call, and without a
/// driver nothing else is called.
std::shared_ptr<ZeState> open_runtime(const ZeOptions &options)
{
	auto s = std::make_shared<ZeState>(options.library);
	const detail::LibZe &z = s->ze;
	ze::Result r = z.init(ze::init_flag_gpu_only);

	if (r != ze::success)
		throw Error(ENODEV, Step::GpuOpen,
			    "zeInit (" + z.library + "): " + ze_result_name(r), Error::no_index, r);
	std::uint32_t count = 0;
	r = z.driver_get(&count, nullptr);
	if (r != ze::success || count == 0)
		throw Error(ENODEV, Step::GpuOpen,
			    "zeDriverGet (" + z.library +
				    "): " + (r == ze::success ? "0 drivers" : ze_result_name(r)),
			    Error::no_index, r);
	if (options.driver < 0 || static_cast<std::uint32_t>(options.driver) >= count)
		throw Error(ENODEV, Step::GpuOpen,
			    "no Level Zero driver " + std::to_string(options.driver) + " (" +
				    std::to_string(count) + " present)");
	std::vector<ze::Driver> drivers(count);
	r = z.driver_get(&count, drivers.data());
	if (r != ze::success)
		throw Error(ENODEV, Step::GpuOpen, "zeDriverGet: " + ze_result_name(r),
			    Error::no_index, r);
	s->driver = drivers[static_cast<std::size_t>(options.driver)];

	count = 0;
	r = z.device_get(s->driver, &count, nullptr);
	if (r != ze::success || count == 0)
		throw Error(ENODEV, Step::GpuOpen,
			    "zeDeviceGet: " + (r == ze::success ? std::string("0 devices") :
								  ze_result_name(r)),
			    Error::no_index, r);
	if (options.device < 0 || static_cast<std::uint32_t>(options.device) >= count)
		throw Error(ENODEV, Step::GpuOpen,
			    "no Level Zero device " + std::to_string(options.device) + " (" +
				    std::to_string(count) + " present)");
	std::vector<ze::Device> devices(count);
	r = z.device_get(s->driver, &count, devices.data());
	if (r != ze::success)
		throw Error(ENODEV, Step::GpuOpen, "zeDeviceGet: " + ze_result_name(r),
			    Error::no_index, r);
	s->device = devices[static_cast<std::size_t>(options.device)];

	ze::ContextDesc desc{ze::structure_type_context_desc, nullptr, 0};
	r = z.context_create(s->driver, &desc, &s->context);
	if (r != ze::success) {
		s->context = nullptr;
		throw Error(ze_errno(r), Step::GpuOpen, "zeContextCreate: " + ze_result_name(r),
			    Error::no_index, r);
	}
	s->zex.resolve(z, s->driver);
	return s;
}

/// Kernel mode: one import of the registration's dma-buf.
GpuMapping map_dmabuf(const std::shared_ptr<const ZeState> &s, const char *backend,
		      const Registration &registration)
{
	auto buffers = registration.buffers();
	auto owner = std::make_unique<ZeDmabufImport>(s, registration.export_dmabuf(
								 detail::all_writable(buffers)));
	owner->import();
	std::vector<std::uint64_t> addresses(buffers.size());
	for (std::size_t i = 0; i < buffers.size(); i++)
		addresses[i] = owner->base() + registration.dmabuf_offset(i);
	return {backend, GpuAddressKind::DevicePointer, std::move(addresses), std::move(owner)};
}

} // namespace

ZeBackend::ZeBackend(const ZeOptions &options)
	: state_(open_runtime(options)), driver_(options.driver), device_(options.device)
{
	ze::DeviceProperties props{};
	props.stype = ze::structure_type_device_properties;
	if (state_->ze.device_get_properties(state_->device, &props) == ze::success) {
		props.name[sizeof(props.name) - 1] = '\0';
		device_name_ = props.name;
	}
}

ZeBackend::~ZeBackend() = default;

const std::string &ZeBackend::library() const noexcept
{
	return state_->ze.library;
}

void *ZeBackend::driver_handle() const noexcept
{
	return state_->driver;
}

void *ZeBackend::device_handle() const noexcept
{
	return state_->device;
}

void *ZeBackend::context_handle() const noexcept
{
	return state_->context;
}

bool ZeBackend::imports_host_pointers() const noexcept
{
	return static_cast<bool>(state_->zex);
}

ZeMemory ZeBackend::classify(const void *ptr) const
{
	return ZeRuntime{state_}.classify(ptr);
}

GpuMapping ZeBackend::map(const Registration &registration)
{
	const ZeRuntime rt{state_};

	if (registration.mode() != Mode::Kernel)
		return detail::map_host_memory(rt, name(), registration);
	// The dma-buf holds every page whatever Level Zero knows of it; the
	// same memory is refused in both modes.
	(void)detail::classify_ranges<ZeMemory>(
		registration, [&rt](const void *p) { return rt.classify(p); },
		detail::memory_name<ZeRuntime>, ZeRuntime::names.runtime);
	return map_dmabuf(state_, name(), registration);
}

} // namespace svmbatch
