// SPDX-License-Identifier: MIT
#include <svmbatch/context.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/registration.hpp>

#include <cerrno>
#include <stdexcept>
#include <vector>

#include "device.hpp"
#include "registration_state.hpp"
#include "vma_check.hpp"

namespace svmbatch {

namespace detail {

RegistrationState::~RegistrationState()
{
	/* Nothing to report to: the module frees it at close() anyway. */
	if (device && handle)
		(void)device->unregister(handle);
}

} // namespace detail

namespace {

/*
 * The caller's buffer to blame for a failure in range r: the one holding
 * addr when it is known, else the lowest-numbered buffer in the range.
 */
std::size_t blame(const detail::RegistrationState &s, std::size_t r,
		  std::uintptr_t addr)
{
	std::size_t best = Error::no_index;
	std::uintptr_t page_mask = ~static_cast<std::uintptr_t>(s.page_size - 1);

	for (std::size_t i = 0; i < s.buffers.size(); i++) {
		if (s.plan.locations[i].range > r || s.plan.last_range[i] < r)
			continue;
		auto start = reinterpret_cast<std::uintptr_t>(s.buffers[i].ptr);
		std::uintptr_t last = start + s.buffers[i].len - 1;

		if (!addr || ((start & page_mask) <= addr && addr <= last))
			return i;
		if (best == Error::no_index)
			best = i;
	}
	return best;
}

/* A hint for the errno (Error's what() appends the errno's own text). */
std::string describe_failure(int err, const detail::RegistrationState &s)
{
	switch (err) {
	case ENOMEM:
		return "pinning " + std::to_string(s.pages) +
		       " pages (RLIMIT_MEMLOCK, ulimit -l, is the limit)";
	case ENOSPC:
		return "the module's max_registrations is reached";
	case EOPNOTSUPP:
		return "a writable pin of a shared file mapping that needs "
		       "dirty tracking";
	case EFAULT:
		return "unmapped, PROT_NONE, or read-only memory registered "
		       "for writing";
	case EPERM:
		return "the context belongs to another process (fork)";
	default:
		return "REGISTER";
	}
}

void register_kernel(detail::RegistrationState &s)
{
	std::vector<svmbatch_range> ranges(s.plan.ranges.size());
	std::uint32_t error_index;

	for (std::size_t i = 0; i < ranges.size(); i++) {
		const KernelRange &r = s.plan.ranges[i];

		ranges[i].addr = r.addr;
		ranges[i].len = r.len;
		ranges[i].flags = r.access == Access::ReadOnly
					  ? SVMBATCH_RANGE_READ_ONLY
					  : 0;
	}
	int ret = s.device->register_ranges(ranges, s.handle, s.pinned_pages,
					    error_index);
	if (!ret)
		return;
	s.handle = 0;
	s.pinned_pages = 0;
	int err = -ret;
	std::size_t culprit = Error::no_index;
	if (error_index < ranges.size()) {
		std::uintptr_t addr = 0;

		/* Pinpoint the page, as userspace mode does. */
		if (err == EFAULT || err == EOPNOTSUPP) {
			detail::VmaFault f = detail::check_vmas(
				std::span(&s.plan.ranges[error_index], 1));
			if (f.err == err)
				addr = f.addr;
		}
		culprit = blame(s, error_index, addr);
	}
	throw Error(err, Step::Register, describe_failure(err, s), culprit);
}

void register_userspace(detail::RegistrationState &s)
{
	detail::VmaFault f = detail::check_vmas(s.plan.ranges);

	if (!f.err)
		f = detail::prefault(s.plan.ranges);
	if (f.err)
		throw Error(f.err, Step::Register, describe_failure(f.err, s),
			    blame(s, f.range, f.addr));
}

} // namespace

Registration Context::register_buffers(std::span<const Buffer> buffers)
{
	auto s = std::make_unique<detail::RegistrationState>();

	if (buffers.empty())
		throw Error(EINVAL, Step::Validate, "no buffers");
	s->mode = info_.mode;
	s->device = device_;
	s->page_size = info_.page_size;
	s->buffers.assign(buffers.begin(), buffers.end());
	std::size_t limit = info_.max_range_bytes & ~(info_.page_size - 1);
	s->plan = detail::plan_ranges(s->buffers, s->page_size, limit);
	for (const KernelRange &r : s->plan.ranges)
		s->pages += r.len / s->page_size;
	if (s->plan.ranges.size() > info_.max_ranges)
		throw Error(E2BIG, Step::Validate,
			    std::to_string(s->plan.ranges.size()) +
				    " ranges after merging; the module takes " +
				    std::to_string(info_.max_ranges));
	if (s->mode == Mode::Kernel)
		register_kernel(*s);
	else
		register_userspace(*s);
	return Registration(std::move(s));
}

Registration::Registration(std::unique_ptr<detail::RegistrationState> state)
	: state_(std::move(state))
{
}

Registration::Registration(Registration &&) noexcept = default;
Registration &Registration::operator=(Registration &&) noexcept = default;
Registration::~Registration() = default;

void Registration::reset() noexcept
{
	state_.reset();
}

const detail::RegistrationState &Registration::state() const
{
	if (!state_)
		throw Error(EBADF, Step::Register,
			    "use of an empty (moved-from or reset) Registration");
	return *state_;
}

Mode Registration::mode() const noexcept
{
	return state_ ? state_->mode : Mode::Userspace;
}

std::uint32_t Registration::handle() const noexcept
{
	return state_ ? state_->handle : 0;
}

std::span<const Buffer> Registration::buffers() const noexcept
{
	if (!state_)
		return {};
	return state_->buffers;
}

std::span<const KernelRange> Registration::ranges() const noexcept
{
	if (!state_)
		return {};
	return state_->plan.ranges;
}

BufferLocation Registration::location(std::size_t buffer) const
{
	const detail::RegistrationState &s = state();

	if (buffer >= s.buffers.size())
		throw std::out_of_range("svmbatch: buffer index " +
					std::to_string(buffer) + " of " +
					std::to_string(s.buffers.size()));
	return s.plan.locations[buffer];
}

std::uint64_t Registration::pages() const noexcept
{
	return state_ ? state_->pages : 0;
}

std::uint64_t Registration::pinned_pages() const noexcept
{
	return state_ ? state_->pinned_pages : 0;
}

RegistrationStats Registration::query() const
{
	const detail::RegistrationState &s = state();
	svmbatch_query q{};

	if (s.mode != Mode::Kernel)
		throw Error(EOPNOTSUPP, Step::Query,
			    "QUERY needs kernel mode (the module)");
	int ret = s.device->query(s.handle, q);
	if (ret)
		throw Error(-ret, Step::Query, "QUERY");
	return {q.nr_pages, q.nr_segments, q.nr_folios, q.meta_bytes,
		(q.out_flags & SVMBATCH_QUERY_STALE) != 0};
}

} // namespace svmbatch
