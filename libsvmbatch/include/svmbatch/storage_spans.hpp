// SPDX-License-Identifier: MIT
// The walk that turns framework tensors into caller buffers, written once
// for <svmbatch/torch.hpp> (libtorch) and svmbatch.torch (Python): each
// storage registered once however many tensors view it, over the longest
// span any of them names.  Free of any framework.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include <svmbatch/api.h>
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
SVMBATCH_API StorageBuffers storage_buffers(std::span<const StorageSpan> storages,
					    Access access = Access::ReadWrite);

} // namespace svmbatch
