// SPDX-License-Identifier: MIT
#include "core/range_plan.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include <svmbatch/error.hpp>

namespace svmbatch::detail {

namespace {

/// A caller buffer rounded out to whole pages.
struct PageSpan {
	std::uintptr_t start;
	std::uintptr_t end;
	std::size_t index;
	bool read_only;
};

std::vector<PageSpan> page_spans(std::span<const Buffer> buffers, std::size_t page_size)
{
	std::vector<PageSpan> spans;
	std::uintptr_t mask = ~static_cast<std::uintptr_t>(page_size - 1);

	spans.reserve(buffers.size());
	for (std::size_t i = 0; i < buffers.size(); i++) {
		const Buffer &b = buffers[i];
		auto addr = reinterpret_cast<std::uintptr_t>(b.ptr);
		std::uintptr_t last;

		if (!b.ptr || !b.len)
			throw Error(EINVAL, Step::Validate, b.ptr ? "empty buffer" : "null buffer",
				    i);
		if (__builtin_add_overflow(addr, b.len - 1, &last) || (last | ~mask) == UINTPTR_MAX)
			throw Error(EOVERFLOW, Step::Validate,
				    "buffer wraps around the address space", i);
		spans.push_back(
			{addr & mask, (last & mask) + page_size, i, b.access == Access::ReadOnly});
	}
	std::sort(spans.begin(), spans.end(), [](const PageSpan &a, const PageSpan &b) {
		return a.start < b.start || (a.start == b.start && a.index < b.index);
	});
	return spans;
}

/// Buffers whose pages overlap (a cut between them would split a buffer).
struct Cluster {
	std::uintptr_t start;
	std::uintptr_t end;
	bool read_only;
};

/// Emit ranges for one group of touching clusters, each range <= limit.
void pack_group(const std::vector<Cluster> &group, std::size_t limit, std::vector<KernelRange> &out)
{
	auto emit = [&out](std::uintptr_t start, std::uintptr_t end, bool ro) {
		out.push_back({start, end - start, ro ? Access::ReadOnly : Access::ReadWrite});
	};
	std::uintptr_t start = group.front().start;
	std::uintptr_t end = start;
	bool ro = true;

	for (const Cluster &c : group) {
		if (c.end - start > limit && end > start) {
			emit(start, end, ro); /* cut before c: no buffer crosses */
			start = c.start;
			ro = true;
		}
		/* A cluster longer than limit on its own: cut inside it. */
		while (c.end - start > limit) {
			emit(start, start + limit, ro && c.read_only);
			start += limit;
			ro = true;
		}
		end = c.end;
		ro = ro && c.read_only;
	}
	emit(start, end, ro);
}

} // namespace

RangePlan plan_ranges(std::span<const Buffer> buffers, std::size_t page_size, std::size_t limit)
{
	RangePlan plan;
	std::vector<PageSpan> spans = page_spans(buffers, page_size);
	std::vector<Cluster> group;

	/* Clusters: overlapping page spans; groups: touching clusters. */
	for (std::size_t i = 0; i < spans.size();) {
		Cluster c{spans[i].start, spans[i].end, spans[i].read_only};

		for (i++; i < spans.size() && spans[i].start < c.end; i++) {
			c.end = std::max(c.end, spans[i].end);
			c.read_only = c.read_only && spans[i].read_only;
		}
		if (!group.empty() && group.back().end != c.start) {
			pack_group(group, limit, plan.ranges);
			group.clear();
		}
		group.push_back(c);
	}
	if (!group.empty())
		pack_group(group, limit, plan.ranges);

	plan.locations.resize(buffers.size());
	plan.last_range.resize(buffers.size());
	auto range_of = [&plan](std::uintptr_t addr) {
		auto it = std::upper_bound(plan.ranges.begin(), plan.ranges.end(), addr,
					   [](std::uintptr_t a, const KernelRange &r) {
						   return a < r.addr;
					   });
		return static_cast<std::size_t>(it - plan.ranges.begin()) - 1;
	};
	for (std::size_t i = 0; i < buffers.size(); i++) {
		auto addr = reinterpret_cast<std::uintptr_t>(buffers[i].ptr);
		std::size_t first = range_of(addr);

		plan.locations[i] = {first, addr - plan.ranges[first].addr};
		plan.last_range[i] = range_of(addr + buffers[i].len - 1);
	}
	return plan;
}

std::size_t RangePlan::first_buffer(std::size_t r, Holding holding) const
{
	for (std::size_t i = 0; i < locations.size(); i++) {
		if (holding == Holding::FirstByte ? locations[i].range == r :
						    locations[i].range <= r && r <= last_range[i])
			return i;
	}
	return Error::no_index;
}

bool all_writable(std::span<const Buffer> buffers)
{
	return std::all_of(buffers.begin(), buffers.end(),
			   [](const Buffer &b) { return b.access == Access::ReadWrite; });
}

std::string read_only_import_hint(int err, bool writable, const std::string &importer)
{
	if (err != EACCES || writable)
		return {};
	return ": read-only buffers export a dma-buf for DMA_TO_DEVICE only, and " + importer +
	       " maps it bidirectionally";
}

} // namespace svmbatch::detail
