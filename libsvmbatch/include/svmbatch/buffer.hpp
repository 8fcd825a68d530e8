// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>

namespace svmbatch {

/// What the device (GPU, io_uring) may do with a buffer.  ReadOnly buffers
/// are pinned without write access: they may live in read-only mappings and
/// can be the source of a write to a file, never the target of a read.
enum class Access {
	ReadWrite,
	ReadOnly,
};

/// One caller buffer, at byte granularity.  The library rounds it to pages.
struct Buffer {
	void *ptr = nullptr;
	std::size_t len = 0;
	Access access = Access::ReadWrite;
};

} // namespace svmbatch
