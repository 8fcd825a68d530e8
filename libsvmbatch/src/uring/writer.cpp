// SPDX-License-Identifier: MIT
// Writer: WRITE_FIXED from registered buffers, on as many cores as asked.
#include <svmbatch/writer.hpp>

#include "uring/io_setup.hpp"

namespace svmbatch {

Writer::Writer(::io_uring &ring, const FixedBuffers &fixed, const WriterOptions &options)
	: ParallelIo(detail::IoOp::Write, ring, fixed, options, options.sync)
{}

} // namespace svmbatch
