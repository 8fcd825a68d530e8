// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include <svmbatch/api.h>
#include <svmbatch/fixed_buffers.hpp>
#include <svmbatch/io.hpp>

struct io_uring;

namespace svmbatch {

namespace detail {
class IoEngine;
}

/// Write length bytes of caller buffer `buffer` at buffer_offset into fd
/// at file_offset.
using WriteRequest = IoRequest;
using WriteResult = IoResult;

/// What a Writer's batch does once all its writes completed.
enum class SyncMode {
	None,
	/// fdatasync() each file written to (in the order first named).
	Fdatasync,
	/// fsync() each file written to.
	Fsync,
};

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
class SVMBATCH_API Writer {
public:
	Writer(::io_uring &ring, const FixedBuffers &fixed, const WriterOptions &options = {});
	Writer(Writer &&) noexcept;
	Writer &operator=(Writer &&) noexcept;
	Writer(const Writer &) = delete;
	Writer &operator=(const Writer &) = delete;
	~Writer();

	/// Validate every request, then start writing them in the background.
	IoBatch start(std::span<const WriteRequest> requests);
	/// start(requests).wait(): one result per request, in request order.
	std::vector<WriteResult> write(std::span<const WriteRequest> requests);

	/// Writes submitted by the last batch that completed.
	std::size_t submitted() const noexcept;
	unsigned threads() const noexcept;
	Parallelism parallelism() const noexcept;
	BufferSharing buffer_sharing() const noexcept;

private:
	std::unique_ptr<detail::IoEngine> engine_;
};

} // namespace svmbatch
