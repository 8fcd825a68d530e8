// SPDX-License-Identifier: MIT
// Userspace mode's stand-in for the module's checks: look the ranges'
// mappings up (PROCMAP_QUERY, else the text of /proc/self/maps) and find
// the first range the kernel would refuse, with its errno.
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

/// How check_vmas() finds the mappings.  Auto: one PROCMAP_QUERY ioctl on
/// /proc/self/maps (Linux 6.11+) per mapping a range covers, the text of
/// /proc/self/maps where the kernel lacks it; Text: always the text.
enum class VmaLookup {
	Auto,
	Text,
};

/// For tests, so that both lookups run on every kernel.
void set_vma_lookup(VmaLookup lookup) noexcept;

/// Does this kernel answer PROCMAP_QUERY on /proc/self/maps?
bool vma_query_supported();

/// Fault the ranges' pages in with MADV_POPULATE_READ/WRITE (Linux 5.14+),
/// as pinning would; errors as the module would report them.
VmaFault prefault(std::span<const KernelRange> ranges);

} // namespace svmbatch::detail
