// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <string>
#include <system_error>

#include <svmbatch/api.h>

namespace svmbatch {

/// The step of an operation that failed, so a caller can tell a bad buffer
/// from a missing module or an io_uring limit.
enum class Step {
	Open, ///< opening the device
	Info, ///< GET_INFO or ABI check
	Validate, ///< the library's own checks of the caller's buffers
	Register, ///< the kernel REGISTER (kernel mode) or the VMA check (userspace mode)
	Query, ///< the kernel QUERY
	IoUringRegister, ///< registering io_uring fixed buffers
	Export, ///< EXPORT_DMABUF
	GpuOpen, ///< a GpuBackend loading its driver and finding its device
	GpuMap, ///< a GpuBackend mapping the buffers
	Diagnostics, ///< reading VmPin, the module's stats or a file's page-cache residency
	IoUringSubmit, ///< submitting to or reaping from the ring (Reader)
	RdmaOpen, ///< RdmaBackend loading libibverbs and querying the device
	RdmaRegister, ///< RdmaBackend registering memory regions
	Arena, ///< an Arena mapping, placing or faulting in its memory, or carving a block
	GpuCopy, ///< queueing or waiting for copies to a GPU (StreamCopier)
};

/// Name of a step, for messages ("register", "io_uring-register", ...).
SVMBATCH_API const char *step_name(Step step) noexcept;

/// Every failure of the library.  code() is the errno (std::generic_category);
/// buffer_index() names the caller's buffer to blame, or no_index;
/// driver_status() is the GPU driver's own code where one failed (a
/// CUresult, an hsa_status_t), else 0.
class SVMBATCH_API Error : public std::system_error {
public:
	static constexpr std::size_t no_index = static_cast<std::size_t>(-1);

	Error(int err, Step step, const std::string &what, std::size_t buffer_index = no_index,
	      long driver_status = 0);

	int err() const noexcept { return code().value(); }
	Step step() const noexcept { return step_; }
	std::size_t buffer_index() const noexcept { return buffer_index_; }
	long driver_status() const noexcept { return driver_status_; }

private:
	Step step_;
	std::size_t buffer_index_;
	long driver_status_;
};

} // namespace svmbatch
