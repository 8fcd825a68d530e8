// SPDX-License-Identifier: MIT
// IoLoop: the pump thread between the request ring (gpu_io/ring.h) and a
// Reader.
#include <svmbatch/context.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/fixed_buffers.hpp>
#include <svmbatch/gpu/backend.hpp>
#include <svmbatch/gpu_io/loop.hpp>
#include <svmbatch/reader.hpp>
#include <svmbatch/registration.hpp>

#include <liburing.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpu_io/ring_memory.hpp"

namespace svmbatch {

namespace detail {

namespace {

using Clock = std::chrono::steady_clock;

/// A request the pump took out of its slot.
struct Taken {
	std::uint64_t ticket;
	svmbatch_io_request rq;
};

/// A completion waiting for its slot.
struct Pending {
	std::uint64_t ticket;
	int status;
	std::uint64_t bytes;
	std::uint64_t tag;
};

/// A Reader batch and the tickets of its requests, in request order.
struct InFlight {
	IoBatch batch;
	std::vector<Taken> taken;
};

void check_options(const IoLoopOptions &o)
{
	if (o.slots < 32 || (o.slots & (o.slots - 1)) || o.slots > (1u << 24))
		throw Error(EINVAL, Step::Validate,
			    "IoLoop slots must be a power of two from 32 to 2^24, not " +
				    std::to_string(o.slots));
	if (!o.max_batch || !o.max_in_flight)
		throw Error(EINVAL, Step::Validate,
			    "IoLoop max_batch and max_in_flight must be > 0");
}

void cpu_relax() noexcept
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	std::this_thread::yield();
#endif
}

} // namespace

class IoLoopPump {
public:
	IoLoopPump(Context &context, const Registration &registration, const IoLoopOptions &o);
	IoLoopPump(const IoLoopPump &) = delete;
	IoLoopPump &operator=(const IoLoopPump &) = delete;
	IoLoopPump(IoLoopPump &&) = delete;
	IoLoopPump &operator=(IoLoopPump &&) = delete;
	~IoLoopPump();

	std::uint32_t add_file(int fd);
	const RingMemory &ring() const noexcept { return mem_; }
	const GpuMapping &gpu() const noexcept { return gpu_; }
	void stop(std::chrono::milliseconds drain) noexcept;
	bool stopped() const noexcept { return exited_.load(std::memory_order_acquire); }
	IoLoopStats stats() const noexcept;

private:
	void run() noexcept;
	bool drain(bool stopping);
	void start(std::vector<Taken> taken);
	bool reap();
	bool deliver_deferred();
	/// Validate against the registration and the files: 0 or -errno.
	int refuse(const svmbatch_io_request &rq, int &fd) const;
	void complete(std::uint64_t ticket, int status, std::uint64_t bytes, std::uint64_t tag);
	bool try_deliver(const Pending &p) noexcept;

	IoLoopOptions options_;
	RingMemory mem_;
	std::vector<Buffer> buffers_;
	std::optional<Registration> ring_reg_;
	GpuMapping gpu_;
	UringQueue uring_;
	std::optional<FixedBuffers> fixed_;
	std::optional<Reader> reader_;

	mutable std::mutex files_mu_;
	std::vector<int> files_;

	// The pump thread's own.
	std::uint64_t head_ = 0;
	std::size_t reading_ = 0;
	std::deque<InFlight> in_flight_;
	std::deque<Pending> deferred_;

