// SPDX-License-Identifier: GPL-2.0-only
/* eventfd_signal() adds 1 and takes no count (6.8 and backports). */
#include <linux/eventfd.h>

static void __maybe_unused svmbatch_probe(struct eventfd_ctx *ctx)
{
	eventfd_signal(ctx);
}
