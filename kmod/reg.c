// SPDX-License-Identifier: GPL-2.0-only
/*
 * The registration object and its commands, REGISTER, UNREGISTER and
 * QUERY, which main.c's table runs with the command struct already read
 * in.  A registration lives from REGISTER to the release of its last
 * reference: its handle, and each dma-buf exported from it (dmabuf.c).
 * The handle table (context.c) only stores references: this file drops the
 * one a handle held, on UNREGISTER and when the file is closed
 * (svmbatch_reg_release_all()), so calls go from here down to context.c
 * and never back.
 *
 * REGISTER pins its batch as one transaction, then reserves a handle,
 * copies the result out, and only then publishes the registration: a
 * failure at any step undoes all earlier ones, so the caller sees either a
 * handle or an errno with nothing pinned, charged or allocated.
 *
 * The transaction's steps, in order: copy the ranges in and check each on
 * its own, refuse overlaps, start watching the span for invalidations
 * (stale.c), then check the mappings, charge RLIMIT_MEMLOCK once for the
 * whole batch, pin, and verify that no invalidation raced the pin, pinning
 * again if one did (these last four are pin.c's svmbatch_reg_pin()).  Any
 * failure undoes all earlier steps with svmbatch_reg_abort().
 */
#include <linux/mm.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/uaccess.h>

#include "svmbatch_priv.h"

/* Ranges copied from user space per copy_from_user() when packed. */
#define SVMBATCH_COPY_BATCH 8

/**
 * svmbatch_reg_alloc() - allocate an empty registration
 * @nr_ranges: number of caller ranges it will hold
 *
 * The registration is bound to the current mm (mmgrab'd).
 *
 * Return: the registration or NULL.
 */
static struct svmbatch_reg *svmbatch_reg_alloc(u32 nr_ranges)
{
	struct svmbatch_reg *reg;

	if (svmbatch_should_fail(-ENOMEM))
		return NULL;
	reg = kzalloc(sizeof(*reg), GFP_KERNEL_ACCOUNT);
	if (!reg)
		return NULL;
	if (svmbatch_should_fail(-ENOMEM))
		goto err_free;
	reg->ranges = kvmalloc_array(nr_ranges, sizeof(*reg->ranges),
				     GFP_KERNEL_ACCOUNT);
	if (!reg->ranges)
		goto err_free;
	kref_init(&reg->ref);
	spin_lock_init(&reg->notifier_lock);
	reg->nr_ranges = nr_ranges;
	mmgrab(current->mm);
	reg->mm = current->mm;
	return reg;

err_free:
	kfree(reg);
	return NULL;
}

static void svmbatch_reg_free(struct svmbatch_reg *reg)
{
	svmbatch_stale_unwatch(reg);
	if (reg->charged_pages)
		svmbatch_account_uncharge(reg->mm, reg->charged_pages);
	mmdrop(reg->mm);
	kvfree(reg->runs);
	kvfree(reg->ranges);
	kfree(reg);
}

/**
 * svmbatch_reg_abort() - undo a registration that was never committed
 * @reg: the registration, possibly partly pinned and charged
 *
 * Nothing was handed out, so no device can have written the pages: they
 * are unpinned without being dirtied.
 */
static void svmbatch_reg_abort(struct svmbatch_reg *reg)
{
	svmbatch_reg_unpin(reg, false);
	svmbatch_reg_free(reg);
}

/**
 * svmbatch_reg_meta_bytes() - kernel memory describing a registration
 * @reg: the registration
 *
 * Return: bytes of the registration, its range table, its address-sorted
 * index and its run array.
 */
static u64 svmbatch_reg_meta_bytes(const struct svmbatch_reg *reg)
{
	return sizeof(*reg) + (u64)reg->nr_ranges * sizeof(*reg->ranges) +
	       (reg->by_addr ? (u64)reg->nr_ranges * sizeof(*reg->by_addr) :
			       0) +
	       (u64)reg->runs_cap * sizeof(*reg->runs);
}

