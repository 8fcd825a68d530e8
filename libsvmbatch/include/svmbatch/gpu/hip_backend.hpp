// SPDX-License-Identifier: MIT
#pragma once

#include <memory>
#include <string>

#include <svmbatch/api.h>
#include <svmbatch/gpu/backend.hpp>

namespace svmbatch {

namespace detail {
struct LibHip;
}

struct HipOptions {
	/// The HIP runtime, loaded with dlopen; "" takes the newest of
	/// libamdhip64.so.7, .so.6 and .so.5 that loads.
	std::string library;
	/// Device ordinal (hipSetDevice's).
	int device = 0;
};

/// What HIP already knows about an address (hipPointerGetAttributes).
enum class HipMemory {
	Unknown, ///< plain host memory: map() registers it
	Host, ///< hipHostMalloc'd or already hipHostRegister'ed
	Managed, ///< hipMallocManaged: the device uses the pointer as is
	Device, ///< device memory: not host memory at all
};

/// AMD GPUs through the HIP runtime (ROCm's libamdhip64), loaded at run
/// time: libsvmbatch neither links nor needs ROCm.  map()
/// hipHostRegister's each merged range (Portable | Mapped), the bytes its
/// buffers cover as CudaBackend does, and gives per caller buffer the
/// device pointer of hipHostGetDevicePointer.  Transactional: if range k
/// fails, ranges 0..k-1 are unregistered before the Error (carrying the
/// hipError_t and its name) is thrown.  Memory HIP already knows is
/// classified first: hipHostMalloc'd or registered host memory is used as
/// it is, managed memory maps to itself, and a range that mixes such
/// memory with plain memory, or holds device memory, is refused (EEXIST,
/// EINVAL) before anything is registered.
///
/// Read-only buffers: ROCm has no read-only host registration (KFD pins
/// userptr memory for writing), so a read-only range is registered like
/// any other and the GPU could write it; one that lies in a mapping
/// without write permission (a PROT_READ file mapping) is refused with
/// EACCES before anything is registered, where the driver would fail.
///
/// Every HIP call is gated on hipGetDeviceCount: without a device (no
/// /dev/kfd) the constructor throws Error(ENODEV) with HIP's status and
/// nothing else is called.
class SVMBATCH_API HipBackend final : public GpuBackend {
public:
	/// Error(ENODEV, Step::GpuOpen) without a runtime, without a device,
	/// with a device that cannot map host memory, or with a library that
	/// is not the HIP runtime.
	explicit HipBackend(const HipOptions &options = {});
	HipBackend(const HipBackend &) = delete;
	HipBackend &operator=(const HipBackend &) = delete;
	HipBackend(HipBackend &&) = delete;
	HipBackend &operator=(HipBackend &&) = delete;
	~HipBackend() override;

	const char *name() const noexcept override { return "hip"; }
	GpuMapping map(const Registration &registration) override;

	int device() const noexcept { return device_; }
	const std::string &device_name() const noexcept { return device_name_; }
	/// The library that loaded, e.g. "libamdhip64.so.6".
	const std::string &library() const noexcept;
	/// hipRuntimeGetVersion: major * 10000000 + minor * 100000 + patch.
	int runtime_version() const noexcept;
	HipMemory classify(const void *ptr) const;

private:
	std::shared_ptr<const detail::LibHip> hip_;
	int device_ = 0;
	std::string device_name_;
};

} // namespace svmbatch
