// SPDX-License-Identifier: MIT
// ROCm's HSA runtime, loaded with dlopen (libsvmbatch does not need ROCm
// installed); typed against the real headers of libhsa-runtime-dev.
#pragma once

#include <hsa.h>
#include <hsa_ext_amd.h>

#include <string>

namespace svmbatch::detail {

/// libhsa-runtime64, loaded and initialized (hsa_init) for as long as this
/// lives; hsa_shut_down in the destructor balances it.  Never unloaded
/// (RTLD_NODELETE), like libcuda.
struct HsaRuntime {
	explicit HsaRuntime(std::string library);
	HsaRuntime(const HsaRuntime &) = delete;
	HsaRuntime &operator=(const HsaRuntime &) = delete;
	HsaRuntime(HsaRuntime &&) = delete;
	HsaRuntime &operator=(HsaRuntime &&) = delete;
	~HsaRuntime();

	std::string library;
	decltype(&::hsa_init) init = nullptr;
	decltype(&::hsa_shut_down) shut_down = nullptr;
	decltype(&::hsa_status_string) status_string = nullptr;
	decltype(&::hsa_iterate_agents) iterate_agents = nullptr;
	decltype(&::hsa_agent_get_info) agent_get_info = nullptr;
	decltype(&::hsa_amd_agent_iterate_memory_pools) iterate_memory_pools = nullptr;
	decltype(&::hsa_amd_memory_pool_get_info) memory_pool_get_info = nullptr;
	decltype(&::hsa_amd_memory_lock_to_pool) memory_lock_to_pool = nullptr;
	decltype(&::hsa_amd_memory_unlock) memory_unlock = nullptr;
	decltype(&::hsa_amd_interop_map_buffer) interop_map_buffer = nullptr;
	decltype(&::hsa_amd_interop_unmap_buffer) interop_unmap_buffer = nullptr;

	/// "HSA_STATUS_ERROR_OUT_OF_RESOURCES: ..." (hsa_status_string) + code.
	std::string describe(hsa_status_t status) const;

private:
	bool initialized_ = false;
};

/// The errno closest to an hsa_status_t:
///   OUT_OF_RESOURCES -> ENOMEM, INVALID_ARGUMENT / INVALID_MEMORY_POOL ->
///   EINVAL, INVALID_ALLOCATION -> EFAULT, INVALID_AGENT / NOT_INITIALIZED
///   -> ENODEV, anything else -> EIO.
int hsa_errno(hsa_status_t status);

} // namespace svmbatch::detail
