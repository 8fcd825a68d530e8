// SPDX-License-Identifier: MIT
#include "arena/arena_memlock.hpp"

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include <svmbatch/diagnostics.hpp>
#include <svmbatch/error.hpp>

namespace svmbatch::detail {

namespace {

constexpr std::uint64_t kib = 1024;

/// "64 MiB (67108864 bytes)": exact, in the largest unit that divides.
std::string size_text(std::uint64_t bytes)
{
	std::string exact = std::to_string(bytes) + " bytes";
	for (auto [shift, unit] : {std::pair{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}}) {
		const std::uint64_t one = std::uint64_t{1} << shift;
		if (bytes >= one && bytes % one == 0)
			return std::to_string(bytes / one) + " " + unit + " (" + exact + ")";
	}
	return exact;
}

bool effective_cap_ipc_lock()
{
	__user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
	__user_cap_data_struct data[2]{};

	if (::syscall(SYS_capget, &hdr, data) != 0)
		return false;
	return (data[CAP_IPC_LOCK / 32].effective & (1U << (CAP_IPC_LOCK % 32))) != 0;
}

} // namespace

bool read_memlock_budget(MemlockBudget *budget)
{
	rlimit lim{};
	if (::getrlimit(RLIMIT_MEMLOCK, &lim) != 0)
		return false;
	MemlockBudget b;
	b.unlimited = lim.rlim_cur == RLIM_INFINITY;
	b.hard_unlimited = lim.rlim_max == RLIM_INFINITY;
	b.soft_limit = lim.rlim_cur;
	b.hard_limit = lim.rlim_max;
	b.cap_ipc_lock = effective_cap_ipc_lock();
	b.page_size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
	try {
		b.pinned = process_pinned_bytes();
	} catch (const Error &) {
		return false; // no /proc: leave the decision to the module
	}
	*budget = b;
	return true;
}

void check_memlock(const MemlockBudget &budget, std::uint64_t bytes)
{
	if (budget.unlimited || budget.cap_ipc_lock)
		return;
	// In pages, as the module counts: pinned_vm + new > limit >> PAGE_SHIFT.
	const std::uint64_t page = budget.page_size;
	const std::uint64_t limit_pages = budget.soft_limit / page;
	const std::uint64_t pinned_pages = budget.pinned / page;
	const std::uint64_t new_pages = bytes / page + (bytes % page != 0);
	if (pinned_pages <= limit_pages && new_pages <= limit_pages - pinned_pages)
		return;

	const std::uint64_t need = (pinned_pages + new_pages) * page;
	const std::uint64_t need_kib = (need + kib - 1) / kib;
	std::string what =
		"arena: pinning " + size_text(new_pages * page) + " would pass RLIMIT_MEMLOCK, " +
		size_text(budget.soft_limit) + ", with " + size_text(pinned_pages * page) +
		" pinned already (VmPin), and this process has no CAP_IPC_LOCK. "
		"Raise the limit to at least " +
		size_text(need) + " or to unlimited: `ulimit -l " + std::to_string(need_kib) +
		"` (KiB) in the shell, LimitMEMLOCK=" + std::to_string(need) +
		" in a systemd unit, `docker run --ulimit memlock=" + std::to_string(need) + ":" +
		std::to_string(need) + "` (or -1:-1)";
	if (!budget.hard_unlimited && budget.hard_limit < need)
		what += "; the hard limit, " + size_text(budget.hard_limit) +
			", must be raised too, which needs privilege (root, the unit or the "
			"container's settings)";
	throw Error(ENOMEM, Step::Validate, what);
}

} // namespace svmbatch::detail
