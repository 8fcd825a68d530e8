// SPDX-License-Identifier: MIT
// The pause of a spinning thread, one definition for the IoLoop's pump
// and I/O threads (gpu_io/) and the copy engine's thread (gpu/): core/
// is below both.
#pragma once

#include <thread>

namespace svmbatch::detail {

/// Tell the CPU this thread spins: PAUSE on x86, a yield elsewhere.
inline void cpu_relax() noexcept
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	std::this_thread::yield();
#endif
}

} // namespace svmbatch::detail
