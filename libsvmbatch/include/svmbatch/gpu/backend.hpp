// SPDX-License-Identifier: MIT
// Making a registration's buffers visible to a GPU: the backend interface
// and the mapping it returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <svmbatch/api.h>

namespace svmbatch {

class Registration;

/// What GpuMapping::address() means for a backend.
enum class GpuAddressKind {
	DevicePointer, ///< a pointer kernels on the device dereference (CUDA, HIP, HSA, amdgpu VA, ZE)
	ObjectOffset, ///< a byte offset in the imported object (DRM PRIME: GEM handle + offset)
};

/// What a backend undoes when a mapping ends (unregister, close a handle).
/// Backends derive from it; the destructor must not throw.
class SVMBATCH_API GpuMappingOwner {
public:
	GpuMappingOwner() = default;
	GpuMappingOwner(const GpuMappingOwner &) = delete;
	GpuMappingOwner &operator=(const GpuMappingOwner &) = delete;
	GpuMappingOwner(GpuMappingOwner &&) = delete;
	GpuMappingOwner &operator=(GpuMappingOwner &&) = delete;
	virtual ~GpuMappingOwner();
};

/// A registration's buffers as one GPU sees them: per caller buffer (in the
/// caller's order) an address.  Move-only; the destructor unmaps.  It does
/// not depend on the Registration object staying alive (the backend holds
/// what it needs: a dma-buf reference, its own host registration), but the
/// caller's memory must stay mapped while the GPU uses it.
class SVMBATCH_API GpuMapping {
public:
	GpuMapping() = default;
	GpuMapping(std::string backend, GpuAddressKind kind, std::vector<std::uint64_t> addresses,
		   std::unique_ptr<GpuMappingOwner> owner, std::uint32_t object_handle = 0);
	GpuMapping(GpuMapping &&) noexcept;
	GpuMapping &operator=(GpuMapping &&) noexcept;
	GpuMapping(const GpuMapping &) = delete;
	GpuMapping &operator=(const GpuMapping &) = delete;
	~GpuMapping();

	/// "cuda", "hip", "hsa", "amdgpu", "drm", "ze".
	const std::string &backend() const noexcept { return backend_; }
	GpuAddressKind kind() const noexcept { return kind_; }
	/// Number of caller buffers.
	std::size_t size() const noexcept { return addresses_.size(); }
	/// Address of caller buffer i (std::out_of_range past the end).
	std::uint64_t address(std::size_t buffer) const;
	std::span<const std::uint64_t> addresses() const noexcept { return addresses_; }
	/// address(i) as a device pointer (kind() == DevicePointer).
	template <typename T> T *device_pointer(std::size_t buffer) const
	{
		// NOLINTNEXTLINE(performance-no-int-to-ptr): the device address is an integer
		return reinterpret_cast<T *>(static_cast<std::uintptr_t>(address(buffer)));
	}
	/// The imported object's handle (DRM: GEM handle; amdgpu: KMS handle
	/// of the buffer object); 0 for backends without one.
	std::uint32_t object_handle() const noexcept { return object_handle_; }

	/// Unmap now.  Idempotent.
	void reset() noexcept;
	explicit operator bool() const noexcept { return owner_ != nullptr; }

private:
	std::string backend_;
	GpuAddressKind kind_ = GpuAddressKind::DevicePointer;
	std::vector<std::uint64_t> addresses_;
	std::unique_ptr<GpuMappingOwner> owner_;
	std::uint32_t object_handle_ = 0;
};

/// The GPU backends this build of the library has, in the order "cuda",
/// "hip", "hsa", "amdgpu", "drm", "ze" (SVMBATCH_WITH_<NAME> when it was built;
/// svmbatch/config.h says the same to the preprocessor).  Whether a driver
/// and a device are there is the backend constructor's to find out.
SVMBATCH_API std::vector<std::string> built_backends();

/// A way to make registered buffers GPU-accessible.  Implementations:
/// DrmBackend, CudaBackend, HipBackend, HsaBackend, AmdgpuBackend, ZeBackend.  A backend that
/// finds no driver or no device throws Error(ENODEV) from its constructor.
class SVMBATCH_API GpuBackend {
public:
	GpuBackend() = default;
	GpuBackend(const GpuBackend &) = delete;
	GpuBackend &operator=(const GpuBackend &) = delete;
	GpuBackend(GpuBackend &&) = delete;
	GpuBackend &operator=(GpuBackend &&) = delete;
	virtual ~GpuBackend();

	virtual const char *name() const noexcept = 0;
	/// All of registration's buffers, or nothing: on failure whatever was
	/// mapped is undone before the Error (Step::GpuMap) is thrown.
	virtual GpuMapping map(const Registration &registration) = 0;
};

} // namespace svmbatch
