// SPDX-License-Identifier: MIT
// CudaCopyEngine: cuMemcpyHtoDAsync on a few streams, an event per copy,
// and one thread that reports each copy's end as its event completes.
#include <svmbatch/error.hpp>
#include <svmbatch/gpu/cuda_copy_engine.hpp>

#include <atomic>
#include <cerrno>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/cpu_relax.hpp"
#include "core/thread_name.hpp"
#include "shim/libcuda.hpp"

namespace svmbatch {

namespace detail {

class CudaCopyQueues {
public:
	CudaCopyQueues(std::shared_ptr<const CudaContext> ctx, unsigned streams);
	CudaCopyQueues(const CudaCopyQueues &) = delete;
	CudaCopyQueues &operator=(const CudaCopyQueues &) = delete;
	CudaCopyQueues(CudaCopyQueues &&) = delete;
	CudaCopyQueues &operator=(CudaCopyQueues &&) = delete;
	~CudaCopyQueues();

	int copy(std::uint64_t dst, const void *src, std::size_t n, unsigned lane,
		 GpuCopyEngine::Done done, void *arg) noexcept;
	unsigned size() const noexcept { return static_cast<unsigned>(queues_.size()); }

private:
	struct Copy {
		cu::Event event;
		GpuCopyEngine::Done done;
		void *arg;
	};
	/// A stream and its copies in the order they were queued: the
	/// poller pops, copy() pushes.
	struct Queue {
		std::mutex mu;
		cu::Stream stream = nullptr;
		std::deque<Copy> copies;
	};

	const LibCuda &driver() const noexcept { return ctx_->driver(); }
	cu::Result take_event(cu::Event &event) noexcept;
	void give_event(cu::Event event) noexcept;
	bool poll(Queue &q) noexcept;
	void run() noexcept;
	void release() noexcept;

	std::shared_ptr<const CudaContext> ctx_;
	std::vector<std::unique_ptr<Queue>> queues_;
	std::mutex events_mu_;
	std::vector<cu::Event> spare_; ///< events of ended copies, for reuse
	std::atomic<std::size_t> queued_{0};
	std::atomic<std::uint32_t> wake_{0};
	std::atomic<bool> exit_{false};
	std::thread poller_;
};

CudaCopyQueues::CudaCopyQueues(std::shared_ptr<const CudaContext> ctx, unsigned streams)
	: ctx_(std::move(ctx))
{
	if (!streams)
		throw Error(EINVAL, Step::Validate, "CudaCopyEngine: streams must be > 0");
	CudaCurrent current(*ctx_);
	try {
		for (unsigned i = 0; i < streams; i++) {
			auto q = std::make_unique<Queue>();
			if (cu::Result r =
				    driver().stream_create(&q->stream, cu::stream_non_blocking);
			    r != cu::success)
				throw Error(cuda_errno(r), Step::GpuOpen,
					    "cuStreamCreate: " + driver().error_name(r),
					    Error::no_index, r);
			queues_.push_back(std::move(q));
		}
		poller_ = std::thread([this] { run(); });
		name_thread(poller_, "svmbatch-copy");
	} catch (...) {
		release();
		throw;
	}
}

CudaCopyQueues::~CudaCopyQueues()
{
	exit_.store(true, std::memory_order_seq_cst);
	wake_.fetch_add(1, std::memory_order_seq_cst);
	wake_.notify_one();
	poller_.join();
	CudaCurrent current(*ctx_);
	release();
}

/// Streams and spare events destroyed (the context current).
void CudaCopyQueues::release() noexcept
{
	for (auto &q : queues_)
		(void)driver().stream_destroy(q->stream);
	queues_.clear();
	for (cu::Event e : spare_)
		(void)driver().event_destroy(e);
	spare_.clear();
}

cu::Result CudaCopyQueues::take_event(cu::Event &event) noexcept
{
	{
		std::lock_guard lock(events_mu_);
		if (!spare_.empty()) {
			event = spare_.back();
			spare_.pop_back();
			return cu::success;
		}
	}
	return driver().event_create(&event, cu::event_disable_timing);
}

void CudaCopyQueues::give_event(cu::Event event) noexcept
{
	try {
		std::lock_guard lock(events_mu_);
		spare_.push_back(event);
	} catch (const std::exception &) {
		(void)driver().event_destroy(event);
	}
}

int CudaCopyQueues::copy(std::uint64_t dst, const void *src, std::size_t n, unsigned lane,
			 GpuCopyEngine::Done done, void *arg) noexcept
{
	Queue &q = *queues_[lane % queues_.size()];
	CudaCurrent current(*ctx_);
	cu::Event event = nullptr;

	if (cu::Result r = take_event(event); r != cu::success)
		return -cuda_errno(r);
	std::lock_guard lock(q.mu); // the stream's order is the queue's
	if (cu::Result r = driver().memcpy_htod_async(dst, src, n, q.stream); r != cu::success) {
		give_event(event);
		return -cuda_errno(r);
	}
	cu::Result r = driver().event_record(event, q.stream);
	if (r == cu::success) {
		try {
			q.copies.push_back({event, done, arg});
		} catch (const std::exception &) {
			r = cu::error_out_of_memory;
		}
	}
	if (r != cu::success) {
		// The copy is queued but nothing will say when it ends: wait
		// for it, so that src is free when the caller hears the error.
		(void)driver().stream_synchronize(q.stream);
		give_event(event);
		return -cuda_errno(r);
	}
	queued_.fetch_add(1, std::memory_order_seq_cst);
	wake_.fetch_add(1, std::memory_order_seq_cst);
	wake_.notify_one();
	return 0;
}

/// The copies of q that ended, in order, reported: whether any was.
bool CudaCopyQueues::poll(Queue &q) noexcept
{
	bool any = false;

	for (;;) {
		Copy c{};
		{
			std::lock_guard lock(q.mu);
			if (q.copies.empty())
				return any;
			c = q.copies.front();
		}
		// Only this thread pops: the front stays while unlocked.
		const cu::Result r = driver().event_query(c.event);
		if (r == cu::error_not_ready)
			return any;
		{
			std::lock_guard lock(q.mu);
			q.copies.pop_front();
		}
		give_event(c.event);
		c.done(c.arg, r == cu::success ? 0 : -cuda_errno(r));
		queued_.fetch_sub(1, std::memory_order_seq_cst);
		any = true;
	}
}

void CudaCopyQueues::run() noexcept
{
	CudaCurrent current(*ctx_);

	for (;;) {
		const std::uint32_t seen = wake_.load(std::memory_order_seq_cst);
		bool any = false;
		for (auto &q : queues_)
			any |= poll(*q);
		if (any)
			continue;
		if (queued_.load(std::memory_order_seq_cst)) {
			cpu_relax();
			continue;
		}
		if (exit_.load(std::memory_order_seq_cst))
			return;
		wake_.wait(seen, std::memory_order_seq_cst);
	}
}

} // namespace detail

CudaCopyEngine::CudaCopyEngine(const CudaBackend &gpu, unsigned streams)
	: queues_(std::make_unique<detail::CudaCopyQueues>(gpu.context(), streams))
{}

CudaCopyEngine::~CudaCopyEngine() = default;

int CudaCopyEngine::copy_to_device(std::uint64_t dst, const void *src, std::size_t n, unsigned lane,
				   Done done, void *arg) noexcept
{
	return queues_->copy(dst, src, n, lane, done, arg);
}

unsigned CudaCopyEngine::streams() const noexcept
{
	return queues_->size();
}

} // namespace svmbatch
