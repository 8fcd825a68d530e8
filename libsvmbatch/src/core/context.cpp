// SPDX-License-Identifier: MIT
// Context: the mode (module or userspace), its limits, and registering.
#include <svmbatch/context.hpp>
#include <svmbatch/error.hpp>

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/device.hpp"
#include "core/registration_state.hpp"
#include "core/vma_check.hpp"

namespace svmbatch {

const char *mode_name(Mode mode) noexcept
{
	switch (mode) {
	case Mode::Auto:
		return "auto";
	case Mode::Kernel:
		return "kernel";
	case Mode::Userspace:
		return "userspace";
	}
	return "unknown";
}

namespace {

/*
 * EAGAIN from REGISTER: invalidations of the memory (another thread
 * unmapping, zapping or moving it) raced every one of the module's pin
 * attempts.  Such a burst usually passes, so the call is repeated a few
 * times, waiting 100 us, 200 us, ... in between, before EAGAIN is reported.
 */
constexpr int register_eagain_retries = 4;
constexpr std::chrono::microseconds register_eagain_backoff{100};

/* The module's default limits (kmod/main.c), so both modes agree. */
constexpr std::uint32_t default_max_ranges = 16384;
constexpr std::uint32_t default_max_registrations = 65536;
constexpr std::uint64_t default_max_range_bytes = std::uint64_t{64} << 30;

Info userspace_info(std::string reason)
{
	Info info;

	info.mode = Mode::Userspace;
	info.reason = std::move(reason);
	info.page_size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
	info.max_ranges = default_max_ranges;
	info.max_registrations = default_max_registrations;
	info.max_range_bytes = default_max_range_bytes;
	return info;
}

/* Mode::Auto gives way to $SVMBATCH_MODE; *from_env says it did. */
Mode resolve_mode(Mode mode, bool *from_env)
{
	/* Read once per Context, like any library configuration. */
	const char *env = std::getenv("SVMBATCH_MODE"); // NOLINT(concurrency-mt-unsafe)

	*from_env = false;
	if (mode != Mode::Auto || !env || !*env)
		return mode;
	*from_env = true;
	std::string_view v(env);
	if (v == "auto")
		return Mode::Auto;
	if (v == "kernel")
		return Mode::Kernel;
	if (v == "userspace")
		return Mode::Userspace;
	throw Error(EINVAL, Step::Open,
		    "SVMBATCH_MODE=" + std::string(v) + " is not auto, kernel or userspace");
}

/*
 * The caller's buffer to blame for a failure in range r: the one holding
 * addr when it is known, else the lowest-numbered buffer in the range.
 */
std::size_t blame(const detail::RegistrationState &s, std::size_t r, std::uintptr_t addr)
{
	std::uintptr_t page_mask = ~static_cast<std::uintptr_t>(s.page_size - 1);

	if (addr) {
		for (std::size_t i = 0; i < s.buffers.size(); i++) {
			auto start = reinterpret_cast<std::uintptr_t>(s.buffers[i].ptr);
			std::uintptr_t last = start + s.buffers[i].len - 1;

			if (s.plan.locations[i].range <= r && r <= s.plan.last_range[i] &&
			    (start & page_mask) <= addr && addr <= last)
				return i;
		}
	}
	return s.plan.first_buffer(r);
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
	case EAGAIN:
		return "the memory kept changing (unmapped, zapped or moved) while it was "
		       "pinned, in " +
		       std::to_string(register_eagain_retries + 1) + " calls";
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
		ranges[i].flags = r.access == Access::ReadOnly ? SVMBATCH_RANGE_READ_ONLY : 0;
	}
	int ret;
	for (int retry = 0;; retry++) {
		ret = s.device->register_ranges(ranges, s.stale_eventfd.get(), s.handle,
						s.pinned_pages, error_index);
		if (ret != -EAGAIN || retry == register_eagain_retries)
			break;
		std::this_thread::sleep_for(register_eagain_backoff * (1 << retry));
	}
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
			detail::VmaFault f =
				detail::check_vmas(std::span(&s.plan.ranges[error_index], 1));
			if (f.err == err)
				addr = f.addr;
		}
		culprit = blame(s, error_index, addr);
	}
	throw Error(err, Step::Register, describe_failure(err, s), culprit);
}

/// The eventfd of RegisterOptions::notify_stale.
detail::UniqueFd stale_eventfd(const Info &info)
{
	if (info.mode != Mode::Kernel)
		throw Error(EOPNOTSUPP, Step::Validate,
			    "stale notification needs kernel mode (svmbatch.ko)");
	if (!(info.features & SVMBATCH_FEATURE_STALE_NOTIFY))
		throw Error(
			EOPNOTSUPP, Step::Validate,
			"the module does not notify staleness (no SVMBATCH_FEATURE_STALE_NOTIFY)");
	detail::UniqueFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
	if (!fd.valid())
		throw Error(errno, Step::Register, "eventfd");
	return fd;
}

void register_userspace(detail::RegistrationState &s, bool prefault)
{
	detail::VmaFault f = detail::check_vmas(s.plan.ranges);

	if (!f.err && prefault)
		f = detail::prefault(s.plan.ranges);
	if (f.err)
		throw Error(f.err, Step::Register, describe_failure(f.err, s),
			    blame(s, f.range, f.addr));
}

} // namespace

Context::Context(Mode requested, const std::string &device)
{
	bool from_env;
	Mode mode = resolve_mode(requested, &from_env);
	std::string why = from_env ? " (SVMBATCH_MODE)" : "";

	if (mode == Mode::Userspace) {
		info_ = userspace_info("userspace mode requested" + why);
		return;
	}
	auto dev = std::make_shared<detail::Device>(device);
	if (!dev->is_open()) {
		int err = dev->open_errno();
		if (mode == Mode::Kernel)
			throw Error(err, Step::Open,
				    device + (err == ENOENT ? " (is svmbatch.ko loaded?)" : ""));
		info_ = userspace_info(device + ": " + std::generic_category().message(err) +
				       ": userspace mode");
		return;
	}

	svmbatch_info ki{};
	int ret = dev->get_info(ki);
	if (ret)
		throw Error(-ret, Step::Info, device + ": GET_INFO");
	if (ki.abi_version != SVMBATCH_ABI_VERSION)
		throw Error(EPROTONOSUPPORT, Step::Info,
			    device + " speaks ABI " + std::to_string(ki.abi_version) +
				    ", this library " + std::to_string(SVMBATCH_ABI_VERSION));
	info_.mode = Mode::Kernel;
	info_.reason = mode == Mode::Kernel ? "kernel mode requested" + why : device + " opened";
	info_.abi_version = ki.abi_version;
	info_.page_size = ki.page_size;
	info_.features = ki.features;
	info_.max_ranges = ki.max_ranges;
	info_.max_registrations = ki.max_registrations;
	info_.max_range_bytes = ki.max_range_bytes;
	device_ = std::move(dev);
}

Context::~Context() = default;
Context::Context(Context &&) noexcept = default;
Context &Context::operator=(Context &&) noexcept = default;

Registration Context::register_buffers(std::span<const Buffer> buffers)
{
	return register_buffers(buffers, RegisterOptions{});
}

Registration Context::register_buffers(std::span<const Buffer> buffers,
				       const RegisterOptions &options)
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
	if (options.notify_stale)
		s->stale_eventfd = stale_eventfd(info_);
	if (s->mode == Mode::Kernel)
		register_kernel(*s);
	else
		register_userspace(*s, options.prefault);
	return Registration(std::move(s));
}

} // namespace svmbatch
