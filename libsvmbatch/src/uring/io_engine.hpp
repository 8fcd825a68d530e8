// SPDX-License-Identifier: MIT
// What a Reader or a Writer is: its rings (the caller's, and private ones
// that hold the same fixed buffers), how they run, and the batch in flight.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include <svmbatch/fixed_buffers.hpp>
#include <svmbatch/io.hpp>
#include <svmbatch/writer.hpp>

struct io_uring;

namespace svmbatch::detail {

enum class IoOp { Read, Write };

/// One ring a driver thread runs pieces on.
struct RingSlot {
	::io_uring *ring;
	unsigned depth; ///< pieces in flight at most
};

/// What one batch needs of its engine, fixed while it runs.
struct IoSetup {
	IoOp op = IoOp::Read;
	bool async = false; ///< IOSQE_ASYNC on every entry (AsyncWorkers)
	SyncMode sync = SyncMode::None;
	std::vector<RingSlot> rings; ///< [0] is the caller's
};

class PrivateRing;
class IoRun;

/// One thread per ring, kept for the engine's life, so that a ring is
/// always driven by the same task (io_uring's per-task state and io-wq are
/// set up once, not per batch).  Started on first use.
class DriverPool {
public:
	explicit DriverPool(unsigned rings) : jobs_(rings) {}
	~DriverPool();
	DriverPool(const DriverPool &) = delete;
	DriverPool &operator=(const DriverPool &) = delete;
	DriverPool(DriverPool &&) = delete;
	DriverPool &operator=(DriverPool &&) = delete;

	/// Rings [first, run->rings()) drive run; a ring without a thread
	/// skips it.
	void post(const std::shared_ptr<IoRun> &run, unsigned first);
	/// run was cancelled: the rings that have not begun it skip it (it
	/// may be queued behind a batch that never ends by itself).
	void withdraw(const IoRun *run);

private:
	void serve(unsigned ring);

	std::mutex mutex_;
	std::condition_variable cv_;
	std::vector<std::deque<std::shared_ptr<IoRun>>> jobs_; ///< per ring, in start order
	std::vector<std::thread> threads_; ///< per ring, or not started
	bool stop_ = false;
};

class IoEngine {
public:
	IoEngine(IoOp op, ::io_uring &ring, const FixedBuffers &fixed, const IoOptions &options,
		 SyncMode sync);
	~IoEngine();
	IoEngine(const IoEngine &) = delete;
	IoEngine &operator=(const IoEngine &) = delete;
	IoEngine(IoEngine &&) = delete;
	IoEngine &operator=(IoEngine &&) = delete;

	IoBatch start(std::span<const IoRequest> requests);
	std::vector<IoResult> run(std::span<const IoRequest> requests);

	std::size_t submitted() const noexcept { return submitted_->load(); }
	unsigned threads() const noexcept { return threads_; }
	Parallelism parallelism() const noexcept { return parallelism_; }
	BufferSharing buffer_sharing() const noexcept { return sharing_; }

private:
	std::shared_ptr<IoRun> begin(std::span<const IoRequest> requests);
	unsigned rings_for(std::span<const IoRequest> requests) const;
	bool idle();
	void add_private_rings(const FixedBuffers &fixed, unsigned n, unsigned depth, bool clone);
	void limit_io_workers(::io_uring &ring);
	const std::shared_ptr<DriverPool> &pool();

	const FixedBuffers &fixed_;
	IoOptions options_;
	unsigned threads_ = 1;
	Parallelism parallelism_ = Parallelism::RingPerThread;
	BufferSharing sharing_ = BufferSharing::None;
	IoSetup setup_;
	std::vector<std::unique_ptr<PrivateRing>> private_;
	::io_uring *limited_ = nullptr; ///< the ring whose io-wq limits we set
	unsigned old_limits_[2] = {0, 0};
	std::mutex mutex_; ///< guards in_flight_
	std::vector<std::shared_ptr<IoRun>> in_flight_; ///< batches not known done
	std::shared_ptr<DriverPool> pool_; ///< the runs hold weak references
	/// Shared with the runs, which may outlive a moved-from engine's use.
	std::shared_ptr<std::atomic<std::size_t>> submitted_;
};

} // namespace svmbatch::detail
