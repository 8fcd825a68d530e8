// SPDX-License-Identifier: MIT
// IoLoop: a pump thread that services read and write requests which
// producers (GPU threads, CPU threads) publish in a ring of host memory,
// with READ_FIXED / WRITE_FIXED between files and a registration's buffers.  The ring's layout and protocol:
// <svmbatch/gpu_io/ring.h>; GPU producers: <svmbatch/gpu_io/device.cuh>.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include <svmbatch/api.h>
#include <svmbatch/io.hpp>
#include <svmbatch/gpu_io/ring.h>

namespace svmbatch {

class Context;
class Registration;
class GpuBackend;
class GpuCopyEngine;

namespace detail {
class IoLoopPump;
}

/// Host clock times (std::chrono::steady_clock, in ns since its epoch) of
/// one request's way through the loop, for measuring (IoLoopOptions::trace).
struct IoLoopTimes {
	std::uint64_t seen_ns = 0; ///< the pump took it out of its slot
	std::uint64_t submitted_ns = 0; ///< its first transfer went to io_uring
	std::uint64_t done_ns = 0; ///< its last transfer's completion was reaped
	std::uint64_t completed_ns = 0; ///< its completion was published (seq stored)
};

/// Device memory that SVMBATCH_IO_READ_DEVICE requests read into: an
/// address of the copy engine's GPU and the bytes from it.
struct IoLoopDeviceBuffer {
	std::uint64_t address = 0;
	std::uint64_t length = 0;
};

/// Reads into device memory (SVMBATCH_IO_READ_DEVICE): the loop reads each
/// piece into a chunk of its staging (READ_FIXED), the engine copies the
/// chunk to the device, and the request completes once its last copy
/// ended, so that a GPU producer copies nothing over PCIe itself.
struct IoLoopDeviceReads {
	/// Copies the staged bytes; must outlive the loop.  nullptr: no device
	/// reads (such requests are refused with -EINVAL).
	GpuCopyEngine *engine = nullptr;
	/// What a device read's request.buffer indexes (copied).
	std::span<const IoLoopDeviceBuffer> buffers;
	/// The caller buffer of the loop's registration that device reads are
	/// staged in, chunk_bytes at a time; requests naming it are refused
	/// (-EINVAL).  Map the registration for the engine's GPU
	/// (GpuBackend::map), so that its copies are DMA.
	std::uint32_t staging = 0;
	/// The most a piece of a device read moves: one chunk of staging (and
	/// at most io.max_io_bytes).
	std::size_t chunk_bytes = std::size_t{1} << 20;
	/// The most staging in use at once, in whole chunks (one at least; 0:
	/// every chunk): a piece waits for a chunk beyond it.  The chunk freed
	/// last is taken first, so the chunks in use stay few and warm, and no
	/// long queue of copies forms behind the copy engines.  On the H100
	/// host, 1 MiB device reads through 64 MiB of a 256 MiB staging ran at
	/// 1.03 of the host pipeline, through all of it at 0.99, with some
	/// requests waiting 100 ms behind the copies.
	std::size_t staged_bytes = std::size_t{64} << 20;
};

struct IoLoopOptions {
	/// Request slots (= completion slots): a power of two, 32 or more (a
	/// warp publishes up to 32 at once).
	unsigned slots = 1024;
	/// The I/O threads: how many (threads; 0: the CPUs less one for the
	/// pump, at most 16), how
	/// (parallelism, clone_buffers: as a Reader's rings), each ring's
	/// depth (queue_depth), the largest single transfer (max_io_bytes:
	/// longer requests go in pieces, to several threads), O_DIRECT's
	/// alignment.
	IoOptions io;
	/// Bytes an I/O thread keeps in flight at most (one transfer always
	/// goes); further pieces wait in its queue.  A buffered read that
	/// io_uring cannot copy inline (tmpfs's, among others) takes an io-wq
	/// worker for as long as it copies: at 32 reads of 1 MiB a ring, 16
	/// threads kept about 500 workers runnable on 16 cores.  The default
	/// keeps the queue depth for requests of 64 KiB and less.
	std::uint64_t thread_bytes = std::uint64_t{2} << 20;
	/// Requests the pump takes out of the ring in one sweep, at most,
	/// before it looks at deferred completions again.
	std::size_t max_batch = 256;
	/// Requests moving at once, at most; beyond, the pump leaves
	/// published requests in the ring (producers then wait for slots).
	std::size_t max_in_flight = 8192;
	/// Idle: poll for this long, then park; at once while more than
	/// 2 MiB are with the I/O threads (they have work for longer than a
	/// park, and a spinning pump takes a core from the copies).  The I/O
	/// threads likewise spin this long after their last transfer, then
	/// sleep until the pump hands them one.
	std::chrono::microseconds spin{200};
	/// Parked: poll every `park`.  The wake-up latency of a parked loop is
	/// at most this (plus the scheduler's).
	std::chrono::microseconds park{50};
	/// For measuring: ticket t < trace.size() gets its times in trace[t]
	/// (the caller's memory; read it after stop()).  Empty: none kept.
	std::span<IoLoopTimes> trace;
	/// Map the ring for this GPU (Registration::map), for device_queue().
	/// Not owned; used only by the constructor.
	GpuBackend *gpu = nullptr;
	/// Reads into device memory; none by default.
	IoLoopDeviceReads device;
};

/// What the pump did so far.
struct IoLoopStats {
	std::uint64_t requests = 0; ///< taken out of the ring
	std::uint64_t completed = 0; ///< completions written (errors included)
	std::uint64_t failed = 0; ///< of those, with a non-zero status
	std::uint64_t bytes = 0; ///< moved (read into buffers, written to files)
	std::uint64_t batches = 0; ///< sweeps of the ring that took requests
	std::uint64_t deferred = 0; ///< completions that waited for their slot
	std::uint64_t parks = 0; ///< times the pump went to sleep
	std::uint64_t undelivered = 0; ///< completions stop() gave up on
};

/// A pump thread servicing the request ring with READ_FIXED into, and
/// WRITE_FIXED from, the buffers of `registration`, and reads into device
/// memory through options.device (see
/// <svmbatch/gpu_io/ring.h> for the protocol).
///
/// The ring is host memory the loop allocates and registers itself, as a
/// registration of its own in the same Context, and maps for options.gpu:
/// not a buffer of the caller's registration, so that no request can read
/// over it; not cuMemHostAlloc'd, so that the loop works with any
/// GpuBackend (CUDA, HIP) or none (CPU producers).
///
/// The pump validates each request against the registration and the file
/// (unknown file: -EBADF; unknown buffer, a range reaching past it or an
/// unknown operation, a device read without options.device.engine or
/// beyond its buffer, a request naming the staging buffer: -EINVAL; a
/// read into a read-only buffer, a read
/// from a file not open for reading, a write to a file not open for
/// writing or opened O_APPEND: -EACCES; O_DIRECT misalignment: -EINVAL)
/// and completes it with that error, never touching memory outside the
/// request's range of its buffer.  Valid ones go at once, cut in pieces
/// of at most io.max_io_bytes, to the I/O threads, each with its own ring
/// (short transfers continued, -ENODATA when a read meets the end of the
/// file, the file's own errors such as -EIO and -ENOSPC as the status);
/// the thread that ends a request's last piece completes it then and
/// there.  Every request a producer published completes exactly once.
/// Idle, the pump spins for options.spin (not while more than 2 MiB are
/// with the I/O threads), then parks, polling every options.park; the
/// I/O threads spin as long, then sleep until woken.
///
/// The registration, its Context and the files must outlive the loop.
class SVMBATCH_API IoLoop {
public:
	/// Error(EINVAL, Step::Validate) for bad options (a device.staging that
	/// is not a writable buffer of the registration, or holds no chunk);
	/// the errors of registering the ring, its fixed buffers and its GPU
	/// mapping.
	IoLoop(Context &context, const Registration &registration,
	       const IoLoopOptions &options = {});
	IoLoop(const IoLoop &) = delete;
	IoLoop &operator=(const IoLoop &) = delete;
	IoLoop(IoLoop &&) = delete;
	IoLoop &operator=(IoLoop &&) = delete;
	/// stop(), then frees the ring: no producer may touch it after.
	~IoLoop();