static void svmbatch_reg_release(struct kref *ref)
{
	struct svmbatch_reg *reg = container_of(ref, struct svmbatch_reg, ref);

	atomic64_dec(&svmbatch_stats.registrations);
	atomic64_sub(reg->nr_pages, &svmbatch_stats.pinned_pages);
	atomic64_sub(svmbatch_reg_meta_bytes(reg), &svmbatch_stats.meta_bytes);
	svmbatch_reg_unpin(reg, true);
	svmbatch_reg_free(reg);
}

/**
 * svmbatch_reg_put() - drop a reference to a committed registration
 * @reg: the registration
 *
 * The last reference unpins (dirtying writable pages) and uncharges.
 */
void svmbatch_reg_put(struct svmbatch_reg *reg)
{
	kref_put(&reg->ref, svmbatch_reg_release);
}

/**
 * svmbatch_reg_release_all() - drop every handle of a closing file
 * @ctx: the context, which no command can reach any more
 *
 * The pages of a registration are unpinned once its last reference is
 * gone: a dma-buf exported from it keeps it pinned.  The caller then frees
 * the context with svmbatch_ctx_destroy().
 */
void svmbatch_reg_release_all(struct svmbatch_ctx *ctx)
{
	struct svmbatch_reg *reg;

	while ((reg = svmbatch_ctx_remove_first(ctx))) {
		svmbatch_reg_put(reg);
		/* A file may hold 65536 registrations: let others run. */
		cond_resched();
	}
}

/* Check one range on its own; on success store it as a record. */
static int svmbatch_check_range(const struct svmbatch_range *r,
				struct svmbatch_range_rec *rec)
{
	u64 end;

	if (r->flags & ~SVMBATCH_RANGE_READ_ONLY)
		return -EOPNOTSUPP;
	if (r->reserved)
		return -EINVAL;
	if (!r->len || !PAGE_ALIGNED(r->addr) || !PAGE_ALIGNED(r->len))
		return -EINVAL;
	if (r->len > READ_ONCE(svmbatch_limits.max_range_bytes))
		return -E2BIG;
	if (check_add_overflow(r->addr, r->len, &end))
		return -EOVERFLOW;
	if (end > TASK_SIZE)
		return -EFAULT;
	rec->addr_flags = r->addr | r->flags;
	rec->len = r->len;
	return 0;
}

/*
 * Copy the caller's ranges in and check each one, in array order; the
 * first bad range sets *error_index.  A caller whose range struct is
 * larger than ours is read element by element with copy_struct_from_user().
 */
static int svmbatch_copy_ranges(struct svmbatch_reg *reg,
				const struct svmbatch_register *cmd,
				u64 *total_pages, u32 *error_index)
{
	const void __user *uranges = u64_to_user_ptr(cmd->ranges);
	struct svmbatch_range buf[SVMBATCH_COPY_BATCH];
	bool packed = cmd->range_size == sizeof(buf[0]);
	u32 i, n;
	int ret;

	*total_pages = 0;
	for (i = 0; i < reg->nr_ranges; i += n) {
		u32 j;

		n = packed ? min_t(u32, reg->nr_ranges - i, ARRAY_SIZE(buf)) :
			     1;
		if (svmbatch_should_fail(-EFAULT))
			return -EFAULT;
		if (packed) {
			if (copy_from_user(buf, uranges + i * sizeof(buf[0]),
					   n * sizeof(buf[0])))
				return -EFAULT;
		} else {
			ret = copy_struct_from_user(&buf[0], sizeof(buf[0]),
						    uranges +
							    (size_t)i *
								    cmd->range_size,
						    cmd->range_size);
			if (ret) {
				*error_index = i;
				return ret;
			}
			/* Each tail, up to 4 GiB, is read to check it is 0. */
			if (fatal_signal_pending(current))
				return -EINTR;
			cond_resched();
		}
		for (j = 0; j < n; j++) {
			ret = svmbatch_check_range(&buf[j],
						   &reg->ranges[i + j]);
			if (ret) {
				*error_index = i + j;
				return ret;
			}
			*total_pages += buf[j].len >> PAGE_SHIFT;
		}
	}
	return 0;
}

