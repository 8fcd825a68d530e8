// SPDX-License-Identifier: MIT
// A batch's pieces on its rings: each ring is driven by one thread that
// takes pieces from the shared list, keeps at most `depth` in flight,
// continues short transfers itself and reaps every completion before it
// stops, so no ring entry is ever left referring to the batch.
#include "uring/io_run.hpp"

#include <svmbatch/error.hpp>

#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>

namespace svmbatch::detail {

namespace {

/*
 * user_data of our entries: a tag in the top 16 bits, the slot below.  The
 * tag keeps a stray completion (the ring is the caller's) from being taken
 * for ours.
 */
constexpr std::uint64_t io_tag = std::uint64_t{0x5356} << 48;
constexpr std::uint64_t cancel_tag = std::uint64_t{0x5357} << 48;
constexpr std::uint64_t tag_mask = std::uint64_t{0xffff} << 48;

/* How long a driver sleeps before it looks at cancel() again. */
constexpr long wait_ns = 10'000'000;

class RingDriver {
public:
	RingDriver(IoRun &run, unsigned i)
		: run_(run), ring_(*run.setup().rings[i].ring), depth_(run.setup().rings[i].depth),
		  share_(run.fair_share(depth_)), slots_(depth_), busy_(depth_, false),
		  cancel_sent_(depth_, false)
	{
		for (unsigned s = depth_; s-- > 0;)
			free_.push_back(s);
	}

	void operator()()
	{
		for (;;) {
			if (run_.cancelled())
				cancel_all();
			else if (!refusal_)
				fill();
			bool work_left = !refusal_ && !run_.cancelled() &&
					 (!local_.empty() || more_);
			if (!in_flight_ && !cancels_ && !work_left)
				break;
			submit_and_reap();
		}
	}

private:
	struct Work {
		std::size_t id; ///< the piece whose outcome this adds to
		Piece p;
	};

	/* The next work: a continuation first, else a piece nobody took. */
	bool next(Work &w)
	{
		if (!local_.empty()) {
			w = local_.front();
			local_.pop_front();
			return true;
		}
		if (!more_)
			return false;
		std::size_t id = 0;
		const Piece *p = run_.claim(id);
		if (!p) {
			more_ = false;
			return false;
		}
		w = {id, *p};
		return true;
	}

	/* Queue work while slots and entries last. */
	void fill()
	{
		std::size_t queued = 0;
		Work w{};

		while (in_flight_ < share_ && next(w)) {
			io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
			if (!sqe) {
				local_.push_front(w); /* ours now: next round */
				break;
			}
			unsigned slot = free_.back();
			free_.pop_back();
			slots_[slot] = w;
			busy_[slot] = true;
			cancel_sent_[slot] = false;
			in_flight_++;
			const Piece &p = w.p;
			if (run_.setup().op == IoOp::Read)
				io_uring_prep_read_fixed(sqe, p.fd, p.addr,
							 static_cast<unsigned>(p.len),
							 p.file_offset, static_cast<int>(p.index));
			else
				io_uring_prep_write_fixed(sqe, p.fd, p.addr,
							  static_cast<unsigned>(p.len),
							  p.file_offset, static_cast<int>(p.index));
			if (run_.setup().async && p.offload)
				sqe->flags |= IOSQE_ASYNC;
			io_uring_sqe_set_data64(sqe, io_tag | slot);
			queued++;
		}
		run_.count_submitted(queued);
	}

	/*
	 * cancel(): what was not queued ends with ECANCELED, and every entry
	 * in flight is asked once to cancel (a read blocked on a pipe would
	 * otherwise never end).
	 */
	void cancel_all()
	{
		Work w{};
		while (next(w))
			fail(w.id, ECANCELED);
		for (unsigned s = 0; s < depth_; s++) {
			if (!busy_[s] || cancel_sent_[s])
				continue;
			io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
			if (!sqe)
				return; /* next round, once submitted */
			io_uring_prep_cancel64(sqe, io_tag | s, 0);
			io_uring_sqe_set_data64(sqe, cancel_tag);
			cancel_sent_[s] = true;
			cancels_++;
		}
	}

	void fail(std::size_t id, int err)
	{
		PieceOutcome &o = run_.outcome(id);
		if (!o.err)
			o.err = err;
	}

	void submit_and_reap()
	{
		__kernel_timespec ts{0, wait_ns};
		io_uring_cqe *cqe = nullptr;
		int ret = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);

