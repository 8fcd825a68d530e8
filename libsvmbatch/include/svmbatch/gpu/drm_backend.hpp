// SPDX-License-Identifier: MIT
#pragma once

#include <memory>
#include <string>

#include <svmbatch/api.h>
#include <svmbatch/gpu/backend.hpp>

namespace svmbatch {

namespace detail {
struct DrmNode;
}

/// Any DRM driver that imports dma-bufs (PRIME): map() exports the
/// registration as a dma-buf (kernel mode) and imports it with
/// drmPrimeFDToHandle.  The mapping's object_handle() is the GEM handle,
/// closed when the mapping ends; address(i) is caller buffer i's byte
/// offset in that object (GpuAddressKind::ObjectOffset).  The GEM object
/// holds the dma-buf, which holds the pinned pages.  In userspace mode
/// map() throws Error(EOPNOTSUPP, Step::Export).
class SVMBATCH_API DrmBackend final : public GpuBackend {
public:
	/// The first node under /dev/dri that opens: render nodes
	/// (renderD*) before primary nodes (card*).  Error(ENODEV) if none.
	DrmBackend();
	/// A given node, e.g. "/dev/dri/renderD128".  Error(errno) if it
	/// does not open (ENOENT: no such node), ENODEV if it is not DRM.
	explicit DrmBackend(const std::string &node);
	DrmBackend(const DrmBackend &) = delete;
	DrmBackend &operator=(const DrmBackend &) = delete;
	DrmBackend(DrmBackend &&) = delete;
	DrmBackend &operator=(DrmBackend &&) = delete;
	~DrmBackend() override;

	const char *name() const noexcept override { return "drm"; }
	GpuMapping map(const Registration &registration) override;

	/// The opened node's path and its driver's name (drmGetVersion).
	const std::string &node() const noexcept;
	const std::string &driver() const noexcept;
	/// The DRM fd, e.g. for driver-specific ioctls on object_handle().
	int fd() const noexcept;

private:
	std::shared_ptr<const detail::DrmNode> node_;
};

} // namespace svmbatch
