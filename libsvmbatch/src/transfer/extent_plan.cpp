// SPDX-License-Identifier: MIT
#include "transfer/extent_plan.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>

namespace svmbatch::detail {

int direct_fd(int fd) noexcept
{
	int flags = fcntl(fd, F_GETFL);
	if (flags < 0)
		return -errno;
	return (flags & O_DIRECT) != 0 ? 1 : 0;
}

ExtentPlan plan_extents(std::span<const Extent> extents, std::span<const bool> direct,
			std::size_t chunk_bytes, std::size_t align)
{
	ExtentPlan plan;
	std::size_t i = 0;
	while (i < extents.size()) {
		if (extents[i].length == 0) {
			i++;
			continue;
		}
		// A run: extents that follow each other in the list and the file.
		std::size_t j = i + 1;
		std::uint64_t end = extents[i].file_offset + extents[i].length;
		while (j < extents.size() && extents[j].fd == extents[i].fd &&
		       direct[j] == direct[i] &&
		       (extents[j].length == 0 || extents[j].file_offset == end)) {
			end += extents[j].length;
			j++;
		}
		std::uint64_t begin = extents[i].file_offset;
		std::size_t a = direct[i] ? align : 1;
		std::uint64_t low = begin / a * a;
		std::uint64_t high = (end + a - 1) / a * a;
		std::size_t k = i; // first extent of the run that may overlap the next read
		for (std::uint64_t at = low; at < high; at += chunk_bytes) {
			ChunkRead r;
			r.fd = extents[i].fd;
			r.file_offset = at;
			r.length = static_cast<std::size_t>(
				std::min<std::uint64_t>(chunk_bytes, high - at));
			r.first = plan.pieces.size();
			std::uint64_t lo = std::max(at, begin);
			std::uint64_t hi = std::min(at + r.length, end);
			r.needed = static_cast<std::size_t>(hi - at);
			// An empty extent of the run may claim any offset: skip it,
			// never stop at it.
			while (k < j && (extents[k].length == 0 ||
					 extents[k].file_offset + extents[k].length <= lo))
				k++;
			for (std::size_t m = k; m < j; m++) {
				const Extent &e = extents[m];
				if (e.length == 0)
					continue;
				if (e.file_offset >= hi)
					break;
				std::uint64_t a0 = std::max(lo, e.file_offset);
				std::uint64_t b0 = std::min(hi, e.file_offset + e.length);
				plan.pieces.push_back({m, static_cast<std::size_t>(a0 - at),
						       static_cast<std::size_t>(b0 - a0),
						       e.dst + (a0 - e.file_offset)});
			}
			r.count = plan.pieces.size() - r.first;
			plan.reads.push_back(r);
		}
		i = j;
	}
	return plan;
}

} // namespace svmbatch::detail
