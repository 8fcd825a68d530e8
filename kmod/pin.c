// SPDX-License-Identifier: GPL-2.0-only
/*
 * Pinning and RLIMIT_MEMLOCK accounting of a registration's pages.
 *
 * Pages are pinned with pin_user_pages_fast(FOLL_LONGTERM) through a scratch
 * array of at most 64 KiB and immediately folded into runs of physically
 * contiguous pages, so a THP- or hugetlb-backed GiB costs a few KiB of
 * metadata instead of one pointer per page.  Every step can fail part way;
 * svmbatch_reg_abort() then unpins whatever was pinned.
 *
 * svmbatch_reg_pin() is REGISTER's pin step, from the mapping check to a
 * pin known to be current: it checks the mappings (vma.c), charges the
 * batch once, pins, and asks stale.c whether an invalidation raced the
 * pin; if one did, it checks and pins again, a bounded number of times.
 *
 * Allocations sized by the caller stay below what kvmalloc() accepts
 * (INT_MAX bytes; more is a WARN): the run array is capped here, the range
 * tables by the max_ranges bound (limits.c).
 */
#include <linux/capability.h>
#include <linux/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>

#include "svmbatch_priv.h"

/* 64 KiB of page pointers per pin_user_pages_fast() call. */
#define SVMBATCH_PIN_CHUNK (SZ_64K / sizeof(struct page *))

/* State of one svmbatch_pin_ranges() call. */
struct svmbatch_pinner {
	struct svmbatch_reg *reg;
	struct page **pages;
	unsigned int pages_len;
	u64 total_pages;
	struct folio *last_folio;
	struct folio *checked_folio;
};

/* Most runs one registration can describe: kvmalloc() stops at INT_MAX. */
#define SVMBATCH_MAX_RUNS (INT_MAX / sizeof(struct svmbatch_run))

/* Pin attempts of one REGISTER when invalidations race the pin. */
#define SVMBATCH_PIN_ATTEMPTS 4

/**
 * struct svmbatch_held_pins - the pages of an earlier pin attempt
 * @runs: their runs, still pinned
 * @nr_runs: entries of @runs
 */
struct svmbatch_held_pins {
	struct svmbatch_run *runs;
	u32 nr_runs;
};

/**
 * svmbatch_account_charge() - charge pinned pages to an mm
 * @mm: the mm whose pinned_vm (VmPin) grows
 * @npages: pages to charge
 *
 * Like RDMA's ib_umem_get(): the charge is checked against RLIMIT_MEMLOCK
 * unless the caller has CAP_IPC_LOCK.  The check and the charge are one
 * compare-and-exchange (as io_uring's accounting does), so a request that
 * does not fit never shows in the counter: adding first and taking back on
 * overflow would make concurrent requests that do fit fail.
 *
 * Return: 0 or -ENOMEM.
 */
static int svmbatch_account_charge(struct mm_struct *mm, u64 npages)
{
	u64 limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	s64 cur, next;

	if (svmbatch_should_fail(-ENOMEM))
		return -ENOMEM;
	if (npages > S64_MAX)
		return -ENOMEM;
	cur = atomic64_read(&mm->pinned_vm);
	do {
		if (check_add_overflow(cur, (s64)npages, &next))
			return -ENOMEM;
		if ((u64)next > limit && !capable(CAP_IPC_LOCK))
			return -ENOMEM;
	} while (!atomic64_try_cmpxchg(&mm->pinned_vm, &cur, next));
	return 0;
}

/**
 * svmbatch_account_uncharge() - undo svmbatch_account_charge()
 * @mm: the mm charged
 * @npages: exactly the number of pages charged
 */
void svmbatch_account_uncharge(struct mm_struct *mm, u64 npages)
{
	atomic64_sub(npages, &mm->pinned_vm);
}

/* Grow the run array geometrically; never past one run per page. */
static int svmbatch_runs_grow(struct svmbatch_reg *reg, u64 total_pages)
{
	u64 cap = max_t(u64, 2ULL * reg->runs_cap, 64);
	struct svmbatch_run *runs;

	cap = min_t(u64, cap, total_pages);
	cap = min_t(u64, cap, SVMBATCH_MAX_RUNS);
	if (cap <= reg->runs_cap)
		return -ENOMEM;
	if (svmbatch_should_fail(-ENOMEM))
		return -ENOMEM;
	runs = kvmalloc_array(cap, sizeof(*runs), GFP_KERNEL_ACCOUNT);
	if (!runs)
		return -ENOMEM;
	if (reg->nr_runs)
		memcpy(runs, reg->runs, reg->nr_runs * sizeof(*runs));
	kvfree(reg->runs);
	reg->runs = runs;
	reg->runs_cap = cap;
	return 0;
}

