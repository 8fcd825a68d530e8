// SPDX-License-Identifier: MIT
#pragma once

#include <memory>
#include <string>

#include <svmbatch/api.h>
#include <svmbatch/gpu/backend.hpp>

namespace svmbatch {

namespace detail {
class CudaContext;
}

struct CudaOptions {
	/// The CUDA driver library, loaded with dlopen.
	std::string library = "libcuda.so.1";
	/// Device ordinal; the mapping uses its primary context.
	int device = 0;
};

/// What CUDA already knows about an address (cuPointerGetAttribute).
enum class CudaMemory {
	Unknown, ///< plain host memory: map() registers it
	Host, ///< cuMemHostAlloc'd or already cuMemHostRegister'ed
	Managed, ///< cuMemAllocManaged: the device uses the pointer as is
	Device, ///< device memory: not host memory at all
};

/// NVIDIA GPUs through the CUDA driver API, loaded at run time (dlopen of
/// libcuda.so.1: libsvmbatch neither links nor needs CUDA).  map()
/// cuMemHostRegister's each merged range (PORTABLE | DEVICEMAP, plus
/// READ_ONLY for read-only ranges where the device supports it): the bytes
/// its buffers cover, not its whole pages, since the rest of a page may
/// hold someone else's heap memory (CUDA refuses copies of a buffer that
/// straddles a registered region's edge).  It gives
/// per caller buffer the device pointer of cuMemHostGetDevicePointer.  It
/// is transactional: if range k fails, ranges 0..k-1 are unregistered
/// before the Error (carrying the CUresult) is thrown.  Ranges CUDA
/// already knows are classified first: host memory CUDA allocated or
/// registered is used as it is (not registered again, not unregistered by
/// the mapping), managed memory maps to itself, and a range that mixes
/// such memory with plain memory, or holds device memory, is refused
/// (EEXIST, EINVAL) before anything is registered.  Works in both modes:
/// CUDA pins the pages itself, so a kernel-mode registration is pinned
/// twice (svmbatch's pin keeps the pages from moving for io_uring and
/// dma-buf users; CUDA's is its own).
class SVMBATCH_API CudaBackend final : public GpuBackend {
public:
	/// Error(ENODEV, Step::GpuOpen) without a driver, without a device,
	/// or with a library that is not the CUDA driver.
	explicit CudaBackend(const CudaOptions &options = {});
	CudaBackend(const CudaBackend &) = delete;
	CudaBackend &operator=(const CudaBackend &) = delete;
	CudaBackend(CudaBackend &&) = delete;
	CudaBackend &operator=(CudaBackend &&) = delete;
	~CudaBackend() override;

	const char *name() const noexcept override { return "cuda"; }
	GpuMapping map(const Registration &registration) override;

	int device() const noexcept { return ordinal_; }
	const std::string &device_name() const noexcept { return device_name_; }
	/// Unified virtual addressing: a registered host pointer and its
	/// device pointer are the same number (checked per mapping, too).
	bool unified_addressing() const noexcept { return uva_; }
	bool read_only_register_supported() const noexcept { return read_only_; }
	CudaMemory classify(const void *ptr) const;
	/// The driver and the primary context (CudaCopyEngine's).
	const std::shared_ptr<const detail::CudaContext> &context() const noexcept { return ctx_; }

private:
	std::shared_ptr<const detail::CudaContext> ctx_;
	int ordinal_ = 0;
	std::string device_name_;
	bool uva_ = false;
	bool read_only_ = false;
};

} // namespace svmbatch
