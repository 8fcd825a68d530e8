// SPDX-License-Identifier: MIT
// A batch of requests checked and cut into the pieces the rings run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <svmbatch/fixed_buffers.hpp>
#include <svmbatch/io.hpp>

namespace svmbatch::detail {

/// One READ_FIXED or WRITE_FIXED: part of a request inside one fixed
/// buffer, at most max_io_bytes long.
struct Piece {
	std::size_t request;
	int fd;
	unsigned index; ///< fixed buffer slot
	char *addr;
	std::size_t len;
	std::uint64_t file_offset;
	bool offload; ///< an io-wq worker may run it: see is_storage()
};

/// fd was opened with O_DIRECT.
bool is_direct(int fd);

/// fd is a regular file or a block device: a transfer a worker can copy
/// in parallel.  A pipe or socket is not: IOSQE_ASYNC only sends it from
/// io-wq to the poll path it would take anyway, and on Linux 6.1 that
/// detour can spin in the submitting thread's task work once data has
/// arrived (seen in our 6.1 guests: the driver at 100% system time, the
/// byte left in the pipe, the read never retried).
bool is_storage(int fd);

/// Check every request against fixed and options, then cut them into
/// pieces, request by request in file order.  Throws Error(EINVAL,
/// Step::Validate) naming the first bad request; nothing is cut then.
std::vector<Piece> plan_pieces(std::span<const IoRequest> requests, const FixedBuffers &fixed,
			       const IoOptions &options, bool reading);

} // namespace svmbatch::detail
