// SPDX-License-Identifier: GPL-2.0-only
/*
 * svmbatch: pin many scattered user ranges in one transactional ioctl.
 *
 * This file owns the misc device and the ioctl table, and only
 * dispatches: it calls into the other files, and none of them calls or
 * uses anything defined here.  Each command's handler,
 * svmbatch_cmd_<command>(), lives with the object it works on: GET_INFO
 * in context.c, REGISTER, UNREGISTER and QUERY in reg.c, EXPORT_DMABUF in
 * dmabuf.c; a handler answers through ucmd.c.  Size checking and
 * copy_struct_from_user() are done once here, so each handler only sees a
 * fully read command struct.  The module parameters and the limits they
 * set are in limits.c.
 */
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/sched.h>
#include <linux/seq_file.h>
#include <linux/uaccess.h>

#include "svmbatch_priv.h"

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
	svmbatch_clients_add(ctx);
	return 0;
}

static int svmbatch_fops_release(struct inode *inode, struct file *filp)
{
	struct svmbatch_ctx *ctx = filp->private_data;

	/* debugfs lists open files only: this one goes before its pins do. */
	svmbatch_clients_del(ctx);
	svmbatch_reg_release_all(ctx);
	svmbatch_ctx_destroy(ctx);
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