	/// Requests name files by the index this returns.  The loop does not
	/// own fd; a file closed while requests use it fails them (-EBADF).
	/// Any thread.
	std::uint32_t add_file(int fd);

	/// The ring as CPU producers see it (IoLoopClient).
	svmbatch_io_queue host_queue() const noexcept;
	/// The ring as options.gpu's kernels see it.  std::logic_error without
	/// options.gpu.
	svmbatch_io_queue device_queue() const;
	/// The ring as a device sees it that mapped ring_memory() at
	/// device_address itself (hipHostRegister, cuMemHostRegister).
	svmbatch_io_queue queue_at(std::uint64_t device_address) const noexcept;
	/// The ring's host memory: header, requests, completions.
	void *ring_memory() const noexcept;
	std::size_t ring_bytes() const noexcept;

	/// Stop taking requests (the ring's `closed` flag), complete those
	/// published until then: the ones not yet reading with -ECANCELED,
	/// the reads in flight when they end (cancelled where io_uring can).
	/// Requests published during `drain` after that are completed with
	/// -ECANCELED too; completions whose slot no waiter frees within it
	/// count as undelivered.  Returns when the pump thread has ended.
	/// Idempotent, any thread; the producers should have stopped first.
	void stop(std::chrono::milliseconds drain = std::chrono::milliseconds(100)) noexcept;
	bool stopped() const noexcept;

