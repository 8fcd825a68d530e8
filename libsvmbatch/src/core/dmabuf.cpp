// SPDX-License-Identifier: MIT
// DmaBuf, the handle of an exported dma-buf (Registration::export_dmabuf).
#include <svmbatch/dmabuf.hpp>

namespace svmbatch {

// Out of line, as they always were: applications built against earlier
// releases call these symbols.
DmaBuf &DmaBuf::operator=(DmaBuf &&other) noexcept
{
	if (this != &other) {
		fd_ = std::move(other.fd_);
		size_ = std::exchange(other.size_, 0);
	}
	return *this;
}

DmaBuf::~DmaBuf() = default;

} // namespace svmbatch
