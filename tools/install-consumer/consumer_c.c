/* SPDX-License-Identifier: MIT */
/* Built against an installed libsvmbatch (tools/check-install.sh). */
#include <stdio.h>

#include <linux/svmbatch.h>
#include <svmbatch/capi.h>
/* The C API's first name still works (a forwarding header). */
#include <svmbatch/svmbatch.h>

/*
 * The names of 0.1 are still exported (deprecated, same functions): a
 * program built against them links and runs.  Closes ctx.
 */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static int deprecated_names_link(svmbatch_ctx *ctx)
{
	static char mem[4096];
	struct svmbatch_buffer b = {mem, sizeof(mem), SVMBATCH_ACCESS_READ_WRITE};
	svmbatch_reg *reg;
	int ret = svmbatch_register(ctx, &b, 1, &reg, NULL);

	if (ret)
		fprintf(stderr, "consumer (C, 0.1 names): %s\n", svmbatch_last_error());
	else
		svmbatch_unregister(reg);
	svmbatch_ctx_close(ctx);
	return ret ? 1 : 0;
}
#pragma GCC diagnostic pop

int main(void)
{
	static char mem[2 * 4096];
	struct svmbatch_buffer b = {mem, sizeof(mem), SVMBATCH_ACCESS_READ_WRITE};
	struct svmbatch_reg_info info;
	svmbatch_ctx *ctx;
	svmbatch_reg *reg;
	int ret = svmbatch_ctx_open(SVMBATCH_MODE_USERSPACE, NULL, &ctx);

	if (ret || svmbatch_reg_create(ctx, &b, 1, &reg, NULL)) {
		fprintf(stderr, "consumer (C): %s\n", svmbatch_last_error());
		return 1;
	}
	svmbatch_reg_get_info(reg, &info);
	printf("consumer (C): ABI header %d, %llu pages\n", SVMBATCH_ABI_VERSION,
	       (unsigned long long)info.pages);
	svmbatch_reg_destroy(reg);
	return deprecated_names_link(ctx);
}