/* Give back the slack of the run array once pinning is done. */
static void svmbatch_runs_trim(struct svmbatch_reg *reg)
{
	struct svmbatch_run *runs;

	/*
	 * Trimming is optional: on failure keep the larger array.  It is no
	 * injection point, since its failure does not fail the command.
	 */
	if (reg->runs_cap - reg->nr_runs <= reg->nr_runs / 8)
		return;
	runs = kvmalloc_array(reg->nr_runs, sizeof(*runs), GFP_KERNEL_ACCOUNT);
	if (!runs)
		return;
	memcpy(runs, reg->runs, reg->nr_runs * sizeof(*runs));
	kvfree(reg->runs);
	reg->runs = runs;
	reg->runs_cap = reg->nr_runs;
}

/*
 * Fold freshly pinned pages into runs.  A page that cannot be recorded, or
 * that a writable pin must not keep, is unpinned here with the rest of the
 * chunk, so the registration's runs always describe exactly the pages it
 * holds.
 */
static int svmbatch_runs_append(struct svmbatch_pinner *p, unsigned int n,
				u32 flags, bool pinned_for_write)
{
	struct svmbatch_reg *reg = p->reg;
	unsigned int i;
	int ret;

	for (i = 0; i < n; i++) {
		struct page *page = p->pages[i];
		struct svmbatch_run *last = NULL;
		struct folio *folio = page_folio(page);

		if (pinned_for_write && folio != p->checked_folio) {
			if (!svmbatch_folio_pin_allowed(folio)) {
				unpin_user_pages(p->pages + i, n - i);
				return -EOPNOTSUPP;
			}
			p->checked_folio = folio;
		}
		if (folio != p->last_folio) {
			reg->nr_folios++;
			p->last_folio = folio;
		}
		if (reg->nr_runs)
			last = &reg->runs[reg->nr_runs - 1];
		if (last && last->flags == flags &&
		    last->nr_pages < SVMBATCH_RUN_MAX_PAGES &&
		    nth_page(last->first, last->nr_pages) == page) {
			last->nr_pages++;
			reg->nr_pages++;
			continue;
		}
		if (reg->nr_runs == reg->runs_cap) {
			ret = svmbatch_runs_grow(reg, p->total_pages);
			if (ret) {
				unpin_user_pages(p->pages + i, n - i);
				return ret;
			}
		}
		reg->runs[reg->nr_runs++] = (struct svmbatch_run){
			.first = page,
			.nr_pages = 1,
			.flags = flags,
		};
		reg->nr_pages++;
	}
	return 0;
}

/*
 * Pin one range.  A short pin is retried from where it stopped; a call
 * that pins nothing fails the range.
 */
static int svmbatch_pin_range(struct svmbatch_pinner *p,
			      const struct svmbatch_range_rec *rec)
{
	unsigned long addr = rec->addr_flags & PAGE_MASK;
	u64 npages = rec->len >> PAGE_SHIFT;
	unsigned int gup_flags = FOLL_LONGTERM;
	u32 run_flags = 0;
	int ret;

	if (!(rec->addr_flags & SVMBATCH_RANGE_READ_ONLY)) {
		gup_flags |= FOLL_WRITE;
		run_flags |= SVMBATCH_RUN_WRITABLE;
	} else if (rec->addr_flags & SVMBATCH_REC_UNSHARE) {
		/* Breaks COW; the run stays read-only (see compat.h). */
		gup_flags |= FOLL_WRITE;
	}
	p->checked_folio = NULL;

	while (npages) {
		unsigned int chunk = min_t(u64, npages, p->pages_len);
		bool inject = svmbatch_should_fail(-EFAULT);
		int pinned = 0;

		if (fatal_signal_pending(current))
			return -EINTR;
		/* An injected failure pins half a chunk, then fails. */
		if (inject)
			chunk /= 2;
		if (chunk)
			pinned = pin_user_pages_fast(addr, chunk, gup_flags,
						     p->pages);
		if (pinned < 0)
			return pinned;
		ret = svmbatch_runs_append(p, pinned, run_flags,
					   gup_flags & FOLL_WRITE);
		if (ret)
			return ret;
		if (inject || !pinned)
			return -EFAULT;
		addr += (unsigned long)pinned << PAGE_SHIFT;
		npages -= pinned;
		cond_resched();
	}
	return 0;
}

/**
 * svmbatch_pin_ranges() - pin every range of a registration, once
 * @reg: registration whose ranges are filled in, validated and checked
 *	by svmbatch_check_vmas(), and that holds no pages
 * @total_pages: sum of the ranges' pages
 * @error_index: output, the range that failed
 *
 * On failure the pages pinned so far stay recorded in @reg; the caller
 * undoes everything with svmbatch_reg_abort().
 *
 * Return: 0 or a negative errno.
 */
