// SPDX-License-Identifier: GPL-2.0-only
/*
 * Per-open-file context: the opener's mm and the handle table, and
 * GET_INFO, which tells a context what the module offers it.
 *
 * A handle is first reserved (a NULL entry in the allocating xarray), so a
 * REGISTER can copy its result to user space before the registration
 * becomes visible; a failed copy then cancels the reservation and nothing
 * was ever observable.  The table mutex is never held while pinning.
 *
 * Handles are allocated cyclically: a handle dropped by UNREGISTER is not
 * handed out again until the 32-bit space wraps, so a stale handle in a
 * buggy caller gets ENOENT instead of naming someone else's registration.
 *
 * The table only stores references and hands them out: a registration it
 * no longer holds goes back to the caller, which drops it (reg.c).  So
 * this file sits below the registration object and never calls into it.
 */
#include <linux/atomic.h>
#include <linux/pid.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>

#include "svmbatch_priv.h"

static atomic64_t svmbatch_next_ctx_id = ATOMIC64_INIT(0);

/**
 * svmbatch_ctx_create() - create the context of a new open file
 *
 * Binds the context to the calling process's mm.
 *
 * Return: the context or an ERR_PTR().
 */
struct svmbatch_ctx *svmbatch_ctx_create(void)
{
	struct svmbatch_ctx *ctx;

	if (!current->mm)
		return ERR_PTR(-EPERM);
	if (svmbatch_should_fail(-ENOMEM))
		return ERR_PTR(-ENOMEM);
	ctx = kzalloc(sizeof(*ctx), GFP_KERNEL_ACCOUNT);
	if (!ctx)
		return ERR_PTR(-ENOMEM);

	mmgrab(current->mm);
	ctx->mm = current->mm;
	mutex_init(&ctx->lock);
	xa_init_flags(&ctx->regs, XA_FLAGS_ALLOC1);
	ctx->id = atomic64_inc_return(&svmbatch_next_ctx_id);
	ctx->tgid = task_tgid_nr(current);
	atomic64_inc(&svmbatch_stats.contexts);
	return ctx;
}

/**
 * svmbatch_ctx_destroy() - free a context when its file is closed
 * @ctx: the context, its handle table already emptied by the caller
 *	(svmbatch_reg_release_all())
 */
void svmbatch_ctx_destroy(struct svmbatch_ctx *ctx)
{
	/* A registration left here would never be unpinned. */
	WARN_ON_ONCE(!xa_empty(&ctx->regs));
	xa_destroy(&ctx->regs);
	mutex_destroy(&ctx->lock);
	mmdrop(ctx->mm);
	atomic64_dec(&svmbatch_stats.contexts);
	kfree(ctx);
}

/**
 * svmbatch_ctx_reserve() - reserve a handle for a registration
 * @ctx: the context
 * @handle: output, the reserved handle
 *
 * Return: 0, -ENOSPC when the file already has max_registrations handles,
 * or -ENOMEM.
 */
int svmbatch_ctx_reserve(struct svmbatch_ctx *ctx, u32 *handle)
{
	int ret;

	mutex_lock(&ctx->lock);
	if (ctx->nr_regs >= READ_ONCE(svmbatch_limits.max_registrations)) {
		ret = -ENOSPC;
		goto out;
	}
	if (svmbatch_should_fail(-ENOMEM)) {
		ret = -ENOMEM;
		goto out;
	}
	ret = xa_alloc_cyclic(&ctx->regs, handle, NULL, xa_limit_32b,
			      &ctx->next_handle, GFP_KERNEL_ACCOUNT);
	if (ret == -EBUSY)
		ret = -ENOSPC;
	if (ret >= 0) {
		/* 1 only says that the handles wrapped around. */
		ret = 0;
		ctx->nr_regs++;
	}
out:
	mutex_unlock(&ctx->lock);
	return ret;
}

/**
 * svmbatch_ctx_publish() - make a registration visible under its handle
 * @ctx: the context
 * @handle: handle from svmbatch_ctx_reserve()
 * @reg: the registration; the table takes over the caller's reference
 *
 * Storing into a reserved slot needs no allocation, so this cannot fail.
 */
void svmbatch_ctx_publish(struct svmbatch_ctx *ctx, u32 handle,
			  struct svmbatch_reg *reg)
{
	mutex_lock(&ctx->lock);
	xa_store(&ctx->regs, handle, reg, GFP_KERNEL);
	ctx->pinned_pages += reg->nr_pages;
	mutex_unlock(&ctx->lock);
}

/**
 * svmbatch_ctx_cancel() - give back a handle that was never published
 * @ctx: the context
 * @handle: handle from svmbatch_ctx_reserve()
 */
