// SPDX-License-Identifier: MIT
// Requests into pieces: validation up front, so that a batch with a bad
// request submits nothing.
#include "uring/io_plan.hpp"

#include <svmbatch/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <string>

namespace svmbatch::detail {

bool is_direct(int fd)
{
	int flags = ::fcntl(fd, F_GETFL);

	return flags >= 0 && (flags & O_DIRECT);
}

bool is_storage(int fd)
{
	struct stat st {};

	return ::fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
}

namespace {

std::size_t buffer_length(std::span<const FixedSlice> slices)
{
	std::size_t len = 0;

	for (const FixedSlice &s : slices)
		len += s.len;
	return len;
}

/// Validate request i and append its pieces: one per slice it touches, cut
/// further to at most max_io_bytes each.
void cut_request(std::size_t i, const IoRequest &rq, const FixedBuffers &fixed,
		 const IoOptions &options, bool reading, std::vector<Piece> &pieces)
{
	const std::size_t align = options.direct_alignment;

	if (rq.buffer >= fixed.size())
		throw Error(EINVAL, Step::Validate,
			    "request " + std::to_string(i) + ": no buffer " +
				    std::to_string(rq.buffer));
	if (reading && fixed.access(rq.buffer) == Access::ReadOnly)
		throw Error(EACCES, Step::Validate,
			    "request " + std::to_string(i) + " reads into read-only buffer " +
				    std::to_string(rq.buffer),
			    rq.buffer);
	auto slices = fixed.slices(rq.buffer);
	std::size_t buffer_len = buffer_length(slices);
	if (rq.buffer_offset > buffer_len || rq.length > buffer_len - rq.buffer_offset)
		throw Error(EINVAL, Step::Validate,
			    "request " + std::to_string(i) + " reaches past its buffer", rq.buffer);
	const bool direct = is_direct(rq.fd);
	const bool offload = is_storage(rq.fd);
	std::size_t skip = rq.buffer_offset, left = rq.length;
	std::uint64_t off = rq.file_offset;
	for (const FixedSlice &s : slices) {
		if (!left)
			break;
		if (skip >= s.len) {
			skip -= s.len;
			continue;
		}
		char *addr = static_cast<char *>(s.addr) + skip;
		std::size_t in_slice = std::min(left, s.len - skip);
		skip = 0;
		for (std::size_t done = 0; done < in_slice;) {
			std::size_t n = std::min(in_slice - done, options.max_io_bytes);
			if (direct &&
			    ((reinterpret_cast<std::uintptr_t>(addr + done) | off | n) % align))
				throw Error(EINVAL, Step::Validate,
					    "request " + std::to_string(i) +
						    ": O_DIRECT needs address, offset and length "
						    "aligned to " +
						    std::to_string(align),
					    rq.buffer);
			pieces.push_back({i, rq.fd, s.index, addr + done, n, off, offload});
			done += n;
			off += n;
		}
		left -= in_slice;
	}
}

} // namespace

std::vector<Piece> plan_pieces(std::span<const IoRequest> requests, const FixedBuffers &fixed,
			       const IoOptions &options, bool reading)
{
	std::vector<Piece> pieces;

	pieces.reserve(requests.size());
	for (std::size_t i = 0; i < requests.size(); i++)
		cut_request(i, requests[i], fixed, options, reading, pieces);
	return pieces;
}

} // namespace svmbatch::detail
