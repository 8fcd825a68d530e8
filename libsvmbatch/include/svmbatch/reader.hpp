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

/// Read length bytes of fd at file_offset into caller buffer `buffer` at
/// buffer_offset.
using ReadRequest = IoRequest;
using ReadResult = IoResult;
using ReaderOptions = IoOptions;

/// Services reads into registered buffers with READ_FIXED, on as many cores
/// as IoOptions::threads says (see Parallelism): bounded queue depth per
/// ring, requests cut in pieces of at most max_io_bytes, short reads
/// continued, and every request completes (success or errno) before its
/// batch does, so no ring entry is ever left referring to a request.
/// Invalid requests (buffer index or range outside the buffer, O_DIRECT
/// misalignment) are refused before anything is submitted with
/// Error(EINVAL, Step::Validate): what() names the request by its index,
/// buffer_index() is the request's buffer (no_index when there is no such
/// buffer).  A read into a buffer registered Access::ReadOnly is refused
/// the same way with EACCES.  A ring that refuses submissions fails the pieces not yet
/// queued (their IoResult::err); only if the pieces in flight cannot be
/// reaped either does the batch throw (Step::IoUringSubmit) from wait().
/// Several batches may be in flight: every ring serves them in start()
/// order, so the next batch begins on a ring as soon as that ring has no
/// pieces of the earlier one left (no idle cores between batches).  One
/// thread at a time may call a Reader; the caller's ring must not be used
/// by anyone else while a batch runs.  The Reader
/// must be destroyed before the FixedBuffers and the ring; its destructor
/// cancels and waits for a batch still in flight.
class SVMBATCH_API Reader : public detail::ParallelIo {
public:
	Reader(::io_uring &ring, const FixedBuffers &fixed, const ReaderOptions &options = {});

	/// start(requests).wait(): one result per request, in request order.
	std::vector<ReadResult> read(std::span<const ReadRequest> requests)
	{
		return run(requests);
	}
};

} // namespace svmbatch
