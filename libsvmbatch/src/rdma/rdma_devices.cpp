// SPDX-License-Identifier: MIT
// rdma_devices(): the RDMA devices libibverbs lists, and what they take.
#include <svmbatch/error.hpp>
#include <svmbatch/rdma.hpp>

#include <cerrno>
#include <memory>
#include <string>
#include <system_error>

#include "shim/libibverbs.hpp"

namespace svmbatch {

namespace {

std::string errno_text(const char *call, int err)
{
	return std::string(call) + ": " + std::generic_category().message(err);
}

/// Ask one opened device; the answer, or why not, goes into info.
void probe(const detail::LibIbverbs &verbs, ::ibv_context *ctx, RdmaDeviceInfo &info)
{
	::ibv_device_attr attr{};
	int rc = verbs.query_device(ctx, &attr);

	if (rc) {
		info.error = errno_text("ibv_query_device", rc);
		return;
	}
	info.max_mr_size = attr.max_mr_size;
	if (!verbs.reg_dmabuf_mr)
		return;
	::ibv_pd *pd = verbs.alloc_pd(ctx);
	if (!pd) {
		info.error = errno_text("ibv_alloc_pd", errno ? errno : EIO);
		return;
	}
	// A device without dma-buf memory regions refuses before looking at
	// the fd (EOPNOTSUPP); one with them fails on the bad fd (EBADF).
	errno = 0;
	::ibv_mr *mr = verbs.reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE);
	info.dmabuf_mr = mr || errno != EOPNOTSUPP;
	if (mr)
		(void)verbs.dereg_mr(mr);
	(void)verbs.dealloc_pd(pd);
}

} // namespace

std::vector<RdmaDeviceInfo> rdma_devices(const std::string &library)
{
	const detail::LibIbverbs verbs(library);
	std::vector<RdmaDeviceInfo> out;
	int n = 0;
	std::unique_ptr<::ibv_device *, decltype(verbs.free_device_list)>
		list(verbs.get_device_list(&n), verbs.free_device_list);

	if (!list) {
		// No devices at all (ENOSYS: no RDMA subsystem) is an empty list.
		if (errno == ENOSYS || errno == ENODEV || errno == 0)
			return out;
		throw Error(errno, Step::RdmaOpen, "ibv_get_device_list");
	}
	for (int i = 0; i < n; i++) {
		RdmaDeviceInfo info;
		const char *name = verbs.get_device_name(list.get()[i]);

		info.name = name ? name : "?";
		::ibv_context *ctx = verbs.open_device(list.get()[i]);
		if (!ctx)
			info.error = errno_text("ibv_open_device", errno ? errno : EIO);
		else {
			probe(verbs, ctx, info);
			(void)verbs.close_device(ctx);
		}
		out.push_back(std::move(info));
	}
	return out;
}

} // namespace svmbatch
