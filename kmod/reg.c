// SPDX-License-Identifier: GPL-2.0-only
/*
 * The registration object: its lifetime, from allocation to the release of
 * its last reference, and REGISTER's transaction, which turns a batch of
 * caller ranges into a registration whose every page is pinned and
 * charged, or into an errno with nothing pinned, charged or allocated.
 *
 * Steps, in order: copy the ranges in and check each on its own, refuse
 * overlaps, start watching the span for invalidations, then check the
 * mappings, charge RLIMIT_MEMLOCK once for the whole batch, pin, and
 * verify that no invalidation raced the pin, pinning again if one did
 * (these last four are pin.c's svmbatch_reg_pin()).
 * Any failure undoes all earlier steps with svmbatch_reg_abort().  Handing
 * the result to the caller is the command's job (commands.c).
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
void svmbatch_reg_abort(struct svmbatch_reg *reg)
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
u64 svmbatch_reg_meta_bytes(const struct svmbatch_reg *reg)
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
struct svmbatch_reg *svmbatch_batch_pin(const struct svmbatch_register *cmd,
					u32 *error_index)
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
