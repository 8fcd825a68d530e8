// SPDX-License-Identifier: MIT
// What the Reader and the Writer share: requests, results, options, and the
// batch of requests in flight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <svmbatch/api.h>

namespace svmbatch {

/// Move length bytes between fd at file_offset and caller buffer `buffer`
/// of the FixedBuffers, at buffer_offset (read: file to buffer; write:
/// buffer to file).
struct IoRequest {
	int fd = -1;
	std::uint64_t file_offset = 0;
	std::size_t length = 0;
	std::size_t buffer = 0;
	std::size_t buffer_offset = 0;
};

/// How one request ended.  err is 0 when all length bytes moved, else the
/// errno of the first piece that failed (in file order): the read or
/// write's own errno, ENODATA when a read met the end of the file first,
/// ECANCELED when the batch was cancelled before the piece ran, or a sync's
/// errno (Writer).  bytes says how many moved either way.
struct IoResult {
	int err = 0;
	std::size_t bytes = 0;
};

/// How a Reader or Writer spreads its I/O over the machine's cores.  A
/// buffered READ_FIXED of cached data (and a buffered write) is a memcpy
/// done by whoever issues it: one ring on one thread is one core's memcpy.
enum class Parallelism {
	/// RingPerThread where the kernel clones a ring's buffer table
	/// (IORING_REGISTER_CLONE_BUFFERS, 6.12+: no new pins), else
	/// AsyncWorkers.  Chosen by probing the kernel, not by its version.
	Auto,
	/// The caller's ring alone; every transfer of a regular file or block
	/// device IOSQE_ASYNC, so the ring's io-wq workers (at most `threads`,
	/// IORING_REGISTER_IOWQ_MAX_WORKERS) do the copies (a pipe or socket
	/// waits by poll as usual).  io-wq runs buffered writes to one file one at a time.
	AsyncWorkers,
	/// `threads` rings, each driven by its own thread: the caller's ring
	/// and threads - 1 private ones holding the same buffer table (cloned
	/// where the kernel can, else registered again: see BufferSharing).
	RingPerThread,
};

/// How the private rings of RingPerThread hold the caller's fixed buffers.
enum class BufferSharing {
	/// No private rings (one thread, or AsyncWorkers).
	None,
	/// Cloned from the caller's ring: the same pinned pages, accounted once.
	Cloned,
	/// Registered again in every private ring: io_uring pins and accounts
	/// the pages once more per ring (VmPin and RLIMIT_MEMLOCK grow by the
	/// registration's size for each of them) until the Reader/Writer dies.
	Registered,
};

/// Options of a Reader or a Writer.
/// What a Writer's batch does once all its writes completed.
enum class SyncMode {
	None,
	/// fdatasync() each file written to (in the order first named).
	Fdatasync,
	/// fsync() each file written to.
	Fsync,
};

struct IoOptions {
	/// Requests in flight at most per ring (also capped by the caller's
	/// ring's SQ size for the caller's ring).
	unsigned queue_depth = 32;
	/// Largest single read or write; longer requests go in pieces.
	std::size_t max_io_bytes = std::size_t{1} << 20;
	/// For fds opened with O_DIRECT: memory address, file offset and
	/// length of every request must be multiples of this (the device's
	/// logical block size; 512 on most, 4096 on some).  Checked up front.
	std::size_t direct_alignment = 512;
	/// Threads (or io-wq workers) copying at once; 0: the CPUs this process
	/// may run on, at most 16.  1: the caller's ring alone, no thread.
	unsigned threads = 0;
	Parallelism parallelism = Parallelism::Auto;
	/// RingPerThread: clone the buffer table where the kernel can.  false
	/// registers it again in every private ring even there (to measure
	/// what a kernel without the clone pays).
	bool clone_buffers = true;
};

namespace detail {
class IoRun;
}

/// One start()'s requests, in flight.  wait() returns one result per
/// request, in request order, on the thread that calls it, once every
/// request completed; nothing of the batch is left in any ring then.  The
/// destructor cancels what has not completed and waits, so a batch never
/// outlives its I/O.  Move-only.  The Reader/Writer must outlive it.
class SVMBATCH_API IoBatch {
public:
	IoBatch(IoBatch &&) noexcept;
	IoBatch &operator=(IoBatch &&) noexcept;
	IoBatch(const IoBatch &) = delete;
	IoBatch &operator=(const IoBatch &) = delete;
	~IoBatch();

	/// Block until every request completed; results in request order.
	/// Only once per batch (std::logic_error after).
	std::vector<IoResult> wait();
	/// From any thread: pieces not yet submitted end with ECANCELED, those
	/// in flight are asked to cancel (IORING_OP_ASYNC_CANCEL; a buffered
	/// read of cached data usually completes anyway).  wait() still
	/// returns every result.
	void cancel() noexcept;
	/// Every request completed (wait() will not block).
	bool done() const noexcept;

private:
	friend class detail::IoRun;
	explicit IoBatch(std::shared_ptr<detail::IoRun> run);
	std::shared_ptr<detail::IoRun> run_;
};

} // namespace svmbatch
