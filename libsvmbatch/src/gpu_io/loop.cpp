// SPDX-License-Identifier: MIT
// IoLoop: the pump thread between the request ring (gpu_io/ring.h) and the
// I/O threads (gpu_io/workers.hpp).
#include <svmbatch/context.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/fixed_buffers.hpp>
#include <svmbatch/gpu/backend.hpp>
#include <svmbatch/gpu/copy_engine.hpp>
#include <svmbatch/gpu_io/loop.hpp>
#include <svmbatch/registration.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/cpu_relax.hpp"
#include "core/thread_name.hpp"
#include "gpu_io/ring_memory.hpp"
#include "gpu_io/staging.hpp"
#include "gpu_io/workers.hpp"
#include "uring/io_plan.hpp"

namespace svmbatch {

namespace detail {

namespace {

using Clock = std::chrono::steady_clock;

/// With more than this handed to the I/O threads and not ended, an idle
/// pump parks at once instead of spinning first: the threads have work
/// for longer than a park (50 us at 40 GB/s), and a spinning pump takes
/// a core from whoever copies (1 MiB reads of tmpfs from CPU producers
/// on 2 cores: the pump used 0.37 of them, the io-wq workers copying
/// 1.44; parking, 0.07 and 1.69, and the reads went 10% faster).  Below
/// it, as for one small request, spinning takes the next request sooner.
constexpr std::uint64_t spin_moving_bytes = 2 << 20;

/// A completion waiting for its slot.
struct Pending {
	std::uint64_t ticket;
	int status;
	std::uint64_t bytes;
	std::uint64_t tag;
};

/// What the pump knows of a file, from add_file().
struct FileInfo {
	int fd = -1;
	bool open = false; ///< fcntl(F_GETFL) knew it
	bool readable = false, writable = false, append = false, direct = false, storage = false;
};

void check_options(const IoLoopOptions &o)
{
	if (o.slots < 32 || (o.slots & (o.slots - 1)) || o.slots > (1u << 24))
		throw Error(EINVAL, Step::Validate,
			    "IoLoop slots must be a power of two from 32 to 2^24, not " +
				    std::to_string(o.slots));
	if (!o.max_batch || !o.max_in_flight || !o.thread_bytes)
		throw Error(EINVAL, Step::Validate,
			    "IoLoop max_batch, max_in_flight and thread_bytes must be > 0");
	if (!o.io.max_io_bytes || !o.io.direct_alignment)
		throw Error(EINVAL, Step::Validate,
			    "IoLoop io.max_io_bytes and io.direct_alignment must be > 0");
	if (o.device.engine && !o.device.chunk_bytes)
		throw Error(EINVAL, Step::Validate, "IoLoop device.chunk_bytes must be > 0");
}

std::uint64_t now_ns() noexcept
{
	return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
						  Clock::now().time_since_epoch())
						  .count());
}

} // namespace

class IoLoopPump final : public IoCompletionSink {
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

	// IoCompletionSink: the I/O threads.
	void complete(std::uint64_t ticket, int status, std::uint64_t bytes,
		      std::uint64_t tag) noexcept override;
	void submitted(std::uint64_t ticket) noexcept override;
	void transferred(std::uint64_t ticket) noexcept override;
	void staged(IoPiece &piece, int status) noexcept override;

private:
	/// A device read's piece on its way to the device (the copy's arg).
	struct StagedCopy {
		IoLoopPump *pump = nullptr;
		IoPiece piece;
		int status = 0; ///< the read's: 0, or -ENODATA
	};
	static void copied(void *arg, int status) noexcept;
	/// Hand a piece to an I/O thread, with a staging chunk if it needs
	/// one: false when none is free, or the threads are full.
	bool post(IoPiece &piece);
	void run() noexcept;
	void close_slots() noexcept;
	bool sweep(bool stopping);
	bool post_backlog();
	bool deliver_deferred();
	/// Validate against the registration and the files: 0 or -errno.
	int refuse(const svmbatch_io_request &rq, FileInfo &file) const;
	void start(std::uint64_t ticket, const svmbatch_io_request &rq, const FileInfo &file);
	int host_pieces(std::uint64_t ticket, const svmbatch_io_request &rq, const FileInfo &file,
			std::vector<IoPiece> &pieces) const;
	/// The pieces of a device read (chunk_bytes each at most), or -EINVAL.
	int device_pieces(std::uint64_t ticket, const svmbatch_io_request &rq, const FileInfo &file,
			  std::vector<IoPiece> &pieces) const;
	/// Write the completion, or defer it while its slot is taken.
	void deliver(const Pending &p) noexcept;
	bool try_deliver(const Pending &p) noexcept;
	IoLoopTimes *times(std::uint64_t ticket) const noexcept
	{
		return ticket < options_.trace.size() ? &options_.trace[ticket] : nullptr;
	}

