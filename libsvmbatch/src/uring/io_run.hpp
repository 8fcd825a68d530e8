// SPDX-License-Identifier: MIT
// One batch in flight: its pieces, the threads that drive the rings, and
// what each piece came to.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include <svmbatch/io.hpp>

#include "uring/driver_pool.hpp"
#include "uring/io_plan.hpp"
#include "uring/io_setup.hpp"

namespace svmbatch::detail {

/// How one piece (with its continuations) ended.
struct PieceOutcome {
	int err = 0;
	std::size_t bytes = 0;
};

class IoRun final : public DriverJob {
public:
	/// rings: how many of setup's rings (the first ones) drive this batch.
	IoRun(IoSetup setup, unsigned rings, std::vector<Piece> pieces,
	      std::vector<int> request_fds, std::shared_ptr<std::atomic<std::size_t>> submitted,
	      std::weak_ptr<DriverPool> pool);
	~IoRun() override;
	IoRun(const IoRun &) = delete;
	IoRun &operator=(const IoRun &) = delete;
	IoRun(IoRun &&) = delete;
	IoRun &operator=(IoRun &&) = delete;

	/// Drive ring i on the calling thread until the batch has no work left
	/// for it.  Every ring's driver must run once, or be skipped.
	void drive(unsigned i) noexcept override;
	/// Ring i will not be driven (no thread for it): the others take its
	/// share.
	void skip() noexcept override { driver_finished(); }
	std::vector<IoResult> wait();
	/// Stop the batch: see IoBatch::cancel().
	void cancel() noexcept;
	bool done() const noexcept { return done_.load(std::memory_order_acquire); }
	/// Wait until every driver finished.  From any thread, any number of
	/// times.
	void join() noexcept;

	static IoBatch batch(std::shared_ptr<IoRun> run) { return IoBatch(std::move(run)); }

	// For the ring drivers (io_run.cpp).
	const IoSetup &setup() const noexcept { return setup_; }
	unsigned rings() const noexcept override { return rings_; }
	/// How many pieces a ring of `depth` keeps in flight at most.
	unsigned fair_share(unsigned depth) const noexcept;
	/// The next piece nobody has taken, or nullptr.
	const Piece *claim(std::size_t &id) noexcept;
	PieceOutcome &outcome(std::size_t id) noexcept { return outcomes_[id]; }
	bool cancelled() const noexcept { return cancelled_.load(std::memory_order_relaxed); }
	void count_submitted(std::size_t n) noexcept { count_.fetch_add(n); }
	/// A ring refused submissions with err: its pieces fail with it, and
	/// so do those no ring took when every driver has stopped.
	void refused(int err) noexcept;

private:
	void driver_finished() noexcept;
	void finish() noexcept;
	void sync_files() noexcept;

	IoSetup setup_;
	std::vector<Piece> pieces_;
	std::vector<int> request_fds_;
	std::vector<PieceOutcome> outcomes_;
	std::vector<IoResult> results_;
	std::shared_ptr<std::atomic<std::size_t>> submitted_; ///< the engine's, set at the end
	std::atomic<std::size_t> count_{0}; ///< submitted by this batch
	std::weak_ptr<DriverPool> pool_; ///< where the batch is queued
	std::atomic<std::size_t> next_{0};
	unsigned rings_;
	std::atomic<unsigned> drivers_left_;
	std::atomic<int> refusal_{0};
	std::atomic<bool> cancelled_{false};
	std::atomic<bool> done_{false};
	bool waited_ = false;
	std::mutex error_mutex_;
	std::exception_ptr error_;
	std::mutex done_mutex_;
	std::condition_variable done_cv_;
};

} // namespace svmbatch::detail
