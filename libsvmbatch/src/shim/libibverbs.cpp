// SPDX-License-Identifier: MIT
#include "shim/libibverbs.hpp"

#include "shim/dynamic_library.hpp"

namespace svmbatch::detail {

LibIbverbs::LibIbverbs(std::string lib_name) : library(std::move(lib_name))
{
	DynamicLibrary lib(library, "libibverbs", Step::RdmaOpen);

	lib.resolve(Symbol(query_device, "ibv_query_device"), Symbol(reg_mr, "ibv_reg_mr"),
		    Symbol(dereg_mr, "ibv_dereg_mr"),
		    Symbol(get_device_list, "ibv_get_device_list"),
		    Symbol(free_device_list, "ibv_free_device_list"),
		    Symbol(get_device_name, "ibv_get_device_name"),
		    Symbol(open_device, "ibv_open_device"),
		    Symbol(close_device, "ibv_close_device"), Symbol(alloc_pd, "ibv_alloc_pd"),
		    Symbol(dealloc_pd, "ibv_dealloc_pd"));
	lib.resolve_optional(Symbol(reg_dmabuf_mr, "ibv_reg_dmabuf_mr"));
}

} // namespace svmbatch::detail
