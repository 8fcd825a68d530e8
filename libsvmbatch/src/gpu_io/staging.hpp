// SPDX-License-Identifier: MIT
// The staging of an IoLoop's device reads: one caller buffer of the
// registration cut into chunks, each inside one fixed buffer, taken by the
// pump as it hands a piece to an I/O thread (the one freed last first, a
// few at most) and given back when the piece's copy to the device ended.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include <svmbatch/fixed_buffers.hpp>

namespace svmbatch::detail {

struct StagingChunk {
	char *addr = nullptr;
	unsigned slot = 0; ///< its fixed buffer
	int index = 0;
};

class StagingChunks {
public:
	/// As many chunks of chunk_bytes as the staging buffer's fixed-buffer
	/// slices hold whole, of which at most max_bytes' worth (one at least;
	/// 0: all) are taken at once.  Error(EINVAL, Step::Validate) naming
	/// buffer when they hold none.
	StagingChunks(std::span<const FixedSlice> slices, std::size_t chunk_bytes,
		      std::size_t direct_alignment, std::uint32_t buffer, std::size_t max_bytes);

	std::size_t chunk_bytes() const noexcept { return chunk_bytes_; }
	/// Every chunk starts at a multiple of the O_DIRECT alignment and is
	/// one long.
	bool aligned() const noexcept { return aligned_; }
	/// The chunk freed last, or none (none free, or max_bytes taken).  Any
	/// thread.
	std::optional<StagingChunk> take();
	/// Chunk index is free again.  Any thread; never allocates.
	void give_back(int index) noexcept;

private:
	std::size_t chunk_bytes_;
	bool aligned_;
	std::vector<StagingChunk> chunks_; ///< all of them, by index
	std::mutex mu_;
	std::vector<int> free_; ///< its capacity holds every chunk
	std::size_t taken_ = 0;
	std::size_t max_taken_;
};

} // namespace svmbatch::detail
