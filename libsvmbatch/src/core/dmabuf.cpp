// SPDX-License-Identifier: MIT
// DmaBuf, the handle of an exported dma-buf (Registration::export_dmabuf).
#include <svmbatch/dmabuf.hpp>

#include <unistd.h>

namespace svmbatch {

DmaBuf &DmaBuf::operator=(DmaBuf &&other) noexcept
{
	if (this != &other) {
		if (fd_ >= 0)
			::close(fd_);
		fd_ = std::exchange(other.fd_, -1);
		size_ = std::exchange(other.size_, 0);
	}
	return *this;
}

DmaBuf::~DmaBuf()
{
	if (fd_ >= 0)
		::close(fd_);
}

} // namespace svmbatch
