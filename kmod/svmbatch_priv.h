/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * svmbatch internals shared by the files of the module.
 */
#ifndef SVMBATCH_PRIV_H
#define SVMBATCH_PRIV_H

#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mmu_notifier.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/xarray.h>
#include <linux/svmbatch.h>

struct mm_struct;
struct page;
struct seq_file;
struct dentry;
struct eventfd_ctx;
struct folio;

/**
 * struct svmbatch_ctx - state of one open file of /dev/svmbatch
 * @mm: the opener's mm; every command must come from it (mmgrab'd)
 * @lock: protects @regs and the per-fd counters below
 * @regs: handle -> struct svmbatch_reg; reserved (NULL) while a REGISTER
 *	is copying its result to user space
 * @next_handle: where the cyclic handle allocation goes on
 * @nr_regs: live plus reserved handles, checked against max_registrations
 * @pinned_pages: pages held by the live handles of this file
 * @failed: REGISTER calls of this file that failed
 * @id: unique id shown in fdinfo and the debugfs client list
 * @tgid: opener's thread group, for the debugfs client list
 * @node: entry in the global client list
 */
struct svmbatch_ctx {
	struct mm_struct *mm;
	struct mutex lock; /* protects regs and the per-fd counters */
	struct xarray regs;
	u32 next_handle;
	u32 nr_regs;
	u64 pinned_pages;
	u64 failed;
	u64 id;
	pid_t tgid;
	struct list_head node;
};

/* Run flags */
#define SVMBATCH_RUN_WRITABLE BIT(0)

/* A run never describes more pages than fit its counter. */
#define SVMBATCH_RUN_MAX_PAGES U32_MAX

/**
 * struct svmbatch_run - physically contiguous pinned pages
 * @first: first pinned page; the others follow as nth_page(@first, i)
 * @nr_pages: number of pages in the run
 * @flags: SVMBATCH_RUN_* (writable runs are dirtied when unpinned)
 */
struct svmbatch_run {
	struct page *first;
	u32 nr_pages;
	u32 flags;
};

/*
 * A registered range as the caller gave it.  The address is page aligned,
 * so its low bits carry the SVMBATCH_RANGE_* flags.
 */
struct svmbatch_range_rec {
	u64 addr_flags;
	u64 len;
};

#define SVMBATCH_REC_FLAGS_MASK ((u64)SVMBATCH_RANGE_READ_ONLY)
/* Internal: pin this read-only range with FOLL_WRITE to break COW (vma.c). */
#define SVMBATCH_REC_UNSHARE	BIT_ULL(1)

/**
 * struct svmbatch_reg - one registration: a set of pinned ranges
 * @ref: held by the handle table entry (later also by exported dma-bufs)
 * @mm: mm charged for the pinned pages (mmgrab'd)
 * @nr_ranges: number of entries in @ranges
 * @ranges: the caller's ranges, in the caller's order
 * @runs: pinned memory, in the order of @ranges
 * @nr_runs: used entries of @runs
 * @runs_cap: allocated entries of @runs
 * @nr_pages: pinned pages (sum of the runs)
 * @nr_folios: folio boundaries crossed while pinning, i.e. the number of
 *	folios when no folio is shared by two ranges
 * @charged_pages: pages charged to @mm->pinned_vm, uncharged on release
 * @flags: SVMBATCH_REG_* bits
 * @notifier: watches the span of @ranges for VA changes (stale.c)
 * @notifier_lock: orders the notifier's sequence updates against the
 *	check that ends pinning (stale.c)
 * @by_addr: indices of @ranges sorted by address, for the notifier
 * @eventfd: signalled once when the registration goes stale, or NULL
 */
struct svmbatch_reg {
	struct kref ref;
	struct mm_struct *mm;
	u32 nr_ranges;
	struct svmbatch_range_rec *ranges;
	struct svmbatch_run *runs;
	u32 nr_runs;
	u32 runs_cap;
	u64 nr_pages;
	u64 nr_folios;
	u64 charged_pages;
	unsigned long flags;
	struct mmu_interval_notifier notifier;
	spinlock_t notifier_lock; /* see stale.c */
	u32 *by_addr;
	struct eventfd_ctx *eventfd;
};

/* Registration flags (bit numbers) */
#define SVMBATCH_REG_STALE   0 /* a registered VA changed */
#define SVMBATCH_REG_WATCHED 1 /* @notifier is inserted */
#define SVMBATCH_REG_LIVE    2 /* pinned pages verified current */

/*
 * An ioctl in flight: the command struct copied in, ready to copy out.
 * Each command's handler, svmbatch_cmd_<command>(), lives in the file of
 * the object it works on and is declared with that file's functions below.
 * The names keep the handlers apart from the uapi structs (struct
 * svmbatch_<command>) and the library's C API (svmbatch_<object>_<verb>()).
 */
