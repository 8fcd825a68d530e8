// SPDX-License-Identifier: MIT
#include "core/device.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>

#include <cerrno>

namespace svmbatch::detail {

namespace {

int ioctl_errno(int fd, unsigned long cmd, void *arg)
{
	int ret;

	do {
		ret = ::ioctl(fd, cmd, arg);
	} while (ret < 0 && errno == EINTR);
	return ret < 0 ? -errno : 0;
}

} // namespace

Device::Device(const std::string &path) : fd_(::open(path.c_str(), O_RDWR | O_CLOEXEC))
{
	if (!fd_.valid())
		open_errno_ = errno;
}

int Device::get_info(svmbatch_info &info) const
{
	info = {};
	info.size = sizeof(info);
	return ioctl_errno(fd_.get(), SVMBATCH_GET_INFO, &info);
}

int Device::register_ranges(std::span<const svmbatch_range> ranges, int stale_eventfd,
			    std::uint32_t &handle, std::uint64_t &nr_pages,
			    std::uint32_t &error_index) const
{
	svmbatch_register cmd{};
	int ret;

	cmd.size = sizeof(cmd);
	if (stale_eventfd >= 0) {
		cmd.flags = SVMBATCH_REGISTER_EVENTFD;
		cmd.eventfd = stale_eventfd;
	}
	cmd.ranges = reinterpret_cast<std::uintptr_t>(ranges.data());
	cmd.nr_ranges = static_cast<std::uint32_t>(ranges.size());
	cmd.range_size = sizeof(svmbatch_range);
	cmd.error_index = SVMBATCH_NO_INDEX;
	ret = ioctl_errno(fd_.get(), SVMBATCH_REGISTER, &cmd);
	handle = cmd.handle;
	nr_pages = cmd.nr_pages;
	error_index = ret ? cmd.error_index : SVMBATCH_NO_INDEX;
	return ret;
}

int Device::unregister(std::uint32_t handle) const
{
	svmbatch_unregister cmd{};

	cmd.size = sizeof(cmd);
	cmd.handle = handle;
	return ioctl_errno(fd_.get(), SVMBATCH_UNREGISTER, &cmd);
}

int Device::query(std::uint32_t handle, svmbatch_query &query) const
{
	query = {};
	query.size = sizeof(query);
	query.handle = handle;
	query.range_size = sizeof(svmbatch_range);
	return ioctl_errno(fd_.get(), SVMBATCH_QUERY, &query);
}

int Device::export_dmabuf(std::uint32_t handle, std::uint32_t flags) const
{
	svmbatch_export_dmabuf cmd{};

	cmd.size = sizeof(cmd);
	cmd.flags = flags;
	cmd.handle = handle;
	cmd.fd = -1;
	int ret = ioctl_errno(fd_.get(), SVMBATCH_EXPORT_DMABUF, &cmd);
	return ret ? ret : cmd.fd;
}

} // namespace svmbatch::detail
