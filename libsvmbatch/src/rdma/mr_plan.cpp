// SPDX-License-Identifier: MIT
#include "rdma/mr_plan.hpp"

#include <algorithm>
#include <cerrno>
#include <string>

#include <svmbatch/error.hpp>

namespace svmbatch::detail {

MrPlan plan_memory_regions(std::vector<MrItem> items, std::size_t nbuffers, std::uint64_t cap)
{
	MrPlan plan;
	std::uint64_t end = 0; // of the current chunk

	std::sort(items.begin(), items.end(), [](const MrItem &a, const MrItem &b) {
		if (a.group != b.group)
			return a.group < b.group;
		return a.start != b.start ? a.start < b.start : a.buffer < b.buffer;
	});
	plan.chunk_of.assign(nbuffers, 0);
	for (const MrItem &it : items) {
		if (it.len > cap)
			throw Error(E2BIG, Step::RdmaRegister,
				    std::to_string(it.len) + " bytes, more than the " +
					    std::to_string(cap) +
					    "-byte limit of one memory region (max_mr_size)",
				    it.buffer);
		const std::uint64_t it_end = it.start + it.len;
		bool joins = !plan.chunks.empty() && plan.chunks.back().group == it.group;

		if (joins && std::max(end, it_end) - plan.chunks.back().start > cap) {
			if (it.start < end)
				throw Error(E2BIG, Step::RdmaRegister,
					    "overlaps buffers that together exceed the " +
						    std::to_string(cap) +
						    "-byte limit of one memory region (max_mr_size)",
					    it.buffer);
			joins = false;
		}
		if (joins) {
			MrChunk &c = plan.chunks.back();
			end = std::max(end, it_end);
			c.len = end - c.start;
			c.first_buffer = std::min(c.first_buffer, it.buffer);
		} else {
			plan.chunks.push_back({it.start, it.len, it.group, it.buffer});
			end = it_end;
		}
		plan.chunk_of[it.buffer] = plan.chunks.size() - 1;
	}
	return plan;
}

} // namespace svmbatch::detail
