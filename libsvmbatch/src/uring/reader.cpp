// SPDX-License-Identifier: MIT
// Reader: a queue of READ_FIXED reads into registered buffers.
#include <svmbatch/error.hpp>
#include <svmbatch/reader.hpp>

#include <fcntl.h>
#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <string>

namespace svmbatch {

namespace {

/// One read: part of a request inside one fixed buffer.
struct Piece {
	std::size_t request;
	int fd;
	unsigned index;		// fixed buffer slot
	char *addr;
	std::size_t len;
	std::uint64_t file_offset;
};

bool is_direct(int fd)
{
	int flags = ::fcntl(fd, F_GETFL);

	return flags >= 0 && (flags & O_DIRECT);
}

} // namespace

Reader::Reader(::io_uring &ring, const FixedBuffers &fixed, const ReaderOptions &options)
	: ring_(ring), fixed_(fixed), options_(options)
{
	options_.queue_depth = std::clamp(options_.queue_depth, 1u, ring.sq.ring_entries);
	if (options_.max_read_bytes == 0 || options_.direct_alignment == 0)
		throw Error(EINVAL, Step::Validate, "max_read_bytes and direct_alignment must be > 0");
}

std::vector<ReadResult> Reader::read(std::span<const ReadRequest> requests)
{
	std::vector<ReadResult> results(requests.size());
	std::deque<Piece> pending;
	const std::size_t align = options_.direct_alignment;

	// Validate all and cut into pieces before submitting anything.
	for (std::size_t i = 0; i < requests.size(); i++) {
		const ReadRequest &rq = requests[i];

		if (rq.buffer >= fixed_.size())
			throw Error(EINVAL, Step::Validate,
				    "request " + std::to_string(i) + ": no buffer " +
					    std::to_string(rq.buffer));
		auto slices = fixed_.slices(rq.buffer);
		std::size_t buffer_len = 0;
		for (const FixedSlice &s : slices)
			buffer_len += s.len;
		if (rq.buffer_offset > buffer_len || rq.length > buffer_len - rq.buffer_offset)
			throw Error(EINVAL, Step::Validate,
				    "request " + std::to_string(i) + " reaches past its buffer",
				    rq.buffer);
		bool direct = is_direct(rq.fd);
		std::size_t skip = rq.buffer_offset, left = rq.length;
		std::uint64_t off = rq.file_offset;
		for (const FixedSlice &s : slices) {
			if (skip >= s.len) {
				skip -= s.len;
				continue;
			}
			char *addr = static_cast<char *>(s.addr) + skip;
			std::size_t in_slice = std::min(left, s.len - skip);
			skip = 0;
			for (std::size_t done = 0; done < in_slice;) {
				std::size_t n = std::min(in_slice - done, options_.max_read_bytes);
				if (direct && ((reinterpret_cast<std::uintptr_t>(addr + done) |
						off | n) % align))
					throw Error(EINVAL, Step::Validate,
						    "request " + std::to_string(i) +
							    ": O_DIRECT needs address, offset and length "
							    "aligned to " + std::to_string(align),
						    rq.buffer);
				pending.push_back({i, rq.fd, s.index, addr + done, n, off});
				done += n;
				off += n;
			}
			left -= in_slice;
			if (!left)
				break;
		}
	}

	// Pieces in flight, by slot; user_data is the slot.
	std::vector<Piece> flight(options_.queue_depth);
	std::vector<unsigned> free_slots;
	for (unsigned s = options_.queue_depth; s-- > 0;)
		free_slots.push_back(s);
	std::vector<bool> failed(requests.size(), false);
	submitted_ = 0;

	auto queue = [&](const Piece &p) {
		unsigned slot = free_slots.back();
		io_uring_sqe *sqe = io_uring_get_sqe(&ring_);

		if (!sqe)
			return false;
		free_slots.pop_back();
		flight[slot] = p;
		io_uring_prep_read_fixed(sqe, p.fd, p.addr, static_cast<unsigned>(p.len),
					 p.file_offset, static_cast<int>(p.index));
		io_uring_sqe_set_data64(sqe, slot);
		submitted_++;
		return true;
	};

	while (!pending.empty() || free_slots.size() < flight.size()) {
		while (!pending.empty() && !free_slots.empty()) {
			if (!queue(pending.front()))
				break;
			pending.pop_front();
		}
		int ret = io_uring_submit_and_wait(&ring_, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
			// The ring refuses submissions: fail what has not been
			// queued, and only wait for (reap) what has.
			for (const Piece &p : pending) {
				failed[p.request] = true;
				if (!results[p.request].err)
					results[p.request].err = -ret;
			}
			pending.clear();
			io_uring_cqe *first;
			if (free_slots.size() < flight.size() &&
			    io_uring_wait_cqe(&ring_, &first) < 0)
				throw Error(-ret, Step::IoUringSubmit, "io_uring_submit failed and "
					    "reads in flight cannot be reaped");
		}
		io_uring_cqe *cqe;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&ring_, head, cqe) {
			seen++;
			auto slot = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
			Piece p = flight[slot];
			free_slots.push_back(slot);
			ReadResult &res = results[p.request];

			if (cqe->res < 0) {
				if (!res.err)
					res.err = -cqe->res;
				failed[p.request] = true;
			} else if (cqe->res == 0) {
				if (!res.err)
					res.err = ENODATA;	// end of file first
				failed[p.request] = true;
			} else {
				auto n = static_cast<std::size_t>(cqe->res);
				res.bytes += n;
				if (n < p.len && !failed[p.request])	// short: go on
					pending.push_front({p.request, p.fd, p.index, p.addr + n,
							    p.len - n, p.file_offset + n});
			}
		}
		io_uring_cq_advance(&ring_, seen);
	}
	return results;
}

} // namespace svmbatch
