// SPDX-License-Identifier: MIT
#include "hsa_runtime.hpp"

#include <dlfcn.h>

#include <cerrno>
#include <cstdio>
#include <memory>

#include <svmbatch/error.hpp>

namespace svmbatch::detail {

namespace {

template <typename Fn> void resolve(void *lib, const std::string &library, Fn &fn, const char *name)
{
	void *sym = ::dlsym(lib, name);

	if (!sym)
		throw Error(ENODEV, Step::GpuOpen,
			    library + " has no " + name + ": not a usable HSA runtime");
	fn = reinterpret_cast<Fn>(sym);
}

} // namespace

HsaRuntime::HsaRuntime(std::string lib_name) : library(std::move(lib_name))
{
	void *lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);

	if (!lib) {
		const char *why = ::dlerror(); // NOLINT(concurrency-mt-unsafe): read at once
		throw Error(ENODEV, Step::GpuOpen,
			    "no HSA runtime: " + std::string(why ? why : library));
	}
	// RTLD_NODELETE: dlclose only drops our reference, the code stays.
	std::unique_ptr<void, int (*)(void *)> closer(lib, ::dlclose);
	resolve(lib, library, init, "hsa_init");
	resolve(lib, library, shut_down, "hsa_shut_down");
	resolve(lib, library, status_string, "hsa_status_string");
	resolve(lib, library, iterate_agents, "hsa_iterate_agents");
	resolve(lib, library, agent_get_info, "hsa_agent_get_info");
	resolve(lib, library, iterate_memory_pools, "hsa_amd_agent_iterate_memory_pools");
	resolve(lib, library, memory_pool_get_info, "hsa_amd_memory_pool_get_info");
	resolve(lib, library, memory_lock_to_pool, "hsa_amd_memory_lock_to_pool");
	resolve(lib, library, memory_unlock, "hsa_amd_memory_unlock");
	resolve(lib, library, interop_map_buffer, "hsa_amd_interop_map_buffer");
	resolve(lib, library, interop_unmap_buffer, "hsa_amd_interop_unmap_buffer");

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
