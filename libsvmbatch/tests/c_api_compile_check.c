/* SPDX-License-Identifier: MIT */
/* The C API header as strict C11, and a call through it from C. */
#include <errno.h>
#include <stddef.h>

#include <svmbatch/capi.h>

int svmbatch_c_api_userspace_roundtrip(void);
int svmbatch_c_api_open_mode(int mode);
int svmbatch_c_api_deprecated_names(void);
int svmbatch_c_api_extent_read(int fd, void *dst, size_t len);

int svmbatch_c_api_userspace_roundtrip(void)
{
	static char mem[3 * 4096];
	struct svmbatch_buffer b[2] = {
		{mem, 100, SVMBATCH_ACCESS_READ_WRITE},
		{mem + 200, 100, SVMBATCH_ACCESS_READ_ONLY},
	};
	struct svmbatch_reg_info info;
	svmbatch_ctx *ctx = NULL;
	svmbatch_reg *reg = NULL;
	size_t bad;
	int ret;

	ret = svmbatch_ctx_open(SVMBATCH_MODE_USERSPACE, NULL, &ctx);
	if (ret)
		return ret;
	ret = svmbatch_reg_create(ctx, b, 2, &reg, &bad);
	if (!ret)
		ret = svmbatch_reg_get_info(reg, &info);
	if (!ret && info.nr_ranges != 1)
		ret = -EPROTO;
	svmbatch_reg_destroy(reg);
	svmbatch_ctx_close(ctx);
	return ret;
}

/* svmbatch_ctx_open with any int as the mode; closes what it opens. */
int svmbatch_c_api_open_mode(int mode)
{
	svmbatch_ctx *ctx = NULL;
	int ret = svmbatch_ctx_open((enum svmbatch_mode)mode, NULL, &ctx);

	if (!ret && !ctx)
		ret = -EPROTO;
	svmbatch_ctx_close(ctx);
	return ret;
}

/*
 * The deprecated names of 0.1 still compile in C (the warning they give is
 * the point of deprecating them) and run.
 */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
int svmbatch_c_api_deprecated_names(void)
{
	static char mem[4096];
	struct svmbatch_buffer b = {mem, sizeof(mem), SVMBATCH_ACCESS_READ_WRITE};
	svmbatch_ctx *ctx = NULL;
	svmbatch_reg *reg = NULL;
	int ret = svmbatch_ctx_open(SVMBATCH_MODE_USERSPACE, NULL, &ctx);

	if (!ret)
		ret = svmbatch_register(ctx, &b, 1, &reg, NULL);
	svmbatch_unregister(reg);
	svmbatch_unregister_fixed(NULL);
	svmbatch_ctx_close(ctx);
	return ret;
}
#pragma GCC diagnostic pop

/* len bytes of fd from offset 1000 to dst, through an extent reader. */
int svmbatch_c_api_extent_read(int fd, void *dst, size_t len)
{
	struct svmbatch_extent_reader_options o = {0};
	struct svmbatch_extent e = {fd, 0, 1000, len, (uint64_t)(uintptr_t)dst};
	struct svmbatch_extent_result res;
	svmbatch_extent_reader *r = NULL;
	svmbatch_ctx *ctx = NULL;
	size_t bad;
	int ret;

	o.staging_bytes = 4 * 16384;
	o.chunk_bytes = 16384;
	ret = svmbatch_ctx_open(SVMBATCH_MODE_USERSPACE, NULL, &ctx);
	if (!ret)
		ret = svmbatch_extent_reader_create(ctx, &o, -1, &r);
	if (!ret)
		ret = svmbatch_extent_read(r, &e, 1, 0, &res, &bad);
	if (!ret && (res.status || res.flags || res.bytes != len))
		ret = -EPROTO;
	svmbatch_extent_reader_destroy(r);
	svmbatch_ctx_close(ctx);
	return ret;
}
