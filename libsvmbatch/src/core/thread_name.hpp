// SPDX-License-Identifier: MIT
// Names for the library's own threads (the IoLoop's pump and I/O threads,
// the copy engine's poller), so that top -H, ps -L and perf say which of
// a process's threads are ours and what each does.
#pragma once

#include <pthread.h>

#include <thread>

namespace svmbatch::detail {

/// Name thread t (at most 15 characters: the kernel's limit), from the
/// thread that started it, so that the name is there once the owner's
/// constructor returned.  Best effort: a name is for people, nothing
/// depends on it.
inline void name_thread(std::thread &t, const char *name) noexcept
{
	(void)::pthread_setname_np(t.native_handle(), name);
}

} // namespace svmbatch::detail
