// SPDX-License-Identifier: MIT
#include "arena/block_allocator.hpp"

#include <algorithm>
#include <cerrno>
#include <string>

#include <svmbatch/arena.hpp>
#include <svmbatch/error.hpp>

namespace svmbatch::detail {

BlockAllocator::BlockAllocator(std::size_t capacity, std::size_t alignment,
			       const std::vector<std::size_t> &boundaries)
	: capacity_(capacity), alignment_(alignment)
{
	if (alignment == 0 || (alignment & (alignment - 1)) != 0)
		throw Error(EINVAL, Step::Validate,
			    "arena: alignment " + std::to_string(alignment) +
				    " is not a power of two");
	std::size_t start = 0;
	for (std::size_t b : boundaries) {
		if (b <= start || b >= capacity)
			continue;
		if (b % alignment != 0)
			throw Error(EINVAL, Step::Validate,
				    "arena: chunk boundary " + std::to_string(b) +
					    " is not a multiple of the alignment " +
					    std::to_string(alignment));
		boundaries_.push_back(b);
		insert_free(start, b - start);
		largest_segment_ = std::max(largest_segment_, b - start);
		start = b;
	}
	if (capacity > start) {
		insert_free(start, capacity - start);
		largest_segment_ = std::max(largest_segment_, capacity - start);
	}
}

bool BlockAllocator::is_boundary(std::size_t offset) const
{
	return std::binary_search(boundaries_.begin(), boundaries_.end(), offset);
}

std::size_t BlockAllocator::rounded(std::size_t bytes) const noexcept
{
	bytes = std::max<std::size_t>(bytes, 1);
	// Past the largest multiple of the alignment: nothing can hold it.
	if (bytes > SIZE_MAX - (alignment_ - 1))
		return SIZE_MAX;
	return (bytes + alignment_ - 1) & ~(alignment_ - 1);
}

void BlockAllocator::insert_free(std::size_t offset, std::size_t bytes)
{
	free_by_offset_.emplace(offset, bytes);
	free_by_size_.emplace(bytes, offset);
}

void BlockAllocator::erase_free(FreeMap::iterator it)
{
	auto [lo, hi] = free_by_size_.equal_range(it->second);
	for (auto s = lo; s != hi; ++s) {
		if (s->second == it->first) {
			free_by_size_.erase(s);
			break;
		}
	}
	free_by_offset_.erase(it);
}

void BlockAllocator::throw_full(std::size_t need) const
{
	const std::size_t free_bytes = capacity_ - used_;
	const std::size_t largest = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
	std::string what = free_bytes >= need ?
				   "arena fragmented: " + std::to_string(need) + " bytes asked, " +
					   std::to_string(free_bytes) + " free in " +
					   std::to_string(free_by_size_.size()) +
					   " pieces, the largest " + std::to_string(largest) :
				   "arena full: " + std::to_string(need) + " bytes asked, " +
					   std::to_string(free_bytes) + " of " +
					   std::to_string(capacity_) + " free";
	if (need > largest_segment_ && !boundaries_.empty())
		what += " (no block crosses a chunk's end, and the largest chunk is " +
			std::to_string(largest_segment_) + " bytes)";
	throw ArenaFull(what, need, free_bytes, largest);
}

std::size_t BlockAllocator::allocate(std::size_t bytes)
{
	const std::size_t need = rounded(bytes);
	std::lock_guard lock(mutex_);
	auto fit = free_by_size_.lower_bound(need);
	if (fit == free_by_size_.end())
		throw_full(need);
	const std::size_t offset = fit->second;
	const std::size_t have = fit->first;
	// The live entry first: if it cannot be made, nothing has changed.
	live_.emplace(offset, need);
	erase_free(free_by_offset_.find(offset));
	if (have > need)
		insert_free(offset + need, have - need);
	used_ += need;
	return offset;
}

bool BlockAllocator::release(std::size_t offset)
{
	std::lock_guard lock(mutex_);
	auto live = live_.find(offset);
	if (live == live_.end())
		return false;
	std::size_t size = live->second;
	live_.erase(live);
	used_ -= size;
	// Merge with the free neighbours on both sides, never across a
	// boundary.
	auto next = free_by_offset_.lower_bound(offset);
	if (next != free_by_offset_.end() && next->first == offset + size &&
	    !is_boundary(next->first)) {
		size += next->second;
		erase_free(next);
	}
	auto prev = free_by_offset_.lower_bound(offset);
	if (prev != free_by_offset_.begin() && !is_boundary(offset)) {
		--prev;
		if (prev->first + prev->second == offset) {
			offset = prev->first;
			size += prev->second;
			erase_free(prev);
		}
	}
	insert_free(offset, size);
	return true;
}

std::size_t BlockAllocator::used() const
{
	std::lock_guard lock(mutex_);
	return used_;
}

std::size_t BlockAllocator::largest_free() const
{
	std::lock_guard lock(mutex_);
	return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

std::size_t BlockAllocator::live_blocks() const
{
	std::lock_guard lock(mutex_);
	return live_.size();
}

} // namespace svmbatch::detail
