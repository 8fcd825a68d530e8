// SPDX-License-Identifier: MIT
// An Arena: one mapping of exactly the size asked (small pages, THP or
// hugetlb), prefaulted by several threads, registered once and mapped for
// a GPU once, from which blocks are carved best-fit with no driver call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <svmbatch/api.h>
#include <svmbatch/error.hpp>

namespace svmbatch {

class Context;
class GpuBackend;
class GpuMapping;
class Registration;

/// The pages an Arena is made of.
enum class PageKind {
	Small, ///< the base page size
	Thp, ///< transparent huge pages (MADV_HUGEPAGE on a 2 MiB-aligned mapping; best effort)
	Hugetlb, ///< MAP_HUGETLB 2 MiB pages of the reserved pool (vm.nr_hugepages)
};

/// "none", "thp" or "hugetlb".
SVMBATCH_API const char *page_kind_name(PageKind kind) noexcept;

struct ArenaOptions {
	PageKind pages = PageKind::Thp;
	/// Bind the memory to this NUMA node (mbind MPOL_BIND); -1: no binding.
	int numa_node = -1;
	/// Every block starts at a multiple of it (a power of two).
	std::size_t alignment = 256;
	/// Threads that fault the pages in; 0: the CPUs this process may run
	/// on, at most 16.
	unsigned prefault_threads = 0;
	/// Map the arena once for this backend (gpu_mapping()); nullptr: none.
	GpuBackend *backend = nullptr;
	/// Return once the memory is mapped and prepare it (fault in,
	/// register, map for the GPU) chunk by chunk on a background thread:
	/// allocate() waits only for the chunks its block covers.  See ready(),
	/// wait() and "Asynchronous arenas" above Arena.
	bool async = false;
	/// The first chunk of an asynchronous arena, rounded up to the page
	/// kind's page (and to the alignment); 0: 256 MiB.  Each next chunk is
	/// twice the one before, at most 64 GiB, and a tail smaller than the
	/// chunk before it joins that chunk.  Each chunk is its own
	/// registration and GPU mapping, and no block crosses a chunk's end: a
	/// copy engine cannot read across two registrations.  Ignored by a
	/// synchronous arena (one chunk).
	std::size_t chunk_bytes = 0;
};

/// allocate() found no free block large enough: ENOMEM, step Validate.
/// fragmented() tells a fragmented arena (enough bytes free, but not in one
/// piece) from a full one.
class SVMBATCH_API ArenaFull : public Error {
public:
	ArenaFull(const std::string &what, std::size_t requested, std::size_t free_bytes,
		  std::size_t largest_free);

	/// The bytes asked, rounded up to the alignment.
	std::size_t requested() const noexcept { return requested_; }
	std::size_t free_bytes() const noexcept { return free_bytes_; }
	std::size_t largest_free() const noexcept { return largest_free_; }
	bool fragmented() const noexcept { return free_bytes_ >= requested_; }

private:
	std::size_t requested_;
	std::size_t free_bytes_;
	std::size_t largest_free_;
};

/// One mapping registered once; blocks carved from it need no driver call.
/// Move-only; the destructor unmaps it from the GPU, unregisters it and
/// unmaps the memory, in that order: blocks still in use become invalid.
/// allocate(), deallocate() and the counters may be called from any
/// number of threads at once; moving, reset() and destruction may not
/// overlap any other call.
///
/// Creation is all or nothing: an Error (from mmap, mbind, the
/// registration or the GPU mapping) leaves no mapping, pin or
/// registration behind.  In kernel mode, without CAP_IPC_LOCK, a size
/// that VmPin plus the mapping would carry over RLIMIT_MEMLOCK is refused
/// before anything is mapped: ENOMEM, step Validate, the message naming
/// the limit and how to raise it.
///
/// Asynchronous arenas (ArenaOptions::async): the constructor checks the
/// arguments and the memlock limit, maps and binds the memory, and
/// returns; one background thread then prepares the chunks in address
/// order, each faulted in, registered (its own REGISTER in kernel mode) and
/// mapped for the GPU.  No block crosses a chunk's end (see
/// ArenaOptions::chunk_bytes for their sizes); allocate() and
/// gpu_address() wait for the chunk they touch, nothing more.  A
/// synchronous arena mapped for a GPU past 64 GiB likewise keeps each
/// block inside one of the backend's registration calls.  A chunk that
/// fails stops the preparation:
/// wait(), and every allocate() or gpu_address() that needs that chunk or
/// a later one, throws its Error (errno and step as the failing call gave
/// them, the message naming the chunk and its bytes).  The chunks before
/// it stay prepared: blocks inside them are carved and used as usual.
/// Destroying the arena, at any time, stops the preparation, waits for
/// the chunk in progress and undoes every chunk.  The Context and the
/// backend must stay alive (and the Context unmoved) until wait() has
/// returned or thrown, or the arena is destroyed.
class SVMBATCH_API Arena {
public:
	/// An empty arena (operator bool false).
	Arena() noexcept;
	/// bytes (> 0) of memory, rounded up to the page kind's page for the
	/// mapping; blocks are carved from the first bytes only.
	Arena(Context &context, std::size_t bytes, const ArenaOptions &options = {});
	Arena(Arena &&other) noexcept;
	Arena &operator=(Arena &&other) noexcept;
	Arena(const Arena &) = delete;
	Arena &operator=(const Arena &) = delete;
	~Arena();

