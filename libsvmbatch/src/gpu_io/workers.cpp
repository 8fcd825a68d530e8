// SPDX-License-Identifier: MIT
// IoWorkers: the I/O threads of an IoLoop (workers.hpp).
#include "gpu_io/workers.hpp"

#include <svmbatch/error.hpp>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <string>
#include <utility>

#include "core/cpu_relax.hpp"
#include "core/cpus.hpp"
#include "core/thread_name.hpp"

namespace svmbatch::detail {

namespace {

using Clock = std::chrono::steady_clock;

constexpr unsigned max_threads = 256;
constexpr unsigned max_depth = 4096;
/// Pieces a thread's queue holds.
constexpr std::size_t queue_slots = 4096;
/// A thread gets the next piece while it has less than this queued.
constexpr std::uint64_t keep_bytes = 64 << 10;
/// Bytes one io_uring_submit() hands over at most: a buffered transfer of
/// cached data is copied inside the call, and its completion is written
/// only when the call returns.
constexpr std::uint64_t submit_bytes = 256 << 10;
/// A thread with transfers in flight and nothing new waits for a
/// completion this long at most before it looks at its queue again.
constexpr long wait_ns = 50'000;
/// With more than this in flight, a thread waits for its next completion
/// asleep in io_uring rather than spinning: what io_uring could not copy
/// inline (a buffered read of tmpfs, among others) an io-wq worker of the
/// thread's ring copies, the next completion is a large copy away, and a
/// spinning thread takes the core that worker needs (1 MiB reads of tmpfs
/// ran at two thirds of the rate with every I/O thread spinning beside
/// its worker).  Below it, as for one small request, spinning catches the
/// completion sooner than a wake-up would.
constexpr std::uint64_t spin_in_flight_bytes = 256 << 10;
/// How long such a sleep lasts at most: its completions wake the thread
/// (a 1 MiB read of tmpfs takes an io-wq worker about 0.4 ms), so the
/// timeout only bounds how late a piece the pump queued meanwhile is
/// submitted, with more than spin_in_flight_bytes still ahead of it.  At
/// wait_ns instead, each thread woke about ten times a read for nothing,
/// and the wake-ups took cores from the workers.
constexpr long sleep_wait_ns = 1'000'000;

} // namespace

void end_piece(IoPiece &p, int status, IoCompletionSink &sink) noexcept
{
	if (!p.task) {
		sink.transferred(p.ticket);
		sink.complete(p.ticket, status, p.done, p.tag);
		return;
	}
	IoTask &t = *p.task;
	t.bytes.fetch_add(p.done, std::memory_order_relaxed);
	if (status) {
		const std::uint64_t mine = (std::uint64_t{p.index} << 32) |
					   static_cast<std::uint32_t>(-status);
		std::uint64_t cur = t.failure.load(std::memory_order_relaxed);
		while (mine < cur &&
		       !t.failure.compare_exchange_weak(cur, mine, std::memory_order_relaxed)) {
		}
	}
	if (t.left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
		const std::uint64_t f = t.failure.load(std::memory_order_relaxed);
		const int st = f == ~std::uint64_t{0} ? 0 : -static_cast<int>(f & 0xffffffffu);
		sink.transferred(p.ticket);
		sink.complete(p.ticket, st, t.bytes.load(std::memory_order_relaxed), p.tag);
	}
	p.task.reset();
}

/// One thread, its ring and the queue of pieces the pump hands it.  What
/// the pump writes and what the thread writes are on cache lines of their
/// own: the padding is the point.
class IoWorker { // NOLINT(clang-analyzer-optin.performance.Padding)
public:
	/// ring: borrowed (the IoWorkers' first) or owned (own is true).
	/// At most depth transfers and max_bytes in flight (one at least).
	IoWorker(io_uring *ring, std::optional<FixedBuffers> fixed, bool own, unsigned depth,
		 std::uint64_t max_bytes, bool async, std::chrono::microseconds spin,
		 IoCompletionSink &sink)
		: ring_(ring), fixed_(std::move(fixed)), own_(own), depth_(depth),
		  max_bytes_(max_bytes), async_(async), spin_(spin), sink_(sink),
		  queue_(queue_slots), slots_(depth), slot_bytes_(depth)
	{
		for (unsigned s = 0; s < depth; s++)
			free_.push_back(depth - 1 - s);
		thread_ = std::thread([this] { run(); });
		name_thread(thread_, "svmbatch-io");
	}
	IoWorker(const IoWorker &) = delete;
	IoWorker &operator=(const IoWorker &) = delete;
	IoWorker(IoWorker &&) = delete;
	IoWorker &operator=(IoWorker &&) = delete;
	~IoWorker()
	{
		cancel_.store(true, std::memory_order_relaxed);
		exit_.store(true, std::memory_order_seq_cst);
		wake();
		thread_.join();
		fixed_.reset(); /* unregistered before the ring goes */
		if (own_) {
			io_uring_queue_exit(ring_);
			delete ring_; // NOLINT(cppcoreguidelines-owning-memory): own_ says ours
		}
	}

