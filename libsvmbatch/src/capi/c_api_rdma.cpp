// SPDX-License-Identifier: MIT
// The C API of RdmaBackend: memory regions of a registration.  Built in
// every configuration, so that the C ABI does not depend on the build:
// without SVMBATCH_WITH_RDMA every call is -EOPNOTSUPP.
#include <svmbatch/config.h>
#include <svmbatch/capi.h>

#include <cerrno>
#include <memory>

#include "capi/c_api_internal.hpp"

#if SVMBATCH_HAS_RDMA
#include <svmbatch/rdma.hpp>

struct svmbatch_rdma {
	svmbatch::RdmaMemoryRegions mrs;
};
#else
struct svmbatch_rdma {};
#endif

namespace {

using namespace svmbatch::capi; // NOLINT(google-build-using-namespace): the C API's helpers

#if SVMBATCH_HAS_RDMA
svmbatch::RdmaPath to_path(svmbatch_rdma_path p)
{
	switch (p) {
	case SVMBATCH_RDMA_DMABUF:
		return svmbatch::RdmaPath::DmaBuf;
	case SVMBATCH_RDMA_PER_RANGE:
		return svmbatch::RdmaPath::PerRange;
	case SVMBATCH_RDMA_AUTO:
		break;
	}
	return svmbatch::RdmaPath::Auto;
}
#endif

} // namespace

extern "C" {

int svmbatch_rdma_create(const svmbatch_reg *reg, struct ibv_pd *pd, int access,
			 const struct svmbatch_rdma_options *options, svmbatch_rdma **rdma,
			 size_t *failed_index)
{
	if (failed_index)
		*failed_index = SVMBATCH_LIB_NO_INDEX;
	if (!reg || !pd || !rdma)
		return invalid("svmbatch_rdma_create: NULL argument");
	*rdma = nullptr;
	if (options) {
		switch (raw_value(options->path)) {
		case SVMBATCH_RDMA_AUTO:
		case SVMBATCH_RDMA_DMABUF:
		case SVMBATCH_RDMA_PER_RANGE:
			break;
		default:
			return invalid("svmbatch_rdma_create: unknown path");
		}
	}
#if SVMBATCH_HAS_RDMA
	return guarded(failed_index, [&] {
		svmbatch::RdmaOptions opt;

		if (options) {
			opt.path = to_path(options->path);
			opt.max_mr_bytes = options->max_mr_bytes;
			if (options->library)
				opt.library = options->library;
		}
		const svmbatch::RdmaBackend backend(pd, opt);
		auto r = std::make_unique<svmbatch_rdma>(
			svmbatch_rdma{backend.register_memory(reg->reg, access)});
		*rdma = r.release(); /* owned by the caller until svmbatch_rdma_destroy */
	});
#else
	(void)access;
	return fail(EOPNOTSUPP, "svmbatch_rdma_create: libsvmbatch was built without RDMA");
#endif
}

int svmbatch_rdma_get_key(const svmbatch_rdma *rdma, size_t buffer, struct svmbatch_rdma_key *key)
{
	if (!rdma || !key)
		return invalid("svmbatch_rdma_get_key: NULL argument");
	last_error().clear();
#if SVMBATCH_HAS_RDMA
	if (buffer >= rdma->mrs.size())
		return fail(ERANGE, "svmbatch_rdma_get_key: buffer index out of range");
	const svmbatch::RdmaKey k = rdma->mrs.key(buffer);
	key->addr = k.addr;
	key->lkey = k.lkey;
	key->rkey = k.rkey;
	return 0;
#else
	(void)buffer;
	return fail(EOPNOTSUPP, "svmbatch_rdma_get_key: libsvmbatch was built without RDMA");
#endif
}

int svmbatch_rdma_get_info(const svmbatch_rdma *rdma, struct svmbatch_rdma_info *info)
{
	if (!rdma || !info)
		return invalid("svmbatch_rdma_get_info: NULL argument");
	last_error().clear();
#if SVMBATCH_HAS_RDMA
	*info = {};
	info->path = rdma->mrs.path() == svmbatch::RdmaPath::DmaBuf ? SVMBATCH_RDMA_DMABUF :
								      SVMBATCH_RDMA_PER_RANGE;
	info->nr_buffers = rdma->mrs.size();
	info->nr_regions = rdma->mrs.regions().size();
	info->fallback_reason = rdma->mrs.fallback_reason().c_str();
	return 0;
#else
	return fail(EOPNOTSUPP, "svmbatch_rdma_get_info: libsvmbatch was built without RDMA");
#endif
}

void svmbatch_rdma_destroy(svmbatch_rdma *rdma)
{
	delete rdma; // NOLINT(cppcoreguidelines-owning-memory): C ownership
}

} // extern "C"
