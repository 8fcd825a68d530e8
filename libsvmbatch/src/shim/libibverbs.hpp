// SPDX-License-Identifier: MIT
// The libibverbs entry points RdmaBackend and rdma_devices() use, loaded
// with dlopen so that libsvmbatch builds without linking rdma-core and runs
// where it is absent.  The caller's ibv_pd comes from the same library:
// dlopen of an soname already loaded returns that copy.
#pragma once

#include <infiniband/verbs.h>

#include <string>

namespace svmbatch::detail {

struct LibIbverbs {
	/// Error(ENODEV, Step::RdmaOpen) if library does not load or lacks
	/// an entry point other than ibv_reg_dmabuf_mr (rdma-core >= 34).
	explicit LibIbverbs(std::string lib_name);

	std::string library;
	decltype(&::ibv_query_device) query_device = nullptr;
	decltype(&::ibv_reg_mr) reg_mr = nullptr;
	/// Null where the library predates dma-buf memory regions.
	decltype(&::ibv_reg_dmabuf_mr) reg_dmabuf_mr = nullptr;
	decltype(&::ibv_dereg_mr) dereg_mr = nullptr;
	decltype(&::ibv_get_device_list) get_device_list = nullptr;
	decltype(&::ibv_free_device_list) free_device_list = nullptr;
	decltype(&::ibv_get_device_name) get_device_name = nullptr;
	decltype(&::ibv_open_device) open_device = nullptr;
	decltype(&::ibv_close_device) close_device = nullptr;
	decltype(&::ibv_alloc_pd) alloc_pd = nullptr;
	decltype(&::ibv_dealloc_pd) dealloc_pd = nullptr;
};

} // namespace svmbatch::detail
