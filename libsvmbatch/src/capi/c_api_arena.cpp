// SPDX-License-Identifier: MIT
// The C API of svmbatch::Arena.
#include <svmbatch/arena.hpp>
#include <svmbatch/capi.h>
#include <svmbatch/registration.hpp>

#include <cerrno>
#include <memory>

#include "capi/c_api_internal.hpp"

struct svmbatch_arena {
	svmbatch::Arena arena;
};

namespace {

using namespace svmbatch::capi; // NOLINT(google-build-using-namespace): the C API's helpers

svmbatch::PageKind to_kind(svmbatch_arena_pages p)
{
	switch (p) {
	case SVMBATCH_ARENA_PAGES_SMALL:
		return svmbatch::PageKind::Small;
	case SVMBATCH_ARENA_PAGES_HUGETLB:
		return svmbatch::PageKind::Hugetlb;
	case SVMBATCH_ARENA_PAGES_THP:
		break;
	}
	return svmbatch::PageKind::Thp;
}

svmbatch_arena_pages from_kind(svmbatch::PageKind k)
{
	switch (k) {
	case svmbatch::PageKind::Small:
		return SVMBATCH_ARENA_PAGES_SMALL;
	case svmbatch::PageKind::Hugetlb:
		return SVMBATCH_ARENA_PAGES_HUGETLB;
	case svmbatch::PageKind::Thp:
		break;
	}
	return SVMBATCH_ARENA_PAGES_THP;
}

} // namespace

extern "C" {

int svmbatch_arena_create(svmbatch_ctx *ctx, size_t bytes,
			  const struct svmbatch_arena_options *options, svmbatch_arena **arena)
{
	if (!ctx || !arena)
		return invalid("svmbatch_arena_create: NULL argument");
	*arena = nullptr;
	svmbatch::ArenaOptions opt;
	if (options) {
		switch (raw_value(options->pages)) {
		case SVMBATCH_ARENA_PAGES_THP:
		case SVMBATCH_ARENA_PAGES_SMALL:
		case SVMBATCH_ARENA_PAGES_HUGETLB:
			break;
		default:
			return invalid("svmbatch_arena_create: unknown pages");
		}
		if (options->flags & ~(SVMBATCH_ARENA_BIND_NODE | SVMBATCH_ARENA_ASYNC))
			return invalid("svmbatch_arena_create: unknown flags");
		if ((options->flags & SVMBATCH_ARENA_BIND_NODE) && options->numa_node < 0)
			return invalid("svmbatch_arena_create: negative numa_node");
		opt.pages = to_kind(options->pages);
		opt.numa_node = (options->flags & SVMBATCH_ARENA_BIND_NODE) ? options->numa_node :
									      -1;
		opt.prefault_threads = options->prefault_threads;
		if (options->alignment != 0)
			opt.alignment = options->alignment;
		if (options->flags & SVMBATCH_ARENA_ASYNC) {
			opt.async = true;
			opt.chunk_bytes = options->chunk_bytes;
		}
	}
	return guarded(nullptr, [&] {
		auto a = std::make_unique<svmbatch_arena>(
			svmbatch_arena{svmbatch::Arena(ctx->ctx, bytes, opt)});
		*arena = a.release(); /* owned by the caller until svmbatch_arena_destroy */
	});
}

int svmbatch_arena_wait(svmbatch_arena *arena)
{
	if (!arena)
		return invalid("svmbatch_arena_wait: NULL argument");
	return guarded(nullptr, [&] { arena->arena.wait(); });
}

int svmbatch_arena_ready(const svmbatch_arena *arena)
{
	if (!arena)
		return invalid("svmbatch_arena_ready: NULL argument");
	int ready = 0;
	const int rc = guarded(nullptr, [&] { ready = arena->arena.ready() ? 1 : 0; });
	return rc < 0 ? rc : ready;
}

void svmbatch_arena_destroy(svmbatch_arena *arena)
{
	delete arena; // NOLINT(cppcoreguidelines-owning-memory): C ownership
}

int svmbatch_arena_alloc(svmbatch_arena *arena, size_t bytes, void **block)
{
	if (!arena || !block)
		return invalid("svmbatch_arena_alloc: NULL argument");
	*block = nullptr;
	return guarded(nullptr, [&] { *block = arena->arena.allocate(bytes); });
}

int svmbatch_arena_free(svmbatch_arena *arena, void *block)
{
	if (!arena)
		return invalid("svmbatch_arena_free: NULL argument");
	return guarded(nullptr, [&] { arena->arena.deallocate(block); });
}

int svmbatch_arena_get_info(const svmbatch_arena *arena, struct svmbatch_arena_info *info)
{
	if (!arena || !info)
		return invalid("svmbatch_arena_get_info: NULL argument");
	return guarded(nullptr, [&] {
		const svmbatch::Arena &a = arena->arena;

		*info = {};
		info->base = a.base();
		info->capacity = a.capacity();
		info->mapped_bytes = a.mapped_bytes();
		info->used = a.used();
		info->free_bytes = a.free_bytes();
		info->largest_free = a.largest_free();
		info->live_blocks = a.live_blocks();
		info->alignment = a.alignment();
		info->pages = from_kind(a.page_kind());
		info->numa_node = a.numa_node();
		info->pages_registered = a.pages_registered();
		info->pinned_pages = a.pinned_pages();
	});
}

} /* extern "C" */
