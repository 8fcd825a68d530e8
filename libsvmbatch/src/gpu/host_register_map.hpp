// SPDX-License-Identifier: MIT
// The map() of the backends that register host memory with a GPU runtime
// (CudaBackend, HipBackend): the runtimes differ only in their calls,
// codes and names, so the steps (classify, register each range's covered
// bytes all or nothing, give each buffer its device pointer, undo when
// the mapping ends) are written once here, over a HostRuntime.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <svmbatch/error.hpp>
#include <svmbatch/gpu/backend.hpp>
#include <svmbatch/registration.hpp>

#include "gpu/host_register_plan.hpp"

namespace svmbatch::detail {

/// The names a runtime's messages use.
struct HostRuntimeNames {
	const char *runtime; ///< "CUDA"
	const char *host_alloc; ///< "cuMemHostAlloc": the runtime's own host memory
	const char *host_register; ///< "cuMemHostRegister"
	const char *device_pointer; ///< "cuMemHostGetDevicePointer"
};

/// A runtime's side of host registration: a small value, copied into each
/// mapping, that keeps the runtime (and its device) alive.  Memory is the
/// backend's public enum (Unknown, Host, Managed, Device), Status the
/// runtime's int status (success 0).  current() returns a scope with the
/// runtime's device current on this thread (Error if it cannot be);
/// refuse_before_register() throws for memory the runtime would refuse,
/// before anything is registered.
template <typename R>
concept HostRuntime = std::copyable<R> &&
	requires(const R &rt, const Registration &registration,
		 const std::vector<KernelRange> &spans, const std::vector<typename R::Memory> &kind,
		 typename R::Status s, void *p, std::uint64_t *dptr)
{
	HostRuntimeNames{R::names};
	s = R::success;
	s = R::already_registered;
	rt.current();
	kind[0] == rt.classify(p);
	rt.host_register(p, std::size_t{}, rt.register_flags(Access::ReadOnly));
	rt.host_unregister(p);
	s = rt.device_pointer(dptr, p);
	std::string{rt.error_name(s)};
	int{R::to_errno(s)};
	rt.refuse_before_register(registration, spans, kind);
};

/// What a kind of memory is, for messages: "CUDA managed memory".
template <HostRuntime R> std::string memory_name(typename R::Memory m)
{
	switch (m) {
	case R::Memory::Unknown:
		return "plain host memory";
	case R::Memory::Host:
		return std::string(R::names.runtime) + " host memory (" + R::names.host_alloc +
		       " or already registered)";
	case R::Memory::Managed:
		return std::string(R::names.runtime) + " managed memory";
	case R::Memory::Device:
		return std::string(R::names.runtime) + " device memory";
	}
	return "?";
}

/// The ranges map() registered, unregistered when the mapping ends.
template <HostRuntime R> class HostRegistration final : public GpuMappingOwner {
public:
	explicit HostRegistration(R runtime) : rt_(std::move(runtime)) {}
	HostRegistration(const HostRegistration &) = delete;
	HostRegistration &operator=(const HostRegistration &) = delete;
	HostRegistration(HostRegistration &&) = delete;
	HostRegistration &operator=(HostRegistration &&) = delete;
	~HostRegistration() override { unregister_all(); }

	void add(void *addr) { registered_.push_back(addr); }

	/// Newest first, with the runtime's device current.
	void unregister_all() noexcept
	{
		if (registered_.empty())
			return;
		try {
			auto current = rt_.current();
			while (!registered_.empty()) {
				rt_.host_unregister(registered_.back());
				registered_.pop_back();
			}
		} catch (const Error &) {
			// The device cannot be made current: the runtime is
			// going away (process exit), and the registrations with it.
		}
	}

private:
	R rt_;
	std::vector<void *> registered_;
};

/// The first caller buffer that holds addr, else fallback.
inline std::size_t buffer_at(const Registration &registration, std::uintptr_t addr,
			     std::size_t fallback)
{
	auto buffers = registration.buffers();

	for (std::size_t i = 0; i < buffers.size(); i++) {
		const auto start = reinterpret_cast<std::uintptr_t>(buffers[i].ptr);
		if (start <= addr && addr - start < buffers[i].len)
			return i;
	}
	return fallback;
}

/// " (len bytes)", or for a piece of a range cut into several calls
/// ", chunk k of n (len bytes at offset o of the range's total)".
inline std::string chunk_text(const KernelRange &span, const std::vector<KernelRange> &chunks,
			      std::size_t k)
{
	if (chunks.size() == 1)
		return " (" + std::to_string(span.len) + " bytes)";
	return ", chunk " + std::to_string(k) + " of " + std::to_string(chunks.size()) + " (" +
	       std::to_string(chunks[k].len) + " bytes at offset " +
	       std::to_string(chunks[k].addr - span.addr) + " of " + std::to_string(span.len) + ")";
}

/// Register the spans of plain host memory into owner, all or nothing, each
/// in chunks of at most host_register_chunk_bytes(); per range its span's
/// device pointer (0 where the runtime knew the memory).  If a chunk fails,
/// every chunk registered before it, of this range and the earlier ones,
/// is unregistered.
template <HostRuntime R>
std::vector<std::uint64_t> register_ranges(const R &rt, const Registration &registration,
					   const std::vector<KernelRange> &spans,
					   const std::vector<typename R::Memory> &kind,
					   HostRegistration<R> &owner)
{
	std::vector<std::uint64_t> range_dptr(spans.size());
	const std::size_t limit = host_register_chunk_bytes();

	for (std::size_t r = 0; r < spans.size(); r++) {
		if (kind[r] != R::Memory::Unknown)
			continue;
		const std::vector<KernelRange> chunks = chunk_span(spans[r], limit, page_size());
		for (std::size_t k = 0; k < chunks.size(); k++) {
			// NOLINTNEXTLINE(performance-no-int-to-ptr)
			void *addr = reinterpret_cast<void *>(chunks[k].addr);
			typename R::Status res =
				rt.host_register(addr, chunks[k].len,
						 rt.register_flags(spans[r].access));
			if (res != R::success) {
				owner.unregister_all(); // every chunk before this one
				std::size_t blame = buffer_at(registration, chunks[k].addr,
							      registration.first_buffer(r));
				if (res == R::already_registered)
					blame = first_buffer_known<typename R::Memory>(
						registration, r, blame,
						[&rt](const void *q) { return rt.classify(q); });
				throw Error(R::to_errno(res), Step::GpuMap,
					    std::string(R::names.host_register) + " of range " +
						    std::to_string(r) +
						    chunk_text(spans[r], chunks, k) + ": " +
						    rt.error_name(res),
					    blame, res);
			}
			owner.add(addr);
			std::uint64_t dptr = 0;
			res = rt.device_pointer(&dptr, addr);
			if (res != R::success) {
				owner.unregister_all();
				throw Error(R::to_errno(res), Step::GpuMap,
					    std::string(R::names.device_pointer) + " of range " +
						    std::to_string(r) +
						    (chunks.size() == 1 ?
							     std::string() :
							     ", chunk " + std::to_string(k)) +
						    ": " + rt.error_name(res),
					    buffer_at(registration, chunks[k].addr,
						      registration.first_buffer(r)),
					    res);
			}
			const std::uint64_t offset = chunks[k].addr - spans[r].addr;
			if (k == 0) {
				range_dptr[r] = dptr;
			} else if (dptr != range_dptr[r] + offset) {
				// Each buffer gets one device pointer: the chunks must
				// follow one another on the device as on the host.
				owner.unregister_all();
				throw Error(EOPNOTSUPP, Step::GpuMap,
					    std::string(R::names.device_pointer) + " of range " +
						    std::to_string(r) + ", chunk " +
						    std::to_string(k) +
						    ": the device address does not follow chunk " +
						    std::to_string(k - 1) + "'s",
					    buffer_at(registration, chunks[k].addr,
						      registration.first_buffer(r)));
			}
		}
	}
	return range_dptr;
}

/// Per buffer: a registered range's device pointer + offset.  Managed
/// memory is its own device pointer.  The runtime's own host memory: ask
/// per buffer, since its block need not start where our range does.
template <HostRuntime R>
std::vector<std::uint64_t>
buffer_addresses(const R &rt, const Registration &registration,
		 const std::vector<KernelRange> &spans, const std::vector<typename R::Memory> &kind,
		 const std::vector<std::uint64_t> &range_dptr, HostRegistration<R> &owner)
{
	auto buffers = registration.buffers();
	std::vector<std::uint64_t> addresses(buffers.size());

	for (std::size_t i = 0; i < buffers.size(); i++) {
		std::size_t r = registration.location(i).range;
		const auto host = reinterpret_cast<std::uintptr_t>(buffers[i].ptr);

		switch (kind[r]) {
		case R::Memory::Unknown:
			addresses[i] = range_dptr[r] + (host - spans[r].addr);
			break;
		case R::Memory::Managed:
			addresses[i] = host;
			break;
		default:
			if (typename R::Status res =
				    rt.device_pointer(&addresses[i], buffers[i].ptr);
			    res != R::success) {
				owner.unregister_all();
				throw Error(R::to_errno(res), Step::GpuMap,
					    std::string(R::names.device_pointer) + " of " +
						    R::names.runtime +
						    " host memory: " + rt.error_name(res),
					    i, res);
			}
		}
	}
	return addresses;
}

/// What the runtime already knows of ptr, asked with its device current.
template <HostRuntime R> typename R::Memory classify_current(const R &rt, const void *ptr)
{
	auto current = rt.current();

	return rt.classify(ptr);
}

/// Map registration's buffers through rt: memory the runtime already knows
/// is used as it is, plain memory is registered range by range (each in
/// chunks of at most host_register_chunk_bytes()) and unregistered when
/// the mapping ends; if a call fails, every chunk registered before it is
/// unregistered before the Error is thrown.
template <HostRuntime R>
GpuMapping map_host_memory(const R &rt, const char *backend, const Registration &registration)
{
	auto current = rt.current();
	std::vector<typename R::Memory> kind = classify_ranges<typename R::Memory>(
		registration, [&rt](const void *p) { return rt.classify(p); }, memory_name<R>,
		R::names.runtime);
	std::vector<KernelRange> spans = covered_spans(registration);
	rt.refuse_before_register(registration, spans, kind);
	auto owner = std::make_unique<HostRegistration<R>>(rt);
	std::vector<std::uint64_t> range_dptr =
		register_ranges(rt, registration, spans, kind, *owner);
	std::vector<std::uint64_t> addresses =
		buffer_addresses(rt, registration, spans, kind, range_dptr, *owner);

	return {backend, GpuAddressKind::DevicePointer, std::move(addresses), std::move(owner)};
}

} // namespace svmbatch::detail
