// SPDX-License-Identifier: MIT
// What a Reader or a Writer is: its rings (the caller's, and private ones
// that hold the same fixed buffers), how they run, and the batch in flight.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include <svmbatch/fixed_buffers.hpp>
#include <svmbatch/io.hpp>

#include "uring/io_setup.hpp"

struct io_uring;

namespace svmbatch::detail {

class DriverPool;
class IoRun;
class PrivateRing;

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
	std::shared_ptr<IoRun> make_run(std::span<const IoRequest> requests);
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
