// SPDX-License-Identifier: MIT
// The tests' window into an asynchronous Arena's preparation.
#pragma once

#include <cstddef>
#include <functional>

namespace svmbatch::detail {

/// Called on the preparing thread before each chunk of an asynchronous
/// arena is prepared, with the chunk's index; what it throws fails that
/// chunk.  An arena takes the hook set when it is created.  Tests only:
/// to slow, hold or fail a chunk.
using ArenaChunkHook = std::function<void(std::size_t chunk)>;
void set_arena_chunk_hook(ArenaChunkHook hook);

} // namespace svmbatch::detail
