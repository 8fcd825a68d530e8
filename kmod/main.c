// SPDX-License-Identifier: GPL-2.0-only
/*
 * svmbatch: pin many scattered user ranges in one transactional ioctl.
 *
 * This file owns the misc device, the module parameters and the ioctl
 * table.  Each command's handler, svmbatch_cmd_<command>(), lives with the
 * object it works on: GET_INFO in context.c, REGISTER, UNREGISTER and
 * QUERY in reg.c, EXPORT_DMABUF in dmabuf.c.  Size checking and
 * copy_struct_from_user() are done once here, so each handler only sees a
 * fully read command struct.
 */
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/sched.h>
#include <linux/seq_file.h>
#include <linux/uaccess.h>

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

/* Largest command struct; the table below checks each one fits. */
union svmbatch_ucmd_buffer {
	struct svmbatch_info info;
	struct svmbatch_register reg;
	struct svmbatch_unregister unreg;
	struct svmbatch_query query;
	struct svmbatch_export_dmabuf export;
};

struct svmbatch_ioctl_op {
	unsigned int size;
	unsigned int min_size;
	unsigned int ioctl_num;
	bool count_failures;
	int (*execute)(struct svmbatch_ucmd *ucmd);
};

/*
 * One row per command: SVMBATCH_<_name> is run by _fn with _struct.
 * _count: every failure of the command, whatever step refused it, counts
 * in failed_registrations and the file's svmbatch-failed.
 */
#define IOCTL_OP(_name, _fn, _struct, _last, _count)                           \
	[SVMBATCH_CMD_##_name - SVMBATCH_CMD_BASE] = {                         \
		.size = sizeof(_struct) +                                      \
			BUILD_BUG_ON_ZERO(sizeof(union svmbatch_ucmd_buffer) < \
					  sizeof(_struct)),                    \
		.min_size = offsetofend(_struct, _last),                       \
		.ioctl_num = SVMBATCH_##_name,                                 \
		.count_failures = _count,                                      \
		.execute = _fn,                                                \
	}

static const struct svmbatch_ioctl_op svmbatch_ioctl_ops[] = {
	IOCTL_OP(GET_INFO, svmbatch_cmd_get_info, struct svmbatch_info,
		 max_range_bytes, false),
	IOCTL_OP(REGISTER, svmbatch_cmd_register, struct svmbatch_register,
		 nr_pages, true),
	IOCTL_OP(UNREGISTER, svmbatch_cmd_unregister,
		 struct svmbatch_unregister, handle, false),
	IOCTL_OP(QUERY, svmbatch_cmd_query, struct svmbatch_query, reserved,
		 false),
	IOCTL_OP(EXPORT_DMABUF, svmbatch_cmd_export_dmabuf,
		 struct svmbatch_export_dmabuf, fd, false),
};

/**
 * svmbatch_ucmd_respond() - copy a command struct back to user space
 * @ucmd: the command in flight
 *
 * Copies at most the size the caller declared, so a caller with an older,
 * smaller struct never has memory beyond it overwritten.
 *
 * Return: 0 or -EFAULT.
 */
int svmbatch_ucmd_respond(struct svmbatch_ucmd *ucmd)
{
	if (svmbatch_should_fail(-EFAULT))
		return -EFAULT;
	if (copy_to_user(ucmd->ubuffer, ucmd->cmd,
			 min_t(size_t, ucmd->user_size, ucmd->cmd_size)))
		return -EFAULT;
	return 0;
}

