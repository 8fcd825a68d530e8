// SPDX-License-Identifier: MIT
// svmbatch::Arena: the memory, its registration and GPU mapping, and the
// allocator that carves blocks from it.
#include <svmbatch/arena.hpp>

#include <cerrno>
#include <optional>
#include <string>

#include <svmbatch/context.hpp>
#include <svmbatch/gpu/backend.hpp>
#include <svmbatch/registration.hpp>

#include "arena/arena_memlock.hpp"
#include "arena/arena_memory.hpp"
#include "arena/block_allocator.hpp"

namespace svmbatch {

const char *page_kind_name(PageKind kind) noexcept
{
	switch (kind) {
	case PageKind::Thp:
		return "thp";
	case PageKind::Hugetlb:
		return "hugetlb";
	case PageKind::Small:
		break;
	}
	return "none";
}

ArenaFull::ArenaFull(const std::string &what, std::size_t requested, std::size_t free_bytes,
		     std::size_t largest_free)
	: Error(ENOMEM, Step::Arena, what), requested_(requested), free_bytes_(free_bytes),
	  largest_free_(largest_free)
{}

// Members in construction order; destroyed in reverse: unmap from the GPU,
// unregister, munmap.
struct Arena::State {
	State(Context &context, std::size_t bytes, const ArenaOptions &o)
		: allocator(bytes, o.alignment),
		  fits_memlock(check_memlock(context, bytes, o.pages)),
		  memory(bytes, o.pages, o.numa_node, o.prefault_threads), kind(o.pages),
		  numa_node(o.numa_node < 0 ? -1 : o.numa_node),
		  registration(register_whole(context, memory))
	{
		if (o.backend != nullptr)
			mapping.emplace(o.backend->map(registration));
	}

	// The module charges the whole mapping to RLIMIT_MEMLOCK when it pins
	// it: a pool that cannot fit fails here, once the arguments are
	// checked and before gigabytes are mapped and faulted in for nothing.
	// Userspace mode pins nothing itself, and the GPU drivers that pin
	// there charge no memlock limit.
	static bool check_memlock(const Context &context, std::size_t bytes, PageKind kind)
	{
		detail::MemlockBudget budget;
		if (context.mode() == Mode::Kernel && detail::read_memlock_budget(&budget))
			detail::check_memlock(budget,
					      detail::ArenaMemory::mapped_size(bytes, kind));
		return true;
	}

	static Registration register_whole(Context &context, const detail::ArenaMemory &m)
	{
		const Buffer whole{m.base(), m.mapped_bytes(), Access::ReadWrite};
		return context.register_buffers({&whole, 1});
	}

	detail::BlockAllocator allocator;
	bool fits_memlock; ///< checked before anything is mapped
	detail::ArenaMemory memory;
	PageKind kind;
	int numa_node;
	Registration registration;
	std::optional<GpuMapping> mapping;
};

Arena::Arena() noexcept = default;

Arena::Arena(Context &context, std::size_t bytes, const ArenaOptions &options)
{
	if (bytes == 0)
		throw Error(EINVAL, Step::Validate, "arena: size 0");
	switch (options.pages) {
	case PageKind::Small:
	case PageKind::Thp:
	case PageKind::Hugetlb:
		break;
	default:
		throw Error(EINVAL, Step::Validate, "arena: unknown page kind");
	}
	state_ = std::make_unique<State>(context, bytes, options);
}

Arena::Arena(Arena &&other) noexcept = default;
Arena &Arena::operator=(Arena &&other) noexcept = default;
Arena::~Arena() = default;

void Arena::reset() noexcept
{
	state_.reset();
}

Arena::State &Arena::state()
{
	if (!state_)
		throw Error(EBADF, Step::Validate, "arena: empty (moved from or reset)");
	return *state_;
}

const Arena::State &Arena::state() const
{
	if (!state_)
		throw Error(EBADF, Step::Validate, "arena: empty (moved from or reset)");
	return *state_;
}

void *Arena::allocate(std::size_t bytes)
{
	State &s = state();
	return s.memory.base() + s.allocator.allocate(bytes);
}

void Arena::deallocate(void *block)
{
	State &s = state();
	const auto p = reinterpret_cast<std::uintptr_t>(block);
	const auto first = reinterpret_cast<std::uintptr_t>(s.memory.base());
	if (p < first || p - first >= s.allocator.capacity() || !s.allocator.release(p - first))
		throw Error(EINVAL, Step::Validate,
			    "arena: " + std::to_string(p) +
				    " is not a block of this arena, or was given back already");
}

char *Arena::base() const
{
	return state().memory.base();
}

std::size_t Arena::capacity() const
{
	return state().allocator.capacity();
}

std::size_t Arena::mapped_bytes() const
{
	return state().memory.mapped_bytes();
}

std::size_t Arena::used() const
{
	return state().allocator.used();
}

std::size_t Arena::free_bytes() const
{
	const auto &a = state().allocator;
	return a.capacity() - a.used();
}

std::size_t Arena::largest_free() const
{
	return state().allocator.largest_free();
}

std::size_t Arena::live_blocks() const
{
	return state().allocator.live_blocks();
}

std::size_t Arena::alignment() const
{
	return state().allocator.alignment();
}

std::size_t Arena::rounded(std::size_t bytes) const
{
	return state().allocator.rounded(bytes);
}

PageKind Arena::page_kind() const
{
	return state().kind;
}

int Arena::numa_node() const
{
	return state().numa_node;
}

const Registration &Arena::registration() const
{
	return state().registration;
}

const GpuMapping *Arena::gpu_mapping() const
{
	const State &s = state();
	return s.mapping ? &*s.mapping : nullptr;
}

std::uint64_t Arena::gpu_address(const void *p) const
{
	const State &s = state();
	if (!s.mapping)
		throw Error(EINVAL, Step::GpuMap, "arena: not mapped for a GPU (no backend)");
	const auto a = reinterpret_cast<std::uintptr_t>(p);
	const auto first = reinterpret_cast<std::uintptr_t>(s.memory.base());
	if (a < first || a - first >= s.memory.mapped_bytes())
		throw Error(EINVAL, Step::Validate,
			    "arena: address " + std::to_string(a) + " is outside the arena");
	return s.mapping->address(0) + (a - first);
}

} // namespace svmbatch
