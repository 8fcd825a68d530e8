// SPDX-License-Identifier: MIT
// RdmaBackend: a registration's buffers as memory regions of a protection
// domain, through a dma-buf where the device takes one, else per range.
#include <svmbatch/context.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/rdma.hpp>
#include <svmbatch/registration.hpp>

#include <cerrno>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "rdma/mr_plan.hpp"
#include "rdma/rdma_regions.hpp"
#include "shim/libibverbs.hpp"

namespace svmbatch {

namespace {

constexpr int write_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			     IBV_ACCESS_REMOTE_ATOMIC;

int region_access(int access, Access buffers)
{
	return buffers == Access::ReadOnly ? access & ~write_access : access;
}

std::string hex(std::uint64_t v)
{
	std::ostringstream s;

	s << "0x" << std::hex << v;
	return s.str();
}

/// A failed region: its errno and what was asked.
struct RegionFailure {
	int err = 0;
	std::size_t chunk = 0;
	std::string what;
};

/// Register every chunk of plan with reg(chunk, access) into out, in
/// order; on the first failure deregister what was registered and say
/// which and why.
template <typename RegisterOne>
RegionFailure register_chunks(detail::RdmaRegions &out, const detail::MrPlan &plan,
			      const std::vector<int> &group_access, RegisterOne reg)
{
	for (std::size_t k = 0; k < plan.chunks.size(); k++) {
		const detail::MrChunk &c = plan.chunks[k];
		const int access = group_access[c.group];

		errno = 0;
		::ibv_mr *mr = reg(c, access);
		if (!mr) {
			const int err = errno ? errno : EIO;
			out.deregister_all();
			return {err, k, std::to_string(c.len) + " bytes at " + hex(c.start)};
		}
		out.regions.push_back({mr, c.start, c.len, access, c.first_buffer});
	}
	return {};
}

[[noreturn]] void fail(const detail::MrPlan &plan, const RegionFailure &f, const char *call)
{
	throw Error(f.err, Step::RdmaRegister,
		    std::string(call) + " of memory region " + std::to_string(f.chunk) + " (" +
			    f.what + ")",
		    plan.chunks[f.chunk].first_buffer);
}

/// The per-range path: ibv_reg_mr of each kernel range's buffers, cut at
/// the cap; keys carry the buffers' own addresses.
void register_per_range(detail::RdmaRegions &out, const detail::LibIbverbs &verbs, ::ibv_pd *pd,
			const Registration &registration, int access, std::uint64_t cap)
{
	auto buffers = registration.buffers();
	auto ranges = registration.ranges();
	std::vector<detail::MrItem> items(buffers.size());
	std::vector<int> group_access(ranges.size());

	for (std::size_t i = 0; i < buffers.size(); i++)
		items[i] = {reinterpret_cast<std::uintptr_t>(buffers[i].ptr), buffers[i].len, i,
			    registration.location(i).range};
	for (std::size_t r = 0; r < ranges.size(); r++)
		group_access[r] = region_access(access, ranges[r].access);
	detail::MrPlan plan = detail::plan_memory_regions(items, buffers.size(), cap);
	RegionFailure f =
		register_chunks(out, plan, group_access, [&](const detail::MrChunk &c, int acc) {
			// NOLINTNEXTLINE(performance-no-int-to-ptr): a user address
			return verbs.reg_mr(pd, reinterpret_cast<void *>(c.start), c.len, acc);
		});
	if (f.err)
		fail(plan, f, "ibv_reg_mr");
	out.path = RdmaPath::PerRange;
	out.region_of = std::move(plan.chunk_of);
	for (const detail::MrItem &it : items)
		out.addr.push_back(it.start);
}

/// The dma-buf path; returns false (and why) where the module or the
/// device does not do dma-buf memory regions and auto may fall back.
bool register_dmabuf(detail::RdmaRegions &out, const detail::LibIbverbs &verbs, ::ibv_pd *pd,
		     const Registration &registration, int access, std::uint64_t cap,
		     bool may_fall_back)
{
	auto buffers = registration.buffers();
	bool any_ro = false, any_rw = false;

	for (const Buffer &b : buffers)
		(b.access == Access::ReadOnly ? any_ro : any_rw) = true;
	if (any_ro && any_rw) {
		if (may_fall_back) {
			out.fallback_reason = "read-only and writable buffers share the dma-buf";
			return false;
		}
		throw Error(EACCES, Step::RdmaRegister,
			    "a dma-buf memory region needs buffers of one access "
			    "(read-only and writable are mixed)");
	}
	if (!verbs.reg_dmabuf_mr) {
		if (may_fall_back) {
			out.fallback_reason = verbs.library + " has no ibv_reg_dmabuf_mr";
			return false;
		}
		throw Error(EOPNOTSUPP, Step::RdmaRegister,
			    verbs.library + " has no ibv_reg_dmabuf_mr (rdma-core < 34)");
	}
	DmaBuf dmabuf;
	try {
		dmabuf = registration.export_dmabuf(any_rw);
	} catch (const Error &e) {
		if (!may_fall_back || e.err() != EOPNOTSUPP)
			throw;
		out.fallback_reason = e.what();
		return false;
	}
	std::vector<detail::MrItem> items(buffers.size());
	for (std::size_t i = 0; i < buffers.size(); i++)
		items[i] = {registration.dmabuf_offset(i), buffers[i].len, i, 0};
	detail::MrPlan plan = detail::plan_memory_regions(items, buffers.size(), cap);
	const std::vector<int> group_access = {
		region_access(access, any_rw ? Access::ReadWrite : Access::ReadOnly)};
	// The iova of each region is its offset in the dma-buf.  The region
	// holds its own reference to the dma-buf: the fd closes on return.
	RegionFailure f =
		register_chunks(out, plan, group_access, [&](const detail::MrChunk &c, int acc) {
			return verbs.reg_dmabuf_mr(pd, c.start, c.len, c.start, dmabuf.fd(), acc);
		});
	if (f.err == EOPNOTSUPP && f.chunk == 0 && may_fall_back) {
		out.fallback_reason = "ibv_reg_dmabuf_mr: the device does not take dma-buf "
				      "memory regions (EOPNOTSUPP)";
		return false;
	}
	if (f.err)
		fail(plan, f, "ibv_reg_dmabuf_mr");
	out.path = RdmaPath::DmaBuf;
	out.region_of = std::move(plan.chunk_of);
	for (const detail::MrItem &it : items)
		out.addr.push_back(it.start);
	return true;
}

} // namespace

RdmaBackend::RdmaBackend(::ibv_pd *pd, const RdmaOptions &options)
	: verbs_(std::make_shared<const detail::LibIbverbs>(options.library)), pd_(pd),
	  options_(options)
{
	if (!pd || !pd->context)
		throw Error(EINVAL, Step::RdmaOpen, "no protection domain");
	::ibv_device_attr attr{};
	int rc = verbs_->query_device(pd->context, &attr);
	if (rc)
		throw Error(rc, Step::RdmaOpen, "ibv_query_device");
	max_mr_bytes_ = attr.max_mr_size;
	if (options.max_mr_bytes && (!max_mr_bytes_ || options.max_mr_bytes < max_mr_bytes_))
		max_mr_bytes_ = options.max_mr_bytes;
	if (!max_mr_bytes_)
		throw Error(EINVAL, Step::RdmaOpen, "the device reports max_mr_size 0");
	const char *name = pd->context->device ? verbs_->get_device_name(pd->context->device) :
						 nullptr;
	device_name_ = name ? name : "";
}

RdmaBackend::~RdmaBackend() = default;

RdmaMemoryRegions RdmaBackend::register_memory(const Registration &registration, int access) const
{
	if (!registration)
		throw Error(EINVAL, Step::RdmaRegister, "the registration was reset");
	auto out = std::make_unique<detail::RdmaRegions>(verbs_);
	const RdmaPath path = options_.path;

	if (path != RdmaPath::PerRange && registration.mode() != Mode::Kernel) {
		if (path == RdmaPath::DmaBuf)
			throw Error(EOPNOTSUPP, Step::RdmaRegister,
				    "dma-buf memory regions need kernel mode (svmbatch.ko)");
		out->fallback_reason = "userspace mode: no dma-buf";
	} else if (path != RdmaPath::PerRange &&
		   register_dmabuf(*out, *verbs_, pd_, registration, access, max_mr_bytes_,
				   path == RdmaPath::Auto)) {
		return RdmaMemoryRegions(std::move(out));
	}
	register_per_range(*out, *verbs_, pd_, registration, access, max_mr_bytes_);
	return RdmaMemoryRegions(std::move(out));
}

} // namespace svmbatch
