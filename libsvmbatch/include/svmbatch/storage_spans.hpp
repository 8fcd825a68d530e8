// SPDX-License-Identifier: MIT
// The walk that turns framework tensors into caller buffers, written once
// for <svmbatch/torch.hpp> (libtorch) and svmbatch.torch (Python): each
// storage registered once however many tensors view it, over the longest
// span any of them names.  Header-only and free of any framework.
#pragma once

#include <cstddef>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include <svmbatch/buffer.hpp>
#include <svmbatch/error.hpp>

namespace svmbatch {

/// One tensor's storage: its first byte and its length.
struct StorageSpan {
	void *data = nullptr;
	std::size_t nbytes = 0;
};

/// What storage_buffers() makes of the tensors' storages.
struct StorageBuffers {
	/// One per distinct storage, in the order first seen.
	std::vector<Buffer> buffers;
	/// Per buffer: the first tensor whose storage it is (to name it in errors).
	std::vector<std::size_t> owner;
	/// Per tensor: its buffer, or Error::no_index for an empty storage.
	std::vector<std::size_t> buffer_of;
};

/// The buffers of tensors' storages, given as (data, nbytes) in the
/// tensors' order: storages with the same data pointer are one buffer,
/// as long as the longest; empty storages are none.
inline StorageBuffers storage_buffers(std::span<const StorageSpan> storages,
				      Access access = Access::ReadWrite)
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