	IoLoopStats stats() const noexcept;

private:
	std::unique_ptr<detail::IoLoopPump> pump_;
};

/// How a request ended, for a producer: status 0 or -errno, bytes read.
struct IoCompletion {
	int status = 0;
	std::uint64_t bytes = 0;
	std::uint64_t tag = 0;
};

/// A CPU producer of an IoLoop's ring (the GPU's is <svmbatch/gpu_io/device.cuh>):
/// the same protocol, with C++ atomics.  Any number of threads may share
/// one; each ticket must be waited for exactly once.
class SVMBATCH_API IoLoopClient {
public:
	explicit IoLoopClient(const svmbatch_io_queue &queue) noexcept : q_(queue) {}

	/// Claim a slot, fill it, publish it: the ticket to wait for.  Blocks
	/// while every slot is taken.  -1 once the loop is closed (nothing
	/// claimed), or when its pump ended while this waited for a slot.
	std::int64_t read(std::uint32_t file, std::uint64_t file_offset, std::uint64_t length,
			  std::uint32_t buffer, std::uint64_t buffer_offset,
			  std::uint64_t tag = 0) const noexcept;
	/// The same for writing length bytes of buffer at buffer_offset to
	/// file at file_offset; the bytes must be there before the call, and
	/// stay until the wait returned.
	std::int64_t write(std::uint32_t file, std::uint64_t file_offset, std::uint64_t length,
			   std::uint32_t buffer, std::uint64_t buffer_offset,
			   std::uint64_t tag = 0) const noexcept;
	/// The same for reading into device buffer `device_buffer` of
	/// IoLoopOptions::device at buffer_offset.
	std::int64_t read_device(std::uint32_t file, std::uint64_t file_offset,
				 std::uint64_t length, std::uint32_t device_buffer,
				 std::uint64_t buffer_offset, std::uint64_t tag = 0) const noexcept;
	/// Block until ticket's completion is there; free its slot.  Wait for
	/// your tickets in the order you took them.  {-ESHUTDOWN} if the pump
	/// ended without completing it (a ticket published after stop()).
	IoCompletion wait(std::int64_t ticket) const noexcept;
	/// Ticket's completion if it is there (slot freed), else nothing.
	bool try_wait(std::int64_t ticket, IoCompletion &out) const noexcept;

private:
	std::int64_t publish(std::uint32_t op, std::uint32_t file, std::uint64_t file_offset,
			     std::uint64_t length, std::uint32_t buffer,
			     std::uint64_t buffer_offset, std::uint64_t tag) const noexcept;

	svmbatch_io_queue q_;
};

} // namespace svmbatch
