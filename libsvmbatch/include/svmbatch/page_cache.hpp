// SPDX-License-Identifier: MIT
// How much of a file the page cache holds: what a loader asks before it
// chooses between buffered reads (the data is cached: a memcpy) and
// O_DIRECT (it is not: skip the cache it would only fill).
#pragma once

#include <cstdint>

#include <svmbatch/api.h>

namespace svmbatch {

/// How page_cache_residency() counted.
enum class ResidencyMethod {
	/// The cachestat() system call (Linux 6.5+): one call, no mapping.
	Cachestat,
	/// mmap() + mincore() in bounded windows, where cachestat() is absent
	/// (ENOSYS), refused (EPERM: a seccomp filter, or a kernel that hides
	/// the cache of files the caller may not write) or unsupported
	/// (EOPNOTSUPP).
	Mincore,
};

/// "cachestat" or "mincore".
SVMBATCH_API const char *residency_method_name(ResidencyMethod method) noexcept;

/// The page-cache residency of a range of a file, in pages of page_size
/// bytes: those that hold a byte of the range inside the file.
struct PageCacheResidency {
	std::uint64_t resident_pages = 0; ///< in the page cache (dirty ones too)
	std::uint64_t total_pages = 0; ///< of the range, clipped at the end of the file
	std::uint64_t page_size = 0;
	ResidencyMethod method = ResidencyMethod::Cachestat;
};

/// The residency of [offset, offset + length) of the regular file open at
/// fd (length 0: to the end of the file; a range past the end counts no
/// pages).  A file the caller could not open for writing may read as all
/// resident: the kernel hides other users' page cache (mincore() then
/// reports every page present, and kernels that restrict cachestat()
/// refuse it), so a caller choosing O_DIRECT from this errs towards the
/// buffered path.  Error(errno, Step::Diagnostics): EBADF (fd is not an
/// open file), EINVAL (not a regular file), or the errno of cachestat(),
/// mmap() or mincore() (EACCES: fd is not open for reading, where the
/// count falls back to mincore()).
SVMBATCH_API PageCacheResidency page_cache_residency(int fd, std::uint64_t offset = 0,
						     std::uint64_t length = 0);

} // namespace svmbatch
