// SPDX-License-Identifier: MIT
// CudaCopyEngine: host-to-device copies on CUDA streams (the copy engines),
// for an IoLoop's device reads.
#pragma once

#include <memory>

#include <svmbatch/api.h>
#include <svmbatch/gpu/copy_engine.hpp>
#include <svmbatch/gpu/cuda_backend.hpp>

namespace svmbatch {

namespace detail {
class CudaCopyQueues;
}

/// Copies on `streams` non-blocking streams of a CudaBackend's device
/// (cuMemcpyHtoDAsync, then an event): a thread of its own polls each
/// stream's events in order and calls each copy's done as its event
/// completes, with the CUresult's errno where the copy failed.  While
/// copies are queued the thread polls (a core); idle, it sleeps until the
/// next copy.
class SVMBATCH_API CudaCopyEngine final : public GpuCopyEngine {
public:
	/// Error(Step::GpuOpen, the CUresult's errno) when a stream cannot be
	/// made; EINVAL for streams 0.
	explicit CudaCopyEngine(const CudaBackend &gpu, unsigned streams = 4);
	CudaCopyEngine(const CudaCopyEngine &) = delete;
	CudaCopyEngine &operator=(const CudaCopyEngine &) = delete;
	CudaCopyEngine(CudaCopyEngine &&) = delete;
	CudaCopyEngine &operator=(CudaCopyEngine &&) = delete;
	~CudaCopyEngine() override;

	const char *name() const noexcept override { return "cuda"; }
	/// -errno of the CUresult when the copy or its event could not be
	/// queued; src is then not read after the return.
	int copy_to_device(std::uint64_t dst, const void *src, std::size_t n, unsigned lane,
			   Done done, void *arg) noexcept override;
	unsigned streams() const noexcept;

private:
	std::unique_ptr<detail::CudaCopyQueues> queues_;
};

} // namespace svmbatch
