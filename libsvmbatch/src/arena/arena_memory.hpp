// SPDX-License-Identifier: MIT
// An Arena's memory: one anonymous mapping of small, THP or hugetlb pages,
// bound to a NUMA node if asked, prefaulted by several threads.
#pragma once

#include <cstddef>

#include <svmbatch/arena.hpp>

namespace svmbatch::detail {

/// An anonymous mapping, unmapped on destruction.
class ArenaMemory {
public:
	/// mmap bytes (rounded up to the page kind's page), bind it to
	/// numa_node (-1: no binding) and, unless prefault_now is false,
	/// prefault it with threads threads (0: the CPUs, at most 16).  Throws
	/// Error (step Validate) and leaves nothing mapped.
	ArenaMemory(std::size_t bytes, PageKind kind, int numa_node, unsigned threads,
		    bool prefault_now = true);
	ArenaMemory(const ArenaMemory &) = delete;
	ArenaMemory &operator=(const ArenaMemory &) = delete;
	ArenaMemory(ArenaMemory &&) = delete;
	ArenaMemory &operator=(ArenaMemory &&) = delete;
	~ArenaMemory();

	/// What bytes of kind map to: rounded up to the kind's page.  Throws
	/// Error (step Validate) for 0 and sizes that cannot be rounded.
	static std::size_t mapped_size(std::size_t bytes, PageKind kind);

	char *base() const noexcept { return base_; }
	std::size_t mapped_bytes() const noexcept { return mapped_; }
	/// The unit a mapping of kind is faulted in by: the base page or 2 MiB.
	static std::size_t fault_unit(PageKind kind) noexcept;
	std::size_t fault_unit() const noexcept { return fault_unit(kind_); }

	/// Fault in [offset, offset + bytes) (multiples of fault_unit()) with
	/// threads threads; throws Error (step Arena).
	void prefault(std::size_t offset, std::size_t bytes, unsigned threads) const;

private:
	PageKind kind_;

	char *base_ = nullptr;
	std::size_t mapped_ = 0;
};

} // namespace svmbatch::detail
