// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include <svmbatch/api.h>
#include <svmbatch/buffer.hpp>
#include <svmbatch/dmabuf.hpp>

namespace svmbatch {

enum class Mode;

/// One range as the kernel sees it: page-aligned, the union of caller
/// buffers whose pages touch or overlap, never longer than max_range_bytes.
struct KernelRange {
	std::uintptr_t addr = 0;
	std::size_t len = 0;
	Access access = Access::ReadWrite; ///< ReadOnly only if all its buffers are
};

/// Where a caller buffer lies: ranges()[range].addr + offset == buffer.ptr.
struct BufferLocation {
	std::size_t range = 0;
	std::size_t offset = 0;
};

/// What the module knows about a registration (kernel mode, QUERY).
struct RegistrationStats {
	std::uint64_t pages = 0; ///< pinned pages
	std::uint64_t segments = 0; ///< physically contiguous runs
	std::uint64_t folios = 0;
	std::uint64_t meta_bytes = 0; ///< module memory for this registration
	bool stale = false; ///< see Registration::stale()
};

class Registration;

namespace detail {
struct RegistrationState;
/// For the layers above core (io_uring, GPU, RDMA): what a Registration
/// holds, without a public accessor on it.
const RegistrationState &state_of(const Registration &registration);
} // namespace detail

/// A set of buffers registered in one step.  Move-only; the destructor
/// unregisters (kernel mode: the pages are unpinned).  Freeing or unmapping
/// a buffer while it is registered does not free its pages: the kernel
/// keeps them pinned until the registration ends, and the registration
/// then refers to memory the process no longer sees at that address.
class SVMBATCH_API Registration {
public:
	Registration(Registration &&) noexcept;
	Registration &operator=(Registration &&) noexcept;
	Registration(const Registration &) = delete;
	Registration &operator=(const Registration &) = delete;
	~Registration();

	Mode mode() const noexcept;
	/// The module's handle; 0 in userspace mode.
	std::uint32_t handle() const noexcept;
	/// The caller's buffers, in the caller's order.
	std::span<const Buffer> buffers() const noexcept;
	/// The merged page-aligned ranges, sorted by address.
	std::span<const KernelRange> ranges() const noexcept;
	BufferLocation location(std::size_t buffer) const;
	/// The lowest-numbered caller buffer whose first byte lies in
	/// ranges()[range]; Error::no_index where none does (a buffer longer
	/// than max_range_bytes continues into a range of its own).
	std::size_t first_buffer(std::size_t range) const;
	/// Pages covered by ranges(); in kernel mode all of them are pinned.
	std::uint64_t pages() const noexcept;
	/// Pinned by the module: pages() in kernel mode, 0 in userspace mode.
	std::uint64_t pinned_pages() const noexcept;
	/// Kernel QUERY; Error EOPNOTSUPP in userspace mode.
	RegistrationStats query() const;
	/// Has a registered address been unmapped, dropped (MADV_DONTNEED),
	/// moved or mapped over since registering?  The pinned pages are then
	/// no longer what the process sees there: register again.  Kernel
	/// mode only (QUERY); Error EOPNOTSUPP in userspace mode.
	bool stale() const { return query().stale; }
	/// With RegisterOptions::notify_stale, an eventfd (non-blocking,
	/// close-on-exec, owned by the registration) that the module signals
	/// once, when the registration goes STALE: poll it for POLLIN from an
	/// event loop, then drop what was derived from the registration (GPU
	/// mappings, RDMA memory regions) and register again.  -1 otherwise.
	int stale_fd() const noexcept;

	/// Export the registration as a dma-buf (kernel mode; EOPNOTSUPP in
	/// userspace mode).  writable needs every buffer ReadWrite (EACCES).
	/// The dma-buf holds the pages in ranges() order: buffer i starts at
	/// byte offset dmabuf_offset(i).
	DmaBuf export_dmabuf(bool writable = true) const;
	/// Byte offset of caller buffer i in export_dmabuf()'s dma-buf.
	std::size_t dmabuf_offset(std::size_t buffer) const;

	/// Unregister now; further use is an error.  Idempotent.
	void reset() noexcept;
	explicit operator bool() const noexcept { return state_ != nullptr; }

private:
	friend class Context;
	friend const detail::RegistrationState &detail::state_of(const Registration &registration);
	explicit Registration(std::unique_ptr<detail::RegistrationState> state);
	const detail::RegistrationState &state() const;

	std::unique_ptr<detail::RegistrationState> state_;
};

} // namespace svmbatch
