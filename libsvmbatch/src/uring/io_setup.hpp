// SPDX-License-Identifier: MIT
// What a batch needs of its engine, fixed while it runs: the operation,
// the rings and how entries are sent.
#pragma once

#include <vector>

#include <svmbatch/io.hpp>

struct io_uring;

namespace svmbatch::detail {

enum class IoOp { Read, Write };

/// One ring a driver thread runs pieces on.
struct RingSlot {
	::io_uring *ring;
	unsigned depth; ///< pieces in flight at most
};

struct IoSetup {
	IoOp op = IoOp::Read;
	bool async = false; ///< IOSQE_ASYNC on storage transfers (AsyncWorkers)
	SyncMode sync = SyncMode::None;
	std::vector<RingSlot> rings; ///< [0] is the caller's
};

} // namespace svmbatch::detail