/* Read the command struct in and run the command. */
static int svmbatch_ioctl_run(struct svmbatch_ctx *ctx,
			      const struct svmbatch_ioctl_op *op,
			      unsigned long arg)
{
	union svmbatch_ucmd_buffer buf;
	struct svmbatch_ucmd ucmd = {};
	int ret;

	/* Pages are pinned in, and charged to, the opener's mm only. */
	if (current->mm != ctx->mm)
		return -EPERM;

	ucmd.ctx = ctx;
	ucmd.ubuffer = (void __user *)arg;
	if (svmbatch_should_fail(-EFAULT))
		return -EFAULT;
	if (get_user(ucmd.user_size, (u32 __user *)ucmd.ubuffer))
		return -EFAULT;
	if (ucmd.user_size < op->min_size)
		return -EINVAL;

	ucmd.cmd = &buf;
	ucmd.cmd_size = op->size;
	ret = copy_struct_from_user(ucmd.cmd, op->size, ucmd.ubuffer,
				    ucmd.user_size);
	if (ret)
		return ret;
	return op->execute(&ucmd);
}

static long svmbatch_fops_ioctl(struct file *filp, unsigned int cmd,
				unsigned long arg)
{
	struct svmbatch_ctx *ctx = filp->private_data;
	const struct svmbatch_ioctl_op *op;
	unsigned int nr = _IOC_NR(cmd);
	int ret;

	if (_IOC_TYPE(cmd) != SVMBATCH_TYPE || nr < SVMBATCH_CMD_BASE ||
	    nr - SVMBATCH_CMD_BASE >= ARRAY_SIZE(svmbatch_ioctl_ops))
		return -ENOTTY;
	op = &svmbatch_ioctl_ops[nr - SVMBATCH_CMD_BASE];
	if (!op->execute || op->ioctl_num != cmd)
		return -ENOTTY;

	ret = svmbatch_ioctl_run(ctx, op, arg);
	/* A call the kernel restarts has not failed. */
	if (ret && ret != -ERESTARTNOINTR && op->count_failures)
		svmbatch_ctx_note_failure(ctx);
	return ret;
}

static int svmbatch_fops_open(struct inode *inode, struct file *filp)
{
	struct svmbatch_ctx *ctx;

	ctx = svmbatch_ctx_create();
	if (IS_ERR(ctx))
		return PTR_ERR(ctx);
	filp->private_data = ctx;
	return 0;
}

static int svmbatch_fops_release(struct inode *inode, struct file *filp)
{
	svmbatch_ctx_destroy(filp->private_data);
	return 0;
}

static void svmbatch_fops_show_fdinfo(struct seq_file *m, struct file *filp)
{
	svmbatch_show_fdinfo(m, filp->private_data);
}

static const struct file_operations svmbatch_fops = {
	.owner = THIS_MODULE,
	.open = svmbatch_fops_open,
	.release = svmbatch_fops_release,
	.unlocked_ioctl = svmbatch_fops_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.show_fdinfo = svmbatch_fops_show_fdinfo,
	.llseek = noop_llseek,
};

static struct miscdevice svmbatch_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "svmbatch",
	.fops = &svmbatch_fops,
};

static int __init svmbatch_init(void)
{
	int ret;

	/* The uapi layouts are the same on 32- and 64-bit ABIs. */
	BUILD_BUG_ON(sizeof(struct svmbatch_info) != 40);
	BUILD_BUG_ON(sizeof(struct svmbatch_range) != 24);
	BUILD_BUG_ON(sizeof(struct svmbatch_register) != 48);
	BUILD_BUG_ON(sizeof(struct svmbatch_unregister) != 8);
	BUILD_BUG_ON(sizeof(struct svmbatch_query) != 72);
	BUILD_BUG_ON(sizeof(struct svmbatch_export_dmabuf) != 16);

	svmbatch_debugfs_init();
	ret = misc_register(&svmbatch_misc);
	if (ret) {
		svmbatch_debugfs_exit();
		return ret;
	}
	return 0;
}

static void __exit svmbatch_exit(void)
{
	misc_deregister(&svmbatch_misc);
	svmbatch_debugfs_exit();
}

module_init(svmbatch_init);
module_exit(svmbatch_exit);

MODULE_DESCRIPTION("Transactional batch pinning of scattered user memory");
MODULE_LICENSE("GPL");
