// SPDX-License-Identifier: GPL-2.0-only
/*
 * Counters: global ones in debugfs "stats", one line per open file in
 * debugfs "clients", and the calling file's own in /proc/PID/fdinfo/FD.
 */
#include <linux/debugfs.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/seq_file.h>

#include "svmbatch_priv.h"

struct svmbatch_stats svmbatch_stats;

static struct dentry *svmbatch_debugfs_dir;
static LIST_HEAD(svmbatch_clients);
static DEFINE_MUTEX(svmbatch_clients_lock);

/**
 * svmbatch_clients_add() - list a new context in debugfs "clients"
 * @ctx: the context
 */
void svmbatch_clients_add(struct svmbatch_ctx *ctx)
{
	mutex_lock(&svmbatch_clients_lock);
	list_add_tail(&ctx->node, &svmbatch_clients);
	mutex_unlock(&svmbatch_clients_lock);
}

/**
 * svmbatch_clients_del() - remove a context from debugfs "clients"
 * @ctx: the context
 */
void svmbatch_clients_del(struct svmbatch_ctx *ctx)
{
	mutex_lock(&svmbatch_clients_lock);
	list_del(&ctx->node);
	mutex_unlock(&svmbatch_clients_lock);
}

/**
 * svmbatch_show_fdinfo() - the per-file counters in /proc/PID/fdinfo/FD
 * @m: the fdinfo seq_file
 * @ctx: the file's context
 */
void svmbatch_show_fdinfo(struct seq_file *m, struct svmbatch_ctx *ctx)
{
	mutex_lock(&ctx->lock);
	seq_printf(m, "svmbatch-id:\t%llu\n", ctx->id);
	seq_printf(m, "svmbatch-registrations:\t%u\n", ctx->nr_regs);
	seq_printf(m, "svmbatch-pinned-pages:\t%llu\n", ctx->pinned_pages);
	seq_printf(m, "svmbatch-failed:\t%llu\n", ctx->failed);
	mutex_unlock(&ctx->lock);
}

static int svmbatch_stats_show(struct seq_file *m, void *unused)
{
	const struct svmbatch_stats *s = &svmbatch_stats;

	seq_printf(m, "contexts %lld\n", atomic64_read(&s->contexts));
	seq_printf(m, "registrations %lld\n", atomic64_read(&s->registrations));
	seq_printf(m, "pinned_pages %lld\n", atomic64_read(&s->pinned_pages));
	seq_printf(m, "meta_bytes %lld\n", atomic64_read(&s->meta_bytes));
	seq_printf(m, "registered_total %lld\n",
		   atomic64_read(&s->registered_total));
	seq_printf(m, "failed_registrations %lld\n",
		   atomic64_read(&s->failed_registrations));
	seq_printf(m, "stale_total %lld\n", atomic64_read(&s->stale_total));
	seq_printf(m, "pin_retries %lld\n", atomic64_read(&s->pin_retries));
	seq_printf(m, "exports %lld\n", atomic64_read(&s->exports));
	seq_printf(m, "dmabuf_segments %lld\n",
		   atomic64_read(&s->dmabuf_segments));
	seq_printf(m, "dmabuf_attachments %lld\n",
		   atomic64_read(&s->dmabuf_attachments));
	if (IS_ENABLED(CONFIG_SVMBATCH_FAULT_INJECTION))
		seq_printf(m, "injected_failures %lld\n",
			   atomic64_read(&s->injected_failures));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(svmbatch_stats);

static int svmbatch_clients_show(struct seq_file *m, void *unused)
{
	struct svmbatch_ctx *ctx;

	seq_puts(m, "id tgid registrations pinned_pages failed\n");
	mutex_lock(&svmbatch_clients_lock);
	list_for_each_entry(ctx, &svmbatch_clients, node) {
		mutex_lock(&ctx->lock);
		seq_printf(m, "%llu %d %u %llu %llu\n", ctx->id, ctx->tgid,
			   ctx->nr_regs, ctx->pinned_pages, ctx->failed);
		mutex_unlock(&ctx->lock);
	}
	mutex_unlock(&svmbatch_clients_lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(svmbatch_clients);

/**
 * svmbatch_debugfs_init() - create /sys/kernel/debug/svmbatch
 *
 * debugfs is optional: failures are ignored, as debugfs itself expects.
 */
void svmbatch_debugfs_init(void)
{
	svmbatch_debugfs_dir = debugfs_create_dir("svmbatch", NULL);
	debugfs_create_file("stats", 0444, svmbatch_debugfs_dir, NULL,
			    &svmbatch_stats_fops);
	debugfs_create_file("clients", 0444, svmbatch_debugfs_dir, NULL,
			    &svmbatch_clients_fops);
	svmbatch_fault_debugfs_init(svmbatch_debugfs_dir);
}

/**
 * svmbatch_debugfs_exit() - remove /sys/kernel/debug/svmbatch
 */
void svmbatch_debugfs_exit(void)
{
	debugfs_remove(svmbatch_debugfs_dir);
}