struct svmbatch_span {
	u64 start;
	u64 end;
	u32 index;
};

static int svmbatch_span_cmp(const void *a, const void *b)
{
	const struct svmbatch_span *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return 0;
}

/* Are the ranges with index <= last pairwise disjoint? */
static bool svmbatch_prefix_disjoint(const struct svmbatch_span *spans, u32 nr,
				     u32 last)
{
	u64 end = 0;
	bool any = false;
	u32 i;

	for (i = 0; i < nr; i++) {
		if (spans[i].index > last)
			continue;
		if (any && spans[i].start < end)
			return false;
		end = max(end, spans[i].end);
		any = true;
	}
	return true;
}

/*
 * Refuse overlapping ranges.  Sorting finds whether any pair overlaps; the
 * range to blame is the smallest index j overlapping some i < j, found by
 * bisecting on the longest disjoint prefix of the caller's array.
 */
static int svmbatch_check_overlap(const struct svmbatch_reg *reg,
				  u32 *error_index)
{
	struct svmbatch_span *spans;
	u32 nr = reg->nr_ranges, i, lo, hi;

	if (nr < 2)
		return 0;
	if (svmbatch_should_fail(-ENOMEM))
		return -ENOMEM;
	spans = kvmalloc_array(nr, sizeof(*spans), GFP_KERNEL);
	if (!spans)
		return -ENOMEM;
	for (i = 0; i < nr; i++) {
		spans[i].start = reg->ranges[i].addr_flags & PAGE_MASK;
		spans[i].end = spans[i].start + reg->ranges[i].len;
		spans[i].index = i;
	}
	sort(spans, nr, sizeof(*spans), svmbatch_span_cmp, NULL);

	if (svmbatch_prefix_disjoint(spans, nr, nr - 1)) {
		kvfree(spans);
		return 0;
	}
	/* Prefix [0, lo] is disjoint, prefix [0, hi] is not. */
	lo = 0;
	hi = nr - 1;
	while (hi - lo > 1) {
		u32 mid = lo + (hi - lo) / 2;

		if (svmbatch_prefix_disjoint(spans, nr, mid))
			lo = mid;
		else
			hi = mid;
	}
	kvfree(spans);
	*error_index = hi;
	return -EINVAL;
}

/**
 * svmbatch_batch_pin() - validate, charge and pin the ranges of a REGISTER
 * @cmd: the REGISTER command, its header already checked
 * @error_index: output, the range to blame on failure; left alone when no
 *	single range is
 *
 * Return: a LIVE registration holding one reference, to be published or
 * aborted by the caller, or an ERR_PTR() with everything undone.
 */
static struct svmbatch_reg *
svmbatch_batch_pin(const struct svmbatch_register *cmd, u32 *error_index)
{
	struct svmbatch_reg *reg;
	u64 total_pages;
	int ret;

	reg = svmbatch_reg_alloc(cmd->nr_ranges);
	if (!reg)
		return ERR_PTR(-ENOMEM);

	if (cmd->flags & SVMBATCH_REGISTER_EVENTFD) {
		ret = svmbatch_stale_get_eventfd(reg, cmd->eventfd);
		if (ret)
			goto err_abort;
	}
	ret = svmbatch_copy_ranges(reg, cmd, &total_pages, error_index);
	if (ret)
		goto err_abort;
	ret = svmbatch_check_overlap(reg, error_index);
	if (ret)
		goto err_abort;
	/* Before pinning, so that no invalidation of the pin goes unseen. */
	ret = svmbatch_stale_watch(reg);
	if (ret)
		goto err_abort;
	ret = svmbatch_reg_pin(reg, total_pages, error_index);
	if (ret)
		goto err_abort;
	return reg;

err_abort:
	svmbatch_reg_abort(reg);
	return ERR_PTR(ret);
}

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
	struct svmbatch_reg *reg;

	reg = svmbatch_ctx_remove(ucmd->ctx, cmd->handle);
	if (!reg)
		return -ENOENT;
	svmbatch_reg_put(reg);
	return 0;
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