	std::mutex stop_mu_; ///< one stop() joins the thread
	std::atomic<bool> stop_{false};
	std::atomic<bool> exited_{false};
	std::atomic<std::int64_t> drain_ms_{100};
	struct Counters {
		std::atomic<std::uint64_t> requests{0}, completed{0}, failed{0}, bytes{0},
			batches{0}, deferred{0}, parks{0}, undelivered{0};
	} counters_;
	std::thread thread_;
};

IoLoopPump::IoLoopPump(Context &context, const Registration &registration, const IoLoopOptions &o)
	: options_((check_options(o), o)), mem_(o.slots),
	  buffers_(registration.buffers().begin(), registration.buffers().end()),
	  uring_(std::max(64u, 2 * o.io.queue_depth))
{
	options_.gpu = nullptr;
	Buffer ring{mem_.base(), mem_.bytes(), Access::ReadWrite};
	ring_reg_.emplace(context.register_buffers({&ring, 1}));
	if (o.gpu)
		gpu_ = o.gpu->map(*ring_reg_);
	fixed_.emplace(register_fixed(registration, uring_.get()));
	reader_.emplace(uring_.get(), *fixed_, options_.io);
	thread_ = std::thread([this] { run(); });
}

IoLoopPump::~IoLoopPump()
{
	stop(std::chrono::milliseconds(drain_ms_.load()));
	reader_.reset();
	fixed_.reset();
}

std::uint32_t IoLoopPump::add_file(int fd)
{
	std::lock_guard lock(files_mu_);

	if (files_.size() >= UINT32_MAX)
		throw Error(EMFILE, Step::Validate, "IoLoop: too many files");
	files_.push_back(fd);
	return static_cast<std::uint32_t>(files_.size() - 1);
}

void IoLoopPump::stop(std::chrono::milliseconds drain) noexcept
{
	std::lock_guard lock(stop_mu_);

	if (!stop_.load(std::memory_order_relaxed)) {
		drain_ms_.store(drain.count());
		std::atomic_ref(mem_.header()->closed).store(1, std::memory_order_release);
		stop_.store(true, std::memory_order_release);
	}
	if (thread_.joinable())
		thread_.join();
}

IoLoopStats IoLoopPump::stats() const noexcept
{
	const Counters &c = counters_;
	return {c.requests.load(), c.completed.load(), c.failed.load(), c.bytes.load(),
		c.batches.load(),  c.deferred.load(),  c.parks.load(),	c.undelivered.load()};
}

int IoLoopPump::refuse(const svmbatch_io_request &rq, int &fd) const
{
	{
		std::lock_guard lock(files_mu_);
		if (rq.file >= files_.size() || files_[rq.file] < 0)
			return -EBADF;
		fd = files_[rq.file];
	}
	if (rq.flags != SVMBATCH_IO_READ)
		return -EINVAL;
	if (rq.buffer >= buffers_.size())
		return -EINVAL;
	const Buffer &b = buffers_[rq.buffer];
	if (rq.buffer_offset > b.len || rq.length > b.len - rq.buffer_offset)
		return -EINVAL;
	if (b.access == Access::ReadOnly)
		return -EACCES;
	return 0;
}

bool IoLoopPump::try_deliver(const Pending &p) noexcept
{
	svmbatch_io_completion &c = mem_.completions()[p.ticket & mem_.mask()];
	std::atomic_ref seq(c.seq);

	if (seq.load(std::memory_order_acquire) != svmbatch_io_seq_free(p.ticket))
		return false; // the waiter of ticket - slots still holds it
	c.status = p.status;
	c.bytes = p.bytes;
	c.tag = p.tag;
	seq.store(svmbatch_io_seq_published(p.ticket), std::memory_order_release);
	counters_.completed.fetch_add(1, std::memory_order_relaxed);
	if (p.status)
		counters_.failed.fetch_add(1, std::memory_order_relaxed);
	counters_.bytes.fetch_add(p.bytes, std::memory_order_relaxed);
	return true;
}

void IoLoopPump::complete(std::uint64_t ticket, int status, std::uint64_t bytes, std::uint64_t tag)
{
	Pending p{ticket, status, bytes, tag};

	if (!try_deliver(p)) {
		deferred_.push_back(p);
		counters_.deferred.fetch_add(1, std::memory_order_relaxed);
	}
}

bool IoLoopPump::deliver_deferred()
{
	std::size_t before = deferred_.size();

	std::erase_if(deferred_, [this](const Pending &p) { return try_deliver(p); });
	return deferred_.size() != before;
}

/// Take published requests in ticket order, up to a batch; refuse the bad
/// ones (and, stopping, every one) at once; start the others.
bool IoLoopPump::drain(bool stopping)
{
	std::vector<Taken> take;
	svmbatch_io_request *slots = mem_.requests();

	while (take.size() < options_.max_batch &&
	       (stopping || reading_ + take.size() < options_.max_in_flight)) {
		svmbatch_io_request &slot = slots[head_ & mem_.mask()];
		std::atomic_ref seq(slot.seq);
		if (seq.load(std::memory_order_acquire) != svmbatch_io_seq_published(head_))
			break;
		take.push_back({head_, slot});
		seq.store(svmbatch_io_seq_next_lap(mem_.mask(), head_), std::memory_order_release);
		head_++;
	}
	if (take.empty())
		return false;
	counters_.requests.fetch_add(take.size(), std::memory_order_relaxed);
	std::vector<Taken> valid;
	for (const Taken &t : take) {
		int fd = -1;
		int err = stopping ? -ECANCELED : refuse(t.rq, fd);
		if (err || !t.rq.length)
			complete(t.ticket, err, 0, t.rq.tag);
		else
			valid.push_back(t);
	}
	if (!valid.empty())
		start(std::move(valid));
	return true;
}

void IoLoopPump::start(std::vector<Taken> taken)
{
	try {
		std::vector<IoRequest> rqs;
		{
			std::lock_guard lock(files_mu_);
			for (const Taken &t : taken)
				rqs.push_back({files_[t.rq.file], t.rq.file_offset, t.rq.length,
					       t.rq.buffer, t.rq.buffer_offset});
		}
		IoBatch batch = reader_->start(rqs);
		counters_.batches.fetch_add(1, std::memory_order_relaxed);
		reading_ += taken.size();
		in_flight_.push_back({std::move(batch), std::move(taken)});
		return;
	} catch (const Error &e) {
		if (taken.size() == 1) {
			complete(taken[0].ticket, -e.err(), 0, taken[0].rq.tag);
			return;
		}
	} catch (const std::exception &) {
		// Out of memory: the requests were taken from the ring, so
		// they complete, with the error.
		for (const Taken &t : taken)
			complete(t.ticket, -ENOMEM, 0, t.rq.tag);
		return;
	}
	// One request refused the batch (O_DIRECT alignment): one by one.
	for (Taken &t : taken)
		start({t});
}

bool IoLoopPump::reap()
{
	bool any = false;

	for (auto it = in_flight_.begin(); it != in_flight_.end();) {
		if (!it->batch.done()) {
			++it;
			continue;
		}
		std::vector<IoResult> results = it->batch.wait();
		for (std::size_t i = 0; i < results.size(); i++)
			complete(it->taken[i].ticket, -results[i].err, results[i].bytes,
				 it->taken[i].rq.tag);
		reading_ -= it->taken.size();
		it = in_flight_.erase(it);
		any = true;
	}
	return any;
}

void IoLoopPump::run() noexcept
{
	std::optional<Clock::time_point> idle_since, deadline, quiet_since;

	for (;;) {
		const bool stopping = stop_.load(std::memory_order_acquire);
		bool work = false;
		try {
			if (stopping && !deadline) {
				deadline =
					Clock::now() + std::chrono::milliseconds(drain_ms_.load());
				for (InFlight &f : in_flight_)
					f.batch.cancel();
			}
			work |= drain(stopping);
			work |= reap();
			work |= deliver_deferred();
		} catch (const std::exception &) {
			// Out of memory in the pump: back off and try again.
			std::this_thread::sleep_for(options_.park);
		}
		const auto now = Clock::now();
		if (stopping) {
			// Done once nothing reads, every completion is out (or
			// the drain time is up), and no producer published for
			// a while.
			quiet_since = work ? now : quiet_since.value_or(now);
			const bool quiet = now - *quiet_since >=
					   std::min<Clock::duration>(std::chrono::milliseconds(5),
								     *deadline - *quiet_since);
			if (in_flight_.empty() &&
			    ((deferred_.empty() && quiet) || now >= *deadline))
				break;
		}
		if (work) {
			idle_since.reset();
			continue;
		}
		if (!idle_since)
			idle_since = now;
		if (now - *idle_since < options_.spin) {
			cpu_relax();
		} else {
			counters_.parks.fetch_add(1, std::memory_order_relaxed);
			std::this_thread::sleep_for(options_.park);
		}
	}
	counters_.undelivered.fetch_add(deferred_.size());
	deferred_.clear();
	std::atomic_ref(mem_.header()->stopped).store(1, std::memory_order_release);
	exited_.store(true, std::memory_order_release);
}

} // namespace detail

