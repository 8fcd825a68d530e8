// SPDX-License-Identifier: GPL-2.0-only
/*
 * The ioctl handlers of REGISTER, UNREGISTER and QUERY, run by main.c's
 * table with the command struct already read in.  GET_INFO's handler
 * lives in context.c, EXPORT_DMABUF's in dmabuf.c with the dma-buf it
 * makes.
 *
 * REGISTER pins its batch as one transaction (reg.c), then reserves a
 * handle, copies the result out, and only then publishes the registration:
 * a failure at any step undoes all earlier ones, so the caller sees either
 * a handle or an errno with nothing pinned, charged or allocated.
 */
#include <linux/mm.h>
#include <linux/sched/signal.h>
#include <linux/uaccess.h>

#include "svmbatch_priv.h"

static int svmbatch_register_fail(struct svmbatch_ucmd *ucmd, int err)
{
	/* error_index is reported even on failure; the errno wins. */
	svmbatch_ucmd_respond(ucmd);
	return err;
}

/**
 * svmbatch_cmd_register() - SVMBATCH_REGISTER: pin a batch of ranges
 * @ucmd: command holding a struct svmbatch_register
 *
 * See Documentation/uapi.rst for the order of the checks and the errnos.
 *
 * Return: 0 with a new handle, or a negative errno with nothing changed
 * but the failure counters.
 */
int svmbatch_cmd_register(struct svmbatch_ucmd *ucmd)
{
	struct svmbatch_register *cmd = ucmd->cmd;
	struct svmbatch_ctx *ctx = ucmd->ctx;
	struct svmbatch_reg *reg;
	u32 handle;
	int ret;

	cmd->handle = 0;
	cmd->nr_pages = 0;
	cmd->error_index = SVMBATCH_NO_INDEX;

	if (cmd->flags & ~SVMBATCH_REGISTER_EVENTFD)
		return svmbatch_register_fail(ucmd, -EOPNOTSUPP);
	if (cmd->reserved)
		return svmbatch_register_fail(ucmd, -EINVAL);
	if (!cmd->nr_ranges)
		return svmbatch_register_fail(ucmd, -EINVAL);
	if (cmd->nr_ranges > READ_ONCE(svmbatch_limits.max_ranges))
		return svmbatch_register_fail(ucmd, -E2BIG);
	if (cmd->range_size < sizeof(struct svmbatch_range))
		return svmbatch_register_fail(ucmd, -EINVAL);
	if (READ_ONCE(ctx->nr_regs) >=
	    READ_ONCE(svmbatch_limits.max_registrations))
		return svmbatch_register_fail(ucmd, -ENOSPC);

	reg = svmbatch_batch_pin(cmd, &cmd->error_index);
	if (IS_ERR(reg))
		return svmbatch_register_fail(ucmd, PTR_ERR(reg));

	ret = svmbatch_ctx_reserve(ctx, &handle);
	if (ret)
		goto err_abort;
	cmd->handle = handle;
	cmd->nr_pages = reg->nr_pages;
	ret = svmbatch_ucmd_respond(ucmd);
	if (ret)
		goto err_cancel;

	atomic64_inc(&svmbatch_stats.registrations);
	atomic64_inc(&svmbatch_stats.registered_total);
	atomic64_add(reg->nr_pages, &svmbatch_stats.pinned_pages);
	atomic64_add(svmbatch_reg_meta_bytes(reg), &svmbatch_stats.meta_bytes);
	svmbatch_ctx_publish(ctx, handle, reg);
	return 0;

err_cancel:
	svmbatch_ctx_cancel(ctx, handle);
err_abort:
	svmbatch_reg_abort(reg);
	cmd->handle = 0;
	cmd->nr_pages = 0;
	return svmbatch_register_fail(ucmd, ret);
}

/**
 * svmbatch_cmd_unregister() - SVMBATCH_UNREGISTER: drop a handle
 * @ucmd: command holding a struct svmbatch_unregister
 *
 * The pages are unpinned when the last reference to the registration is
 * gone.
 *
 * Return: 0 or -ENOENT for an unknown handle.
 */
int svmbatch_cmd_unregister(struct svmbatch_ucmd *ucmd)
{
	struct svmbatch_unregister *cmd = ucmd->cmd;

	return svmbatch_ctx_remove(ucmd->ctx, cmd->handle);
}

static int svmbatch_query_ranges(const struct svmbatch_reg *reg,
				 const struct svmbatch_query *cmd)
{
	void __user *uranges = u64_to_user_ptr(cmd->ranges);
	size_t extra = cmd->range_size - sizeof(struct svmbatch_range);
	u32 i;

	if (svmbatch_should_fail(-EFAULT))
		return -EFAULT;
	for (i = 0; i < reg->nr_ranges; i++) {
		const struct svmbatch_range_rec *rec = &reg->ranges[i];
		struct svmbatch_range r = {
			.addr = rec->addr_flags & PAGE_MASK,
			.len = rec->len,
			.flags = rec->addr_flags & SVMBATCH_REC_FLAGS_MASK,
		};
		void __user *dst = uranges + (size_t)i * cmd->range_size;

		if (copy_to_user(dst, &r, sizeof(r)))
			return -EFAULT;
		if (extra && clear_user(dst + sizeof(r), extra))
			return -EFAULT;
		/* Up to max_ranges elements of up to 4 GiB each. */
		if (fatal_signal_pending(current))
			return -EINTR;
		cond_resched();
	}
	return 0;
}

/**
 * svmbatch_cmd_query() - SVMBATCH_QUERY: describe a registration
 * @ucmd: command holding a struct svmbatch_query
 *
 * Return: 0, -ENOENT for an unknown handle, -EMSGSIZE when the range
 * buffer is too small (nr_ranges is still reported), -EINVAL or
 * -EOPNOTSUPP for bad input, or -EFAULT.
 */
int svmbatch_cmd_query(struct svmbatch_ucmd *ucmd)
{
	struct svmbatch_query *cmd = ucmd->cmd;
	struct svmbatch_reg *reg;
	int ret = 0;

	if (cmd->flags)
		return -EOPNOTSUPP;
	if (cmd->reserved)
		return -EINVAL;
	if (cmd->ranges && cmd->range_size < sizeof(struct svmbatch_range))
		return -EINVAL;

	reg = svmbatch_ctx_get(ucmd->ctx, cmd->handle);
	if (!reg)
		return -ENOENT;

	cmd->nr_ranges = reg->nr_ranges;
	cmd->nr_pages = reg->nr_pages;
	cmd->nr_segments = reg->nr_runs;
	cmd->nr_folios = reg->nr_folios;
	cmd->meta_bytes = svmbatch_reg_meta_bytes(reg);
	cmd->out_flags = test_bit(SVMBATCH_REG_STALE, &reg->flags) ?
				 SVMBATCH_QUERY_STALE :
				 0;

	if (cmd->ranges) {
		if (cmd->ranges_cap < reg->nr_ranges)
			ret = -EMSGSIZE;
		else
			ret = svmbatch_query_ranges(reg, cmd);
	}
	svmbatch_reg_put(reg);

	if (ret && ret != -EMSGSIZE)
		return ret;
	return svmbatch_ucmd_respond(ucmd) ?: ret;
}
