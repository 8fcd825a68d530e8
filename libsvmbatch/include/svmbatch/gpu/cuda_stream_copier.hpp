// SPDX-License-Identifier: MIT
// CudaStreamCopier: an ExtentReader's copies on the caller's CUDA stream.
#pragma once

#include <cstdint>
#include <memory>

#include <svmbatch/api.h>
#include <svmbatch/gpu/cuda_backend.hpp>
#include <svmbatch/gpu/stream_copier.hpp>

namespace svmbatch {

namespace detail {
class CudaFences;
}

/// cuMemcpyHtoDAsync on a stream the caller owns (a CUstream, as an
/// integer: torch.cuda.current_stream().cuda_stream; 0 is the legacy
/// default stream), in the CudaBackend's primary context, with one event
/// per fence.  The copies run after what the caller queued on the stream
/// before, and what it queues after runs after them.
class SVMBATCH_API CudaStreamCopier final : public StreamCopier {
public:
	/// Error(Step::GpuOpen, the CUresult's errno) when an event cannot be
	/// made; EINVAL for slots 0.
	CudaStreamCopier(const CudaBackend &gpu, std::uintptr_t stream, unsigned slots = 4);
	CudaStreamCopier(const CudaStreamCopier &) = delete;
	CudaStreamCopier &operator=(const CudaStreamCopier &) = delete;
	CudaStreamCopier(CudaStreamCopier &&) = delete;
	CudaStreamCopier &operator=(CudaStreamCopier &&) = delete;
	~CudaStreamCopier() override;

	const char *name() const noexcept override { return "cuda"; }
	int copy(std::uint64_t dst, const void *src, std::size_t n) noexcept override;
	int fence(unsigned slot) noexcept override;
	int wait(unsigned slot) noexcept override;
	/// cuStreamSynchronize of the caller's stream.
	int synchronize() noexcept override;
	unsigned slots() const noexcept override;
	long driver_status() const noexcept override;

private:
	std::unique_ptr<detail::CudaFences> fences_;
};

} // namespace svmbatch
