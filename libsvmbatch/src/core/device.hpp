// SPDX-License-Identifier: MIT
// /dev/svmbatch: the fd and its ioctls, errno-returning, no policy.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <linux/svmbatch.h>

#include <svmbatch/detail/unique_fd.hpp>

namespace svmbatch::detail {

class Device {
public:
	/// Opens path; on failure fd() is invalid and open_errno() says why.
	explicit Device(const std::string &path);

	bool is_open() const noexcept { return fd_.valid(); }
	int open_errno() const noexcept { return open_errno_; }

	/// Each returns 0 or -errno.
	int get_info(svmbatch_info &info) const;
	/// On failure *error_index is the kernel's (SVMBATCH_NO_INDEX if none).
	/// stale_eventfd >= 0: the kernel signals it when the registration
	/// goes STALE (SVMBATCH_REGISTER_EVENTFD).
	int register_ranges(std::span<const svmbatch_range> ranges, int stale_eventfd,
			    std::uint32_t &handle, std::uint64_t &nr_pages,
			    std::uint32_t &error_index) const;
	int unregister(std::uint32_t handle) const;
	int query(std::uint32_t handle, svmbatch_query &query) const;
	/// The new dma-buf fd, or -errno.
	int export_dmabuf(std::uint32_t handle, std::uint32_t flags) const;

private:
	UniqueFd fd_;
	int open_errno_ = 0;
};

} // namespace svmbatch::detail
