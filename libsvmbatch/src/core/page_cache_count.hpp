// SPDX-License-Identifier: MIT
// Not API: the two ways page_cache_residency() counts, each callable on
// its own so that the tests cover the mincore() path on every kernel.
#pragma once

#include <cstdint>
#include <optional>

#include <svmbatch/page_cache.hpp>

namespace svmbatch::detail {

/// Pages of mincore()'s window: 1 GiB of 4 KiB pages (a 256 KiB vector).
inline constexpr std::uint64_t mincore_window_pages = std::uint64_t{1} << 18;

/// The count by cachestat(), or nothing where the kernel has none or
/// refuses it (ENOSYS, EOPNOTSUPP, EPERM); Error for any other failure.
std::optional<PageCacheResidency> residency_by_cachestat(int fd, std::uint64_t offset,
							 std::uint64_t length);

/// The count by mmap() + mincore(), window_pages pages at a time.
PageCacheResidency residency_by_mincore(int fd, std::uint64_t offset, std::uint64_t length,
					std::uint64_t window_pages = mincore_window_pages);

} // namespace svmbatch::detail