	IoLoopOptions options_;
	RingMemory mem_;
	std::vector<Buffer> buffers_;
	std::optional<Registration> ring_reg_;
	GpuMapping gpu_;
	std::vector<IoLoopDeviceBuffer> device_buffers_;
	std::optional<StagingChunks> staging_; ///< with options.device.engine

	mutable std::mutex files_mu_;
	std::vector<FileInfo> files_;

	std::mutex deferred_mu_;
	std::deque<Pending> deferred_; ///< completions waiting for their slot
	std::atomic<std::size_t> ndeferred_{0};
	std::atomic<std::size_t> moving_{0}; ///< requests handed to the I/O threads, not ended

	// The pump thread's own.
	std::uint64_t head_ = 0;
	std::deque<IoPiece> backlog_; ///< pieces no I/O thread had room for

	std::mutex stop_mu_; ///< one stop() joins the thread
	std::atomic<bool> stop_{false};
	std::atomic<bool> exited_{false};
	std::atomic<std::int64_t> drain_ms_{100};
	struct Counters {
		std::atomic<std::uint64_t> requests{0}, completed{0}, failed{0}, bytes{0},
			batches{0}, deferred{0}, parks{0}, undelivered{0};
	} counters_;
	/// Last: its threads end (and call complete()) before the rest goes.
	std::optional<IoWorkers> workers_;
	std::thread thread_;
};

IoLoopPump::IoLoopPump(Context &context, const Registration &registration, const IoLoopOptions &o)
	: options_((check_options(o), o)), mem_(o.slots),
	  buffers_(registration.buffers().begin(), registration.buffers().end()),
	  device_buffers_(o.device.buffers.begin(), o.device.buffers.end())
{
	options_.gpu = nullptr;
	options_.device.buffers = {};
	if (o.device.engine && (o.device.staging >= buffers_.size() ||
				buffers_[o.device.staging].access != Access::ReadWrite))
		throw Error(EINVAL, Step::Validate,
			    "IoLoop device.staging must be a writable buffer of the registration",
			    o.device.staging);
	Buffer ring{mem_.base(), mem_.bytes(), Access::ReadWrite};
	ring_reg_.emplace(context.register_buffers({&ring, 1}));
	if (o.gpu)
		gpu_ = o.gpu->map(*ring_reg_);
	workers_.emplace(registration, options_.io, options_.thread_bytes, options_.spin, *this);
	if (o.device.engine)
		staging_.emplace(workers_->fixed().slices(o.device.staging),
				 std::min<std::size_t>({o.device.chunk_bytes, o.io.max_io_bytes,
							io_uring_max_buffer_bytes}),
				 o.io.direct_alignment, o.device.staging, o.device.staged_bytes);
	thread_ = std::thread([this] { run(); });
	name_thread(thread_, "svmbatch-pump");
}

IoLoopPump::~IoLoopPump()
{
	stop(std::chrono::milliseconds(drain_ms_.load()));
	workers_.reset();
}

