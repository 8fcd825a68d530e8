// SPDX-License-Identifier: GPL-2.0-only
/*
 * Test hook, built only with CONFIG_SVMBATCH_FAULT_INJECTION: fail the Nth
 * injection point reached by one process, so a test can walk through every
 * error path of a command (like iommufd's fail_nth test).
 *
 * Writing N > 0 to debugfs "fail_nth" arms it for the writer's thread
 * group; writing 0 disarms.  Reading gives the remaining countdown, which
 * is 0 once the failure has been injected.
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

static DEFINE_SPINLOCK(svmbatch_fault_lock);
static pid_t svmbatch_fault_tgid;
static u64 svmbatch_fault_countdown;
static pid_t svmbatch_fake_inval_tgid;
static u64 svmbatch_fake_inval_left;

/**
 * svmbatch_should_fail() - an injection point
 *
 * Return: true when the caller must fail as if its step had failed.
 */
bool svmbatch_should_fail(void)
{
	bool fail = false;

	if (!READ_ONCE(svmbatch_fault_countdown))
		return false;
	spin_lock(&svmbatch_fault_lock);
	if (svmbatch_fault_countdown &&
	    svmbatch_fault_tgid == task_tgid_nr(current)) {
		fail = --svmbatch_fault_countdown == 0;
		if (fail)
			atomic64_inc(&svmbatch_stats.injected_failures);
	}
	spin_unlock(&svmbatch_fault_lock);
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
	bool fake = false;

	if (!READ_ONCE(svmbatch_fake_inval_left))
		return false;
	spin_lock(&svmbatch_fault_lock);
	if (svmbatch_fake_inval_left &&
	    svmbatch_fake_inval_tgid == task_tgid_nr(current)) {
		svmbatch_fake_inval_left--;
		fake = true;
	}
	spin_unlock(&svmbatch_fault_lock);
	return fake;
}

static int svmbatch_fail_nth_get(void *data, u64 *val)
{
	spin_lock(&svmbatch_fault_lock);
	*val = svmbatch_fault_countdown;
	spin_unlock(&svmbatch_fault_lock);
	return 0;
}

static int svmbatch_fail_nth_set(void *data, u64 val)
{
	spin_lock(&svmbatch_fault_lock);
	svmbatch_fault_tgid = task_tgid_nr(current);
	WRITE_ONCE(svmbatch_fault_countdown, val);
	spin_unlock(&svmbatch_fault_lock);
	return 0;
}

DEFINE_DEBUGFS_ATTRIBUTE(svmbatch_fail_nth_fops, svmbatch_fail_nth_get,
			 svmbatch_fail_nth_set, "%llu\n");

static int svmbatch_fake_inval_get(void *data, u64 *val)
{
	spin_lock(&svmbatch_fault_lock);
	*val = svmbatch_fake_inval_left;
	spin_unlock(&svmbatch_fault_lock);
	return 0;
}

static int svmbatch_fake_inval_set(void *data, u64 val)
{
	spin_lock(&svmbatch_fault_lock);
	svmbatch_fake_inval_tgid = task_tgid_nr(current);
	WRITE_ONCE(svmbatch_fake_inval_left, val);
	spin_unlock(&svmbatch_fault_lock);
	return 0;
}

DEFINE_DEBUGFS_ATTRIBUTE(svmbatch_fake_inval_fops, svmbatch_fake_inval_get,
			 svmbatch_fake_inval_set, "%llu\n");

/**
 * svmbatch_fault_debugfs_init() - create debugfs "fail_nth" and
 *	"fake_invalidations"
 * @dir: the svmbatch debugfs directory
 */
void svmbatch_fault_debugfs_init(struct dentry *dir)
{
	debugfs_create_file_unsafe("fail_nth", 0600, dir, NULL,
				   &svmbatch_fail_nth_fops);
	debugfs_create_file_unsafe("fake_invalidations", 0600, dir, NULL,
				   &svmbatch_fake_inval_fops);
}
