// SPDX-License-Identifier: MIT
#include "shim/libhsa.hpp"

#include <cerrno>
#include <cstdio>

#include <svmbatch/error.hpp>

namespace svmbatch::detail {

LibHsa::LibHsa(std::string lib_name) : lib_(lib_name, "HSA runtime"), library(std::move(lib_name))
{
	lib_.resolve(Symbol(init, "hsa_init"), Symbol(shut_down, "hsa_shut_down"),
		     Symbol(status_string, "hsa_status_string"),
		     Symbol(iterate_agents, "hsa_iterate_agents"),
		     Symbol(agent_get_info, "hsa_agent_get_info"),
		     Symbol(iterate_memory_pools, "hsa_amd_agent_iterate_memory_pools"),
		     Symbol(memory_pool_get_info, "hsa_amd_memory_pool_get_info"),
		     Symbol(memory_lock_to_pool, "hsa_amd_memory_lock_to_pool"),
		     Symbol(memory_unlock, "hsa_amd_memory_unlock"),
		     Symbol(interop_map_buffer, "hsa_amd_interop_map_buffer"),
		     Symbol(interop_unmap_buffer, "hsa_amd_interop_unmap_buffer"));

	// A failed hsa_init leaves the runtime's reference count alone: no
	// hsa_shut_down is owed, and the destructor does not run.
	if (hsa_status_t s = init(); s != HSA_STATUS_SUCCESS)
		throw Error(ENODEV, Step::GpuOpen,
			    "hsa_init: " + describe(s) + " (no /dev/kfd, or no AMD GPU)",
			    Error::no_index, s);
}

LibHsa::~LibHsa()
{
	shut_down();
}

std::string LibHsa::describe(hsa_status_t status) const
{
	const char *text = nullptr;
	char code[16];

	// hsa_status_string works before hsa_init succeeded (ROCR checks no
	// runtime state); an unknown status leaves text unset.
	if (status_string(status, &text) != HSA_STATUS_SUCCESS || !text)
		text = "unknown HSA status";
	std::snprintf(code, sizeof(code), "0x%x", static_cast<unsigned>(status));
	return std::string(text) + " (" + code + ")";
}

// hsa_status_t -> errno, from the @retval lists of hsa.h / hsa_ext_amd.h:
//   HSA_STATUS_SUCCESS                        0
//   HSA_STATUS_ERROR_OUT_OF_RESOURCES         ENOMEM  (ROCR also reports a
//                                                      failed pin this way)
//   HSA_STATUS_ERROR_INVALID_ARGUMENT         EINVAL
//   HSA_STATUS_ERROR_INVALID_MEMORY_POOL      EINVAL  (pool not a CPU agent's)
//   HSA_STATUS_ERROR_INVALID_ALLOCATION       EFAULT  (not the runtime's memory)
//   HSA_STATUS_ERROR_INVALID_AGENT            ENODEV
//   HSA_STATUS_ERROR_NOT_INITIALIZED          ENODEV
//   anything else (HSA_STATUS_ERROR, ...)     EIO
// Construction failures are ENODEV whatever the status (a missing device).
int hsa_errno(hsa_status_t status)
{
	switch (static_cast<int>(status)) {
	case HSA_STATUS_SUCCESS:
		return 0;
	case HSA_STATUS_ERROR_OUT_OF_RESOURCES:
		return ENOMEM;
	case HSA_STATUS_ERROR_INVALID_ARGUMENT:
	case HSA_STATUS_ERROR_INVALID_MEMORY_POOL:
		return EINVAL;
	case HSA_STATUS_ERROR_INVALID_ALLOCATION:
		return EFAULT;
	case HSA_STATUS_ERROR_INVALID_AGENT:
	case HSA_STATUS_ERROR_NOT_INITIALIZED:
		return ENODEV;
	default:
		return EIO;
	}
}

} // namespace svmbatch::detail
