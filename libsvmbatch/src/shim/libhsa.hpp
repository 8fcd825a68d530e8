// SPDX-License-Identifier: MIT
// ROCm's HSA runtime, loaded with dlopen (libsvmbatch does not need ROCm
// installed); typed against the real headers of libhsa-runtime-dev.
#pragma once

#include <hsa.h>
#include <hsa_ext_amd.h>

#include <string>

#include "shim/dynamic_library.hpp"

namespace svmbatch::detail {

/// libhsa-runtime64, loaded and initialized (hsa_init) for as long as this
/// lives.  The destructor calls hsa_shut_down once, balancing hsa_init,
/// and only then drops the library (dlclose; RTLD_NODELETE keeps the code
/// mapped for the runtime's own threads and atexit handlers).
struct LibHsa {
	/// Error(ENODEV, Step::GpuOpen): the library does not load, lacks an
	/// entry point, or hsa_init fails (driver_status() = its status).
	explicit LibHsa(std::string library);
	LibHsa(const LibHsa &) = delete;
	LibHsa &operator=(const LibHsa &) = delete;
	LibHsa(LibHsa &&) = delete;
	LibHsa &operator=(LibHsa &&) = delete;
	~LibHsa();

private:
	DynamicLibrary lib_; // first: destroyed last, after hsa_shut_down

public:
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

	/// "HSA_STATUS_ERROR_OUT_OF_RESOURCES: ... (0x1008)": hsa_status_string's
	/// text and the code.
	std::string describe(hsa_status_t status) const;
};

/// The errno closest to an hsa_status_t (the table is in libhsa.cpp
/// and Documentation/amd.rst).
int hsa_errno(hsa_status_t status);

} // namespace svmbatch::detail
