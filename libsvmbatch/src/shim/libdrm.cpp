// SPDX-License-Identifier: MIT
#include "shim/libdrm.hpp"

#include <fcntl.h>
#include <xf86drm.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include <svmbatch/error.hpp>

namespace svmbatch::detail {

std::shared_ptr<const DrmNode> open_drm_node(const std::string &path)
{
	UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));

	if (!fd.valid())
		throw Error(errno, Step::GpuOpen, "cannot open " + path);
	drmVersionPtr version = drmGetVersion(fd.get());
	if (!version)
		throw Error(ENODEV, Step::GpuOpen, path + " is not a DRM device");
	std::string driver(version->name, version->name_len);
	drmFreeVersion(version);
	return std::make_shared<const DrmNode>(DrmNode{std::move(fd), path, std::move(driver)});
}

std::vector<std::string> drm_node_paths()
{
	std::vector<std::string> render, primary;
	std::error_code ec;

	for (const auto &entry : std::filesystem::directory_iterator("/dev/dri", ec)) {
		std::string name = entry.path().filename();
		if (name.starts_with("renderD"))
			render.push_back(entry.path());
		else if (name.starts_with("card"))
			primary.push_back(entry.path());
	}
	std::sort(render.begin(), render.end());
	std::sort(primary.begin(), primary.end());
	render.insert(render.end(), primary.begin(), primary.end());
	return render;
}

std::shared_ptr<const DrmNode> find_drm_node(const std::string &driver)
{
	for (const std::string &path : drm_node_paths()) {
		try {
			auto node = open_drm_node(path);
			if (driver.empty() || node->driver == driver)
				return node;
		} catch (const Error &) {
			continue; // e.g. EACCES on a primary node: try the next
		}
	}
	return nullptr;
}

} // namespace svmbatch::detail