	/// The pump's: queue a piece (false: full), waking the thread if it
	/// sleeps.
	bool push(IoPiece &p) noexcept
	{
		const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
		if (tail - head_.load(std::memory_order_acquire) >= queue_.size())
			return false;
		posted_bytes_ += p.len;
		queue_[tail % queue_.size()] = std::move(p);
		tail_.store(tail + 1, std::memory_order_seq_cst);
		if (parked_.load(std::memory_order_seq_cst))
			wake();
		return true;
	}
	/// The pump's estimate of the bytes queued here and not ended;
	/// fresh reads the thread's count (a cache line it writes).
	std::uint64_t outstanding(bool fresh) noexcept
	{
		if (fresh)
			seen_done_ = done_bytes_.load(std::memory_order_relaxed);
		return posted_bytes_ - seen_done_;
	}
	std::size_t busy() const noexcept
	{
		return tail_.load(std::memory_order_acquire) -
		       ended_.load(std::memory_order_acquire);
	}
	void cancel() noexcept
	{
		cancel_.store(true, std::memory_order_relaxed);
		wake();
	}

private:
	void wake() noexcept
	{
		wake_.fetch_add(1, std::memory_order_seq_cst);
		wake_.notify_one();
	}

	bool pop(IoPiece &p) noexcept
	{
		const std::uint64_t head = head_.load(std::memory_order_relaxed);
		if (head == tail_.load(std::memory_order_seq_cst))
			return false;
		p = std::move(queue_[head % queue_.size()]);
		head_.store(head + 1, std::memory_order_release);
		return true;
	}

	void run() noexcept
	{
		Clock::time_point idle_since = Clock::now();

		for (;;) {
			bool work = fill();
			work |= reap();
			if (cancel_.load(std::memory_order_relaxed) && !cancel_sent_)
				send_cancels();
			if (work) {
				idle_since = Clock::now();
				continue;
			}
			if (exit_.load(std::memory_order_acquire) && !in_flight_ &&
			    local_.empty() &&
			    head_.load(std::memory_order_relaxed) ==
				    tail_.load(std::memory_order_acquire))
				return;
			const bool spinning = Clock::now() - idle_since < spin_;
			if (in_flight_) {
				const bool small = in_flight_bytes_ <= spin_in_flight_bytes;
				if (spinning && small) {
					cpu_relax();
				} else {
					io_uring_cqe *cqe = nullptr;
					__kernel_timespec ts{0, small ? wait_ns : sleep_wait_ns};
					(void)io_uring_wait_cqe_timeout(ring_, &cqe, &ts);
				}
			} else if (spinning) {
				cpu_relax();
			} else {
				park();
			}
		}
	}