std::uint32_t IoLoopPump::add_file(int fd)
{
	FileInfo f;
	f.fd = fd;
	const int flags = ::fcntl(fd, F_GETFL);
	if (flags >= 0) {
		f.open = true;
		const int mode = flags & O_ACCMODE;
		f.readable = mode == O_RDONLY || mode == O_RDWR;
		f.writable = mode == O_WRONLY || mode == O_RDWR;
		f.append = (flags & O_APPEND) != 0;
		f.direct = (flags & O_DIRECT) != 0;
		f.storage = is_storage(fd);
	}
	std::lock_guard lock(files_mu_);

	if (files_.size() >= UINT32_MAX)
		throw Error(EMFILE, Step::Validate, "IoLoop: too many files");
	files_.push_back(f);
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

int IoLoopPump::refuse(const svmbatch_io_request &rq, FileInfo &file) const
{
	{
		std::lock_guard lock(files_mu_);
		if (rq.file >= files_.size() || files_[rq.file].fd < 0)
			return -EBADF;
		file = files_[rq.file];
	}
	if (rq.flags == SVMBATCH_IO_READ_DEVICE) {
		if (!options_.device.engine || rq.buffer >= device_buffers_.size())
			return -EINVAL;
		const IoLoopDeviceBuffer &d = device_buffers_[rq.buffer];
		if (rq.buffer_offset > d.length || rq.length > d.length - rq.buffer_offset)
			return -EINVAL;
		if (!file.open)
			return -EBADF;
		return file.readable ? 0 : -EACCES;
	}
	if (rq.flags != SVMBATCH_IO_READ && rq.flags != SVMBATCH_IO_WRITE)
		return -EINVAL;
	const bool write = rq.flags == SVMBATCH_IO_WRITE;
	if (rq.buffer >= buffers_.size() ||
	    (options_.device.engine && rq.buffer == options_.device.staging))
		return -EINVAL;
	const Buffer &b = buffers_[rq.buffer];
	if (rq.buffer_offset > b.len || rq.length > b.len - rq.buffer_offset)
		return -EINVAL;
	if (!write && b.access == Access::ReadOnly)
		return -EACCES;
	/* A descriptor closed later fails its transfers with -EBADF. */
	if (!file.open)
		return -EBADF;
	if (write ? !file.writable || file.append : !file.readable)
		return -EACCES;
	return 0;
}

int IoLoopPump::device_pieces(std::uint64_t ticket, const svmbatch_io_request &rq,
			      const FileInfo &file, std::vector<IoPiece> &pieces) const
{
	const std::uint64_t chunk = staging_->chunk_bytes();
	const std::uint64_t dst = device_buffers_[rq.buffer].address + rq.buffer_offset;

	if (file.direct &&
	    (!staging_->aligned() || (rq.file_offset | rq.length) % options_.io.direct_alignment))
		return -EINVAL;
	for (std::uint64_t done = 0; done < rq.length;) {
		const std::uint64_t n = std::min(rq.length - done, chunk);
		IoPiece p{};
		p.ticket = ticket;
		p.tag = rq.tag;
		p.file_offset = rq.file_offset + done;
		p.len = static_cast<std::uint32_t>(n);
		p.index = static_cast<std::uint32_t>(pieces.size());
		p.fd = file.fd;
		p.offload = file.storage;
		p.to_device = true;
		p.device_dst = dst + done;
		pieces.push_back(std::move(p));
		done += n;
	}
	return 0;
}

/// The pieces of a read or write: one per fixed-buffer slice it touches,
/// at most io.max_io_bytes each; -EINVAL where O_DIRECT's alignment fails.
int IoLoopPump::host_pieces(std::uint64_t ticket, const svmbatch_io_request &rq,
			    const FileInfo &file, std::vector<IoPiece> &pieces) const
{
	const FixedBuffers &fixed = workers_->fixed();
	const std::size_t align = options_.io.direct_alignment;
	const std::size_t max_io =
		std::min<std::size_t>(options_.io.max_io_bytes, io_uring_max_buffer_bytes);
	std::uint64_t skip = rq.buffer_offset, left = rq.length, off = rq.file_offset;

	for (const FixedSlice &s : fixed.slices(rq.buffer)) {
		if (!left)
			break;
		if (skip >= s.len) {
			skip -= s.len;
			continue;
		}
		char *addr = static_cast<char *>(s.addr) + skip;
		const std::uint64_t in_slice = std::min<std::uint64_t>(left, s.len - skip);
		skip = 0;
		for (std::uint64_t done = 0; done < in_slice;) {
			const std::uint64_t n = std::min<std::uint64_t>(in_slice - done, max_io);
			if (file.direct &&
			    ((reinterpret_cast<std::uintptr_t>(addr + done) | off | n) % align))
				return -EINVAL;
			IoPiece p{};
			p.ticket = ticket;
			p.tag = rq.tag;
			p.addr = addr + done;
			p.file_offset = off;
			p.len = static_cast<std::uint32_t>(n);
			p.index = static_cast<std::uint32_t>(pieces.size());
			p.fd = file.fd;
			p.slot = s.index;
			p.write = rq.flags == SVMBATCH_IO_WRITE;
			p.offload = file.storage;
			/* Buffered writes to one file take its inode lock: one
			 * thread per file, as a Writer uses one ring per file. */
			if (p.write && !file.direct)
				p.thread = static_cast<int>(rq.file % INT32_MAX);
			pieces.push_back(std::move(p));
			done += n;
			off += n;
		}
		left -= in_slice;
	}
	return 0;
}

/// Cut the request into pieces and hand them to the I/O threads.
void IoLoopPump::start(std::uint64_t ticket, const svmbatch_io_request &rq, const FileInfo &file)
{
	std::vector<IoPiece> pieces;
	const int err = rq.flags == SVMBATCH_IO_READ_DEVICE ?
				device_pieces(ticket, rq, file, pieces) :
				host_pieces(ticket, rq, file, pieces);

	if (err) {
		deliver({ticket, err, 0, rq.tag});
		return;
	}
	if (pieces.size() > 1) {
		auto task = std::make_shared<IoTask>(static_cast<unsigned>(pieces.size()));
		for (IoPiece &p : pieces)
			p.task = task;
	}
	moving_.fetch_add(1, std::memory_order_relaxed);
	for (IoPiece &p : pieces)
		if (!backlog_.empty() || !post(p))
			backlog_.push_back(std::move(p));
}

bool IoLoopPump::post(IoPiece &p)
{
	if (p.to_device && p.chunk < 0) {
		const std::optional<StagingChunk> c = staging_->take();
		if (!c)
			return false;
		p.addr = c->addr;
		p.slot = c->slot;
		p.chunk = c->index;
	}
	return workers_->post(p);
}

void IoLoopPump::staged(IoPiece &p, int status) noexcept
{
	if ((!status || status == -ENODATA) && p.done) {
		std::unique_ptr<StagedCopy> c(new (std::nothrow) StagedCopy);
		if (!c) {
			p.done = 0;
			status = -ENOMEM;
		} else {
			c->pump = this;
			c->piece = std::move(p);
			c->status = status;
			const IoPiece &q = c->piece;
			const int err =
				options_.device.engine->copy_to_device(q.device_dst, q.addr, q.done,
								       static_cast<unsigned>(
									       q.chunk),
								       &IoLoopPump::copied,
								       c.get());
			if (!err) {
				(void)c.release(); // copied() owns it
				return;
			}
			p = std::move(c->piece);
			status = err;
		}
	}
	if (status && status != -ENODATA)
		p.done = 0; // nothing reached the device
	staging_->give_back(p.chunk);
	end_piece(p, status, *this);
}

void IoLoopPump::copied(void *arg, int status) noexcept
{
	std::unique_ptr<StagedCopy> c(static_cast<StagedCopy *>(arg));

	if (status)
		c->piece.done = 0;
	c->pump->staging_->give_back(c->piece.chunk);
	end_piece(c->piece, status ? status : c->status, *c->pump);
}

bool IoLoopPump::post_backlog()
{
	bool any = false;

	while (!backlog_.empty() && post(backlog_.front())) {
		backlog_.pop_front();
		any = true;
	}
	return any;
}

void IoLoopPump::submitted(std::uint64_t ticket) noexcept
{
	if (IoLoopTimes *t = times(ticket))
		t->submitted_ns = now_ns();
}

void IoLoopPump::transferred(std::uint64_t ticket) noexcept
{
	if (IoLoopTimes *t = times(ticket))
		t->done_ns = now_ns();
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
	if (IoLoopTimes *t = times(p.ticket))
		t->completed_ns = now_ns();
	counters_.completed.fetch_add(1, std::memory_order_relaxed);
	if (p.status)
		counters_.failed.fetch_add(1, std::memory_order_relaxed);
	counters_.bytes.fetch_add(p.bytes, std::memory_order_relaxed);
	return true;
}

void IoLoopPump::deliver(const Pending &p) noexcept
{
	if (try_deliver(p))
		return;
	try {
		std::lock_guard lock(deferred_mu_);
		deferred_.push_back(p);
		ndeferred_.fetch_add(1, std::memory_order_release);
		counters_.deferred.fetch_add(1, std::memory_order_relaxed);
	} catch (const std::exception &) {
		/* No memory for the deque: wait for the slot instead. */
		while (!try_deliver(p) && !exited_.load(std::memory_order_acquire))
			std::this_thread::yield();
	}
}

void IoLoopPump::complete(std::uint64_t ticket, int status, std::uint64_t bytes,
			  std::uint64_t tag) noexcept
{
	deliver({ticket, status, bytes, tag});
	moving_.fetch_sub(1, std::memory_order_release);
}

bool IoLoopPump::deliver_deferred()
{
	if (!ndeferred_.load(std::memory_order_acquire))
		return false;
	std::lock_guard lock(deferred_mu_);
	const std::size_t before = deferred_.size();
	std::erase_if(deferred_, [this](const Pending &p) { return try_deliver(p); });
	ndeferred_.store(deferred_.size(), std::memory_order_release);
	return deferred_.size() != before;
}

/// Closing (gpu_io/ring.h): SVMBATCH_IO_SEQ_CLOSED into every free request
/// slot, so that a producer waiting for its slot, or coming to it later,
/// gives its ticket up.  A slot's seq is free when it names the slot's own
/// index (t & mask == index), published when it names the next.  A
/// producer that saw its slot free before the swap publishes over it: the
/// slot ends published (and is taken, cancelled) or closed, never both.
/// Slots freed from now on are freed closed (sweep).
void IoLoopPump::close_slots() noexcept
{
	svmbatch_io_request *slots = mem_.requests();

	for (std::uint64_t i = 0; i <= mem_.mask(); i++) {
		std::atomic_ref seq(slots[i].seq);
		std::uint64_t v = seq.load(std::memory_order_relaxed);
		while (!svmbatch_io_seq_closed(v) && (v & mem_.mask()) == i &&
		       !seq.compare_exchange_weak(v, v | SVMBATCH_IO_SEQ_CLOSED,
						  std::memory_order_release,
						  std::memory_order_relaxed)) {
		}
	}
}

/// Take published requests in ticket order, up to max_batch; refuse the
/// bad ones (and, stopping, every one) at once; hand each other one to
/// the I/O threads as soon as it is taken.
bool IoLoopPump::sweep(bool stopping)
{
	svmbatch_io_request *slots = mem_.requests();
	std::size_t taken = 0, given_up = 0;

	while (taken + given_up < options_.max_batch && (stopping || backlog_.empty()) &&
	       (stopping || moving_.load(std::memory_order_relaxed) < options_.max_in_flight)) {
		svmbatch_io_request &slot = slots[head_ & mem_.mask()];
		std::atomic_ref seq(slot.seq);
		const std::uint64_t v = seq.load(std::memory_order_acquire);
		if (v == svmbatch_io_seq_given_up(head_)) {
			// A producer gave its ticket up (closed): nobody waits.
			seq.store(svmbatch_io_seq_next_lap_closed(mem_.mask(), head_++),
				  std::memory_order_release);
			given_up++;
			continue;
		}
		if (v != svmbatch_io_seq_published(head_))
			break;
		const svmbatch_io_request rq = slot;
		const std::uint64_t ticket = head_++;
		seq.store(stopping ? svmbatch_io_seq_next_lap_closed(mem_.mask(), ticket) :
				     svmbatch_io_seq_next_lap(mem_.mask(), ticket),
			  std::memory_order_release);
		if (IoLoopTimes *t = times(ticket))
			t->seen_ns = now_ns();
		taken++;
		// Counted before it is handed on: its completion, seen by its
		// producer, comes after.
		counters_.requests.fetch_add(1, std::memory_order_relaxed);
		FileInfo file;
		const int err = stopping ? -ECANCELED : refuse(rq, file);
		if (err || !rq.length)
			deliver({ticket, err, 0, rq.tag});
		else
			start(ticket, rq, file);
	}
	if (!taken)
		return given_up != 0;
	counters_.batches.fetch_add(1, std::memory_order_relaxed);
	return true;
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
				close_slots();
				workers_->cancel();
			}
			work |= post_backlog();
			work |= sweep(stopping);
			work |= deliver_deferred();
		} catch (const std::exception &) {
			// Out of memory in the pump: back off and try again.
			std::this_thread::sleep_for(options_.park);
		}
		const auto now = Clock::now();
		if (stopping) {
			// Done once nothing moves, every completion is out (or
			// the drain time is up), and no producer published for
			// a while.
			quiet_since = work ? now : quiet_since.value_or(now);
			const bool quiet = now - *quiet_since >=
					   std::min<Clock::duration>(std::chrono::milliseconds(5),
								     *deadline - *quiet_since);
			const bool idle = backlog_.empty() &&
					  !moving_.load(std::memory_order_acquire);
			if (idle && ((!ndeferred_.load(std::memory_order_acquire) && quiet) ||
				     now >= *deadline))
				break;
		}
		if (work) {
			idle_since.reset();
			continue;
		}
		if (!idle_since)
			idle_since = now;
		if (now - *idle_since < options_.spin &&
		    workers_->outstanding_bytes() <= spin_moving_bytes) {
			cpu_relax();
		} else {
			counters_.parks.fetch_add(1, std::memory_order_relaxed);
			std::this_thread::sleep_for(options_.park);
		}
	}
	{
		std::lock_guard lock(deferred_mu_);
		counters_.undelivered.fetch_add(deferred_.size());
		deferred_.clear();
		ndeferred_.store(0);
	}
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
