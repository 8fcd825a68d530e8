// SPDX-License-Identifier: MIT
// Host-to-device copies queued in order on one queue of a GPU (the
// caller's CUDA stream), with fences to wait for: what an ExtentReader
// copies its staging chunks with.
#pragma once

#include <cstddef>
#include <cstdint>

#include <svmbatch/api.h>

namespace svmbatch {

/// One GPU queue the caller owns; copies on it run in the order queued,
/// after whatever the caller queued there before.  Implementations:
/// CudaStreamCopier.  One thread at a time.
class SVMBATCH_API StreamCopier {
public:
	StreamCopier() = default;
	StreamCopier(const StreamCopier &) = delete;
	StreamCopier &operator=(const StreamCopier &) = delete;
	StreamCopier(StreamCopier &&) = delete;
	StreamCopier &operator=(StreamCopier &&) = delete;
	/// Waits for every fence, so that no copy reads host memory after it.
	virtual ~StreamCopier();

	virtual const char *name() const noexcept = 0;
	/// Queue a copy of n bytes from src (host memory mapped for this GPU)
	/// to device address dst.  0, or -errno when nothing was queued
	/// (driver_status() then says the driver's own code).
	virtual int copy(std::uint64_t dst, const void *src, std::size_t n) noexcept = 0;
	/// Fence `slot` (< slots()) passes once every copy queued so far has
	/// ended.  0 or -errno.
	virtual int fence(unsigned slot) noexcept = 0;
	/// Block until fence `slot` passed; at once for a slot never fenced.
	/// 0, or -errno when the driver reports the queue failed.
	virtual int wait(unsigned slot) noexcept = 0;
	/// Block until every copy queued so far ended, fenced or not: what
	/// a caller does before reusing host memory after a fence failed.
	/// 0 or -errno.
	virtual int synchronize() noexcept = 0;
	virtual unsigned slots() const noexcept = 0;
	/// The driver's status of the last call that failed (a CUresult).
	virtual long driver_status() const noexcept = 0;
};

} // namespace svmbatch