	/// Sleep until push() or the destructor wakes us.
	void park() noexcept
	{
		const std::uint32_t seen = wake_.load(std::memory_order_seq_cst);
		parked_.store(true, std::memory_order_seq_cst);
		if (head_.load(std::memory_order_relaxed) ==
			    tail_.load(std::memory_order_seq_cst) &&
		    !exit_.load(std::memory_order_seq_cst))
			wake_.wait(seen, std::memory_order_seq_cst);
		parked_.store(false, std::memory_order_relaxed);
	}

	/// Submit what is queued (continuations first), a submit_bytes at a
	/// time, while fewer than depth_ transfers are in flight and the next
	/// fits in max_bytes_ (or nothing is in flight).  Whether it submitted
	/// or ended anything.
	bool fill() noexcept
	{
		bool any = false;
		unsigned queued = 0;
		std::uint64_t bytes = 0;
		IoPiece p{};

		while (in_flight_ + queued < depth_) {
			if (bytes >= submit_bytes) {
				submit(queued);
				(void)reap();
				queued = 0;
				bytes = 0;
				continue;
			}
			if (!local_.empty()) {
				p = std::move(local_.front());
				local_.pop_front();
			} else if (!pop(p)) {
				break;
			}
			if (cancel_.load(std::memory_order_relaxed)) {
				end(p, -ECANCELED);
				any = true;
				continue;
			}
			const auto len = static_cast<unsigned>(p.len - p.done);
			const bool fits = in_flight_ + queued == 0 ||
					  in_flight_bytes_ + len <= max_bytes_;
			io_uring_sqe *sqe = fits ? io_uring_get_sqe(ring_) : nullptr;
			if (!sqe) {
				local_.push_front(std::move(p));
				break;
			}
			any = true;
			char *addr = p.addr + p.done;
			const std::uint64_t off = p.file_offset + p.done;
			if (p.write)
				io_uring_prep_write_fixed(sqe, p.fd, addr, len, off,
							  static_cast<int>(p.slot));
			else
				io_uring_prep_read_fixed(sqe, p.fd, addr, len, off,
							 static_cast<int>(p.slot));
			if (async_ && p.offload)
				sqe->flags |= IOSQE_ASYNC;
			const unsigned s = free_.back();
			free_.pop_back();
			io_uring_sqe_set_data64(sqe, s);
			slot_bytes_[s] = len;
			in_flight_bytes_ += len;
			if (!p.done && !p.index)
				sink_.submitted(p.ticket);
			slots_[s] = std::move(p);
			queued++;
			bytes += len;
		}
		if (queued)
			submit(queued);
		return any;
	}

	void submit(unsigned queued) noexcept
	{
		in_flight_ += queued;
		/* An entry the kernel did not take stays in the SQ: the next
		 * submit sends it. */
		(void)io_uring_submit(ring_);
	}

	void send_cancels() noexcept
	{
		for (unsigned s = 0; s < depth_; s++) {
			if (std::find(free_.begin(), free_.end(), s) != free_.end())
				continue;
			io_uring_sqe *sqe = io_uring_get_sqe(ring_);
			if (!sqe)
				return; /* the next round */
			io_uring_prep_cancel64(sqe, s, 0);
			io_uring_sqe_set_data64(sqe, cancel_tag);
		}
		(void)io_uring_submit(ring_);
		cancel_sent_ = true;
	}

	bool reap() noexcept
	{
		io_uring_cqe *cqe;
		unsigned head, seen = 0;

		io_uring_for_each_cqe(ring_, head, cqe)
		{
			seen++;
			const std::uint64_t s = io_uring_cqe_get_data64(cqe);
			if (s == cancel_tag)
				continue;
			IoPiece p = std::move(slots_[s]);
			free_.push_back(static_cast<unsigned>(s));
			in_flight_--;
			in_flight_bytes_ -= slot_bytes_[s];
			transferred(p, cqe->res);
		}
		io_uring_cq_advance(ring_, seen);
		return seen != 0;
	}

