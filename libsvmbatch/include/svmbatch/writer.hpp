// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include <svmbatch/api.h>
#include <svmbatch/fixed_buffers.hpp>
#include <svmbatch/io.hpp>
#include <svmbatch/parallel_io.hpp>

struct io_uring;

namespace svmbatch {

/// Write length bytes of caller buffer `buffer` at buffer_offset into fd
/// at file_offset.
using WriteRequest = IoRequest;
using WriteResult = IoResult;

struct WriterOptions : IoOptions {
	SyncMode sync = SyncMode::None;
};

/// Services writes from registered buffers with WRITE_FIXED (checkpoint
/// save, CPU offload), with the Reader's guarantees and parallelism: short
/// writes continued, errors (ENOSPC, EIO, EBADF...) per request with
/// nothing stranded in any ring, O_DIRECT alignment checked up front.  With
/// SyncMode, a failed sync of a file is the error of every request to that
/// file that had none (its data may not be durable).  io-wq, and most
/// filesystems' inode lock, serialise buffered writes to one file: writes
/// spread over several files scale better than one.
class SVMBATCH_API Writer : public detail::ParallelIo {
public:
	Writer(::io_uring &ring, const FixedBuffers &fixed, const WriterOptions &options = {});

	/// start(requests).wait(): one result per request, in request order.
	std::vector<WriteResult> write(std::span<const WriteRequest> requests)
	{
		return run(requests);
	}
};

} // namespace svmbatch
