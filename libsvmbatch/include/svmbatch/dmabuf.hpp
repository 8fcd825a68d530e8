// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <utility>

#include <svmbatch/api.h>
#include <svmbatch/detail/unique_fd.hpp>

namespace svmbatch {

/// A dma-buf of a registration (kernel mode): its pages, the merged ranges
/// concatenated in address order.  Move-only; closes the fd on destruction.
/// The dma-buf keeps the pages pinned even after the Registration is gone.
class SVMBATCH_API DmaBuf {
public:
	DmaBuf() = default;
	DmaBuf(int fd, std::size_t size) noexcept : fd_(fd), size_(size) {}
	DmaBuf(DmaBuf &&other) noexcept
		: fd_(std::move(other.fd_)), size_(std::exchange(other.size_, 0))
	{}
	DmaBuf &operator=(DmaBuf &&other) noexcept;
	DmaBuf(const DmaBuf &) = delete;
	DmaBuf &operator=(const DmaBuf &) = delete;
	~DmaBuf();

	int fd() const noexcept { return fd_.get(); }
	std::size_t size() const noexcept { return size_; }
	/// Give up ownership: the caller closes the returned fd.
	int release() noexcept
	{
		size_ = 0;
		return fd_.release();
	}
	explicit operator bool() const noexcept { return fd_.valid(); }

private:
	detail::UniqueFd fd_;
	std::size_t size_ = 0;
};

} // namespace svmbatch