	void transferred(IoPiece &p, int res) noexcept
	{
		const bool cancelled = cancel_.load(std::memory_order_relaxed);

		if (res < 0) {
			/* A cancelled blocking transfer in io-wq ends interrupted. */
			end(p, res == -EINTR && cancelled ? -ECANCELED : res);
			return;
		}
		if (res == 0) {
			/* A read at the end of the file; a write that made no progress. */
			end(p, p.write ? -EIO : -ENODATA);
			return;
		}
		p.done += static_cast<unsigned>(res);
		if (p.done == p.len)
			end(p, 0);
		else if (cancelled)
			end(p, -ECANCELED);
		else
			local_.push_front(std::move(p));
	}

	/// p left this thread: ended, or on to its copy (a device read's).
	void end(IoPiece &p, int status) noexcept
	{
		const std::uint32_t len = p.len;

		if (p.to_device)
			sink_.staged(p, status);
		else
			end_piece(p, status, sink_);
		done_bytes_.fetch_add(len, std::memory_order_relaxed);
		ended_.fetch_add(1, std::memory_order_release);
		p.task.reset();
	}

	static constexpr std::uint64_t cancel_tag = ~std::uint64_t{0};

	io_uring *ring_;
	std::optional<FixedBuffers> fixed_;
	bool own_;
	unsigned depth_;
	std::uint64_t max_bytes_;
	bool async_;
	std::chrono::microseconds spin_;
	IoCompletionSink &sink_;

	// The queue: the pump writes tail_, the thread head_.
	std::vector<IoPiece> queue_;
	alignas(64) std::atomic<std::uint64_t> tail_{0};
	std::uint64_t posted_bytes_ = 0; ///< the pump's
	std::uint64_t seen_done_ = 0; ///< the pump's copy of done_bytes_
	alignas(64) std::atomic<std::uint64_t> head_{0};
	std::atomic<std::uint64_t> ended_{0};
	std::atomic<std::uint64_t> done_bytes_{0};
	alignas(64) std::atomic<bool> parked_{false};
	std::atomic<std::uint32_t> wake_{0};
	std::atomic<bool> cancel_{false};
	std::atomic<bool> exit_{false};