		if (ret < 0 && ret != -ETIME && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY)
			refuse(-ret);
		reap();
	}

	/*
	 * The ring refused a submission: what has not been queued fails with
	 * its errno; what is in flight is still reaped.  A second refusal
	 * while entries are outstanding means they cannot be reaped either.
	 */
	void refuse(int err)
	{
		if (refusal_ && (in_flight_ || cancels_))
			throw Error(err, Step::IoUringSubmit,
				    "io_uring_submit failed and entries in flight cannot be reaped");
		refusal_ = err;
		run_.refused(err);
		for (const Work &w : local_)
			fail(w.id, err);
		local_.clear();
	}

	void reap()
	{
		io_uring_cqe *cqe;
		unsigned head, seen = 0;

		io_uring_for_each_cqe(&ring_, head, cqe)
		{
			seen++;
			std::uint64_t ud = io_uring_cqe_get_data64(cqe);
			if ((ud & tag_mask) == cancel_tag) {
				cancels_--;
			} else if ((ud & tag_mask) == io_tag && (ud & ~tag_mask) < depth_ &&
				   busy_[ud & ~tag_mask]) {
				auto slot = static_cast<unsigned>(ud & ~tag_mask);
				free_.push_back(slot);
				busy_[slot] = false;
				in_flight_--;
				complete(slots_[slot], cqe->res);
			}
		}
		io_uring_cq_advance(&ring_, seen);
	}

	void complete(const Work &w, int ret)
	{
		PieceOutcome &o = run_.outcome(w.id);

		if (ret < 0) {
			/* A cancelled blocking read in io-wq ends interrupted. */
			int err = ret == -EINTR && run_.cancelled() ? ECANCELED : -ret;
			fail(w.id, err);
			return;
		}
		if (ret == 0) {
			/* A read at the end of the file; a write that made no progress. */
			fail(w.id, run_.setup().op == IoOp::Read ? ENODATA : EIO);
			return;
		}
		auto n = static_cast<std::size_t>(ret);
		o.bytes += n;
		if (n == w.p.len)
			return;
		if (run_.cancelled()) {
			fail(w.id, ECANCELED);
			return;
		}
		Piece rest = w.p;
		rest.addr += n;
		rest.len -= n;
		rest.file_offset += n;
		local_.push_front({w.id, rest});
	}

	IoRun &run_;
	::io_uring &ring_;
	unsigned depth_;
	unsigned share_; ///< in flight at most: the ring's fair share of the batch
	std::vector<Work> slots_;
	std::vector<bool> busy_;
	std::vector<bool> cancel_sent_;
	std::vector<unsigned> free_;
	std::deque<Work> local_; ///< short transfers to continue
	unsigned in_flight_ = 0; ///< transfers submitted and not reaped
	bool more_ = true; ///< the shared list may have pieces left
	unsigned cancels_ = 0; ///< our entries that are not transfers, in flight
	int refusal_ = 0;
};

} // namespace

IoRun::IoRun(IoSetup setup, unsigned rings, std::vector<Piece> pieces, std::vector<int> request_fds,
	     std::shared_ptr<std::atomic<std::size_t>> submitted, std::weak_ptr<DriverPool> pool)
	: setup_(std::move(setup)), pieces_(std::move(pieces)),
	  request_fds_(std::move(request_fds)), outcomes_(pieces_.size()),
	  submitted_(std::move(submitted)), pool_(std::move(pool)), rings_(rings),
	  drivers_left_(rings)
{}

/*
 * Pieces not yet taken end with ECANCELED, those in flight are asked to
 * cancel, and the rings that have not begun the batch (it may be queued
 * behind one that never ends by itself) skip it.
 */
void IoRun::cancel() noexcept
{
	cancelled_.store(true);
	if (auto pool = pool_.lock()) {
		try {
			pool->withdraw(this);
		} catch (...) {
			/* No memory to withdraw: the rings will see the flag. */
		}
	}
}

IoRun::~IoRun()
{
	cancel();
	join();
}

/*
 * A buffered transfer of cached data completes inline, in the submitting
 * thread: a ring that took `depth` pieces at once would copy them all
 * while the other rings had none.  So each ring keeps at most half its
 * fair share of the batch in flight (at least one, at most depth).
 */
