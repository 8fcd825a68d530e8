// SPDX-License-Identifier: GPL-2.0-only
/*
 * MODULE_IMPORT_NS() takes the namespace as a string literal (6.13 and
 * backports); before, it took a bare name and stringified it.  Both forms
 * compile on both kinds of kernel, with a wrong namespace for the wrong
 * one, so catch the string the macro hands to MODULE_INFO() and check it
 * is the literal itself, not the literal in quotes.
 */
#include <linux/build_bug.h>
#include <linux/module.h>

#undef MODULE_INFO
#define MODULE_INFO(tag, info) \
	static const char svmbatch_probe_##tag[] __maybe_unused = info

MODULE_IMPORT_NS("DMA_BUF");
static_assert(sizeof(svmbatch_probe_import_ns) == sizeof("DMA_BUF"));