	// The thread's own.
	std::vector<IoPiece> slots_; ///< in flight, by user_data
	std::vector<unsigned> free_;
	std::deque<IoPiece> local_; ///< short transfers to continue
	std::vector<std::uint32_t> slot_bytes_; ///< asked of each slot in flight
	unsigned in_flight_ = 0;
	std::uint64_t in_flight_bytes_ = 0;
	bool cancel_sent_ = false;
	std::thread thread_;
};

IoWorkers::IoWorkers(const Registration &registration, const IoOptions &options,
		     std::uint64_t thread_bytes, std::chrono::microseconds spin,
		     IoCompletionSink &sink)
{
	const unsigned threads =
		std::min(options.threads ? options.threads : default_threads(1), max_threads);
	const unsigned depth = std::clamp(options.queue_depth, 1u, max_depth);
	Parallelism p = threads == 1 ? Parallelism::RingPerThread : options.parallelism;
	const unsigned depth0 = p == Parallelism::AsyncWorkers ?
					std::clamp(std::max(depth, threads), 1u, max_depth) :
					depth;

	/* Deep enough for an AsyncWorkers probe's outcome too. */
	const unsigned entries0 = std::clamp(std::max(depth, threads), 1u, max_depth);
	if (int ret = io_uring_queue_init(entries0, &ring0_, 0); ret < 0)
		throw Error(-ret, Step::IoUringRegister, "IoLoop: io_uring_queue_init failed");
	ring0_live_ = true;
	try {
		fixed_.emplace(register_fixed(registration, ring0_));
		std::vector<std::pair<io_uring *, FixedBuffers>> more;
		auto add_ring = [&](bool clone, bool &cloned) {
			auto *r = new io_uring{}; // NOLINT(cppcoreguidelines-owning-memory)
			if (int ret = io_uring_queue_init(depth, r, 0); ret < 0) {
				delete r; // NOLINT(cppcoreguidelines-owning-memory)
				throw Error(-ret, Step::IoUringRegister,
					    "IoLoop: io_uring_queue_init of an I/O thread's ring");
			}
			try {
				more.emplace_back(r, fixed_->mirror(*r, clone, cloned));
			} catch (...) {
				io_uring_queue_exit(r);
				delete r; // NOLINT(cppcoreguidelines-owning-memory)
				throw;
			}
		};
		auto drop_rings = [&] {
			for (auto &[r, f] : more) {
				f.reset();
				io_uring_queue_exit(r);
				delete r; // NOLINT(cppcoreguidelines-owning-memory)
			}
			more.clear();
		};
		try {
			if (threads > 1 && p != Parallelism::AsyncWorkers) {
				bool cloned = false;
				add_ring(options.clone_buffers, cloned);
				if (p == Parallelism::Auto && !cloned) {
					drop_rings();
					p = Parallelism::AsyncWorkers;
				} else {
					p = Parallelism::RingPerThread;
					for (unsigned i = 2; i < threads; i++)
						add_ring(options.clone_buffers, cloned);
				}
			}
		} catch (...) {
			drop_rings();
			throw;
		}
		async_ = p == Parallelism::AsyncWorkers && threads > 1;
		if (async_) {
			unsigned limits[2] = {threads, threads};
			if (io_uring_register_iowq_max_workers(&ring0_, limits) == 0) {
				limited_ = true;
				old_limits_[0] = limits[0];
				old_limits_[1] = limits[1];
			}
		}
		/* One ring for all of io-wq's workers: their bytes together. */
		std::uint64_t bytes0 = thread_bytes;
		if (async_)
			bytes0 = thread_bytes > UINT64_MAX / threads ? UINT64_MAX :
								       thread_bytes * threads;
		workers_.push_back(std::make_unique<IoWorker>(&ring0_, std::nullopt, false,
							      async_ ? depth0 : depth, bytes0,
							      async_, spin, sink));
		for (auto &[r, f] : more) {
			io_uring *ring = r;
			r = nullptr;
			workers_.push_back(std::make_unique<IoWorker>(ring, std::move(f), true,
								      depth, thread_bytes, false,
								      spin, sink));
		}
	} catch (...) {
		workers_.clear();
		fixed_.reset();
		io_uring_queue_exit(&ring0_);
		throw;
	}
}

IoWorkers::~IoWorkers()
{
	workers_.clear(); /* ends and joins the threads */
	if (limited_)
		(void)io_uring_register_iowq_max_workers(&ring0_, old_limits_);
	fixed_.reset();
	if (ring0_live_)
		io_uring_queue_exit(&ring0_);
}

bool IoWorkers::post(IoPiece &piece)
{
	const auto n = static_cast<unsigned>(workers_.size());

	if (piece.thread >= 0)
		return workers_[static_cast<unsigned>(piece.thread) % n]->push(piece);
	/* The current thread while it has little queued, else the next. */
	for (unsigned k = 0; k < n; k++) {
		IoWorker &w = *workers_[current_];
		if ((w.outstanding(false) < keep_bytes || w.outstanding(true) < keep_bytes) &&
		    w.push(piece))
			return true;
		current_ = (current_ + 1) % n;
	}
	/* All busy: the least loaded with room. */
	unsigned best = 0;
	for (unsigned i = 1; i < n; i++)
		if (workers_[i]->outstanding(false) < workers_[best]->outstanding(false))
			best = i;
	current_ = best;
	return workers_[best]->push(piece);
}

std::uint64_t IoWorkers::outstanding_bytes() noexcept
{
	std::uint64_t n = 0;

	for (auto &w : workers_)
		n += w->outstanding(true);
	return n;
}

void IoWorkers::cancel() noexcept
{
	for (auto &w : workers_)
		w->cancel();
}

std::size_t IoWorkers::busy() const noexcept
{
	std::size_t n = 0;

	for (const auto &w : workers_)
		n += w->busy();
	return n;
}

} // namespace svmbatch::detail