unsigned IoRun::fair_share(unsigned depth) const noexcept
{
	const std::size_t halves = std::size_t{2} * rings_;
	const std::size_t share = (pieces_.size() + halves - 1) / halves;

	return static_cast<unsigned>(std::clamp<std::size_t>(share, 1, depth));
}

const Piece *IoRun::claim(std::size_t &id) noexcept
{
	if (next_.load(std::memory_order_relaxed) >= pieces_.size())
		return nullptr;
	id = next_.fetch_add(1, std::memory_order_relaxed);
	return id < pieces_.size() ? &pieces_[id] : nullptr;
}

void IoRun::refused(int err) noexcept
{
	int none = 0;

	refusal_.compare_exchange_strong(none, err);
}

void IoRun::drive(unsigned i) noexcept
{
	try {
		RingDriver driver(*this, i);
		driver();
	} catch (...) {
		{
			std::lock_guard lock(error_mutex_);
			if (!error_)
				error_ = std::current_exception();
		}
		cancel();
	}
	driver_finished();
}

void IoRun::driver_finished() noexcept
{
	if (drivers_left_.fetch_sub(1, std::memory_order_acq_rel) == 1)
		finish();
}

/* The last driver: pieces no ring took, the results, the syncs. */
void IoRun::finish() noexcept
{
	const int refusal = refusal_.load();
	const std::size_t taken = std::min(next_.load(), pieces_.size());

	for (std::size_t k = taken; k < pieces_.size(); k++)
		if (!outcomes_[k].err)
			outcomes_[k].err = refusal ? refusal : ECANCELED;
	try {
		results_.assign(request_fds_.size(), IoResult{});
	} catch (...) {
		std::lock_guard lock(error_mutex_);
		if (!error_)
			error_ = std::current_exception();
	}
	if (results_.size() == request_fds_.size()) {
		for (std::size_t k = 0; k < pieces_.size(); k++) {
			IoResult &r = results_[pieces_[k].request];
			r.bytes += outcomes_[k].bytes;
			if (!r.err)
				r.err = outcomes_[k].err;
		}
		if (setup_.op == IoOp::Write && setup_.sync != SyncMode::None)
			sync_files();
	}
	submitted_->store(count_.load());
	std::lock_guard lock(done_mutex_);
	done_.store(true, std::memory_order_release);
	done_cv_.notify_all();
}

/* Each file written to, synced once; a failure is its requests' error. */
void IoRun::sync_files() noexcept
{
	std::vector<int> synced;

	for (int fd : request_fds_) {
		if (std::find(synced.begin(), synced.end(), fd) != synced.end())
			continue;
		try {
			synced.push_back(fd);
		} catch (...) {
			return;
		}
		int ret = setup_.sync == SyncMode::Fsync ? ::fsync(fd) : ::fdatasync(fd);
		if (ret == 0)
			continue;
		int err = errno;
		for (std::size_t i = 0; i < request_fds_.size(); i++)
			if (request_fds_[i] == fd && !results_[i].err)
				results_[i].err = err;
	}
}

void IoRun::join() noexcept
{
	std::unique_lock lock(done_mutex_);

	done_cv_.wait(lock, [this] { return done_.load(std::memory_order_acquire); });
}

std::vector<IoResult> IoRun::wait()
{
	if (waited_)
		throw std::logic_error("svmbatch: IoBatch::wait() called twice");
	waited_ = true;
	join();
	if (error_)
		std::rethrow_exception(error_);
	return std::move(results_);
}

} // namespace svmbatch::detail

namespace svmbatch {

IoBatch::IoBatch(std::shared_ptr<detail::IoRun> run) : run_(std::move(run))
{}
IoBatch::IoBatch(IoBatch &&) noexcept = default;

IoBatch &IoBatch::operator=(IoBatch &&other) noexcept
{
	if (this != &other) {
		if (run_) {
			run_->cancel();
			run_->join();
		}
		run_ = std::move(other.run_);
	}
	return *this;
}

IoBatch::~IoBatch()
{
	if (run_ && !run_->done()) {
		run_->cancel();
		run_->join();
	}
}

std::vector<IoResult> IoBatch::wait()
{
	if (!run_)
		throw std::logic_error("svmbatch: IoBatch::wait() on a moved-from batch");
	return run_->wait();
}

void IoBatch::cancel() noexcept
{
	if (run_)
		run_->cancel();
}

bool IoBatch::done() const noexcept
{
	return !run_ || run_->done();
}

} // namespace svmbatch
