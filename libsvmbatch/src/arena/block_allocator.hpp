// SPDX-License-Identifier: MIT
// The Arena's carving: best-fit allocation of byte ranges with coalescing.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

namespace svmbatch::detail {

/// Best fit over [0, capacity), every block a multiple of the alignment,
/// free neighbours merged, no block across a boundary.  Thread-safe.
class BlockAllocator {
public:
	/// alignment: a power of two (else Error EINVAL).  boundaries: offsets
	/// no block may cross (each memory registration of the arena ends at
	/// one: a copy engine cannot read across two), ascending multiples of
	/// the alignment; those at or past capacity are ignored.
	BlockAllocator(std::size_t capacity, std::size_t alignment,
		       const std::vector<std::size_t> &boundaries = {});

	/// The offset of a free block of rounded(bytes); throws ArenaFull when
	/// none is large enough.
	std::size_t allocate(std::size_t bytes);
	/// Give back the block at offset; false (nothing changed) when no live
	/// block starts there.
	bool release(std::size_t offset);

	std::size_t capacity() const noexcept { return capacity_; }
	std::size_t alignment() const noexcept { return alignment_; }
	std::size_t used() const;
	std::size_t largest_free() const;
	std::size_t live_blocks() const;
	std::size_t rounded(std::size_t bytes) const noexcept;

private:
	using FreeMap = std::map<std::size_t, std::size_t>;

	void insert_free(std::size_t offset, std::size_t bytes);
	void erase_free(FreeMap::iterator it);
	bool is_boundary(std::size_t offset) const;
	[[noreturn]] void throw_full(std::size_t need) const;

	std::size_t capacity_;
	std::size_t alignment_;
	std::vector<std::size_t> boundaries_; ///< ascending, inside (0, capacity)
	std::size_t largest_segment_ = 0; ///< between two boundaries
	mutable std::mutex mutex_;
	FreeMap free_by_offset_; ///< offset -> bytes
	std::multimap<std::size_t, std::size_t> free_by_size_; ///< bytes -> offset
	std::map<std::size_t, std::size_t> live_; ///< offset -> bytes
	std::size_t used_ = 0;
};

} // namespace svmbatch::detail
