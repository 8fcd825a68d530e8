// SPDX-License-Identifier: MIT
// What a program, an example or a test looks at to see the library work:
// how much memory this process has pinned, and the module's counters.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <svmbatch/api.h>

namespace svmbatch {

/// This process's VmPin (mm->pinned_vm: pages the module, io_uring or a
/// GPU driver pinned for it) in bytes, from /proc/self/status.
/// Error(errno, Step::Diagnostics) when the file cannot be read, ENOENT
/// when it has no VmPin line.
SVMBATCH_API std::uint64_t process_pinned_bytes();

/// The module's counters: the "name value" lines of <debugfs_dir>/stats
/// (other lines are skipped).  Error(errno, Step::Diagnostics) with the
/// errno of the failed open, so a caller can say why: EACCES (debugfs is
/// root's), ENOENT (debugfs not mounted, or the module not loaded).
SVMBATCH_API std::map<std::string, std::uint64_t>
read_module_stats(const std::string &debugfs_dir = "/sys/kernel/debug/svmbatch");

} // namespace svmbatch
