// SPDX-License-Identifier: MIT
// A Registration's buffers as io_uring fixed buffers: one slot per piece of
// at most 1 GiB, either as the ring's whole table or as a window of a
// sparse table the application owns.
#include <svmbatch/error.hpp>
#include <svmbatch/fixed_buffers.hpp>
#include <svmbatch/registration.hpp>

#include <liburing.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/registration_state.hpp"

namespace svmbatch {

namespace {

/* Write iovecs into slots [first, first + n); 0..n = entries done, or -errno. */
int update_slots(::io_uring &ring, unsigned first, const ::iovec *iov, unsigned n)
{
	std::vector<__u64> tags(n, 0);

	return io_uring_register_buffers_update_tag(&ring, first, iov, tags.data(), n);
}

/* Clear slots [first, first + n); best effort, for undo and destruction. */
void clear_slots(::io_uring &ring, unsigned first, unsigned n) noexcept
{
	try {
		std::vector<::iovec> empty(n, ::iovec{nullptr, 0});

		(void)update_slots(ring, first, empty.data(), n);
	} catch (...) {
		/* No memory for the vector: nothing more can be done here. */
	}
}

/*
 * The registration's ranges serve as they are unless one is over
 * io_uring's 1 GiB (planning again is most of register_fixed's cost):
 * then replanned holds the plan returned.
 */
const detail::RangePlan &plan_for_io_uring(const detail::RegistrationState &s,
					   std::optional<detail::RangePlan> &replanned)
{
	bool fits =
		std::all_of(s.plan.ranges.begin(), s.plan.ranges.end(), [](const KernelRange &r) {
			return r.len <= io_uring_max_buffer_bytes;
		});
	if (fits)
		return s.plan;
	replanned = detail::plan_ranges(s.buffers, s.page_size, io_uring_max_buffer_bytes);
	return *replanned;
}

std::vector<::iovec> iovecs_of(const detail::RangePlan &plan)
{
	std::vector<::iovec> iov(plan.ranges.size());

	for (std::size_t p = 0; p < plan.ranges.size(); p++)
		// NOLINTNEXTLINE(performance-no-int-to-ptr)
		iov[p] = {reinterpret_cast<void *>(plan.ranges[p].addr), plan.ranges[p].len};
	return iov;
}

/* Each buffer's part of each piece it touches, buffer by buffer. */
void slice_buffers(const detail::RegistrationState &s, const detail::RangePlan &plan,
		   unsigned first, std::vector<FixedSlice> &slices,
		   std::vector<std::size_t> &first_slice)
{
	first_slice.reserve(s.buffers.size() + 1);
	slices.reserve(s.buffers.size());
	for (std::size_t i = 0; i < s.buffers.size(); i++) {
		auto addr = reinterpret_cast<std::uintptr_t>(s.buffers[i].ptr);
		std::uintptr_t end = addr + s.buffers[i].len;

		for (std::size_t p = plan.locations[i].range; p <= plan.last_range[i]; p++) {
			const KernelRange &r = plan.ranges[p];
			std::uintptr_t a = std::max(addr, r.addr);
			std::uintptr_t e = std::min(end, r.addr + r.len);

			slices.push_back(
				{first + static_cast<unsigned>(p),
				 reinterpret_cast<void *>(a), // NOLINT(performance-no-int-to-ptr)
				 e - a});
		}
		first_slice.push_back(slices.size());
	}
}

/* The pieces as the ring's whole table. */
void register_table(::io_uring &ring, const std::vector<::iovec> &iov)
{
	const std::size_t n = iov.size();
	int ret = io_uring_register_buffers(&ring, iov.data(), static_cast<unsigned>(n));
	if (ret < 0)
		throw Error(-ret, Step::IoUringRegister,
			    "io_uring_register_buffers of " + std::to_string(n) + " buffers" +
				    (ret == -EBUSY ?
					     " (the ring already has a table: use a window)" :
					     ""));
}

/*
 * IORING_REGISTER_CLONE_BUFFERS (6.12+; liburing 2.3 has no helper): dst
 * gets src's whole buffer table, the same pinned pages, accounted once.
 * The 6.13 fields after flags (offsets, count) stay 0: everything.
 */
constexpr unsigned register_clone_buffers = 30;

struct CloneBuffers {
	__u32 src_fd;
	__u32 flags;
	__u32 pad[6];
};

int clone_table(::io_uring &dst, const ::io_uring &src)
{
	CloneBuffers arg{static_cast<__u32>(src.ring_fd), 0, {}};
	long ret = ::syscall(__NR_io_uring_register, dst.ring_fd, register_clone_buffers, &arg, 1);

	return ret < 0 ? -errno : 0;
}

/* The pieces into slots [first, first + n) of the ring's sparse table. */
void update_window(::io_uring &ring, unsigned first, const std::vector<::iovec> &iov,
		   const detail::RangePlan &plan)
{
	const std::size_t n = iov.size();
	int ret = update_slots(ring, first, iov.data(), static_cast<unsigned>(n));

	/*
	 * The kernel applies the update entry by entry and reports how
	 * many it did.  Learn entry k's errno by retrying it alone while
	 * the others still hold their pages (as when it failed), then
	 * undo everything.
	 */
	if (ret >= 0 && static_cast<std::size_t>(ret) < n) {
		auto k = static_cast<unsigned>(ret);

		ret = update_slots(ring, first + k, &iov[k], 1);
		if (ret >= 0) {
			clear_slots(ring, first + k, 1);
			ret = -EAGAIN; /* failed once, not twice */
		}
		clear_slots(ring, first, k);
		throw Error(-ret, Step::IoUringRegister,
			    "io_uring buffer update of slot " + std::to_string(first + k) + " (" +
				    std::to_string(k) + " of " + std::to_string(n) +
				    " done, undone)",
			    plan.first_buffer(k));
	}
	/*
	 * Nothing was done.  ENXIO (no table) and EINVAL (past its
	 * end) are about the table; our iovecs always pass the
	 * kernel's checks, so any other errno is entry 0's.
	 */
	if (ret < 0) {
		const bool table = ret == -ENXIO || ret == -EINVAL;

		throw Error(
			-ret, Step::IoUringRegister,
			"io_uring buffer update of slots " + std::to_string(first) + ".." +
				std::to_string(first + n - 1) +
				(ret == -ENXIO ?
					 " (the ring has no buffer table: register a sparse one)" :
				 ret == -EINVAL ? " (past the end of the sparse table?)" :
						  ""),
			table ? Error::no_index : plan.first_buffer(0));
	}
}

} // namespace

FixedBuffers::FixedBuffers(::io_uring &ring, const detail::RegistrationState &s,
			   const FixedOptions &options)
{
	std::optional<detail::RangePlan> replanned;
	const detail::RangePlan &plan = plan_for_io_uring(s, replanned);
	const std::size_t n = plan.ranges.size();
	const bool window = options.window_first.has_value();
	const unsigned first = window ? *options.window_first : 0;
	const std::size_t room = window && options.window_size ?
					 options.window_size :
					 io_uring_max_slots - std::min(first, io_uring_max_slots);

	if (n > room)
		throw Error(ENOSPC, Step::IoUringRegister,
			    std::to_string(n) + " fixed buffers needed, " +
				    (window ? "the window holds " : "io_uring allows ") +
				    std::to_string(room));

	std::vector<::iovec> iov = iovecs_of(plan);
	for (std::size_t p = 0; p < n; p++)
		slots_.push_back(
			{first + static_cast<unsigned>(p), iov[p].iov_base, iov[p].iov_len});
	first_slot_ = first;
	nr_slots_ = static_cast<unsigned>(n);
	window_ = window;
	slice_buffers(s, plan, first, slices_, first_slice_);
	for (const Buffer &b : s.buffers)
		access_.push_back(b.access);
	if (window)
		update_window(ring, first, iov, plan);
	else
		register_table(ring, iov);
	ring_ = &ring;
}

FixedBuffers register_fixed(const Registration &registration, ::io_uring &ring,
			    const FixedOptions &options)
{
	return {ring, detail::state_of(registration), options};
}

FixedBuffers::FixedBuffers(FixedBuffers &&other) noexcept
	: ring_(std::exchange(other.ring_, nullptr)), window_(other.window_),
	  first_slot_(other.first_slot_), nr_slots_(other.nr_slots_),
	  slices_(std::move(other.slices_)), first_slice_(std::exchange(other.first_slice_, {0})),
	  slots_(std::move(other.slots_)), access_(std::move(other.access_))
{}

FixedBuffers &FixedBuffers::operator=(FixedBuffers &&other) noexcept
{
	if (this != &other) {
		reset();
		ring_ = std::exchange(other.ring_, nullptr);
		window_ = other.window_;
		first_slot_ = other.first_slot_;
		nr_slots_ = other.nr_slots_;
		slices_ = std::move(other.slices_);
		first_slice_ = std::exchange(other.first_slice_, {0});
		slots_ = std::move(other.slots_);
		access_ = std::move(other.access_);
	}
	return *this;
}

FixedBuffers::~FixedBuffers()
{
	reset();
}

void FixedBuffers::reset() noexcept
{
	if (!ring_)
		return;
	if (window_)
		clear_slots(*ring_, first_slot_, nr_slots_);
	else
		(void)io_uring_unregister_buffers(ring_);
	ring_ = nullptr;
	slices_.clear();
	first_slice_.assign(1, 0);
	slots_.clear();
	access_.clear();
}

FixedBuffers FixedBuffers::mirror(::io_uring &ring, bool clone, bool &cloned) const
{
	FixedBuffers m;

	m.first_slot_ = first_slot_;
	m.nr_slots_ = nr_slots_;
	m.slices_ = slices_;
	m.first_slice_ = first_slice_;
	m.slots_ = slots_;
	m.access_ = access_;
	cloned = clone && ring_ && clone_table(ring, *ring_) == 0;
	if (!cloned) {
		std::vector<::iovec> iov;
		for (const FixedSlice &s : slots_)
			iov.push_back({s.addr, s.len});
		/* Our slots where they are in the caller's ring: a sparse table. */
		int ret = window_ ?
				  io_uring_register_buffers_sparse(&ring, first_slot_ + nr_slots_) :
				  io_uring_register_buffers(&ring, iov.data(), nr_slots_);
		if (ret == 0 && window_) {
			ret = update_slots(ring, first_slot_, iov.data(), nr_slots_);
			ret = ret == static_cast<int>(nr_slots_) ? 0 : ret < 0 ? ret : -ENOMEM;
			if (ret)
				(void)io_uring_unregister_buffers(&ring);
		}
		if (ret < 0)
			throw Error(-ret, Step::IoUringRegister,
				    "registering " + std::to_string(nr_slots_) +
					    " fixed buffers again in a private ring");
	}
	m.ring_ = &ring;
	return m;
}

std::span<const FixedSlice> FixedBuffers::slices(std::size_t buffer) const
{
	if (buffer >= size())
		throw std::out_of_range("svmbatch: fixed buffer index " + std::to_string(buffer) +
					" of " + std::to_string(size()));
	return std::span(slices_).subspan(first_slice_[buffer],
					  first_slice_[buffer + 1] - first_slice_[buffer]);
}

const FixedSlice &FixedBuffers::operator[](std::size_t buffer) const
{
	return slices(buffer).front();
}

} // namespace svmbatch
