// SPDX-License-Identifier: MIT
// Opening DRM nodes: shared by DrmBackend and AmdgpuBackend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <svmbatch/detail/unique_fd.hpp>

namespace svmbatch::detail {

struct DrmNode {
	UniqueFd fd;
	std::string path;
	std::string driver; ///< drmGetVersion()'s name: "vgem", "amdgpu", ...
};

/// Open path read-write; Error(errno, GpuOpen) if it does not open,
/// Error(ENODEV, GpuOpen) if it is not a DRM device.
std::shared_ptr<const DrmNode> open_drm_node(const std::string &path);

/// The nodes under /dev/dri: render nodes (renderD*) first, then primary
/// nodes (card*), each group sorted.
std::vector<std::string> drm_node_paths();

/// The first node that opens and whose driver is `driver` (any driver if
/// empty); nullptr when none.
std::shared_ptr<const DrmNode> find_drm_node(const std::string &driver);

} // namespace svmbatch::detail
