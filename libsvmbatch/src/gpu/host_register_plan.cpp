// SPDX-License-Identifier: MIT
#include "gpu/host_register_plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace svmbatch::detail {

std::size_t page_size() noexcept
{
	return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

std::vector<KernelRange> covered_spans(const Registration &registration)
{
	auto ranges = registration.ranges();
	auto buffers = registration.buffers();
	std::vector<KernelRange> span(ranges.size());
	std::vector<std::uintptr_t> end(ranges.size(), 0);

	for (std::size_t r = 0; r < ranges.size(); r++) {
		span[r] = ranges[r];
		span[r].addr = ranges[r].addr + ranges[r].len;
	}
	for (std::size_t i = 0; i < buffers.size(); i++) {
		const auto start = reinterpret_cast<std::uintptr_t>(buffers[i].ptr);
		const std::uintptr_t stop = start + buffers[i].len;
		for (std::size_t r = registration.location(i).range;
		     r < ranges.size() && ranges[r].addr < stop; r++) {
			span[r].addr = std::min(span[r].addr, std::max(start, ranges[r].addr));
			end[r] = std::max(end[r], std::min(stop, ranges[r].addr + ranges[r].len));
		}
	}
	for (std::size_t r = 0; r < ranges.size(); r++)
		span[r].len = end[r] - span[r].addr;
	return span;
}

} // namespace svmbatch::detail
