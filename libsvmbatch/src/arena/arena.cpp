// SPDX-License-Identifier: MIT
// svmbatch::Arena: the memory, its registration and GPU mapping, and the
// allocator that carves blocks from it.
#include <svmbatch/arena.hpp>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <svmbatch/context.hpp>
#include <svmbatch/gpu/backend.hpp>
#include <svmbatch/registration.hpp>

#include "arena/arena_memlock.hpp"
#include "arena/arena_memory.hpp"
#include "arena/arena_prepare.hpp"
#include "arena/block_allocator.hpp"
#include "gpu/host_register_plan.hpp"

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

namespace detail {
namespace {

std::mutex hook_mutex;
ArenaChunkHook chunk_hook; // guarded by hook_mutex

ArenaChunkHook current_chunk_hook()
{
	const std::lock_guard lock(hook_mutex);
	return chunk_hook;
}

} // namespace

void set_arena_chunk_hook(ArenaChunkHook hook)
{
	const std::lock_guard lock(hook_mutex);
	chunk_hook = std::move(hook);
}

} // namespace detail

namespace {

constexpr std::size_t default_chunk = std::size_t{256} << 20;

// Where the arena's chunks start, and its mapped end last: the first chunk
// of first bytes, each next twice the one before, none over cap (one
// registration call each), a tail smaller than the chunk before it joined
// to that chunk.  Every size a multiple of unit.  No block crosses a
// chunk's end (a copy engine cannot read across two registrations), so
// doubling keeps the first chunk quick to prepare and the later ones large
// enough for large blocks.
std::vector<std::size_t> chunk_starts(std::size_t mapped, std::size_t unit, std::size_t first,
				      std::size_t cap)
{
	auto round_up = [unit](std::size_t n) { return (n + unit - 1) / unit * unit; };
	cap = std::max(cap / unit * unit, unit);
	std::size_t size = std::min(round_up(std::max<std::size_t>(first, 1)), cap);
	std::vector<std::size_t> starts{0};
	while (starts.back() < mapped) {
		const std::size_t left = mapped - starts.back();
		std::size_t take = std::min(size, left);
		if (left - take < take && left <= cap)
			take = left;
		starts.push_back(starts.back() + take);
		size = std::min(size * 2, cap);
	}
	return starts;
}

// e's own words, without the "svmbatch <step> (buffer i): " it starts with
// and the strerror() it ends with: the chunk's Error says those again.
std::string inner_what(const Error &e)
{
	std::string s = e.what();
	const std::string tail = ": " + std::generic_category().message(e.err());
	if (s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0)
		s.resize(s.size() - tail.size());
	if (s.rfind("svmbatch ", 0) == 0) {
		const std::size_t colon = s.find(": ");
		if (colon != std::string::npos)
			s.erase(0, colon + 2);
	}
	return s;
}

} // namespace

// Members in construction order; destroyed in reverse: the preparing
// thread is stopped and joined first (~State), then each chunk is unmapped
// from the GPU and unregistered, then the memory unmapped.
struct Arena::State {
	// One chunk's registration and GPU mapping (destroyed first).
	struct Chunk {
		std::optional<Registration> registration;
		std::optional<GpuMapping> mapping;
	};

	State(Context &context, std::size_t bytes, const ArenaOptions &o)
		: starts(layout(bytes, o)), allocator(bytes, o.alignment, boundaries(bytes, o)),
		  fits_memlock(check_memlock(context, bytes, o.pages)),
		  memory(bytes, o.pages, o.numa_node, o.prefault_threads, !o.async), kind(o.pages),
		  numa_node(o.numa_node < 0 ? -1 : o.numa_node), async(o.async), backend(o.backend),
		  chunks(starts.size() - 1)
	{
		if (!async) {
			prepare(context, 0, o.prefault_threads);
			prepared = 1;
			return;
		}
		try {
			worker = std::thread([this, &context, hook = detail::current_chunk_hook(),
					      threads = o.prefault_threads] {
				prepare_all(context, hook, threads);
			});
		} catch (const std::system_error &e) {
			throw Error(e.code().value(), Step::Arena,
				    "arena: no thread to prepare it: " + std::string(e.what()));
		}
	}

