// SPDX-License-Identifier: MIT
// How many threads the library starts by default: one rule for the
// Reader and Writer, the IoLoop's I/O threads and the Arena's faulting.
#pragma once

#include <sched.h>

#include <algorithm>
#include <thread>

namespace svmbatch::detail {

/// Beyond this, more threads only add rings and memory.
inline constexpr unsigned max_default_threads = 16;

/// The CPUs this process may run on (its affinity), at least 1.
inline unsigned usable_cpus() noexcept
{
	cpu_set_t set;
	int n = 0;

	if (::sched_getaffinity(0, sizeof(set), &set) == 0)
		n = CPU_COUNT(&set);
	if (n <= 0)
		n = static_cast<int>(std::thread::hardware_concurrency());
	return std::max(1, n);
}

/// The threads a default of 0 means: the usable CPUs less `reserved`
/// (for a thread of the caller's own, as the IoLoop's pump), between 1
/// and max_default_threads.
inline unsigned default_threads(unsigned reserved = 0) noexcept
{
	unsigned n = usable_cpus();
	return std::clamp(n > reserved ? n - reserved : 1U, 1U, max_default_threads);
}

} // namespace svmbatch::detail
