// SPDX-License-Identifier: MIT
// A Reader's or Writer's rings: how many threads, which parallelism (by
// probing the kernel), the private rings and their fixed buffers.
#include "uring/io_engine.hpp"

#include <svmbatch/error.hpp>

#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/cpus.hpp"
#include "uring/driver_pool.hpp"
#include "uring/io_plan.hpp"
#include "uring/io_run.hpp"
#include "uring/owned_ring.hpp"

namespace svmbatch::detail {

namespace {

constexpr unsigned max_threads = 256;
constexpr unsigned max_private_depth = 4096;

} // namespace

/// A ring of the Reader/Writer's own, holding the caller's fixed buffers
/// at the same slots.
class PrivateRing {
public:
	explicit PrivateRing(unsigned entries) : ring_(entries, "a private ring") {}
	~PrivateRing() { fixed_.reset(); /* unregistered before the ring goes */ }
	PrivateRing(const PrivateRing &) = delete;
	PrivateRing &operator=(const PrivateRing &) = delete;
	PrivateRing(PrivateRing &&) = delete;
	PrivateRing &operator=(PrivateRing &&) = delete;

	::io_uring &ring() { return ring_.get(); }
	void hold(FixedBuffers fixed) { fixed_.emplace(std::move(fixed)); }

private:
	OwnedRing ring_;
	std::optional<FixedBuffers> fixed_;
};

IoEngine::IoEngine(IoOp op, ::io_uring &ring, const FixedBuffers &fixed, const IoOptions &options,
		   SyncMode sync)
	: fixed_(fixed), options_(options),
	  submitted_(std::make_shared<std::atomic<std::size_t>>(0))
{
	if (options_.max_io_bytes == 0 || options_.direct_alignment == 0)
		throw Error(EINVAL, Step::Validate,
			    "max_io_bytes and direct_alignment must be > 0");
	if (!fixed)
		throw Error(EINVAL, Step::Validate, "the FixedBuffers are not registered");
	/* One transfer's length is 32 bits, and no fixed buffer is longer. */
	options_.max_io_bytes = std::min(options_.max_io_bytes, io_uring_max_buffer_bytes);
	threads_ = std::min(options_.threads ? options_.threads : default_threads(), max_threads);
	const unsigned sq = ring.sq.ring_entries;
	const unsigned depth = std::clamp(options_.queue_depth, 1u, sq);
	setup_ = {op, false, sync, {{&ring, depth}}};
	if (threads_ == 1)
		return; /* the caller's ring on the calling thread */

	Parallelism p = options_.parallelism;
	if (p != Parallelism::AsyncWorkers) {
		const unsigned private_depth =
			std::clamp(options_.queue_depth, 1u, max_private_depth);
		const bool clone = options_.clone_buffers;
		if (p == Parallelism::Auto) {
			/* Probe with one ring: without the clone, no ring per thread. */
			if (clone)
				add_private_rings(fixed, 1, private_depth, true);
			if (sharing_ == BufferSharing::Cloned) {
				add_private_rings(fixed, threads_ - 2, private_depth, true);
				p = Parallelism::RingPerThread;
			} else {
				private_.clear();
				setup_.rings.resize(1);
				sharing_ = BufferSharing::None;
				p = Parallelism::AsyncWorkers;
			}
		} else {
			add_private_rings(fixed, threads_ - 1, private_depth, clone);
		}
	}
	if (p == Parallelism::AsyncWorkers) {
		setup_.async = true;
		setup_.rings[0].depth =
			std::clamp(std::max(options_.queue_depth, threads_), 1u, sq);
		limit_io_workers(ring);
	}
	parallelism_ = p;
}

/*
 * n more rings of depth entries, each holding the caller's fixed buffers:
 * cloned where asked and possible, else registered again.  Several are
 * made at once, each on a thread of its own: a ring and its table cost
 * about a millisecond each, and a first load waits for all of them.
 */
void IoEngine::add_private_rings(const FixedBuffers &fixed, unsigned n, unsigned depth, bool clone)
{
	struct Made {
		std::unique_ptr<PrivateRing> ring;
		bool cloned = false;
		std::exception_ptr error;
	};
	std::vector<Made> made(n);
	auto make = [&](unsigned i) {
		try {
			made[i].ring = std::make_unique<PrivateRing>(depth);
			made[i].ring->hold(
				fixed.mirror(made[i].ring->ring(), clone, made[i].cloned));
		} catch (...) {
			made[i].error = std::current_exception();
		}
	};
	if (n == 1) {
		make(0);
	} else {
		std::vector<std::thread> threads;
		threads.reserve(n);
		try {
			for (unsigned i = 0; i < n; i++)
				threads.emplace_back(make, i);
		} catch (...) {
			// No thread to spare: the rest made here, one by one.
			for (auto i = static_cast<unsigned>(threads.size()); i < n; i++)
				make(i);
		}
		for (std::thread &t : threads)
			t.join();
	}
	for (Made &m : made)
		if (m.error)
			std::rethrow_exception(m.error);
	for (Made &m : made) {
		sharing_ = m.cloned ? BufferSharing::Cloned : BufferSharing::Registered;
		setup_.rings.push_back({&m.ring->ring(), depth});
		private_.push_back(std::move(m.ring));
	}
}

/*
 * io-wq workers of the caller's ring at most threads_ (bounded: regular
 * files; unbounded: sockets, pipes); the old limits come back on
 * destruction.
 */
void IoEngine::limit_io_workers(::io_uring &ring)
{
	unsigned limits[2] = {threads_, threads_};

	if (io_uring_register_iowq_max_workers(&ring, limits) == 0) {
		limited_ = &ring;
		old_limits_[0] = limits[0];
		old_limits_[1] = limits[1];
	}
}

IoEngine::~IoEngine()
{
	std::vector<std::shared_ptr<IoRun>> runs;
	{
		std::lock_guard lock(mutex_);
		runs = std::move(in_flight_);
	}
	for (const auto &run : runs)
		run->cancel();
	for (const auto &run : runs)
		run->join();
	pool_.reset(); /* before the rings its threads drive */
	private_.clear();
	if (limited_)
		(void)io_uring_register_iowq_max_workers(limited_, old_limits_);
}

std::shared_ptr<IoRun> IoEngine::make_run(std::span<const IoRequest> requests)
{
	std::vector<Piece> pieces =
		plan_pieces(requests, fixed_, options_, setup_.op == IoOp::Read);
	std::vector<int> fds(requests.size());

	std::transform(requests.begin(), requests.end(), fds.begin(),
		       [](const IoRequest &r) { return r.fd; });
	auto run = std::make_shared<IoRun>(setup_, rings_for(requests), std::move(pieces),
					   std::move(fds), submitted_, pool());
	std::lock_guard lock(mutex_);
	std::erase_if(in_flight_, [](const auto &r) { return r->done(); });
	in_flight_.push_back(run);
	return run;
}

bool IoEngine::idle()
{
	std::lock_guard lock(mutex_);

	return std::all_of(in_flight_.begin(), in_flight_.end(),
			   [](const auto &r) { return r->done(); });
}

/*
 * Buffered writes to one file are serialised by its inode lock (ext4,
 * xfs, tmpfs...): more threads than files only spin on it (on the H100
 * machine 16 threads wrote one file slower than one thread did).  So a
 * batch of buffered writes uses one ring per file at most; O_DIRECT
 * writes and reads use them all.
 */
unsigned IoEngine::rings_for(std::span<const IoRequest> requests) const
{
	const auto all = static_cast<unsigned>(setup_.rings.size());

	if (setup_.op != IoOp::Write || all == 1)
		return all;
	std::vector<int> files;
	for (const IoRequest &r : requests) {
		if (std::find(files.begin(), files.end(), r.fd) != files.end())
			continue;
		if (is_direct(r.fd))
			return all;
		files.push_back(r.fd);
		if (files.size() >= all)
			return all;
	}
	return std::max(1u, static_cast<unsigned>(files.size()));
}

IoBatch IoEngine::start(std::span<const IoRequest> requests)
{
	std::shared_ptr<IoRun> run = make_run(requests);

	pool()->post(run, 0);
	return IoRun::batch(std::move(run));
}

std::vector<IoResult> IoEngine::run(std::span<const IoRequest> requests)
{
	/* Batches in flight: the caller's ring is its pool thread's now. */
	if (!idle())
		return start(requests).wait();
	std::shared_ptr<IoRun> run = make_run(requests);

	if (run->rings() > 1)
		pool()->post(run, 1);
	run->drive(0);
	return run->wait();
}

const std::shared_ptr<DriverPool> &IoEngine::pool()
{
	if (!pool_)
		pool_ = std::make_shared<DriverPool>(static_cast<unsigned>(setup_.rings.size()));
	return pool_;
}

} // namespace svmbatch::detail
