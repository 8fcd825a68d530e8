// SPDX-License-Identifier: MIT
// Reader: READ_FIXED into registered buffers, on as many cores as asked.
#include <svmbatch/reader.hpp>

#include "uring/io_setup.hpp"

namespace svmbatch {

Reader::Reader(::io_uring &ring, const FixedBuffers &fixed, const ReaderOptions &options)
	: ParallelIo(detail::IoOp::Read, ring, fixed, options, SyncMode::None)
{}

} // namespace svmbatch
