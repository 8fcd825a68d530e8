// SPDX-License-Identifier: MIT
// HipBackend: hipHostRegister per merged range, all or nothing.
#include <svmbatch/error.hpp>
#include <svmbatch/gpu/hip_backend.hpp>
#include <svmbatch/registration.hpp>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "core/vma_check.hpp"
#include "gpu/host_register_plan.hpp"
#include "shim/libhip.hpp"

namespace svmbatch {

using detail::classify_ranges;
using detail::covered_spans;
using detail::first_buffer_known;
using detail::hip_errno;
using detail::HipDeviceScope;
using detail::LibHip;
namespace hip = detail::hip;

namespace {

/// The ranges map() registered, unregistered when the mapping ends.
class HipHostRegistration final : public GpuMappingOwner {
public:
	HipHostRegistration(std::shared_ptr<const LibHip> hip, int device)
		: hip_(std::move(hip)), device_(device)
	{}
	HipHostRegistration(const HipHostRegistration &) = delete;
	HipHostRegistration &operator=(const HipHostRegistration &) = delete;
	HipHostRegistration(HipHostRegistration &&) = delete;
	HipHostRegistration &operator=(HipHostRegistration &&) = delete;
	~HipHostRegistration() override { unregister_all(); }

	void add(void *addr) { registered_.push_back(addr); }

	/// Newest first, with the mapping's device current.
	void unregister_all() noexcept
	{
		if (registered_.empty())
			return;
		try {
			HipDeviceScope current(*hip_, device_);
			while (!registered_.empty()) {
				hip_->host_unregister(registered_.back());
				registered_.pop_back();
			}
		} catch (const Error &) {
			// The device cannot be made current: the runtime is
			// going away (process exit), and the registrations with it.
		}
	}

private:
	std::shared_ptr<const LibHip> hip_;
	int device_;
	std::vector<void *> registered_;
};

HipMemory classify_with(const LibHip &h, const void *ptr)
{
	hip::PointerAttributes attr{};

	// ROCm 5 fails for memory it does not know (hipErrorInvalidValue);
	// ROCm 6 succeeds and says Unregistered.
	if (h.pointer_get_attributes(&attr, ptr) != hip::success)
		return HipMemory::Unknown;
	if (attr.is_managed)
		return HipMemory::Managed;
	switch (hip::memory_type(attr.type, h.runtime_version)) {
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

const char *memory_name(HipMemory m)
{
	switch (m) {
	case HipMemory::Unknown:
		return "plain host memory";
	case HipMemory::Host:
		return "HIP host memory (hipHostMalloc or already registered)";
	case HipMemory::Managed:
		return "HIP managed memory";
	case HipMemory::Device:
		return "HIP device memory";
	}
	return "?";
}

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

/// hipHostRegister the spans of plain host memory into owner, all or
/// nothing; per range its span's device pointer (0 where HIP knew the
/// memory).
std::vector<std::uintptr_t> register_ranges(const LibHip &h, const Registration &registration,
					    const std::vector<KernelRange> &spans,
					    const std::vector<HipMemory> &kind,
					    HipHostRegistration &owner)
{
	std::vector<std::uintptr_t> range_dptr(spans.size());

	for (std::size_t r = 0; r < spans.size(); r++) {
		if (kind[r] != HipMemory::Unknown)
			continue;
		// NOLINTNEXTLINE(performance-no-int-to-ptr)
		void *addr = reinterpret_cast<void *>(spans[r].addr);
		hip::Error res =
			h.host_register(addr, spans[r].len,
					hip::host_register_portable | hip::host_register_mapped);
		if (res != hip::success) {
			owner.unregister_all(); // ranges 0..r-1
			std::size_t blame = registration.first_buffer(r);
			if (res == hip::error_host_memory_already_registered)
				blame = first_buffer_known<HipMemory>(
					registration, r, blame,
					[&h](const void *p) { return classify_with(h, p); });
			throw Error(hip_errno(res), Step::GpuMap,
				    "hipHostRegister of range " + std::to_string(r) + " (" +
					    std::to_string(spans[r].len) +
					    " bytes): " + h.error_name(res),
				    blame, res);
		}
		owner.add(addr);
		void *dptr = nullptr;
		res = h.host_get_device_pointer(&dptr, addr, 0);
		if (res != hip::success) {
			owner.unregister_all();
			throw Error(hip_errno(res), Step::GpuMap,
				    "hipHostGetDevicePointer of range " + std::to_string(r) + ": " +
					    h.error_name(res),
				    registration.first_buffer(r), res);
		}
		range_dptr[r] = reinterpret_cast<std::uintptr_t>(dptr);
	}
	return range_dptr;
}

/// Per buffer: a registered range's device pointer + offset.  Managed
/// memory is its own device pointer.  HIP's own host memory: ask per
/// buffer, since its block need not start where our range does.
std::vector<std::uint64_t> buffer_addresses(const LibHip &h, const Registration &registration,
					    const std::vector<KernelRange> &spans,
					    const std::vector<HipMemory> &kind,
					    const std::vector<std::uintptr_t> &range_dptr,
					    HipHostRegistration &owner)
{
	auto buffers = registration.buffers();
	std::vector<std::uint64_t> addresses(buffers.size());

	for (std::size_t i = 0; i < buffers.size(); i++) {
		std::size_t r = registration.location(i).range;
		const auto host = reinterpret_cast<std::uintptr_t>(buffers[i].ptr);

		switch (kind[r]) {
		case HipMemory::Unknown:
			addresses[i] = range_dptr[r] + (host - spans[r].addr);
			break;
		case HipMemory::Managed:
			addresses[i] = host;
			break;
		default: {
			void *dptr = nullptr;
			hip::Error res = h.host_get_device_pointer(&dptr, buffers[i].ptr, 0);
			if (res != hip::success) {
				owner.unregister_all();
				throw Error(hip_errno(res), Step::GpuMap,
					    "hipHostGetDevicePointer of HIP host memory: " +
						    h.error_name(res),
					    i, res);
			}
			addresses[i] = reinterpret_cast<std::uintptr_t>(dptr);
		}
		}
	}
	return addresses;
}

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
	HipDeviceScope current(*hip_, device_);

	return classify_with(*hip_, ptr);
}

GpuMapping HipBackend::map(const Registration &registration)
{
	const LibHip &h = *hip_;
	HipDeviceScope current(h, device_);
	std::vector<HipMemory> kind = classify_ranges<HipMemory>(
		registration, [&h](const void *p) { return classify_with(h, p); }, memory_name,
		"HIP");
	std::vector<KernelRange> spans = covered_spans(registration);
	refuse_unwritable(registration, spans, kind);
	auto owner = std::make_unique<HipHostRegistration>(hip_, device_);
	std::vector<std::uintptr_t> range_dptr =
		register_ranges(h, registration, spans, kind, *owner);
	std::vector<std::uint64_t> addresses =
		buffer_addresses(h, registration, spans, kind, range_dptr, *owner);

	return {name(), GpuAddressKind::DevicePointer, std::move(addresses), std::move(owner)};
}

} // namespace svmbatch
