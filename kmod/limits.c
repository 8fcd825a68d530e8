// SPDX-License-Identifier: GPL-2.0-only
/*
 * The limits a context works within, and the module parameters that set
 * them: max_ranges, max_registrations and max_range_bytes, each checked
 * against its bound when written.  REGISTER (reg.c) and the handle table
 * (context.c) enforce them; GET_INFO (context.c) reports them.
 */
#include <linux/kernel.h>
#include <linux/moduleparam.h>

#include "svmbatch_priv.h"

struct svmbatch_limits svmbatch_limits = {
	.max_ranges = 16384,
	.max_registrations = 65536,
	.max_range_bytes = 64ULL << 30,
};

/*
 * Upper bounds of the parameters.  The range tables of a REGISTER are sized
 * by max_ranges (24 bytes a range at most: the overlap check), so they
 * stay far below kvmalloc()'s INT_MAX limit, beyond which it WARNs.  The
 * tables are also sorted twice with the kernel's sort(), which never
 * reschedules: 2^16 ranges keep that short even on a slow (emulated,
 * KASAN) machine, where 2^20 tripped the soft-lockup watchdog.
 */
#define SVMBATCH_MAX_RANGES_LIMIT	 BIT(16)
#define SVMBATCH_MAX_REGISTRATIONS_LIMIT BIT(20)
#define SVMBATCH_MAX_RANGE_BYTES_LIMIT	 BIT_ULL(40)

static int svmbatch_param_set_max_ranges(const char *val,
					 const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 1, SVMBATCH_MAX_RANGES_LIMIT);
}

static int svmbatch_param_set_max_registrations(const char *val,
						const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 1,
				     SVMBATCH_MAX_REGISTRATIONS_LIMIT);
}

static int svmbatch_param_set_max_range_bytes(const char *val,
					      const struct kernel_param *kp)
{
	u64 bytes;
	int ret;

	ret = kstrtoull(val, 0, &bytes);
	if (ret)
		return ret;
	if (bytes < PAGE_SIZE || bytes > SVMBATCH_MAX_RANGE_BYTES_LIMIT)
		return -EINVAL;
	WRITE_ONCE(*(u64 *)kp->arg, bytes);
	return 0;
}

static const struct kernel_param_ops svmbatch_max_ranges_ops = {
	.set = svmbatch_param_set_max_ranges,
	.get = param_get_uint,
};

static const struct kernel_param_ops svmbatch_max_registrations_ops = {
	.set = svmbatch_param_set_max_registrations,
	.get = param_get_uint,
};

static const struct kernel_param_ops svmbatch_max_range_bytes_ops = {
	.set = svmbatch_param_set_max_range_bytes,
	.get = param_get_ullong,
};

module_param_cb(max_ranges, &svmbatch_max_ranges_ops,
		&svmbatch_limits.max_ranges, 0644);
MODULE_PARM_DESC(max_ranges,
		 "Most ranges in one REGISTER, 1..65536 (default 16384)");
module_param_cb(max_registrations, &svmbatch_max_registrations_ops,
		&svmbatch_limits.max_registrations, 0644);
MODULE_PARM_DESC(max_registrations,
		 "Most live registrations per file, 1..1048576 (default 65536)");
module_param_cb(max_range_bytes, &svmbatch_max_range_bytes_ops,
		&svmbatch_limits.max_range_bytes, 0644);
MODULE_PARM_DESC(max_range_bytes,
		 "Longest range in bytes, PAGE_SIZE..1 TiB (default 64 GiB)");