	explicit operator bool() const noexcept { return state_ != nullptr; }
	/// Unmap, unregister and free now; idempotent.
	void reset() noexcept;

	/// Every chunk prepared; false while an asynchronous arena is being
	/// prepared and after its preparation failed.  A synchronous arena is
	/// always ready.
	bool ready() const;
	/// Block until every chunk is prepared; throws the Error of the chunk
	/// that failed (every call, from any thread).
	void wait() const;
	/// The chunks the arena is prepared in (1 for a synchronous arena).
	std::size_t chunks() const;
	/// The bytes of the first chunk (the whole mapping for a synchronous
	/// arena).
	std::size_t chunk_bytes() const;

	/// A block of bytes (0 counts as 1), aligned to alignment(); throws
	/// ArenaFull when no free block is large enough.
	void *allocate(std::size_t bytes);
	/// Give a block back; Error EINVAL if block is not one allocate()
	/// returned and not yet given back.
	void deallocate(void *block);

	/// The first byte of the mapping (2 MiB-aligned for huge pages).
	char *base() const;
	/// The bytes asked: what blocks are carved from.
	std::size_t capacity() const;
	/// The bytes mapped, registered and GPU-mapped.
	std::size_t mapped_bytes() const;
	/// Bytes taken by live blocks (each rounded()).
	std::size_t used() const;
	/// capacity() - used().
	std::size_t free_bytes() const;
	std::size_t largest_free() const;
	std::size_t live_blocks() const;
	std::size_t alignment() const;
	/// What a block of bytes takes from the arena.
	std::size_t rounded(std::size_t bytes) const;
	PageKind page_kind() const;
	/// -1 when unbound.
	int numa_node() const;

	/// The registration of [base(), base() + mapped_bytes()): one buffer.
	/// An asynchronous arena has one per chunk and no such registration:
	/// Error EINVAL.
	const Registration &registration() const;
	/// Pages registered (Registration::pages()) and pinned by the module
	/// (pinned_pages()), summed over the chunks prepared so far.
	std::uint64_t pages_registered() const;
	std::uint64_t pinned_pages() const;
	/// The GPU mapping of that buffer, or nullptr without a backend (and
	/// for an asynchronous arena, mapped per chunk: see gpu_mapped()).
	const GpuMapping *gpu_mapping() const;
	/// Created with a backend.
	bool gpu_mapped() const;
	/// The device address of p (any byte of the arena), once p's chunk is
	/// mapped (waiting for it); Error EINVAL when p is outside the arena or
	/// the arena has no GPU mapping.  Per chunk: no block crosses a chunk's
	/// end.
	std::uint64_t gpu_address(const void *p) const;

private:
	struct State;
	State &state();
	const State &state() const;

	std::unique_ptr<State> state_;
};

} // namespace svmbatch
