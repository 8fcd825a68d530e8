// SPDX-License-Identifier: MIT
// The threads that drive an engine's rings, one per ring, and the jobs
// queued for each.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace svmbatch::detail {

/// Work for some of a pool's rings (a batch: IoRun).
class DriverJob {
public:
	DriverJob() = default;
	DriverJob(const DriverJob &) = delete;
	DriverJob &operator=(const DriverJob &) = delete;
	DriverJob(DriverJob &&) = delete;
	DriverJob &operator=(DriverJob &&) = delete;
	virtual ~DriverJob() = default;
	/// How many rings, the first ones, drive this job.
	virtual unsigned rings() const noexcept = 0;
	/// Drive ring i on the calling thread until the job has none left.
	virtual void drive(unsigned i) noexcept = 0;
	/// Ring i will not drive it: the others take its share.
	virtual void skip() noexcept = 0;
};

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

	/// Rings [first, job->rings()) drive job; a ring without a thread
	/// skips it.
	void post(const std::shared_ptr<DriverJob> &job, unsigned first);
	/// job was cancelled: the rings that have not begun it skip it (it
	/// may be queued behind a job that never ends by itself).
	void withdraw(const DriverJob *job);

private:
	void serve(unsigned ring);

	std::mutex mutex_;
	std::condition_variable cv_;
	std::vector<std::deque<std::shared_ptr<DriverJob>>> jobs_; ///< per ring, in order
	std::vector<std::thread> threads_; ///< per ring, or not started
	bool stop_ = false;
};

} // namespace svmbatch::detail
