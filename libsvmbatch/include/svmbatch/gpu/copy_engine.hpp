// SPDX-License-Identifier: MIT
// Asynchronous copies from host memory to device memory on a GPU's copy
// engines: what an IoLoop's device reads (SVMBATCH_IO_READ_DEVICE) end with.
#pragma once

#include <cstddef>
#include <cstdint>

#include <svmbatch/api.h>

namespace svmbatch {

/// Queues host-to-device copies and says when each ended.  Implementations:
/// CudaCopyEngine.
class SVMBATCH_API GpuCopyEngine {
public:
	/// Called once per copy, with 0 or -errno, on a thread of the
	/// engine's; it must not block, and must not queue a copy itself.
	using Done = void (*)(void *arg, int status) noexcept;

	GpuCopyEngine() = default;
	GpuCopyEngine(const GpuCopyEngine &) = delete;
	GpuCopyEngine &operator=(const GpuCopyEngine &) = delete;
	GpuCopyEngine(GpuCopyEngine &&) = delete;
	GpuCopyEngine &operator=(GpuCopyEngine &&) = delete;
	/// Waits for the copies queued and calls their done.
	virtual ~GpuCopyEngine();

	virtual const char *name() const noexcept = 0;
	/// Copy n bytes from src (host memory, registered with this GPU, e.g.
	/// by GpuBackend::map, or the copy is not asynchronous) to device
	/// address dst, on queue `lane` modulo the engine's queues (copies of
	/// one queue run in order, those of different queues may overlap).
	/// 0: done(arg, status) will be called once the copy ended; -errno:
	/// nothing was queued and done will not be called.  Any thread.
	virtual int copy_to_device(std::uint64_t dst, const void *src, std::size_t n, unsigned lane,
				   Done done, void *arg) noexcept = 0;
};

} // namespace svmbatch
