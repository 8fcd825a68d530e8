// SPDX-License-Identifier: MIT
// The memory of an IoLoop's request ring.
#pragma once

#include <cstddef>
#include <cstdint>

#include <svmbatch/gpu_io/ring.h>

namespace svmbatch::detail {

/// Header, request slots, completion slots, in one anonymous mapping
/// (page-aligned, populated), every slot's seq at its index: all free.
class RingMemory {
public:
	explicit RingMemory(unsigned slots);
	RingMemory(const RingMemory &) = delete;
	RingMemory &operator=(const RingMemory &) = delete;
	RingMemory(RingMemory &&) = delete;
	RingMemory &operator=(RingMemory &&) = delete;
	~RingMemory();

	void *base() const noexcept { return base_; }
	std::size_t bytes() const noexcept { return bytes_; }
	std::uint32_t mask() const noexcept { return slots_ - 1; }
	svmbatch_io_ring_header *header() const noexcept;
	svmbatch_io_request *requests() const noexcept;
	svmbatch_io_completion *completions() const noexcept;
	/// The queue as seen where the memory is mapped at address.
	svmbatch_io_queue queue_at(std::uint64_t address) const noexcept;

private:
	std::uint32_t slots_;
	std::size_t bytes_;
	void *base_ = nullptr;
};

} // namespace svmbatch::detail
