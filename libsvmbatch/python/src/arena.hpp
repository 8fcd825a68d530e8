// SPDX-License-Identifier: MIT
// An Arena: one exact-size mapping (THP, hugetlb or small pages),
// prefaulted by several threads, registered once and GPU-mapped once,
// from which blocks are carved with no driver call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <svmbatch/context.hpp>
#include <svmbatch/gpu/backend.hpp>
#include <svmbatch/registration.hpp>

namespace svmbatch::python {

enum class PageKind {
	Small, ///< the base page size
	Thp, ///< transparent huge pages (MADV_HUGEPAGE on a 2 MiB-aligned mapping)
	Hugetlb, ///< MAP_HUGETLB 2 MiB pages from the reserved pool
};

/// An anonymous mapping, unmapped on destruction.
class ArenaMemory {
public:
	/// mmap bytes (rounded up to the page kind's size), bind it to
	/// numa_node (-1: no binding) and prefault it with threads threads.
	ArenaMemory(std::size_t bytes, PageKind kind, int numa_node, unsigned threads);
	ArenaMemory(const ArenaMemory &) = delete;
	ArenaMemory &operator=(const ArenaMemory &) = delete;
	ArenaMemory(ArenaMemory &&) = delete;
	ArenaMemory &operator=(ArenaMemory &&) = delete;
	~ArenaMemory();

	char *base() const noexcept { return base_; }
	std::size_t mapped_bytes() const noexcept { return mapped_; }

private:
	char *base_ = nullptr;
	std::size_t mapped_ = 0;
};

/// Best-fit allocation of byte ranges with coalescing; thread-safe (blocks
/// come back from DLPack deleters on any thread).
class BlockAllocator {
public:
	BlockAllocator(std::size_t capacity, std::size_t alignment);
	/// Offset of a free block of bytes (rounded up to the alignment);
	/// throws ArenaFull when none is large enough.
	std::size_t allocate(std::size_t bytes);
	void release(std::size_t offset, std::size_t bytes) noexcept;

	std::size_t capacity() const noexcept { return capacity_; }
	std::size_t used() const;
	std::size_t largest_free() const;
	std::size_t live_blocks() const;
	std::size_t rounded(std::size_t bytes) const noexcept;

private:
	void insert_free(std::size_t offset, std::size_t bytes);
	void erase_free(std::map<std::size_t, std::size_t>::iterator it);

	std::size_t capacity_;
	std::size_t alignment_;
	mutable std::mutex mutex_;
	std::map<std::size_t, std::size_t> by_offset_; ///< free: offset -> bytes
	std::multimap<std::size_t, std::size_t> by_size_; ///< free: bytes -> offset
	std::size_t used_ = 0;
	std::size_t live_ = 0;
};

/// What lives as long as the arena or any block carved from it: the
/// memory, its registration and its GPU mapping (destroyed in the reverse
/// order: unmap, unregister, munmap).
struct ArenaState {
	ArenaState(std::size_t bytes, PageKind kind, int numa_node, unsigned threads,
		   std::size_t alignment)
		: memory(bytes, kind, numa_node, threads), allocator(bytes, alignment), kind(kind),
		  numa_node(numa_node)
	{}

	ArenaMemory memory;
	BlockAllocator allocator;
	PageKind kind;
	int numa_node;
	std::shared_ptr<Registration> registration;
	std::optional<GpuMapping> mapping;
};

} // namespace svmbatch::python
