// SPDX-License-Identifier: MIT
// Caller buffers -> page-aligned ranges: round to pages, sort, merge pages
// that touch or overlap, cut ranges longer than a limit (between buffers
// where possible), and remember where each caller buffer landed.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <svmbatch/buffer.hpp>
#include <svmbatch/registration.hpp>

namespace svmbatch::detail {

/// Which caller buffers a range holds: every one with a byte in it, or
/// only those whose first byte lies in it.
enum class Holding { AnyByte, FirstByte };

struct RangePlan {
	std::vector<KernelRange> ranges; ///< sorted by address
	/// Per caller buffer: the range holding its first byte.
	std::vector<BufferLocation> locations;
	/// Per caller buffer: the ranges [first, last] its bytes touch.
	std::vector<std::size_t> last_range;

	/// The lowest-numbered caller buffer that range r holds, or
	/// Error::no_index.  The two Holdings differ only where a buffer
	/// longer than the limit continues from an earlier range into r.
	std::size_t first_buffer(std::size_t r, Holding holding = Holding::AnyByte) const;
};

/// Does every buffer allow writes (Access::ReadWrite)?
bool all_writable(std::span<const Buffer> buffers);

/// What to add to an importer's EACCES on a dma-buf exported read-only
/// (writable false): such a dma-buf allows DMA_TO_DEVICE only, and the
/// importer (named so in the text) maps it bidirectionally.  Else empty.
std::string read_only_import_hint(int err, bool writable, const std::string &importer);

/// Plan the ranges for buffers.  limit (a multiple of page_size) caps every
/// range: a group of buffers is cut only where no buffer crosses the cut,
/// unless one buffer alone is longer than limit.  Throws Error(Validate):
/// EINVAL for a null or empty buffer, EOVERFLOW when ptr + len wraps.
RangePlan plan_ranges(std::span<const Buffer> buffers, std::size_t page_size, std::size_t limit);

} // namespace svmbatch::detail
