// SPDX-License-Identifier: MIT
// The I/O threads of an IoLoop: each drives a ring of its own holding the
// registration's fixed buffers, takes the pieces the pump hands it, submits
// each at once and completes each request the moment its last piece ends,
// without waiting for any other request (no batch).
#pragma once

#include <liburing.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <svmbatch/fixed_buffers.hpp>
#include <svmbatch/io.hpp>

namespace svmbatch::detail {

/// A request cut in several pieces: what they share until the last ends.
struct IoTask {
	std::atomic<unsigned> left; ///< pieces not ended
	std::atomic<std::uint64_t> bytes{0};
	/// The first failed piece in file order and its errno: (k << 32) | err,
	/// or ~0 while none failed.
	std::atomic<std::uint64_t> failure{~std::uint64_t{0}};
	explicit IoTask(unsigned pieces) : left(pieces) {}
};

/// One READ_FIXED or WRITE_FIXED of a request, inside one fixed buffer.
struct IoPiece {
	std::uint64_t ticket = 0;
	std::uint64_t tag = 0;
	std::shared_ptr<IoTask> task; ///< nullptr: the request is this piece alone
	char *addr = nullptr;
	std::uint64_t file_offset = 0;
	std::uint32_t len = 0;
	std::uint32_t index = 0; ///< the piece's place in its request (file order)
	int fd = -1;
	unsigned slot = 0; ///< fixed buffer slot
	bool write = false;
	bool offload = false; ///< IOSQE_ASYNC (AsyncWorkers, a regular file or block device)
	/// A device read's: read into a chunk of staging (addr, slot), then
	/// copied to device_dst (IoCompletionSink::staged).
	bool to_device = false;
	std::uint64_t device_dst = 0;
	int chunk = -1; ///< the staging chunk it holds, or -1
	/// The I/O thread it must go to (modulo their number), or -1: any.
	int thread = -1;
	std::uint64_t done = 0; ///< bytes moved so far (short transfers continue)
};

/// Where requests end: IoLoopPump writes the completion slot (or defers
/// it).  Called from the I/O threads, concurrently.
class IoCompletionSink {
public:
	IoCompletionSink() = default;
	IoCompletionSink(const IoCompletionSink &) = delete;
	IoCompletionSink &operator=(const IoCompletionSink &) = delete;
	IoCompletionSink(IoCompletionSink &&) = delete;
	IoCompletionSink &operator=(IoCompletionSink &&) = delete;
	virtual void complete(std::uint64_t ticket, int status, std::uint64_t bytes,
			      std::uint64_t tag) noexcept = 0;
	/// A device read's piece left its I/O thread: read into its chunk
	/// (status 0, or -ENODATA with piece.done bytes), or failed.  The sink
	/// copies it on and ends it with end_piece().
	virtual void staged(IoPiece &piece, int status) noexcept = 0;
	/// Its first transfer was handed to io_uring / its last one ended.
	virtual void submitted(std::uint64_t ticket) noexcept = 0;
	virtual void transferred(std::uint64_t ticket) noexcept = 0;

protected:
	~IoCompletionSink() = default;
};

/// piece ended with status: its request too when it was the last piece
/// (the request's status is its first failed piece's, in file order).
void end_piece(IoPiece &piece, int status, IoCompletionSink &sink) noexcept;

class IoWorker;

/// The threads, started at construction, ended at destruction.  Only the
/// pump calls post().
class IoWorkers {
public:
	/// Rings like a Reader's (options.threads, parallelism, queue_depth,
	/// clone_buffers): RingPerThread gives every thread a ring with the
	/// fixed buffers (cloned where the kernel can); AsyncWorkers one
	/// thread whose ring sends transfers of regular files to io-wq
	/// (options.threads workers at most).  A ring keeps at most
	/// thread_bytes in flight (AsyncWorkers' ring: that per worker), at
	/// least one transfer.  Idle, a thread spins for spin, then sleeps
	/// until post() wakes it.
	IoWorkers(const Registration &registration, const IoOptions &options,
		  std::uint64_t thread_bytes, std::chrono::microseconds spin,
		  IoCompletionSink &sink);
	IoWorkers(const IoWorkers &) = delete;
	IoWorkers &operator=(const IoWorkers &) = delete;
	IoWorkers(IoWorkers &&) = delete;
	IoWorkers &operator=(IoWorkers &&) = delete;
	~IoWorkers();

	const FixedBuffers &fixed() const noexcept { return *fixed_; }
	bool async() const noexcept { return async_; }
	std::size_t size() const noexcept { return workers_.size(); }

	/// Hand a piece to a thread: piece.thread's if it names one, else the
	/// one the pump last used while it has fewer than a few pieces queued
	/// (an idle loop keeps one thread warm for one request at a time), else
	/// the next.  false when that thread's queue (or every thread's) is
	/// full (the pump keeps it and tries again).
	bool post(IoPiece &piece);
	/// Pieces not yet submitted end with -ECANCELED, those in flight are
	/// asked to cancel, short transfers are not continued.
	void cancel() noexcept;
	/// Pieces posted and not ended.
	std::size_t busy() const noexcept;
	/// Bytes posted and not ended (a device read's: until read).  The
	/// pump's: it reads each thread's count of what it ended.
	std::uint64_t outstanding_bytes() noexcept;

private:
	io_uring ring0_{};
	bool ring0_live_ = false;
	std::optional<FixedBuffers> fixed_;
	bool async_ = false;
	unsigned old_limits_[2] = {0, 0};
	bool limited_ = false;
	std::vector<std::unique_ptr<IoWorker>> workers_;
	unsigned current_ = 0; ///< the pump's
};

} // namespace svmbatch::detail
