// SPDX-License-Identifier: MIT
#include <svmbatch/storage_spans.hpp>

#include <unordered_map>

namespace svmbatch {

StorageBuffers storage_buffers(std::span<const StorageSpan> storages, Access access)
{
	StorageBuffers out;
	std::unordered_map<const void *, std::size_t> index_of;

	out.buffer_of.reserve(storages.size());
	for (std::size_t i = 0; i < storages.size(); i++) {
		const StorageSpan &s = storages[i];
		if (s.nbytes == 0 || s.data == nullptr) {
			out.buffer_of.push_back(Error::no_index);
			continue;
		}
		auto [it, added] = index_of.try_emplace(s.data, out.buffers.size());
		if (added) {
			out.buffers.push_back({s.data, s.nbytes, access});
			out.owner.push_back(i);
		} else if (out.buffers[it->second].len < s.nbytes) {
			out.buffers[it->second].len = s.nbytes;
		}
		out.buffer_of.push_back(it->second);
	}
	return out;
}

} // namespace svmbatch
