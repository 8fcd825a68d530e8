// SPDX-License-Identifier: MIT
// The memlock check an Arena makes before it maps anything: would the
// module's charge of the whole pool go over RLIMIT_MEMLOCK?
#pragma once

#include <cstddef>
#include <cstdint>

namespace svmbatch::detail {

/// What decides whether this process may pin more, as the module's
/// REGISTER decides it: mm->pinned_vm (VmPin) plus the new pages against
/// the soft RLIMIT_MEMLOCK, unless CAP_IPC_LOCK is in the effective set.
/// mlock()'s VmLck is a separate account (locked_vm) that the module, like
/// RDMA's ib_umem_get(), neither counts nor charges.
struct MemlockBudget {
	std::uint64_t soft_limit = 0; ///< bytes; meaningless when unlimited
	std::uint64_t hard_limit = 0; ///< bytes; meaningless when hard_unlimited
	bool unlimited = false; ///< soft limit RLIM_INFINITY
	bool hard_unlimited = false;
	bool cap_ipc_lock = false; ///< effective CAP_IPC_LOCK: no limit applies
	std::uint64_t pinned = 0; ///< VmPin, bytes
	std::size_t page_size = 4096;
};

/// This process's budget now.  Returns false (and leaves *budget alone)
/// where it cannot be read: the module's own check then decides.
bool read_memlock_budget(MemlockBudget *budget);

/// Throw Error(ENOMEM, Step::Validate) when pinning bytes more (a multiple
/// of the page size) would go over the budget, with a message that names
/// the limit, what is pinned already, the request and how to raise it.
void check_memlock(const MemlockBudget &budget, std::uint64_t bytes);

} // namespace svmbatch::detail