void svmbatch_ctx_cancel(struct svmbatch_ctx *ctx, u32 handle)
{
	mutex_lock(&ctx->lock);
	xa_release(&ctx->regs, handle);
	ctx->nr_regs--;
	mutex_unlock(&ctx->lock);
}

/**
 * svmbatch_ctx_get() - look up a registration and take a reference
 * @ctx: the context
 * @handle: the handle
 *
 * Return: the registration (drop it with svmbatch_reg_put()) or NULL.
 */
struct svmbatch_reg *svmbatch_ctx_get(struct svmbatch_ctx *ctx, u32 handle)
{
	struct svmbatch_reg *reg;

	mutex_lock(&ctx->lock);
	reg = xa_load(&ctx->regs, handle);
	if (reg)
		kref_get(&reg->ref);
	mutex_unlock(&ctx->lock);
	return reg;
}

/* Take @reg, stored under @handle, out of the table; ctx->lock is held. */
static void svmbatch_ctx_erase(struct svmbatch_ctx *ctx, unsigned long handle,
			       struct svmbatch_reg *reg)
{
	lockdep_assert_held(&ctx->lock);
	xa_erase(&ctx->regs, handle);
	ctx->nr_regs--;
	ctx->pinned_pages -= reg->nr_pages;
}

/**
 * svmbatch_ctx_remove() - take a registration out of the table
 * @ctx: the context
 * @handle: the handle
 *
 * The handle is gone when this returns; the table's reference on the
 * registration goes to the caller.
 *
 * Return: the registration (drop it with svmbatch_reg_put()) or NULL when
 * no registration has that handle.
 */
struct svmbatch_reg *svmbatch_ctx_remove(struct svmbatch_ctx *ctx, u32 handle)
{
	struct svmbatch_reg *reg;

	mutex_lock(&ctx->lock);
	reg = xa_load(&ctx->regs, handle);
	if (reg)
		svmbatch_ctx_erase(ctx, handle, reg);
	mutex_unlock(&ctx->lock);
	return reg;
}

/**
 * svmbatch_ctx_remove_first() - take the registration of the lowest handle
 *	out of the table
 * @ctx: the context
 *
 * For emptying the table of a closing file, one registration at a time;
 * reserved handles are skipped (a closing file has none).
 *
 * Return: the registration, whose reference goes to the caller (drop it
 * with svmbatch_reg_put()), or NULL when the table holds none.
 */
struct svmbatch_reg *svmbatch_ctx_remove_first(struct svmbatch_ctx *ctx)
{
	struct svmbatch_reg *reg;
	unsigned long handle = 0;

	mutex_lock(&ctx->lock);
	reg = xa_find(&ctx->regs, &handle, ULONG_MAX, XA_PRESENT);
	if (reg)
		svmbatch_ctx_erase(ctx, handle, reg);
	mutex_unlock(&ctx->lock);
	return reg;
}

/**
 * svmbatch_ctx_note_failure() - count a failed REGISTER
 * @ctx: the context
 */
void svmbatch_ctx_note_failure(struct svmbatch_ctx *ctx)
{
	mutex_lock(&ctx->lock);
	ctx->failed++;
	mutex_unlock(&ctx->lock);
	atomic64_inc(&svmbatch_stats.failed_registrations);
}

/**
 * svmbatch_cmd_get_info() - SVMBATCH_GET_INFO: ABI version, limits, features
 * @ucmd: command holding a struct svmbatch_info
 *
 * Return: 0, -EOPNOTSUPP for unknown flags, or -EFAULT.
 */
int svmbatch_cmd_get_info(struct svmbatch_ucmd *ucmd)
{
	struct svmbatch_info *cmd = ucmd->cmd;

	if (cmd->flags)
		return -EOPNOTSUPP;
	cmd->abi_version = SVMBATCH_ABI_VERSION;
	cmd->page_size = PAGE_SIZE;
	cmd->features = SVMBATCH_FEATURE_STALE_NOTIFY | SVMBATCH_FEATURE_DMABUF;
	if (IS_ENABLED(CONFIG_SVMBATCH_FAULT_INJECTION))
		cmd->features |= SVMBATCH_FEATURE_FAULT_INJECTION;
	cmd->max_ranges = READ_ONCE(svmbatch_limits.max_ranges);
	cmd->max_registrations = READ_ONCE(svmbatch_limits.max_registrations);
	cmd->max_range_bytes = READ_ONCE(svmbatch_limits.max_range_bytes);
	return svmbatch_ucmd_respond(ucmd);
}
