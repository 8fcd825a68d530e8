// SPDX-License-Identifier: MIT
// A ring the library sets up itself and exits on destruction: a Reader's
// private rings, an ExtentReader's ring.
#pragma once

#include <liburing.h>

#include <string>

#include <svmbatch/error.hpp>

namespace svmbatch::detail {

class OwnedRing {
public:
	/// Error(-errno, Step::IoUringRegister) naming `what` when the kernel
	/// refuses the ring.
	OwnedRing(unsigned entries, const char *what)
	{
		int ret = io_uring_queue_init(entries, &ring_, 0);
		if (ret < 0)
			throw Error(-ret, Step::IoUringRegister,
				    std::string("io_uring_queue_init of ") + what + " (" +
					    std::to_string(entries) + " entries)");
	}
	OwnedRing(const OwnedRing &) = delete;
	OwnedRing &operator=(const OwnedRing &) = delete;
	OwnedRing(OwnedRing &&) = delete;
	OwnedRing &operator=(OwnedRing &&) = delete;
	~OwnedRing() { io_uring_queue_exit(&ring_); }

	::io_uring &get() noexcept { return ring_; }

private:
	::io_uring ring_{};
};

} // namespace svmbatch::detail
