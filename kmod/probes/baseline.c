// SPDX-License-Identifier: GPL-2.0-only
/*
 * Compiles against every kernel: if it does not, the probe flags in
 * kmod/Kbuild are wrong, and every other probe would answer a false "no".
 */
#include <linux/module.h>

static int __maybe_unused svmbatch_probe(void)
{
	return 0;
}
