// SPDX-License-Identifier: MIT
// CudaStreamCopier: copies on the caller's stream, an event per fence.
#include <svmbatch/error.hpp>
#include <svmbatch/gpu/cuda_stream_copier.hpp>

#include <cerrno>
#include <string>
#include <vector>

#include "shim/libcuda.hpp"

namespace svmbatch {

namespace detail {

class CudaFences {
public:
	CudaFences(std::shared_ptr<const CudaContext> ctx, cu::Stream stream, unsigned slots)
		: ctx_(std::move(ctx)), stream_(stream)
	{
		if (slots == 0)
			throw Error(EINVAL, Step::Validate, "CudaStreamCopier: slots must be > 0");
		CudaCurrent current(*ctx_);
		events_.resize(slots);
		for (Fence &f : events_) {
			if (cu::Result r =
				    driver().event_create(&f.event, cu::event_disable_timing);
			    r != cu::success) {
				release();
				throw Error(cuda_errno(r), Step::GpuOpen,
					    "cuEventCreate: " + driver().error_name(r),
					    Error::no_index, r);
			}
		}
	}
	CudaFences(const CudaFences &) = delete;
	CudaFences &operator=(const CudaFences &) = delete;
	CudaFences(CudaFences &&) = delete;
	CudaFences &operator=(CudaFences &&) = delete;
	~CudaFences()
	{
		if (in_context([&] {
			    for (unsigned s = 0; s < events_.size(); s++)
				    (void)wait_current(s);
			    release();
			    return 0;
		    }) < 0)
			release(); // without the context, rather than leak the events
	}

	int copy(std::uint64_t dst, const void *src, std::size_t n) noexcept
	{
		return in_context(
			[&] { return status(driver().memcpy_htod_async(dst, src, n, stream_)); });
	}
	int fence(unsigned slot) noexcept
	{
		if (slot >= events_.size())
			return -EINVAL;
		return in_context([&] {
			int rc = status(driver().event_record(events_[slot].event, stream_));
			if (rc == 0)
				events_[slot].recorded = true;
			return rc;
		});
	}
	int wait(unsigned slot) noexcept
	{
		if (slot >= events_.size())
			return -EINVAL;
		if (!events_[slot].recorded)
			return 0;
		return in_context([&] { return wait_current(slot); });
	}
	int synchronize() noexcept
	{
		return in_context([&] {
			for (Fence &f : events_)
				f.recorded = false;
			return status(driver().stream_synchronize(stream_));
		});
	}
	unsigned slots() const noexcept { return static_cast<unsigned>(events_.size()); }
	long driver_status() const noexcept { return last_; }

private:
	struct Fence {
		cu::Event event = nullptr;
		bool recorded = false;
	};
	const LibCuda &driver() const noexcept { return ctx_->driver(); }
	/// f() with the context current; never throws (the calls are noexcept).
	template <typename F> int in_context(F f) noexcept
	{
		if (int rc = status(driver().ctx_push_current(ctx_->get())); rc < 0)
			return rc;
		int rc = f();
		cu::Context popped = nullptr;
		(void)driver().ctx_pop_current(&popped);
		return rc;
	}
	int status(cu::Result r) noexcept
	{
		if (r == cu::success)
			return 0;
		last_ = r;
		return -cuda_errno(r);
	}
	int wait_current(unsigned slot) noexcept
	{
		Fence &f = events_[slot];
		if (!f.recorded)
			return 0;
		f.recorded = false;
		return status(driver().event_synchronize(f.event));
	}
	void release() noexcept
	{
		for (Fence &f : events_)
			if (f.event != nullptr)
				(void)driver().event_destroy(f.event);
		events_.clear();
	}

	std::shared_ptr<const CudaContext> ctx_;
	cu::Stream stream_;
	std::vector<Fence> events_;
	long last_ = 0;
};

} // namespace detail

namespace {

detail::cu::Stream as_stream(std::uintptr_t stream) noexcept
{
	// NOLINTNEXTLINE(performance-no-int-to-ptr): a CUstream handed over as an integer
	return reinterpret_cast<detail::cu::Stream>(stream);
}

} // namespace

CudaStreamCopier::CudaStreamCopier(const CudaBackend &gpu, std::uintptr_t stream, unsigned slots)
	: fences_(std::make_unique<detail::CudaFences>(gpu.context(), as_stream(stream), slots))
{}

CudaStreamCopier::~CudaStreamCopier() = default;

int CudaStreamCopier::copy(std::uint64_t dst, const void *src, std::size_t n) noexcept
{
	return fences_->copy(dst, src, n);
}

int CudaStreamCopier::fence(unsigned slot) noexcept
{
	return fences_->fence(slot);
}

int CudaStreamCopier::wait(unsigned slot) noexcept
{
	return fences_->wait(slot);
}

int CudaStreamCopier::synchronize() noexcept
{
	return fences_->synchronize();
}

unsigned CudaStreamCopier::slots() const noexcept
{
	return fences_->slots();
}

long CudaStreamCopier::driver_status() const noexcept
{
	return fences_->driver_status();
}

} // namespace svmbatch
