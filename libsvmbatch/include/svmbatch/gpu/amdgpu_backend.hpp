// SPDX-License-Identifier: MIT
#pragma once

#include <memory>
#include <string>

#include <svmbatch/api.h>
#include <svmbatch/gpu/backend.hpp>

namespace svmbatch {

namespace detail {
struct AmdgpuDevice;
}

/// AMD GPUs through the amdgpu DRM driver and libdrm_amdgpu: map()
/// exports the registration as a dma-buf (kernel mode; EOPNOTSUPP in
/// userspace mode), imports it (amdgpu_bo_import), reserves GPU virtual
/// addresses (amdgpu_va_range_alloc) and maps the buffer object there
/// (amdgpu_bo_va_op MAP).  address(i) is caller buffer i's GPU virtual
/// address in this process's amdgpu VM; object_handle() the KMS handle of
/// the imported buffer object.  Each failed step undoes the earlier ones.
/// Never run on AMD hardware here: see Documentation/amd.rst.
class SVMBATCH_API AmdgpuBackend final : public GpuBackend {
public:
	/// The first DRM node whose driver is amdgpu (render nodes first);
	/// Error(ENODEV, Step::GpuOpen) when there is none.
	AmdgpuBackend();
	/// A given node: ENOENT if absent, ENODEV if it is not amdgpu.
	explicit AmdgpuBackend(const std::string &node);
	AmdgpuBackend(const AmdgpuBackend &) = delete;
	AmdgpuBackend &operator=(const AmdgpuBackend &) = delete;
	AmdgpuBackend(AmdgpuBackend &&) = delete;
	AmdgpuBackend &operator=(AmdgpuBackend &&) = delete;
	~AmdgpuBackend() override;

	const char *name() const noexcept override { return "amdgpu"; }
	GpuMapping map(const Registration &registration) override;

	const std::string &node() const noexcept;

private:
	std::shared_ptr<const detail::AmdgpuDevice> dev_;
};

} // namespace svmbatch
