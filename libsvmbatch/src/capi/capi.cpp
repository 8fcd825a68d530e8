// SPDX-License-Identifier: MIT
// The C API: opaque handles over the C++ objects.  No exception crosses
// this boundary; each becomes a negative errno and a thread-local message.
#include <svmbatch/capi.h>
#include <svmbatch/all.hpp>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "capi/c_api_internal.hpp"

namespace svmbatch::capi {

std::string &last_error() noexcept
{
	thread_local std::string message;

	return message;
}

void set_error(const char *what, const char *detail) noexcept
{
	try {
		last_error().assign(what).append(detail);
	} catch (...) {
		last_error().clear();
	}
}

} // namespace svmbatch::capi

namespace {

using namespace svmbatch::capi; // NOLINT(google-build-using-namespace): the C API's helpers

svmbatch::Mode to_mode(svmbatch_mode m)
{
	switch (m) {
	case SVMBATCH_MODE_KERNEL:
		return svmbatch::Mode::Kernel;
	case SVMBATCH_MODE_USERSPACE:
		return svmbatch::Mode::Userspace;
	case SVMBATCH_MODE_AUTO:
		break;
	}
	return svmbatch::Mode::Auto;
}

} // namespace

extern "C" {

int svmbatch_ctx_open(enum svmbatch_mode mode, const char *device, svmbatch_ctx **ctx)
{
	if (!ctx)
		return invalid("svmbatch_ctx_open: ctx is NULL");
	*ctx = nullptr;
	switch (raw_value(mode)) {
	case SVMBATCH_MODE_AUTO:
	case SVMBATCH_MODE_KERNEL:
	case SVMBATCH_MODE_USERSPACE:
		break;
	default:
		return invalid("svmbatch_ctx_open: unknown mode");
	}
	return guarded(nullptr, [&] {
		auto c = std::make_unique<svmbatch_ctx>(svmbatch_ctx{
			svmbatch::Context(to_mode(mode),
					  device ? device : svmbatch::Context::default_device)});
		*ctx = c.release(); /* owned by the caller until svmbatch_ctx_close */
	});
}

void svmbatch_ctx_close(svmbatch_ctx *ctx)
{
	delete ctx; // NOLINT(cppcoreguidelines-owning-memory): C ownership
}

int svmbatch_ctx_get_info(const svmbatch_ctx *ctx, struct svmbatch_ctx_info *info)
{
	if (!ctx || !info)
		return invalid("svmbatch_ctx_get_info: NULL argument");
	const svmbatch::Info &i = ctx->ctx.info();

	last_error().clear();
	*info = {};
	info->mode = i.mode == svmbatch::Mode::Kernel ? SVMBATCH_MODE_KERNEL :
							SVMBATCH_MODE_USERSPACE;
	info->abi_version = i.abi_version;
	info->max_ranges = i.max_ranges;
	info->max_registrations = i.max_registrations;
	info->page_size = i.page_size;
	info->features = i.features;
	info->max_range_bytes = i.max_range_bytes;
	return 0;
}

int svmbatch_reg_create(svmbatch_ctx *ctx, const struct svmbatch_buffer *buffers, size_t nr_buffers,
			svmbatch_reg **reg, size_t *failed_index)
{
	return svmbatch_reg_create_with(ctx, buffers, nr_buffers, nullptr, reg, failed_index);
}

int svmbatch_reg_create_with(svmbatch_ctx *ctx, const struct svmbatch_buffer *buffers,
			     size_t nr_buffers, const struct svmbatch_reg_options *options,
			     svmbatch_reg **reg, size_t *failed_index)
{
	if (failed_index)
		*failed_index = SVMBATCH_LIB_NO_INDEX;
	if (!ctx || !reg || (!buffers && nr_buffers))
		return invalid("svmbatch_reg_create: NULL argument");
	*reg = nullptr;
	/* More than could ever be in memory: the copy below would throw length_error. */
	if (nr_buffers > std::vector<svmbatch::Buffer>().max_size())
		return fail(ENOMEM, "svmbatch_reg_create: too many buffers");
	for (size_t i = 0; i < nr_buffers; i++) {
		auto a = raw_value(buffers[i].access);

		if (a != SVMBATCH_ACCESS_READ_WRITE && a != SVMBATCH_ACCESS_READ_ONLY) {
			if (failed_index)
				*failed_index = i;
			return invalid("svmbatch_reg_create: unknown access");
		}
	}
	if (options && (options->flags & ~(SVMBATCH_REG_NOTIFY_STALE | SVMBATCH_REG_NO_PREFAULT)))
		return invalid("svmbatch_reg_create: unknown flags");
	svmbatch::RegisterOptions opt;
	opt.notify_stale = options && (options->flags & SVMBATCH_REG_NOTIFY_STALE);
	opt.prefault = !(options && (options->flags & SVMBATCH_REG_NO_PREFAULT));
	return guarded(failed_index, [&] {
		std::vector<svmbatch::Buffer> b(nr_buffers);

		for (size_t i = 0; i < nr_buffers; i++)
			b[i] = {buffers[i].ptr, buffers[i].len,
				buffers[i].access == SVMBATCH_ACCESS_READ_ONLY ?
					svmbatch::Access::ReadOnly :
					svmbatch::Access::ReadWrite};
		auto r = std::make_unique<svmbatch_reg>(
			svmbatch_reg{ctx->ctx.register_buffers(b, opt)});
		*reg = r.release(); /* owned by the caller until svmbatch_reg_destroy */
	});
}

void svmbatch_reg_destroy(svmbatch_reg *reg)
{
	delete reg; // NOLINT(cppcoreguidelines-owning-memory): C ownership
}

int svmbatch_reg_get_info(const svmbatch_reg *reg, struct svmbatch_reg_info *info)
{
	if (!reg || !info)
		return invalid("svmbatch_reg_get_info: NULL argument");
	last_error().clear();
	*info = {};
	info->handle = reg->reg.handle();
	info->nr_buffers = reg->reg.buffers().size();
	info->nr_ranges = reg->reg.ranges().size();
	info->pages = reg->reg.pages();
	info->pinned_pages = reg->reg.pinned_pages();
	return 0;
}

int svmbatch_reg_get_stale_fd(const svmbatch_reg *reg, int *fd)
{
	if (!reg || !fd)
		return invalid("svmbatch_reg_get_stale_fd: NULL argument");
	last_error().clear();
	*fd = reg->reg.stale_fd();
	return 0;
}

int svmbatch_fixed_create(const svmbatch_reg *reg, struct io_uring *ring,
			  const struct svmbatch_fixed_options *options, svmbatch_fixed **fixed)
{
	if (!reg || !ring || !fixed)
		return invalid("svmbatch_fixed_create: NULL argument");
	*fixed = nullptr;
	return guarded(nullptr, [&] {
		svmbatch::FixedOptions opt;

		if (options && options->use_window) {
			opt.window_first = options->window_first;
			opt.window_size = options->window_size;
		}
		auto f = std::make_unique<svmbatch_fixed>(
			svmbatch_fixed{register_fixed(reg->reg, *ring, opt)});
		*fixed = f.release(); /* owned by the caller */
	});
}

int svmbatch_fixed_get(const svmbatch_fixed *fixed, size_t buffer,
		       struct svmbatch_fixed_slice *slice)
{
	if (!fixed || !slice)
		return invalid("svmbatch_fixed_get: NULL argument");
	last_error().clear();
	if (buffer >= fixed->fixed.size())
		return fail(ERANGE, "svmbatch_fixed_get: buffer index out of range");
	const svmbatch::FixedSlice &s = fixed->fixed[buffer];
	slice->index = s.index;
	slice->addr = s.addr;
	slice->len = s.len;
	return 0;
}

void svmbatch_fixed_destroy(svmbatch_fixed *fixed)
{
	delete fixed; // NOLINT(cppcoreguidelines-owning-memory): C ownership
}

const char *svmbatch_last_error(void)
{
	return last_error().c_str();
}

/* The deprecated names: the same functions under the names of 0.1. */
int svmbatch_register(svmbatch_ctx *ctx, const struct svmbatch_buffer *buffers, size_t nr_buffers,
		      svmbatch_reg **reg, size_t *failed_index)
{
	return svmbatch_reg_create(ctx, buffers, nr_buffers, reg, failed_index);
}

void svmbatch_unregister(svmbatch_reg *reg)
{
	svmbatch_reg_destroy(reg);
}

int svmbatch_register_fixed(const svmbatch_reg *reg, struct io_uring *ring,
			    const struct svmbatch_fixed_options *options, svmbatch_fixed **fixed)
{
	return svmbatch_fixed_create(reg, ring, options, fixed);
}

void svmbatch_unregister_fixed(svmbatch_fixed *fixed)
{
	svmbatch_fixed_destroy(fixed);
}

} // extern "C"
