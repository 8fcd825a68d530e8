// SPDX-License-Identifier: MIT
// Not API: what the public classes that own a file descriptor hold.
#pragma once

#include <unistd.h>

#include <utility>

namespace svmbatch::detail {

/// An owned file descriptor, closed on destruction.
class UniqueFd {
public:
	UniqueFd() = default;
	explicit UniqueFd(int fd) noexcept : fd_(fd) {}
	UniqueFd(UniqueFd &&other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
	UniqueFd &operator=(UniqueFd &&other) noexcept
	{
		if (this != &other) {
			reset();
			fd_ = std::exchange(other.fd_, -1);
		}
		return *this;
	}
	UniqueFd(const UniqueFd &) = delete;
	UniqueFd &operator=(const UniqueFd &) = delete;
	~UniqueFd() { reset(); }

	int get() const noexcept { return fd_; }
	bool valid() const noexcept { return fd_ >= 0; }
	/// Give up ownership: the caller closes the returned fd.
	int release() noexcept { return std::exchange(fd_, -1); }
	void reset() noexcept
	{
		if (fd_ >= 0)
			::close(fd_);
		fd_ = -1;
	}

private:
	int fd_ = -1;
};

} // namespace svmbatch::detail
