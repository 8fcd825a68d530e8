// SPDX-License-Identifier: GPL-2.0-only
/*
 * Test hook, built only with CONFIG_SVMBATCH_FAULT_INJECTION: fail the Nth
 * injection point reached by one process, so a test can walk through every
 * error path of a command (like iommufd's fail_nth test).
 *
 * Writing N > 0 to debugfs "fail_nth" arms it for the writer's thread
 * group; writing 0 disarms.  Reading gives the remaining countdown, which
 * is 0 once the failure has been injected.  Debugfs "fail_nth_errno" then
 * gives the errno that the point fired documents for its command (0 from
 * arming until a point fires; disarming keeps it), so a sweep can check
 * each point's errno.
 *
 * Writing K to debugfs "fake_invalidations" makes the next K pin attempts
 * of the writer's thread group end as if an invalidation had raced them,
 * so a test can drive REGISTER's re-pinning, and its EAGAIN once the
 * attempts run out, without a lucky race.  Reading gives what is left.
 */
#include <linux/debugfs.h>
#include <linux/pid.h>
#include <linux/sched.h>
#include <linux/spinlock.h>

#include "svmbatch_priv.h"

/* A countdown armed by one thread group through a debugfs file. */
struct svmbatch_knob {
	pid_t tgid;
	u64 count;
};

static DEFINE_SPINLOCK(svmbatch_fault_lock); /* protects both knobs */
static struct svmbatch_knob svmbatch_fail_nth;
static struct svmbatch_knob svmbatch_fake_inval;
/* The errno documented by the last point fail_nth fired (positive). */
static u32 svmbatch_fail_nth_errno;

/* Count @k down by one for the calling process; its value before, or 0. */
static u64 svmbatch_knob_take(struct svmbatch_knob *k)
{
	u64 before = 0;

	if (!READ_ONCE(k->count))
		return 0;
	spin_lock(&svmbatch_fault_lock);
	if (k->count && k->tgid == task_tgid_nr(current))
		before = k->count--;
	spin_unlock(&svmbatch_fault_lock);
	return before;
}

/**
 * svmbatch_should_fail() - an injection point
 * @err: the negative errno the command fails with when this point fires,
 *	recorded for debugfs "fail_nth_errno"
 *
 * Return: true when the caller must fail as if its step had failed.
 */
bool svmbatch_should_fail(int err)
{
	bool fail = svmbatch_knob_take(&svmbatch_fail_nth) == 1;

	if (fail) {
		WRITE_ONCE(svmbatch_fail_nth_errno, -err);
		atomic64_inc(&svmbatch_stats.injected_failures);
	}
	return fail;
}

/**
 * svmbatch_fake_invalidation() - a simulated invalidation racing a pin
 *
 * Return: true when the caller must act as if its pinned pages had been
 * invalidated while it pinned them.
 */
bool svmbatch_fake_invalidation(void)
{
	return svmbatch_knob_take(&svmbatch_fake_inval) != 0;
}

static int svmbatch_knob_get(void *data, u64 *val)
{
	struct svmbatch_knob *k = data;

	spin_lock(&svmbatch_fault_lock);
	*val = k->count;
	spin_unlock(&svmbatch_fault_lock);
	return 0;
}

/* Arms @data for the writer's thread group; 0 disarms. */
static int svmbatch_knob_set(void *data, u64 val)
{
	struct svmbatch_knob *k = data;

	spin_lock(&svmbatch_fault_lock);
	k->tgid = task_tgid_nr(current);
	WRITE_ONCE(k->count, val);
	/* Arming forgets the last errno; disarming keeps it to be read. */
	if (k == &svmbatch_fail_nth && val)
		WRITE_ONCE(svmbatch_fail_nth_errno, 0);
	spin_unlock(&svmbatch_fault_lock);
	return 0;
}

DEFINE_DEBUGFS_ATTRIBUTE(svmbatch_knob_fops, svmbatch_knob_get,
			 svmbatch_knob_set, "%llu\n");

static int svmbatch_fail_nth_errno_get(void *data, u64 *val)
{
	*val = READ_ONCE(svmbatch_fail_nth_errno);
	return 0;
}

DEFINE_DEBUGFS_ATTRIBUTE(svmbatch_fail_nth_errno_fops,
			 svmbatch_fail_nth_errno_get, NULL, "%llu\n");

/**
 * svmbatch_fault_debugfs_init() - create debugfs "fail_nth",
 *	"fail_nth_errno" and "fake_invalidations"
 * @dir: the svmbatch debugfs directory
 */
void svmbatch_fault_debugfs_init(struct dentry *dir)
{
	debugfs_create_file_unsafe("fail_nth", 0600, dir, &svmbatch_fail_nth,
				   &svmbatch_knob_fops);
	debugfs_create_file_unsafe("fail_nth_errno", 0400, dir, NULL,
				   &svmbatch_fail_nth_errno_fops);
	debugfs_create_file_unsafe("fake_invalidations", 0600, dir,
				   &svmbatch_fake_inval, &svmbatch_knob_fops);
}
