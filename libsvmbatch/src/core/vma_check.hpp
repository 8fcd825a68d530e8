// SPDX-License-Identifier: MIT
// Userspace mode's stand-in for the module's checks: read /proc/self/maps
// once and find the first range the kernel would refuse, with its errno.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <svmbatch/registration.hpp>

namespace svmbatch::detail {

struct VmaFault {
	int err = 0; ///< 0: every range is fine
	std::size_t range = 0; ///< index into ranges
	std::uintptr_t addr = 0; ///< first refused address
};

/// EFAULT: a page is unmapped, PROT_NONE, or a writable range covers a
/// read-only mapping.  EOPNOTSUPP: a writable range covers a shared file
/// mapping that needs dirty tracking (what svmbatch.ko refuses).
VmaFault check_vmas(std::span<const KernelRange> ranges);

/// Fault the ranges' pages in with MADV_POPULATE_READ/WRITE (Linux 5.14+),
/// as pinning would; errors as the module would report them.
VmaFault prefault(std::span<const KernelRange> ranges);

} // namespace svmbatch::detail
