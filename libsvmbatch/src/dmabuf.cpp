// SPDX-License-Identifier: MIT
// Registration::export_dmabuf and the DmaBuf handle.
#include <svmbatch/context.hpp>
#include <svmbatch/dmabuf.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/registration.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

#include "device.hpp"
#include "registration_state.hpp"

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

DmaBuf Registration::export_dmabuf(bool writable) const
{
	const detail::RegistrationState &s = state();

	if (s.mode != Mode::Kernel)
		throw Error(EOPNOTSUPP, Step::Export,
			    "a dma-buf needs kernel mode (the module)");
	int fd = s.device->export_dmabuf(
		s.handle, O_CLOEXEC | (writable ? O_RDWR : O_RDONLY));
	if (fd < 0)
		throw Error(-fd, Step::Export,
			    fd == -EACCES ? "read-only buffers export read-only"
					  : "EXPORT_DMABUF");
	return {fd, static_cast<std::size_t>(s.pinned_pages * s.page_size)};
}

std::size_t Registration::dmabuf_offset(std::size_t buffer) const
{
	const detail::RegistrationState &s = state();
	BufferLocation loc = location(buffer);
	std::size_t off = 0;

	for (std::size_t r = 0; r < loc.range; r++)
		off += s.plan.ranges[r].len;
	return off + loc.offset;
}

} // namespace svmbatch
