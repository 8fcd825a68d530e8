// SPDX-License-Identifier: MIT
#include "gpu/host_register_plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace svmbatch::detail {

std::size_t page_size() noexcept
{
	return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

namespace {

std::atomic<std::size_t> chunk_bytes{host_register_chunk_default};

} // namespace

std::size_t host_register_chunk_bytes() noexcept
{
	return chunk_bytes.load(std::memory_order_relaxed);
}

void set_host_register_chunk_bytes(std::size_t bytes) noexcept
{
	const std::size_t page = page_size();

	bytes = bytes == 0 ? host_register_chunk_default : std::max(bytes / page * page, page);
	chunk_bytes.store(bytes, std::memory_order_relaxed);
}

std::vector<KernelRange> chunk_span(const KernelRange &span, std::size_t limit, std::size_t page)
{
	std::vector<KernelRange> chunks;
	const std::uintptr_t end = span.addr + span.len;

	limit = std::max(limit / page * page, page);
	for (std::uintptr_t at = span.addr; at < end;) {
		// The first cut is on the last page boundary within limit: the
		// span may start inside a page, the cuts never do.
		std::uintptr_t cut = (at + limit) / page * page;
		if (cut <= at || cut >= end)
			cut = end;
		chunks.push_back({at, cut - at, span.access});
		at = cut;
	}
	return chunks;
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
