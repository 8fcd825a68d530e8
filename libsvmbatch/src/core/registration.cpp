// SPDX-License-Identifier: MIT
// Registration: what a Context::register_buffers() call made, and what can
// be done with it (query, export a dma-buf, io_uring fixed buffers, GPU).
#include <svmbatch/context.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/registration.hpp>

#include <fcntl.h>

#include <cerrno>
#include <stdexcept>

#include "core/device.hpp"
#include "core/registration_state.hpp"

namespace svmbatch {

namespace detail {

RegistrationState::~RegistrationState()
{
	/* Nothing to report to: the module frees it at close() anyway. */
	if (device && handle)
		(void)device->unregister(handle);
}

} // namespace detail

Registration::Registration(std::unique_ptr<detail::RegistrationState> state)
	: state_(std::move(state))
{}

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

int Registration::stale_fd() const noexcept
{
	return state_ ? state_->stale_eventfd.get() : -1;
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
		throw std::out_of_range("svmbatch: buffer index " + std::to_string(buffer) +
					" of " + std::to_string(s.buffers.size()));
	return s.plan.locations[buffer];
}

std::size_t Registration::first_buffer(std::size_t range) const
{
	return state().plan.first_buffer(range, detail::Holding::FirstByte);
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
		throw Error(EOPNOTSUPP, Step::Query, "QUERY needs kernel mode (the module)");
	int ret = s.device->query(s.handle, q);
	if (ret)
		throw Error(-ret, Step::Query, "QUERY");
	return {q.nr_pages, q.nr_segments, q.nr_folios, q.meta_bytes,
		(q.out_flags & SVMBATCH_QUERY_STALE) != 0};
}

DmaBuf Registration::export_dmabuf(bool writable) const
{
	const detail::RegistrationState &s = state();

	if (s.mode != Mode::Kernel)
		throw Error(EOPNOTSUPP, Step::Export, "a dma-buf needs kernel mode (the module)");
	int fd = s.device->export_dmabuf(s.handle, O_CLOEXEC | (writable ? O_RDWR : O_RDONLY));
	if (fd < 0)
		throw Error(-fd, Step::Export,
			    fd == -EACCES ? "read-only buffers export read-only" : "EXPORT_DMABUF");
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

namespace detail {

const RegistrationState &state_of(const Registration &registration)
{
	return registration.state();
}

} // namespace detail

} // namespace svmbatch
