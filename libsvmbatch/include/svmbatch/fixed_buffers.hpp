// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include <svmbatch/api.h>
#include <svmbatch/buffer.hpp>
#include <svmbatch/registration.hpp>

struct io_uring;

namespace svmbatch {

namespace detail {
struct RegistrationState;
class IoEngine;
class IoWorkers;
} // namespace detail

/// io_uring limits every fixed buffer to 1 GiB and a table to 16384 slots.
inline constexpr std::size_t io_uring_max_buffer_bytes = std::size_t{1} << 30;
inline constexpr unsigned io_uring_max_slots = 16384;

struct FixedOptions {
	/// Without a window the library registers the ring's whole buffer table
	/// (the ring must have none) and unregisters it on destruction.  With
	/// one, it fills slots [first, first + window_size) of a sparse table
	/// the application registered (io_uring_register_buffers_sparse), so it
	/// coexists with the application's own fixed buffers, and clears them on
	/// destruction.  window_size 0 means "up to the end of the table".
	std::optional<unsigned> window_first;
	unsigned window_size = 0;
};

/// The part of a caller buffer inside one fixed buffer.  A caller buffer
/// larger than 1 GiB (rare) spans several; READ_FIXED/WRITE_FIXED I/O must
/// stay within one slice.
struct FixedSlice {
	unsigned index = 0; ///< buf_index for io_uring_prep_read_fixed
	void *addr = nullptr; ///< where the slice starts (inside the caller buffer)
	std::size_t len = 0;
};

/// io_uring fixed buffers covering a Registration's buffers.  Move-only;
/// the destructor unregisters (or clears its window).  Destroy it before
/// io_uring_queue_exit() of its ring.
class SVMBATCH_API FixedBuffers {
public:
	FixedBuffers(FixedBuffers &&) noexcept;
	FixedBuffers &operator=(FixedBuffers &&) noexcept;
	FixedBuffers(const FixedBuffers &) = delete;
	FixedBuffers &operator=(const FixedBuffers &) = delete;
	~FixedBuffers();

	/// Number of caller buffers.
	std::size_t size() const noexcept { return first_slice_.size() - 1; }
	/// The first (usually only) slice of caller buffer i.
	const FixedSlice &operator[](std::size_t buffer) const;
	std::span<const FixedSlice> slices(std::size_t buffer) const;
	/// How caller buffer i was registered: a Reader refuses to read into a
	/// ReadOnly one (io_uring itself pins every fixed buffer writable).
	Access access(std::size_t buffer) const { return access_.at(buffer); }
	/// Slots [first_slot(), first_slot() + nr_slots()) belong to this object.
	unsigned first_slot() const noexcept { return first_slot_; }
	unsigned nr_slots() const noexcept { return nr_slots_; }

	/// Unregister now (clear the window).  Idempotent.
	void reset() noexcept;
	explicit operator bool() const noexcept { return ring_ != nullptr; }

private:
	friend SVMBATCH_API FixedBuffers register_fixed(const Registration &registration,
							::io_uring &ring,
							const FixedOptions &options);
	friend class detail::IoEngine;
	friend class detail::IoWorkers;
	FixedBuffers() = default;
	/// The same slots in ring, which has no buffer table yet (a Reader's
	/// or Writer's private ring): the table cloned from this object's ring
	/// when clone is true and the kernel can (cloned says whether it did),
	/// else the buffers registered again.  The result owns ring's table.
	FixedBuffers mirror(::io_uring &ring, bool clone, bool &cloned) const;
	/// register_fixed(): register s's buffers in ring.
	FixedBuffers(::io_uring &ring, const detail::RegistrationState &s,
		     const FixedOptions &options);

	::io_uring *ring_ = nullptr;
	bool window_ = false;
	unsigned first_slot_ = 0;
	unsigned nr_slots_ = 0;
	std::vector<FixedSlice> slices_;
	std::vector<std::size_t> first_slice_{0}; ///< per buffer, plus end
	std::vector<FixedSlice> slots_; ///< what each of our slots holds
	std::vector<Access> access_; ///< per caller buffer
};

/// Register registration's buffers as io_uring fixed buffers of ring (see
/// FixedOptions).  Independent of the registration's lifetime: io_uring
/// pins the pages itself.  Must be destroyed before the ring is exited.
SVMBATCH_API FixedBuffers register_fixed(const Registration &registration, ::io_uring &ring,
					 const FixedOptions &options = {});

} // namespace svmbatch
