// SPDX-License-Identifier: MIT
// Cutting a registration into RDMA memory regions no longer than a NIC's
// max_mr_size, never inside a caller buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace svmbatch::detail {

/// A caller buffer in some address space (user virtual addresses, or byte
/// offsets in the registration's dma-buf).  Buffers of different groups
/// never share a memory region (per-range path: one group per kernel
/// range).
struct MrItem {
	std::uint64_t start = 0;
	std::uint64_t len = 0;
	std::size_t buffer = 0;
	std::size_t group = 0;
};

/// One memory region: from the first byte of its first buffer to the last
/// byte of its last.
struct MrChunk {
	std::uint64_t start = 0;
	std::uint64_t len = 0;
	std::size_t group = 0;
	std::size_t first_buffer = 0; ///< lowest caller index among its buffers
};

struct MrPlan {
	std::vector<MrChunk> chunks; ///< sorted by (group, start)
	std::vector<std::size_t> chunk_of; ///< per caller buffer
};

/// Greedy: a region grows by the next buffer (in address order) while it
/// stays within cap bytes, and a new one starts at a buffer that does not
/// overlap the region before it.  Error(E2BIG, Step::RdmaRegister) naming
/// the buffer when a buffer, or a run of overlapping buffers, is longer
/// than cap.  nbuffers: the number of caller buffers (items name each).
MrPlan plan_memory_regions(std::vector<MrItem> items, std::size_t nbuffers, std::uint64_t cap);

} // namespace svmbatch::detail
