// SPDX-License-Identifier: GPL-2.0-only
/*
 * Stale-VA detection.  Pinned pages stay valid whatever the process does
 * to its address space, but after munmap, MADV_DONTNEED, mremap or a new
 * mapping over a registered range, the process no longer sees them at
 * that address.  One mmu interval notifier per registration covers the
 * span from its lowest to its highest address.  Invalidations that can
 * replace pages (UNMAP, CLEAR, MIGRATE) inside a registered range matter;
 * those that only change protections (fork's write-protect, mprotect, NUMA
 * hinting, soft-dirty) leave the pinned pages mapped and are ignored.
 *
 * The notifier is inserted before pinning, in the kernel's usual pattern
 * (mmu_interval_read_begin() before, mmu_interval_read_retry() after):
 * an invalidation that lands while a REGISTER pins makes it pin again
 * (pin.c), since the pages it got may already be gone from the
 * address space.  The commonest such invalidation is the pin's own
 * copy-on-write break of a page that fork() had shared with a child; the
 * next attempt holds the pages of the one before, which fork() no longer
 * shares, so it breaks nothing and goes through.  Once the pin is
 * verified the registration is LIVE, and an invalidation marks it STALE
 * and signals its eventfd once.  The check of the sequence and the switch
 * to LIVE happen under @notifier_lock, which the notifier also takes: an
 * invalidation either makes the check fail or finds the registration
 * LIVE; none falls between the two.
 */
#include <linux/eventfd.h>
#include <linux/mm.h>
#include <linux/mmu_notifier.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/sort.h>

#include "compat.h"
#include "svmbatch_priv.h"

static unsigned long svmbatch_range_start(const struct svmbatch_reg *reg, u32 i)
{
	return reg->ranges[reg->by_addr[i]].addr_flags & PAGE_MASK;
}

