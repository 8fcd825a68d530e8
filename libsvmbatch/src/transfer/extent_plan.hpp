// SPDX-License-Identifier: MIT
// Cutting extents into chunk-sized reads: extents next to each other (in
// the list and in the file) read together, O_DIRECT reads widened to whole
// aligned blocks, and per read the pieces of extents it holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <svmbatch/extent_reader.hpp>

namespace svmbatch::detail {

/// length bytes at offset `at` of a read's chunk, for extent `extent` at
/// dst.
struct ExtentPiece {
	std::size_t extent = 0;
	std::size_t at = 0;
	std::size_t length = 0;
	std::uint64_t dst = 0;
};

/// One read of at most a chunk: pieces [first, first + count) of the
/// plan's pieces, of which the read must bring the first `needed` bytes.
struct ChunkRead {
	int fd = -1;
	std::uint64_t file_offset = 0;
	std::size_t length = 0;
	std::size_t needed = 0;
	std::size_t first = 0;
	std::size_t count = 0;
};

struct ExtentPlan {
	std::vector<ChunkRead> reads;
	std::vector<ExtentPiece> pieces;
};

/// Whether an fd reads with O_DIRECT (fcntl F_GETFL); -errno when it is
/// no open fd.
int direct_fd(int fd) noexcept;

/// The reads of extents in chunks of chunk_bytes; direct[i] says extent
/// i's fd is O_DIRECT, whose reads begin and end on multiples of align
/// (chunk_bytes is one too).  Empty extents get no piece.
ExtentPlan plan_extents(std::span<const Extent> extents, std::span<const bool> direct,
			std::size_t chunk_bytes, std::size_t align);

} // namespace svmbatch::detail
