// SPDX-License-Identifier: MIT
#include "hsa_runtime.hpp"

#include <cerrno>
#include <cstdio>

#include <svmbatch/error.hpp>

#include "dynamic_library.hpp"

namespace svmbatch::detail {

HsaRuntime::HsaRuntime(std::string lib_name) : library(std::move(lib_name))
{
	DynamicLibrary lib(library, "HSA runtime");

	lib.resolve(init, "hsa_init");
	lib.resolve(shut_down, "hsa_shut_down");
	lib.resolve(status_string, "hsa_status_string");
	lib.resolve(iterate_agents, "hsa_iterate_agents");
	lib.resolve(agent_get_info, "hsa_agent_get_info");
	lib.resolve(iterate_memory_pools, "hsa_amd_agent_iterate_memory_pools");
	lib.resolve(memory_pool_get_info, "hsa_amd_memory_pool_get_info");
	lib.resolve(memory_lock_to_pool, "hsa_amd_memory_lock_to_pool");
	lib.resolve(memory_unlock, "hsa_amd_memory_unlock");
	lib.resolve(interop_map_buffer, "hsa_amd_interop_map_buffer");
	lib.resolve(interop_unmap_buffer, "hsa_amd_interop_unmap_buffer");

	hsa_status_t s = init();
	if (s != HSA_STATUS_SUCCESS)
		throw Error(ENODEV, Step::GpuOpen,
			    "hsa_init: " + describe(s) + " (no /dev/kfd, or no AMD GPU)",
			    Error::no_index, s);
	initialized_ = true;
}

HsaRuntime::~HsaRuntime()
{
	if (initialized_)
		shut_down();
}

std::string HsaRuntime::describe(hsa_status_t status) const
{
	const char *text = nullptr;
	char code[16];

	if (status_string(status, &text) != HSA_STATUS_SUCCESS || !text)
		text = "unknown HSA status";
	std::snprintf(code, sizeof(code), "0x%x", static_cast<unsigned>(status));
	return std::string(text) + " (" + code + ")";
}

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