IoLoop::IoLoop(Context &context, const Registration &registration, const IoLoopOptions &options)
	: pump_(std::make_unique<detail::IoLoopPump>(context, registration, options))
{}

IoLoop::~IoLoop() = default;

std::uint32_t IoLoop::add_file(int fd)
{
	return pump_->add_file(fd);
}

svmbatch_io_queue IoLoop::host_queue() const noexcept
{
	return pump_->ring().queue_at(reinterpret_cast<std::uintptr_t>(pump_->ring().base()));
}

svmbatch_io_queue IoLoop::device_queue() const
{
	if (!pump_->gpu())
		throw std::logic_error("svmbatch: IoLoop has no GPU mapping (IoLoopOptions::gpu)");
	return pump_->ring().queue_at(pump_->gpu().address(0));
}

svmbatch_io_queue IoLoop::queue_at(std::uint64_t device_address) const noexcept
{
	return pump_->ring().queue_at(device_address);
}

void *IoLoop::ring_memory() const noexcept
{
	return pump_->ring().base();
}

std::size_t IoLoop::ring_bytes() const noexcept
{
	return pump_->ring().bytes();
}

void IoLoop::stop(std::chrono::milliseconds drain) noexcept
{
	pump_->stop(drain);
}

bool IoLoop::stopped() const noexcept
{
	return pump_->stopped();
}

IoLoopStats IoLoop::stats() const noexcept
{
	return pump_->stats();
}

} // namespace svmbatch
