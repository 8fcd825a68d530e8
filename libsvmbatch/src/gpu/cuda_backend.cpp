// SPDX-License-Identifier: MIT
// CudaBackend: cuMemHostRegister per merged range, all or nothing.
#include <svmbatch/gpu/cuda_backend.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/registration.hpp>

#include <cerrno>
#include <vector>

#include "gpu/host_register_plan.hpp"
#include "shim/libcuda.hpp"

namespace svmbatch {

using detail::classify_ranges;
using detail::covered_spans;
using detail::cuda_errno;
using detail::CudaContext;
using detail::CudaCurrent;
using detail::first_buffer_known;
using detail::LibCuda;
namespace cu = detail::cu;

namespace {

/// The ranges map() registered, unregistered when the mapping ends.
class CudaHostRegistration final : public GpuMappingOwner {
public:
	explicit CudaHostRegistration(std::shared_ptr<const CudaContext> ctx) : ctx_(std::move(ctx))
	{}
	CudaHostRegistration(const CudaHostRegistration &) = delete;
	CudaHostRegistration &operator=(const CudaHostRegistration &) = delete;
	CudaHostRegistration(CudaHostRegistration &&) = delete;
	CudaHostRegistration &operator=(CudaHostRegistration &&) = delete;
	~CudaHostRegistration() override { unregister_all(); }

	void add(void *addr) { registered_.push_back(addr); }

	/// Newest first; the context is made current for the calls.
	void unregister_all() noexcept
	{
		if (registered_.empty())
			return;
		try {
			CudaCurrent current(*ctx_);
			while (!registered_.empty()) {
				ctx_->driver().mem_host_unregister(registered_.back());
				registered_.pop_back();
			}
		} catch (const Error &) {
			// No context to make current: the driver is going away
			// (process exit), and with it the registrations.
		}
	}

private:
	std::shared_ptr<const CudaContext> ctx_;
	std::vector<void *> registered_;
};

CudaMemory classify_with(const LibCuda &d, const void *ptr)
{
	unsigned type = 0;
	auto addr = static_cast<cu::DevicePtr>(reinterpret_cast<std::uintptr_t>(ptr));
	cu::Result r = d.pointer_get_attribute(&type, cu::pointer_attribute_memory_type, addr);

	if (r != cu::success)
		return CudaMemory::Unknown; // CUDA_ERROR_INVALID_VALUE: not CUDA's
	int managed = 0;
	if (d.pointer_get_attribute(&managed, cu::pointer_attribute_is_managed, addr) ==
		    cu::success &&
	    managed)
		return CudaMemory::Managed;
	return type == cu::memorytype_host ? CudaMemory::Host : CudaMemory::Device;
}

const char *memory_name(CudaMemory m)
{
	switch (m) {
	case CudaMemory::Unknown:
		return "plain host memory";
	case CudaMemory::Host:
		return "CUDA host memory (cuMemHostAlloc or already registered)";
	case CudaMemory::Managed:
		return "CUDA managed memory";
	case CudaMemory::Device:
		return "CUDA device memory";
	}
	return "?";
}

/// cuMemHostRegister the spans of plain host memory into owner, all or
/// nothing; per range its span's device pointer (0 where CUDA knew the
/// memory).
std::vector<cu::DevicePtr> register_ranges(const LibCuda &d, const Registration &registration,
					   const std::vector<KernelRange> &spans,
					   const std::vector<CudaMemory> &kind, bool read_only,
					   CudaHostRegistration &owner)
{
	const auto &ranges = spans;
	std::vector<cu::DevicePtr> range_dptr(ranges.size());

	for (std::size_t r = 0; r < ranges.size(); r++) {
		if (kind[r] != CudaMemory::Unknown)
			continue;
		// NOLINTNEXTLINE(performance-no-int-to-ptr)
		void *addr = reinterpret_cast<void *>(ranges[r].addr);
		unsigned flags = cu::host_register_portable | cu::host_register_devicemap;

		if (ranges[r].access == Access::ReadOnly && read_only)
			flags |= cu::host_register_read_only;
		cu::Result res = d.mem_host_register(addr, ranges[r].len, flags);
		if (res != cu::success) {
			owner.unregister_all(); // ranges 0..r-1
			std::size_t blame = registration.first_buffer(r);
			if (res == cu::error_host_memory_already_registered)
				blame = first_buffer_known<CudaMemory>(
					registration, r, blame,
					[&d](const void *p) { return classify_with(d, p); });
			throw Error(cuda_errno(res), Step::GpuMap,
				    "cuMemHostRegister of range " + std::to_string(r) + " (" +
					    std::to_string(ranges[r].len) +
					    " bytes): " + d.error_name(res),
				    blame, res);
		}
		owner.add(addr);
		res = d.mem_host_get_device_pointer(&range_dptr[r], addr, 0);
		if (res != cu::success) {
			owner.unregister_all();
			throw Error(cuda_errno(res), Step::GpuMap,
				    "cuMemHostGetDevicePointer of range " + std::to_string(r) +
					    ": " + d.error_name(res),
				    registration.first_buffer(r), res);
		}
	}
	return range_dptr;
}

/// Per buffer: a registered range's device pointer + offset.  Managed
/// memory is its own device pointer.  CUDA's own host memory: ask per
/// buffer, since its block need not start at our page-aligned range.
std::vector<std::uint64_t> buffer_addresses(const LibCuda &d, const Registration &registration,
					    const std::vector<KernelRange> &spans,
					    const std::vector<CudaMemory> &kind,
					    const std::vector<cu::DevicePtr> &range_dptr,
					    CudaHostRegistration &owner)
{
	auto buffers = registration.buffers();
	std::vector<std::uint64_t> addresses(buffers.size());

	for (std::size_t i = 0; i < buffers.size(); i++) {
		BufferLocation loc = registration.location(i);
		cu::DevicePtr dptr = 0;

		switch (kind[loc.range]) {
		case CudaMemory::Unknown:
			dptr = range_dptr[loc.range] +
			       (reinterpret_cast<std::uintptr_t>(buffers[i].ptr) -
				spans[loc.range].addr);
			break;
		case CudaMemory::Managed:
			dptr = reinterpret_cast<std::uintptr_t>(buffers[i].ptr);
			break;
		default:
			if (cu::Result res =
				    d.mem_host_get_device_pointer(&dptr, buffers[i].ptr, 0);
			    res != cu::success) {
				owner.unregister_all();
				throw Error(cuda_errno(res), Step::GpuMap,
					    "cuMemHostGetDevicePointer of CUDA host memory: " +
						    d.error_name(res),
					    i, res);
			}
		}
		addresses[i] = dptr;
	}
	return addresses;
}

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
	CudaCurrent current(*ctx_);

	return classify_with(ctx_->driver(), ptr);
}

GpuMapping CudaBackend::map(const Registration &registration)
{
	const LibCuda &d = ctx_->driver();
	CudaCurrent current(*ctx_);
	std::vector<CudaMemory> kind = classify_ranges<CudaMemory>(
		registration, [&d](const void *p) { return classify_with(d, p); }, memory_name,
		"CUDA");
	auto owner = std::make_unique<CudaHostRegistration>(ctx_);
	std::vector<KernelRange> spans = covered_spans(registration);
	std::vector<cu::DevicePtr> range_dptr =
		register_ranges(d, registration, spans, kind, read_only_, *owner);
	std::vector<std::uint64_t> addresses =
		buffer_addresses(d, registration, spans, kind, range_dptr, *owner);

	return {name(), GpuAddressKind::DevicePointer, std::move(addresses), std::move(owner)};
}

} // namespace svmbatch