	State(const State &) = delete;
	State &operator=(const State &) = delete;
	State(State &&) = delete;
	State &operator=(State &&) = delete;

	~State()
	{
		if (!worker.joinable())
			return;
		{
			const std::lock_guard lock(mutex);
			stopping = true;
		}
		worker.join();
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

	// The chunks an asynchronous arena is prepared in, each a multiple of
	// the page and of the alignment (a block may start at any chunk);
	// a synchronous arena is prepared as one.
	static std::vector<std::size_t> layout(std::size_t bytes, const ArenaOptions &o)
	{
		const std::size_t mapped = detail::ArenaMemory::mapped_size(bytes, o.pages);
		if (!o.async)
			return {0, mapped};
		const std::size_t unit =
			std::max(detail::ArenaMemory::fault_unit(o.pages), o.alignment);
		return chunk_starts(mapped, unit, o.chunk_bytes ? o.chunk_bytes : default_chunk,
				    detail::host_register_chunk_bytes());
	}

	// Where blocks must not cross: each chunk's end, and in a synchronous
	// arena mapped for a GPU, where the backend cuts its registration
	// (past 64 GiB, in calls of at most 64 GiB).
	static std::vector<std::size_t> boundaries(std::size_t bytes, const ArenaOptions &o)
	{
		std::vector<std::size_t> b = layout(bytes, o);
		if (!o.async && o.backend != nullptr) {
			const std::size_t align = std::max<std::size_t>(o.alignment, 1);
			const std::size_t cap =
				std::max(detail::host_register_chunk_bytes() / align * align,
					 align);
			b = chunk_starts(b.back(), align, cap, cap);
		}
		return {b.begin() + 1, b.end() - 1};
	}

	std::size_t chunk_offset(std::size_t k) const { return starts[k]; }
	std::size_t chunk_length(std::size_t k) const { return starts[k + 1] - starts[k]; }
	// The chunk that holds byte off of the mapping.
	std::size_t chunk_of(std::size_t off) const
	{
		return static_cast<std::size_t>(
			std::upper_bound(starts.begin(), starts.end() - 1, off) - starts.begin() -
			1);
	}

	// Chunk k: faulted in (an asynchronous arena's; the synchronous one's
	// memory was at creation), registered, mapped for the GPU.
	void prepare(Context &context, std::size_t k, unsigned threads)
	{
		const std::size_t off = chunk_offset(k);
		const std::size_t len = chunk_length(k);
		if (async)
			memory.prefault(off, len, threads);
		const Buffer b{memory.base() + off, len, Access::ReadWrite};
		Chunk c;
		c.registration.emplace(context.register_buffers({&b, 1}));
		if (backend != nullptr)
			c.mapping.emplace(backend->map(*c.registration));
		chunks[k] = std::move(c);
	}

	// The preparing thread: chunk after chunk, publishing each, until all
	// are ready, one fails or the arena is destroyed.
	void prepare_all(Context &context, const detail::ArenaChunkHook &hook, unsigned threads)
	{
		for (std::size_t k = 0; k < chunks.size(); ++k) {
			{
				const std::lock_guard lock(mutex);
				if (stopping)
					return;
			}
			std::exception_ptr err;
			try {
				if (hook)
					hook(k);
				prepare(context, k, threads);
			} catch (const Error &e) {
				err = std::make_exception_ptr(
					Error(e.err(), e.step(),
					      "arena chunk " + std::to_string(k) + " of " +
						      std::to_string(chunks.size()) + " (bytes " +
						      std::to_string(chunk_offset(k)) + " to " +
						      std::to_string(chunk_offset(k) +
								     chunk_length(k)) +
						      "): " + inner_what(e),
					      k, e.driver_status()));
			} catch (...) {
				err = std::current_exception();
			}
			{
				const std::lock_guard lock(mutex);
				if (err)
					failure = err;
				else
					prepared = k + 1;
			}
			changed.notify_all();
			if (err)
				return;
		}
	}

	// Wait until chunks [0, last] are prepared; throws the failure when one
	// of them failed.
	void wait_for(std::size_t last) const
	{
		std::unique_lock lock(mutex);
		changed.wait(lock, [&] { return prepared > last || failure; });
		if (prepared <= last)
			std::rethrow_exception(failure);
	}

	// Wait for the chunks that [off, off + len) touches.
	void wait_for_bytes(std::size_t off, std::size_t len) const
	{
		wait_for(chunk_of(off + std::max<std::size_t>(len, 1) - 1));
	}

	std::size_t ready_chunks() const
	{
		const std::lock_guard lock(mutex);
		return prepared;
	}

	std::vector<std::size_t> starts; ///< chunk k at starts[k]; the mapped end last
	detail::BlockAllocator allocator;
	bool fits_memlock; ///< checked before anything is mapped
	detail::ArenaMemory memory;
	PageKind kind;
	int numa_node;
	bool async;
	GpuBackend *backend;
	std::vector<Chunk> chunks; ///< [k] written before prepared passes k
	mutable std::mutex mutex;
	mutable std::condition_variable changed;
	std::size_t prepared = 0; ///< chunks [0, prepared) are ready
	std::exception_ptr failure; ///< of chunk prepared, which stopped the thread
	bool stopping = false; ///< the arena is being destroyed
	std::thread worker;
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

bool Arena::ready() const
{
	const State &s = state();
	return s.ready_chunks() == s.chunks.size();
}

void Arena::wait() const
{
	const State &s = state();
	s.wait_for(s.chunks.size() - 1);
}

std::size_t Arena::chunks() const
{
	return state().chunks.size();
}

std::size_t Arena::chunk_bytes() const
{
	return state().chunk_length(0);
}

void *Arena::allocate(std::size_t bytes)
{
	State &s = state();
	const std::size_t off = s.allocator.allocate(bytes);
	if (!s.async)
		return s.memory.base() + off;
	try {
		s.wait_for_bytes(off, bytes);
	} catch (...) {
		(void)s.allocator.release(off);
		throw;
	}
	return s.memory.base() + off;
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
	const State &s = state();
	if (s.chunks.size() != 1)
		throw Error(EINVAL, Step::Validate,
			    "arena: registered in " + std::to_string(s.chunks.size()) +
				    " chunks, not as one registration");
	s.wait_for(0);
	return *s.chunks[0].registration;
}

std::uint64_t Arena::pages_registered() const
{
	const State &s = state();
	std::uint64_t n = 0;
	const std::size_t ready = s.ready_chunks();
	for (std::size_t k = 0; k < ready; ++k)
		n += s.chunks[k].registration->pages();
	return n;
}

std::uint64_t Arena::pinned_pages() const
{
	const State &s = state();
	std::uint64_t n = 0;
	const std::size_t ready = s.ready_chunks();
	for (std::size_t k = 0; k < ready; ++k)
		n += s.chunks[k].registration->pinned_pages();
	return n;
}

const GpuMapping *Arena::gpu_mapping() const
{
	const State &s = state();
	if (s.backend == nullptr || s.chunks.size() != 1)
		return nullptr;
	s.wait_for(0);
	return &*s.chunks[0].mapping;
}

bool Arena::gpu_mapped() const
{
	return state().backend != nullptr;
}

std::uint64_t Arena::gpu_address(const void *p) const
{
	const State &s = state();
	if (s.backend == nullptr)
		throw Error(EINVAL, Step::GpuMap, "arena: not mapped for a GPU (no backend)");
	const auto a = reinterpret_cast<std::uintptr_t>(p);
	const auto first = reinterpret_cast<std::uintptr_t>(s.memory.base());
	if (a < first || a - first >= s.memory.mapped_bytes())
		throw Error(EINVAL, Step::Validate,
			    "arena: address " + std::to_string(a) + " is outside the arena");
	const std::size_t off = a - first;
	const std::size_t k = s.chunk_of(off);
	s.wait_for(k);
	return s.chunks[k].mapping->address(0) + (off - s.chunk_offset(k));
}

} // namespace svmbatch
