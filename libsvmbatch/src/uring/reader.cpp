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
	unsigned index; // fixed buffer slot
	char *addr;
	std::size_t len;
	std::uint64_t file_offset;
};

bool is_direct(int fd)
{
	int flags = ::fcntl(fd, F_GETFL);

	return flags >= 0 && (flags & O_DIRECT);
}

/// Validate request i and append its pieces to pending: one per slice it
/// touches, cut further to at most max_read_bytes each.
void cut_request(std::size_t i, const ReadRequest &rq, const FixedBuffers &fixed,
		 const ReaderOptions &options, std::deque<Piece> &pending)
{
	const std::size_t align = options.direct_alignment;

	if (rq.buffer >= fixed.size())
		throw Error(EINVAL, Step::Validate,
			    "request " + std::to_string(i) + ": no buffer " +
				    std::to_string(rq.buffer));
	auto slices = fixed.slices(rq.buffer);
	std::size_t buffer_len = 0;
	for (const FixedSlice &s : slices)
		buffer_len += s.len;
	if (rq.buffer_offset > buffer_len || rq.length > buffer_len - rq.buffer_offset)
		throw Error(EINVAL, Step::Validate,
			    "request " + std::to_string(i) + " reaches past its buffer", rq.buffer);
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
			std::size_t n = std::min(in_slice - done, options.max_read_bytes);
			if (direct &&
			    ((reinterpret_cast<std::uintptr_t>(addr + done) | off | n) % align))
				throw Error(EINVAL, Step::Validate,
					    "request " + std::to_string(i) +
						    ": O_DIRECT needs address, offset and length "
						    "aligned to " +
						    std::to_string(align),
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

/// The pieces in flight, by slot (user_data is the slot), and what their
/// completions add to the results.
class Flight {
public:
	Flight(::io_uring &ring, unsigned depth, std::vector<ReadResult> &results,
	       std::size_t &submitted)
		: ring_(ring), slots_(depth), failed_(results.size(), false), results_(results),
		  submitted_(submitted)
	{
		for (unsigned s = depth; s-- > 0;)
			free_slots_.push_back(s);
	}

	bool busy() const { return free_slots_.size() < slots_.size(); }

	/// Queue pending's pieces from the front while slots and SQEs last.
	void queue(std::deque<Piece> &pending)
	{
		while (!pending.empty() && !free_slots_.empty()) {
			if (!queue_one(pending.front()))
				break;
			pending.pop_front();
		}
	}

	/// The ring refused a submission (err < 0): fail what has not been
	/// queued, and only wait for (reap) what has.
	void refuse(std::deque<Piece> &pending, int err)
	{
		for (const Piece &p : pending) {
			failed_[p.request] = true;
			if (!results_[p.request].err)
				results_[p.request].err = -err;
		}
		pending.clear();
		io_uring_cqe *first;
		if (busy() && io_uring_wait_cqe(&ring_, &first) < 0)
			throw Error(-err, Step::IoUringSubmit,
				    "io_uring_submit failed and "
				    "reads in flight cannot be reaped");
	}

	/// Count the completions; a short read puts its rest at pending's front.
	void reap(std::deque<Piece> &pending)
	{
		io_uring_cqe *cqe;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&ring_, head, cqe)
		{
			seen++;
			auto slot = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
			Piece p = slots_[slot];
			free_slots_.push_back(slot);
			complete(p, cqe->res, pending);
		}
		io_uring_cq_advance(&ring_, seen);
	}

private:
	bool queue_one(const Piece &p)
	{
		unsigned slot = free_slots_.back();
		io_uring_sqe *sqe = io_uring_get_sqe(&ring_);

		if (!sqe)
			return false;
		free_slots_.pop_back();
		slots_[slot] = p;
		io_uring_prep_read_fixed(sqe, p.fd, p.addr, static_cast<unsigned>(p.len),
					 p.file_offset, static_cast<int>(p.index));
		io_uring_sqe_set_data64(sqe, slot);
		submitted_++;
		return true;
	}

	void complete(const Piece &p, int ret, std::deque<Piece> &pending)
	{
		ReadResult &res = results_[p.request];

		if (ret < 0) {
			if (!res.err)
				res.err = -ret;
			failed_[p.request] = true;
		} else if (ret == 0) {
			if (!res.err)
				res.err = ENODATA; // end of file first
			failed_[p.request] = true;
		} else {
			auto n = static_cast<std::size_t>(ret);
			res.bytes += n;
			if (n < p.len && !failed_[p.request]) // short: go on
				pending.push_front({p.request, p.fd, p.index, p.addr + n, p.len - n,
						    p.file_offset + n});
		}
	}

	::io_uring &ring_;
	std::vector<Piece> slots_;
	std::vector<unsigned> free_slots_;
	std::vector<bool> failed_;
	std::vector<ReadResult> &results_;
	std::size_t &submitted_;
};

} // namespace

Reader::Reader(::io_uring &ring, const FixedBuffers &fixed, const ReaderOptions &options)
	: ring_(ring), fixed_(fixed), options_(options)
{
	options_.queue_depth = std::clamp(options_.queue_depth, 1u, ring.sq.ring_entries);
	if (options_.max_read_bytes == 0 || options_.direct_alignment == 0)
		throw Error(EINVAL, Step::Validate,
			    "max_read_bytes and direct_alignment must be > 0");
}

std::vector<ReadResult> Reader::read(std::span<const ReadRequest> requests)
{
	std::vector<ReadResult> results(requests.size());
	std::deque<Piece> pending;

	// Validate all and cut into pieces before submitting anything.
	for (std::size_t i = 0; i < requests.size(); i++)
		cut_request(i, requests[i], fixed_, options_, pending);

	submitted_ = 0;
	Flight flight(ring_, options_.queue_depth, results, submitted_);
	while (!pending.empty() || flight.busy()) {
		flight.queue(pending);
		int ret = io_uring_submit_and_wait(&ring_, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY)
			flight.refuse(pending, ret);
		flight.reap(pending);
	}
	return results;
}

} // namespace svmbatch
