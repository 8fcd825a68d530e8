// SPDX-License-Identifier: MIT
// The C API of page_cache_residency().
#include <svmbatch/capi.h>
#include <svmbatch/page_cache.hpp>

#include "capi/c_api_internal.hpp"

extern "C" {

int svmbatch_file_get_residency(int fd, uint64_t offset, uint64_t length,
				struct svmbatch_file_residency *residency)
{
	using namespace svmbatch::capi; // NOLINT(google-build-using-namespace): the C API's helpers

	if (!residency)
		return invalid("svmbatch_file_get_residency: residency is NULL");
	*residency = {};
	return guarded(nullptr, [&] {
		const svmbatch::PageCacheResidency r =
			svmbatch::page_cache_residency(fd, offset, length);

		residency->resident_pages = r.resident_pages;
		residency->total_pages = r.total_pages;
		residency->page_size = r.page_size;
		residency->method = r.method == svmbatch::ResidencyMethod::Cachestat ?
					    SVMBATCH_RESIDENCY_CACHESTAT :
					    SVMBATCH_RESIDENCY_MINCORE;
	});
}

} /* extern "C" */
