// SPDX-License-Identifier: MIT
#include <svmbatch/context.hpp>
#include <svmbatch/error.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string_view>

#include "device.hpp"
#include "registration_state.hpp"
#include "vma_check.hpp"

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
		    "SVMBATCH_MODE=" + std::string(v) +
			    " is not auto, kernel or userspace");
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
				    device + (err == ENOENT ? " (is svmbatch.ko loaded?)"
							    : ""));
		info_ = userspace_info(device + ": " +
				       std::generic_category().message(err) +
				       ": userspace mode");
		return;
	}

	svmbatch_info ki{};
	int ret = dev->get_info(ki);
	if (ret)
		throw Error(-ret, Step::Info, device + ": GET_INFO");
	if (ki.abi_version != SVMBATCH_ABI_VERSION)
		throw Error(EPROTONOSUPPORT, Step::Info,
			    device + " speaks ABI " +
				    std::to_string(ki.abi_version) +
				    ", this library " +
				    std::to_string(SVMBATCH_ABI_VERSION));
	info_.mode = Mode::Kernel;
	info_.reason = mode == Mode::Kernel ? "kernel mode requested" + why
					    : device + " opened";
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

} // namespace svmbatch
