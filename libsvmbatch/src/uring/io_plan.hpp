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
};

/// fd was opened with O_DIRECT.
bool is_direct(int fd);

/// Check every request against fixed and options, then cut them into
/// pieces, request by request in file order.  Throws Error(EINVAL,
/// Step::Validate) naming the first bad request; nothing is cut then.
std::vector<Piece> plan_pieces(std::span<const IoRequest> requests, const FixedBuffers &fixed,
			       const IoOptions &options, bool reading);

} // namespace svmbatch::detail
