// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <svmbatch/api.h>
#include <svmbatch/buffer.hpp>
#include <svmbatch/registration.hpp>

namespace svmbatch {

/// Kernel: pages are pinned by svmbatch.ko in one transactional ioctl.
/// Userspace: no module; the library checks the buffers the way the module
/// would (same errno) and prefaults them; io_uring and GPU drivers pin.
/// Auto: Kernel when /dev/svmbatch opens, else Userspace (info().reason says
/// why).  The environment variable SVMBATCH_MODE (auto, kernel, userspace)
/// replaces Auto, as KvikIO's compatibility mode does.
enum class Mode {
	Auto,
	Kernel,
	Userspace,
};

SVMBATCH_API const char *mode_name(Mode mode) noexcept;

/// What GET_INFO reports in kernel mode; in userspace mode the module's
/// default limits, so that both modes accept and refuse the same input.
struct Info {
	Mode mode = Mode::Userspace;
	std::string reason; ///< why this mode was chosen
	std::uint32_t abi_version = 0; ///< 0 in userspace mode
	std::size_t page_size = 0;
	std::uint64_t features = 0; ///< SVMBATCH_FEATURE_* bits
	std::uint32_t max_ranges = 0; ///< kernel ranges per registration
	std::uint32_t max_registrations = 0;
	std::uint64_t max_range_bytes = 0;
};

/// How Context::register_buffers() registers.
struct RegisterOptions {
	/// Kernel mode: the registration gets an eventfd that becomes readable
	/// when the registration goes STALE (Registration::stale_fd()), so a
	/// registration cache can drop it from its event loop instead of
	/// querying every entry.  EOPNOTSUPP in userspace mode or where the
	/// module lacks SVMBATCH_FEATURE_STALE_NOTIFY.
	bool notify_stale = false;
	/// Userspace mode: after checking the mappings, fault the pages in
	/// (MADV_POPULATE_READ/WRITE) as the module's pinning would, so that
	/// what only faulting in finds (no memory, VM_IO or VM_PFNMAP memory,
	/// a file mapping past the end of its file) fails the registration.
	/// false: the checks alone, which still refuse holes, PROT_NONE,
	/// read-only memory registered for writing and shared file mappings
	/// that need dirty tracking with the same errors; the pages are left
	/// as they are.  For a caller that hands the registration straight to
	/// a GPU runtime (or io_uring), which faults the same pages in when it
	/// pins them: what the checks miss then fails there.  Kernel mode
	/// ignores it: the module pins, and pinning faults in.
	bool prefault = true;
};

namespace detail {
class Device;
}

/// The library's entry point.  Kernel mode opens /dev/svmbatch; the fd is
/// bound to this process's address space (a forked child gets EPERM).
/// Registrations keep the device open, so they may outlive the Context.
class SVMBATCH_API Context {
public:
	static constexpr const char *default_device = "/dev/svmbatch";

	explicit Context(Mode mode = Mode::Auto, const std::string &device = default_device);
	~Context();
	Context(Context &&) noexcept;
	Context &operator=(Context &&) noexcept;
	Context(const Context &) = delete;
	Context &operator=(const Context &) = delete;

	Mode mode() const noexcept { return info_.mode; }
	const Info &info() const noexcept { return info_; }

	/// Register every buffer in one step: all of them or none.  Throws
	/// Error with the index of the caller's buffer to blame.
	Registration register_buffers(std::span<const Buffer> buffers);
	Registration register_buffers(std::span<const Buffer> buffers,
				      const RegisterOptions &options);

private:
	std::shared_ptr<detail::Device> device_; ///< null in userspace mode
	Info info_;
};

} // namespace svmbatch
