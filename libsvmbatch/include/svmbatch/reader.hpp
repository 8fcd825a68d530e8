// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <svmbatch/api.h>
#include <svmbatch/fixed_buffers.hpp>

struct io_uring;

namespace svmbatch {

/// Read length bytes of fd at file_offset into caller buffer `buffer` of
/// the FixedBuffers, at buffer_offset.
struct ReadRequest {
	int fd = -1;
	std::uint64_t file_offset = 0;
	std::size_t length = 0;
	std::size_t buffer = 0;
	std::size_t buffer_offset = 0;
};

/// How one request ended.  err is 0 when all length bytes arrived, else
/// the errno of the read that failed, or ENODATA when the file ended first;
/// bytes says how many arrived either way.
struct ReadResult {
	int err = 0;
	std::size_t bytes = 0;
};

struct ReaderOptions {
	/// Reads in flight at most (also capped by the ring's SQ size).
	unsigned queue_depth = 32;
	/// Largest single read; longer requests are read in pieces.
	std::size_t max_read_bytes = std::size_t{1} << 20;
	/// For fds opened with O_DIRECT: memory address, file offset and
	/// length of every request must be multiples of this (the device's
	/// logical block size; 512 on most, 4096 on some).  Checked up front.
	std::size_t direct_alignment = 512;
};

/// Services a queue of reads into registered buffers with READ_FIXED:
/// bounded queue depth, short reads continued, and every request completes
/// (success or errno) before read() returns, so no ring entry is ever left
/// referring to a request.  Invalid requests (buffer index or range
/// outside the buffer, O_DIRECT misalignment) are refused before anything
/// is submitted with Error(EINVAL, Step::Validate): what() names the
/// request by its index, buffer_index() is the request's buffer (no_index
/// when there is no such buffer).  A ring that refuses submissions fails
/// the requests not yet queued (their ReadResult::err); only if the reads
/// in flight cannot be reaped either does read() throw (Step::IoUringSubmit).
/// Not thread-safe; the ring must not be used by anyone else during read().
class SVMBATCH_API Reader {
public:
	Reader(::io_uring &ring, const FixedBuffers &fixed, const ReaderOptions &options = {});

	/// One result per request, in request order.
	std::vector<ReadResult> read(std::span<const ReadRequest> requests);

	/// Reads submitted by the last read() (pieces and continuations).
	std::size_t submitted() const noexcept { return submitted_; }

private:
	::io_uring &ring_;
	const FixedBuffers &fixed_;
	ReaderOptions options_;
	std::size_t submitted_ = 0;
};

} // namespace svmbatch
