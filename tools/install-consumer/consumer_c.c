/* SPDX-License-Identifier: MIT */
/* Built against an installed libsvmbatch (tools/check-install.sh). */
#include <stdio.h>

#include <linux/svmbatch.h>
#include <svmbatch/svmbatch.h>

int main(void)
{
	static char mem[2 * 4096];
	struct svmbatch_buffer b = { mem, sizeof(mem), SVMBATCH_ACCESS_READ_WRITE };
	struct svmbatch_reg_info info;
	svmbatch_ctx *ctx;
	svmbatch_reg *reg;
	int ret = svmbatch_ctx_open(SVMBATCH_MODE_USERSPACE, NULL, &ctx);

	if (ret || svmbatch_register(ctx, &b, 1, &reg, NULL)) {
		fprintf(stderr, "consumer (C): %s\n", svmbatch_last_error());
		return 1;
	}
	svmbatch_reg_get_info(reg, &info);
	printf("consumer (C): ABI header %d, %llu pages\n", SVMBATCH_ABI_VERSION,
	       (unsigned long long)info.pages);
	svmbatch_unregister(reg);
	svmbatch_ctx_close(ctx);
	return 0;
}
