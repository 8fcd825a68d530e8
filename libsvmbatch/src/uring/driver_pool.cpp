// SPDX-License-Identifier: MIT
// One thread per ring, serving the jobs posted to it in order.
#include "uring/driver_pool.hpp"

#include <algorithm>
#include <utility>

namespace svmbatch::detail {

DriverPool::~DriverPool()
{
	{
		std::lock_guard lock(mutex_);
		stop_ = true;
	}
	cv_.notify_all();
	for (std::thread &t : threads_)
		if (t.joinable())
			t.join();
}

void DriverPool::post(const std::shared_ptr<DriverJob> &job, unsigned first)
{
	std::lock_guard lock(mutex_);

	threads_.resize(jobs_.size());
	for (unsigned i = first; i < job->rings(); i++) {
		if (!threads_[i].joinable()) {
			try {
				threads_[i] = std::thread([this, i] { serve(i); });
			} catch (...) {
				job->skip(); /* the other rings take its share */
				continue;
			}
		}
		jobs_[i].push_back(job);
	}
	cv_.notify_all();
}

void DriverPool::withdraw(const DriverJob *job)
{
	std::vector<std::shared_ptr<DriverJob>> withdrawn;
	{
		std::lock_guard lock(mutex_);
		for (auto &queue : jobs_) {
			auto it = std::find_if(queue.begin(), queue.end(),
					       [job](const auto &j) { return j.get() == job; });
			if (it != queue.end()) {
				withdrawn.push_back(std::move(*it));
				queue.erase(it);
			}
		}
	}
	for (const auto &r : withdrawn)
		r->skip();
}

void DriverPool::serve(unsigned ring)
{
	for (;;) {
		std::shared_ptr<DriverJob> job;
		{
			std::unique_lock lock(mutex_);
			cv_.wait(lock, [&] { return stop_ || !jobs_[ring].empty(); });
			if (jobs_[ring].empty())
				return;
			job = std::move(jobs_[ring].front());
			jobs_[ring].pop_front();
		}
		job->drive(ring);
	}
}

} // namespace svmbatch::detail