static int svmbatch_pin_ranges(struct svmbatch_reg *reg, u64 total_pages,
			       u32 *error_index)
{
	struct svmbatch_pinner p = {
		.reg = reg,
		.total_pages = total_pages,
		.pages_len = min_t(u64, total_pages, SVMBATCH_PIN_CHUNK),
	};
	u32 i;
	int ret = 0;

	if (svmbatch_should_fail(-ENOMEM))
		return -ENOMEM;
	p.pages = kvmalloc_array(p.pages_len, sizeof(*p.pages), GFP_KERNEL);
	if (!p.pages)
		return -ENOMEM;

	for (i = 0; i < reg->nr_ranges; i++) {
		ret = svmbatch_pin_range(&p, &reg->ranges[i]);
		if (ret) {
			*error_index = i;
			break;
		}
	}
	kvfree(p.pages);
	if (!ret)
		svmbatch_runs_trim(reg);
	return ret;
}

static void svmbatch_runs_unpin(const struct svmbatch_run *runs, u32 nr_runs,
				bool may_dirty)
{
	u32 i;

	for (i = 0; i < nr_runs; i++) {
		const struct svmbatch_run *run = &runs[i];
		bool dirty = may_dirty && (run->flags & SVMBATCH_RUN_WRITABLE);

		unpin_user_page_range_dirty_lock(run->first, run->nr_pages,
						 dirty);
		cond_resched();
	}
}

/**
 * svmbatch_reg_unpin() - unpin every page a registration holds
 * @reg: the registration; its runs stay recorded, for the caller to free
 * @may_dirty: whether a device may have written the pages, so that the
 *	writable ones are dirtied
 */
void svmbatch_reg_unpin(struct svmbatch_reg *reg, bool may_dirty)
{
	svmbatch_runs_unpin(reg->runs, reg->nr_runs, may_dirty);
}

/**
 * svmbatch_reg_hold_pins() - set aside the pages of a pin attempt that raced
 * @reg: registration never handed out; left holding no page
 * @held: receives @reg's runs, which stay pinned
 *
 * The next attempt pins while these pages are still pinned.  That is what
 * lets it succeed beside fork(): a pinned anonymous page is exclusive to
 * the process, so fork() copies it for the child instead of write-protecting
 * it, and pinning it again breaks no copy-on-write (the break, a
 * page-replacing invalidation, is what made the attempt race).  Dropped
 * first, the pages would be shared with the next child again.
 */
static void svmbatch_reg_hold_pins(struct svmbatch_reg *reg,
				   struct svmbatch_held_pins *held)
{
	held->runs = reg->runs;
	held->nr_runs = reg->nr_runs;
	reg->runs = NULL;
	reg->nr_runs = 0;
	reg->runs_cap = 0;
	reg->nr_pages = 0;
	reg->nr_folios = 0;
}

/**
 * svmbatch_held_pins_release() - unpin and free pages set aside
 * @held: from svmbatch_reg_hold_pins(), or zeroed; left empty
 *
 * No device saw these pages, so they are not dirtied.
 */
static void svmbatch_held_pins_release(struct svmbatch_held_pins *held)
{
	svmbatch_runs_unpin(held->runs, held->nr_runs, false);
	kvfree(held->runs);
	held->runs = NULL;
	held->nr_runs = 0;
}

/**
 * svmbatch_reg_pin() - pin every range of a registration, verified current
 * @reg: registration whose ranges are copied in, validated and watched
 *	(svmbatch_stale_watch()), and that holds no pages
 * @total_pages: sum of the ranges' pages
 * @error_index: output, the range to blame on failure; left alone when no
 *	single range is
 *
 * Checks the mappings, charges once, pins, and verifies that no
 * invalidation raced the pin (stale.c).  When one did, the pages may no
 * longer be the ones mapped, so it checks and pins again, a bounded number
 * of times, holding the earlier attempt's pages until the new attempt has
 * its own (svmbatch_reg_hold_pins() says why).
 *
 * Return: 0 with every page of @reg pinned and @reg LIVE, or a negative
 * errno (-EAGAIN when every attempt raced) with the pages pinned and the
 * charge taken so far left in @reg for the caller's svmbatch_reg_abort().
 */
int svmbatch_reg_pin(struct svmbatch_reg *reg, u64 total_pages,
		     u32 *error_index)
{
	struct svmbatch_held_pins held = {};
	unsigned int attempt;
	int ret;

	for (attempt = 1;; attempt++) {
		unsigned long seq = svmbatch_stale_begin(reg);

		ret = svmbatch_check_vmas(reg, error_index);
		if (!ret && !reg->charged_pages) {
			ret = svmbatch_account_charge(reg->mm, total_pages);
			if (!ret)
				reg->charged_pages = total_pages;
		}
		if (!ret)
			ret = svmbatch_pin_ranges(reg, total_pages,
						  error_index);
		svmbatch_held_pins_release(&held);
		if (ret)
			return ret;
		if (svmbatch_stale_go_live(reg, seq))
			return 0;

		if (attempt == SVMBATCH_PIN_ATTEMPTS)
			return -EAGAIN;
		atomic64_inc(&svmbatch_stats.pin_retries);
		svmbatch_reg_hold_pins(reg, &held);
		if (fatal_signal_pending(current)) {
			svmbatch_held_pins_release(&held);
			return -EINTR;
		}
		cond_resched();
	}
}
