// SPDX-License-Identifier: MIT
// Caller buffers -> page-aligned ranges: round to pages, sort, merge pages
// that touch or overlap, cut ranges longer than a limit (between buffers
// where possible), and remember where each caller buffer landed.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include <svmbatch/buffer.hpp>
#include <svmbatch/registration.hpp>

namespace svmbatch::detail {

struct RangePlan {
	std::vector<KernelRange> ranges;	///< sorted by address
	/// Per caller buffer: the range holding its first byte.
	std::vector<BufferLocation> locations;
	/// Per caller buffer: the ranges [first, last] its bytes touch.
	std::vector<std::size_t> last_range;
};

/// Plan the ranges for buffers.  limit (a multiple of page_size) caps every
/// range: a group of buffers is cut only where no buffer crosses the cut,
/// unless one buffer alone is longer than limit.  Throws Error(Validate):
/// EINVAL for a null or empty buffer, EOVERFLOW when ptr + len wraps.
RangePlan plan_ranges(std::span<const Buffer> buffers, std::size_t page_size,
		      std::size_t limit);

} // namespace svmbatch::detail