/* Does [start, end) meet a registered range?  The ranges are disjoint. */
static bool svmbatch_reg_overlaps(const struct svmbatch_reg *reg,
				  unsigned long start, unsigned long end)
{
	u32 lo = 0, hi = reg->nr_ranges;
	u32 last;
	u64 last_end;

	/* The last range starting before @end ends last among those. */
	while (lo < hi) {
		u32 mid = lo + (hi - lo) / 2;

		if (svmbatch_range_start(reg, mid) < end)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return false;
	last = reg->by_addr[lo - 1];
	last_end = (reg->ranges[last].addr_flags & PAGE_MASK) +
		   reg->ranges[last].len;
	return last_end > start;
}

/* Events after which the page mapped at an address may be another one. */
static bool svmbatch_event_replaces_pages(enum mmu_notifier_event event)
{
	return event == MMU_NOTIFY_UNMAP || event == MMU_NOTIFY_CLEAR ||
	       event == MMU_NOTIFY_MIGRATE;
}

static bool svmbatch_invalidate(struct mmu_interval_notifier *mni,
				const struct mmu_notifier_range *range,
				unsigned long cur_seq)
{
	struct svmbatch_reg *reg =
		container_of(mni, struct svmbatch_reg, notifier);
	bool newly_stale = false;

	if (!svmbatch_event_replaces_pages(range->event))
		return true;
	if (!svmbatch_reg_overlaps(reg, range->start, range->end))
		return true;
	spin_lock(&reg->notifier_lock);
	mmu_interval_set_seq(mni, cur_seq);
	if (test_bit(SVMBATCH_REG_LIVE, &reg->flags))
		newly_stale =
			!test_and_set_bit(SVMBATCH_REG_STALE, &reg->flags);
	spin_unlock(&reg->notifier_lock);
	if (newly_stale) {
		atomic64_inc(&svmbatch_stats.stale_total);
		if (reg->eventfd)
			svmbatch_eventfd_signal(reg->eventfd);
	}
	return true;
}

static const struct mmu_interval_notifier_ops svmbatch_notifier_ops = {
	.invalidate = svmbatch_invalidate,
};

/**
 * svmbatch_stale_get_eventfd() - take the eventfd REGISTER names
 * @reg: registration being built
 * @fd: eventfd file descriptor
 *
 * Return: 0, or -EBADF / -EINVAL when @fd is not an eventfd.
 */
int svmbatch_stale_get_eventfd(struct svmbatch_reg *reg, int fd)
{
	struct eventfd_ctx *ctx = eventfd_ctx_fdget(fd);

	if (IS_ERR(ctx))
		return PTR_ERR(ctx);
	reg->eventfd = ctx;
	return 0;
}

static int svmbatch_cmp_start(const void *a, const void *b, const void *priv)
{
	const struct svmbatch_reg *reg = priv;
	u64 x = reg->ranges[*(const u32 *)a].addr_flags & PAGE_MASK;
	u64 y = reg->ranges[*(const u32 *)b].addr_flags & PAGE_MASK;

	return x < y ? -1 : x > y;
}

/**
 * svmbatch_stale_watch() - start watching a registration's VAs
 * @reg: registration with validated ranges, not yet pinned
 *
 * Return: 0 or -ENOMEM.
 */
int svmbatch_stale_watch(struct svmbatch_reg *reg)
{
	unsigned long start, end;
	u32 i, last;
	int ret;

	if (svmbatch_should_fail(-ENOMEM))
		return -ENOMEM;
	reg->by_addr = kvmalloc_array(reg->nr_ranges, sizeof(*reg->by_addr),
				      GFP_KERNEL_ACCOUNT);
	if (!reg->by_addr)
		return -ENOMEM;
	for (i = 0; i < reg->nr_ranges; i++)
		reg->by_addr[i] = i;
	sort_r(reg->by_addr, reg->nr_ranges, sizeof(*reg->by_addr),
	       svmbatch_cmp_start, NULL, reg);

	last = reg->by_addr[reg->nr_ranges - 1];
	start = svmbatch_range_start(reg, 0);
	end = (reg->ranges[last].addr_flags & PAGE_MASK) +
	      reg->ranges[last].len;
	if (svmbatch_should_fail(-ENOMEM))
		return -ENOMEM;
	ret = mmu_interval_notifier_insert(&reg->notifier, reg->mm, start,
					   end - start, &svmbatch_notifier_ops);
	/*
	 * The first notifier of an mm takes mm_take_all_locks(), which gives
	 * up with -EINTR on any pending signal, even one that is ignored once
	 * delivered (a SIGCHLD that a thread in system() blocks).  Nothing is
	 * done yet: have the call restarted once the signal is handled.
	 */
	if (ret == -EINTR && !fatal_signal_pending(current))
		return -ERESTARTNOINTR;
	if (ret)
		return ret;
	set_bit(SVMBATCH_REG_WATCHED, &reg->flags);
	return 0;
}

/**
 * svmbatch_stale_begin() - start a pin attempt
 * @reg: watched registration
 *
 * Waits for an invalidation of the span that is in progress.
 *
 * Return: the sequence to hand to svmbatch_stale_go_live().
 */
unsigned long svmbatch_stale_begin(struct svmbatch_reg *reg)
{
	return mmu_interval_read_begin(&reg->notifier);
}

/**
 * svmbatch_stale_go_live() - end a pin attempt
 * @reg: watched registration, every range pinned
 * @seq: from svmbatch_stale_begin() before the attempt
 *
 * Return: true when no invalidation that can replace pages touched a
 * registered range since @seq: the pinned pages are the mapped ones and
 * from now on every such invalidation marks @reg STALE.  False when the
 * caller must unpin and pin again.
 */
bool svmbatch_stale_go_live(struct svmbatch_reg *reg, unsigned long seq)
{
	/* Taken by every attempt, raced or not, as the knob promises. */
	bool fake = svmbatch_fake_invalidation();
	bool raced;

	spin_lock(&reg->notifier_lock);
	raced = mmu_interval_read_retry(&reg->notifier, seq) || fake;
	if (!raced)
		set_bit(SVMBATCH_REG_LIVE, &reg->flags);
	spin_unlock(&reg->notifier_lock);
	return !raced;
}

/**
 * svmbatch_stale_unwatch() - stop watching and drop the eventfd
 * @reg: registration being freed
 *
 * Waits for an invalidation in progress; process context only.
 */
void svmbatch_stale_unwatch(struct svmbatch_reg *reg)
{
	if (test_bit(SVMBATCH_REG_WATCHED, &reg->flags))
		mmu_interval_notifier_remove(&reg->notifier);
	if (reg->eventfd)
		eventfd_ctx_put(reg->eventfd);
	kvfree(reg->by_addr);
}