struct svmbatch_ucmd {
	struct svmbatch_ctx *ctx;
	void __user *ubuffer;
	u32 user_size;
	void *cmd;
	size_t cmd_size;
};

/* limits.c: limits, set by module parameters and reported by GET_INFO */
struct svmbatch_limits {
	u32 max_ranges;
	u32 max_registrations;
	u64 max_range_bytes;
};

extern struct svmbatch_limits svmbatch_limits;

/* ucmd.c: the command in flight */
int svmbatch_ucmd_respond(struct svmbatch_ucmd *ucmd);

/* context.c: the per-file context and its handle table; GET_INFO */
struct svmbatch_ctx *svmbatch_ctx_create(void);
void svmbatch_ctx_destroy(struct svmbatch_ctx *ctx);
int svmbatch_ctx_reserve(struct svmbatch_ctx *ctx, u32 *handle);
void svmbatch_ctx_publish(struct svmbatch_ctx *ctx, u32 handle,
			  struct svmbatch_reg *reg);
void svmbatch_ctx_cancel(struct svmbatch_ctx *ctx, u32 handle);
struct svmbatch_reg *svmbatch_ctx_get(struct svmbatch_ctx *ctx, u32 handle);
struct svmbatch_reg *svmbatch_ctx_remove(struct svmbatch_ctx *ctx, u32 handle);
struct svmbatch_reg *svmbatch_ctx_remove_first(struct svmbatch_ctx *ctx);
void svmbatch_ctx_note_failure(struct svmbatch_ctx *ctx);
int svmbatch_cmd_get_info(struct svmbatch_ucmd *ucmd);

/* reg.c: the registration object; REGISTER, UNREGISTER, QUERY */
void svmbatch_reg_put(struct svmbatch_reg *reg);
void svmbatch_reg_release_all(struct svmbatch_ctx *ctx);
int svmbatch_cmd_register(struct svmbatch_ucmd *ucmd);
int svmbatch_cmd_unregister(struct svmbatch_ucmd *ucmd);
int svmbatch_cmd_query(struct svmbatch_ucmd *ucmd);

/* pin.c: pinning and accounting */
int svmbatch_reg_pin(struct svmbatch_reg *reg, u64 total_pages,
		     u32 *error_index);
void svmbatch_reg_unpin(struct svmbatch_reg *reg, bool may_dirty);
void svmbatch_account_uncharge(struct mm_struct *mm, u64 npages);

/* vma.c: which memory may be pinned */
int svmbatch_check_vmas(struct svmbatch_reg *reg, u32 *error_index);
bool svmbatch_folio_pin_allowed(struct folio *folio);

/* stale.c: stale-VA detection */
int svmbatch_stale_get_eventfd(struct svmbatch_reg *reg, int fd);
int svmbatch_stale_watch(struct svmbatch_reg *reg);
unsigned long svmbatch_stale_begin(struct svmbatch_reg *reg);
bool svmbatch_stale_go_live(struct svmbatch_reg *reg, unsigned long seq);
void svmbatch_stale_unwatch(struct svmbatch_reg *reg);

/* dmabuf.c: the dma-buf export; EXPORT_DMABUF */
int svmbatch_cmd_export_dmabuf(struct svmbatch_ucmd *ucmd);

/* stats.c: counters in debugfs and fdinfo */
struct svmbatch_stats {
	atomic64_t contexts;
	atomic64_t registrations;
	atomic64_t pinned_pages;
	atomic64_t meta_bytes;
	atomic64_t registered_total;
	atomic64_t failed_registrations;
	atomic64_t injected_failures;
	atomic64_t stale_total;
	atomic64_t pin_retries;
	atomic64_t exports;
	atomic64_t dmabuf_segments;
	atomic64_t dmabuf_attachments;
};

extern struct svmbatch_stats svmbatch_stats;

void svmbatch_debugfs_init(void);
void svmbatch_debugfs_exit(void);
void svmbatch_clients_add(struct svmbatch_ctx *ctx);
void svmbatch_clients_del(struct svmbatch_ctx *ctx);
void svmbatch_show_fdinfo(struct seq_file *m, struct svmbatch_ctx *ctx);

/* fault_inject.c: fail the Nth injection point of the armed process */
#ifdef CONFIG_SVMBATCH_FAULT_INJECTION
bool svmbatch_should_fail(int err);
bool svmbatch_fake_invalidation(void);
void svmbatch_fault_debugfs_init(struct dentry *dir);
#else
static inline bool svmbatch_should_fail(int err)
{
	return false;
}

static inline bool svmbatch_fake_invalidation(void)
{
	return false;
}

static inline void svmbatch_fault_debugfs_init(struct dentry *dir)
{
}
#endif

#endif /* SVMBATCH_PRIV_H */
