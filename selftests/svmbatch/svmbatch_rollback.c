// SPDX-License-Identifier: GPL-2.0
/*
 * Accounting and rollback: the global and per-fd counters follow each
 * registration exactly, RLIMIT_MEMLOCK is enforced against mm->pinned_vm
 * (CAP_IPC_LOCK bypasses it), and a REGISTER that fails at any stage,
 * including half way through pinning, leaves nothing behind.
 */
#include "svmbatch_utils.h"

#define NPAGES 256

FIXTURE(rollback) {
	int fd;
	char *buf;
};

FIXTURE_SETUP(rollback)
{
	svmbatch_fixture_setup(NPAGES);
}

FIXTURE_TEARDOWN(rollback)
{
	svmbatch_fixture_release(self->fd, self->buf, NPAGES);
}

static long long stat_delta(const struct svmbatch_snapshot *a,
			    const struct svmbatch_snapshot *b,
			    const char *name)
{
	return (long long)snap_stat(b, name)->val -
	       (long long)snap_stat(a, name)->val;
}

/* ------------------------------------------------------------ counters */

TEST_F(rollback, counters_follow_registration)
{
	struct svmbatch_range r[3] = {
		mkrange(self->buf, 3 * PAGE_SZ, 0),
		mkrange(self->buf + 10 * PAGE_SZ, PAGE_SZ, 0),
		mkrange(self->buf + 20 * PAGE_SZ, 3 * PAGE_SZ,
			SVMBATCH_RANGE_READ_ONLY),
	};
	struct svmbatch_snapshot s0, s1, s2;
	struct svmbatch_client c;
	struct svmbatch_query q;
	__u32 h;

	snapshot_take(_metadata, self->fd, &s0);
	h = test_cmd_register(r, 3, NULL);
	test_cmd_query(h, &q);
	snapshot_take(_metadata, self->fd, &s1);

	EXPECT_EQ(1, stat_delta(&s0, &s1, "registrations"));
	EXPECT_EQ(7, stat_delta(&s0, &s1, "pinned_pages"));
	EXPECT_LT(0, stat_delta(&s0, &s1, "meta_bytes"));
	EXPECT_EQ(0, stat_delta(&s0, &s1, "contexts"));
	EXPECT_EQ(s0.fd_registrations + 1, s1.fd_registrations);
	EXPECT_EQ(s0.fd_pinned_pages + 7, s1.fd_pinned_pages);
	EXPECT_EQ(s0.fd_id, s1.fd_id);
	EXPECT_EQ(s0.vmpin_kb + (long long)(7 * PAGE_SZ / 1024), s1.vmpin_kb);

	ASSERT_EQ(0, read_client(s1.fd_id, &c)) {
		TH_LOG("no line for context %llu in %s", s1.fd_id,
		       SVMBATCH_CLIENTS);
	}
	EXPECT_EQ((unsigned long long)getpid(), c.tgid);
	EXPECT_EQ(s1.fd_registrations, c.registrations);
	EXPECT_EQ(s1.fd_pinned_pages, c.pinned_pages);
	EXPECT_EQ(s1.fd_failed, c.failed);

	test_cmd_unregister(h);
	snapshot_take(_metadata, self->fd, &s2);
	ASSERT_SNAPSHOT_EQ(&s0, &s2);
}

TEST_F(rollback, counters_contexts)
{
	struct svmbatch_snapshot s0, s1, s2;
	struct svmbatch_snapshot f2;
	struct svmbatch_client c;
	int fd2;

	snapshot_take(_metadata, self->fd, &s0);
	fd2 = open(SVMBATCH_DEV, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd2);
	snapshot_take(_metadata, fd2, &f2);
	snapshot_take(_metadata, self->fd, &s1);
	EXPECT_EQ(1, stat_delta(&s0, &s1, "contexts"));
	EXPECT_NE(s1.fd_id, f2.fd_id);
	EXPECT_EQ(0ULL, f2.fd_registrations);
	EXPECT_EQ(0ULL, f2.fd_pinned_pages);
	EXPECT_EQ(0ULL, f2.fd_failed);
	ASSERT_EQ(0, read_client(f2.fd_id, &c));
	EXPECT_EQ((unsigned long long)getpid(), c.tgid);
	EXPECT_EQ(0ULL, c.registrations);
	ASSERT_EQ(0, read_client(s1.fd_id, &c));

	close(fd2);
	snapshot_take(_metadata, self->fd, &s2);
	ASSERT_SNAPSHOT_EQ(&s0, &s2);
	EXPECT_EQ(-1, read_client(f2.fd_id, &c));
}

TEST_F(rollback, counters_count_failures)
{
	struct svmbatch_range r = mkrange(self->buf, 0, 0);	/* len 0 */
	struct svmbatch_snapshot s0, s1, o0, o1;
	struct svmbatch_client c;
	int fd2 = open(SVMBATCH_DEV, O_RDWR | O_CLOEXEC);

	ASSERT_LE(0, fd2);
	snapshot_take(_metadata, fd2, &o0);
	snapshot_take(_metadata, self->fd, &s0);
	test_err_register(EINVAL, 0, &r, 1);
	test_err_register(EINVAL, 0, &r, 1);
	snapshot_take(_metadata, self->fd, &s1);
	snapshot_take(_metadata, fd2, &o1);

	EXPECT_EQ(2, stat_delta(&s0, &s1, "failed_registrations"));
	EXPECT_EQ(s0.fd_failed + 2, s1.fd_failed);
	EXPECT_EQ(o0.fd_failed, o1.fd_failed);
	ASSERT_EQ(0, read_client(s1.fd_id, &c));
	EXPECT_EQ(s1.fd_failed, c.failed);
	close(fd2);
}

/* -------------------------------------------------------------- rollback */

/* 63 ranges pinned, the 64th cannot be: all 63 are unpinned again. */
TEST_F(rollback, last_range_fails_to_pin)
{
	struct svmbatch_range r[64];
	__u32 h;

	scatter_ranges(r, 64, self->buf, 3, 5, 0);
	ASSERT_EQ(0, munmap(u64_ptr(r[63].addr), r[63].len));
	test_err_register(EFAULT, 63, r, 64);
	/* The same batch without its bad range works, exactly once. */
	h = test_cmd_register(r, 63, NULL);
	test_cmd_unregister(h);
}

/* A hole deep inside one long range, past the first pin chunk(s). */
TEST_F_TIMEOUT(rollback, hole_after_several_pin_chunks, 180)
{
	const size_t pages = 12000;	/* > 64 KiB worth of page pointers */
	char *mem = anon_map(pages * PAGE_SZ);
	struct svmbatch_range r[2];
	__u32 h;
	__u64 nr;

	ASSERT_NE(NULL, mem);
	r[0] = mkrange(self->buf, 4 * PAGE_SZ, 0);
	r[1] = mkrange(mem, pages * PAGE_SZ, 0);
	h = test_cmd_register(r, 2, &nr);
	EXPECT_EQ(4 + pages, nr);
	test_cmd_unregister(h);

	ASSERT_EQ(0, munmap(mem + 11000 * PAGE_SZ, PAGE_SZ));
	test_err_register(EFAULT, 1, r, 2);
	r[1].flags = SVMBATCH_RANGE_READ_ONLY;
	test_err_register(EFAULT, 1, r, 2);
	munmap(mem, pages * PAGE_SZ);
}

/* A failing REGISTER does not disturb registrations already live. */
TEST_F(rollback, live_registrations_untouched)
{
	struct svmbatch_range a[2] = {
		mkrange(self->buf, 8 * PAGE_SZ, 0),
		mkrange(self->buf + 16 * PAGE_SZ, 8 * PAGE_SZ, 0),
	};
	struct svmbatch_range b[3] = {
		mkrange(self->buf, 8 * PAGE_SZ, 0),	/* same pages as a */
		mkrange(self->buf + 40 * PAGE_SZ, 8 * PAGE_SZ, 0),
		mkrange(unmapped_hole(PAGE_SZ), PAGE_SZ, 0),
	};
	struct svmbatch_query q0, q1;
	__u32 h;

	h = test_cmd_register(a, 2, NULL);
	test_cmd_query(h, &q0);
	test_err_register(EFAULT, 2, b, 3);
	test_cmd_query(h, &q1);
	EXPECT_EQ(q0.nr_pages, q1.nr_pages);
	EXPECT_EQ(q0.nr_ranges, q1.nr_ranges);
	EXPECT_EQ(q0.nr_folios, q1.nr_folios);
	test_query_ranges_eq(self->fd, h, a, 2);
	test_cmd_unregister(h);
}

/* ------------------------------------------------------- RLIMIT_MEMLOCK */

static void set_memlock(struct __test_metadata *_metadata, __u64 bytes)
{
	struct rlimit rl;

	ASSERT_EQ(0, getrlimit(RLIMIT_MEMLOCK, &rl));
	rl.rlim_cur = bytes;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < bytes)
		rl.rlim_max = bytes;
	ASSERT_EQ(0, setrlimit(RLIMIT_MEMLOCK, &rl));
}

static void drop_ipc_lock(struct __test_metadata *_metadata)
{
	ASSERT_EQ(0, drop_effective_cap(CAP_IPC_LOCK));
	ASSERT_FALSE(have_effective_cap(CAP_IPC_LOCK));
}

/* Exactly at the limit works, one page more fails with ENOMEM. */
TEST_F(rollback, memlock_exact_limit)
{
	const unsigned int n = 16;
	struct svmbatch_range r[2];
	long long base;
	__u32 h;

	drop_ipc_lock(_metadata);
	base = vmpin_kb();
	set_memlock(_metadata, base * 1024 + n * PAGE_SZ);

	r[0] = mkrange(self->buf, (n - 4) * PAGE_SZ, 0);
	r[1] = mkrange(self->buf + 100 * PAGE_SZ, 4 * PAGE_SZ,
		       SVMBATCH_RANGE_READ_ONLY);
	h = test_cmd_register(r, 2, NULL);
	EXPECT_EQ(base + (long long)(n * PAGE_SZ / 1024), vmpin_kb());
	test_cmd_unregister(h);
	EXPECT_EQ(base, vmpin_kb());

	r[1].len += PAGE_SZ;
	test_err_register(ENOMEM, SVMBATCH_NO_INDEX, r, 2);
}

/* Pages already pinned (VmPin) count against the limit. */
TEST_F(rollback, memlock_counts_existing_pins)
{
	struct svmbatch_range a = mkrange(self->buf, 10 * PAGE_SZ, 0);
	struct svmbatch_range b = mkrange(self->buf + 50 * PAGE_SZ,
					  6 * PAGE_SZ, 0);
	long long base;
	__u32 ha, hb;

	drop_ipc_lock(_metadata);
	base = vmpin_kb();
	set_memlock(_metadata, base * 1024 + 16 * PAGE_SZ);
	ha = test_cmd_register(&a, 1, NULL);
	hb = test_cmd_register(&b, 1, NULL);	/* 16 of 16 */
	b.addr += 10 * PAGE_SZ;
	b.len = PAGE_SZ;
	test_err_register(ENOMEM, SVMBATCH_NO_INDEX, &b, 1);
	test_cmd_unregister(hb);
	hb = test_cmd_register(&b, 1, NULL);
	test_cmd_unregister(hb);
	test_cmd_unregister(ha);
	EXPECT_EQ(base, vmpin_kb());
}

/* The limit is checked once for the batch, before any pinning. */
TEST_F(rollback, memlock_checked_before_pinning)
{
	struct svmbatch_range r[3] = {
		mkrange(self->buf, 8 * PAGE_SZ, 0),
		mkrange(unmapped_hole(PAGE_SZ), PAGE_SZ, 0),
		mkrange(self->buf + 20 * PAGE_SZ, 8 * PAGE_SZ, 0),
	};

	drop_ipc_lock(_metadata);
	set_memlock(_metadata, vmpin_kb() * 1024 + 4 * PAGE_SZ);
	test_err_register(ENOMEM, SVMBATCH_NO_INDEX, r, 3);
	/* Overlap is checked before the limit. */
	r[2] = r[0];
	test_err_register(EINVAL, 2, r, 3);
}

TEST_F(rollback, memlock_cap_ipc_lock_bypasses)
{
	struct svmbatch_range r = mkrange(self->buf, 64 * PAGE_SZ, 0);
	long long base = vmpin_kb();
	__u32 h;

	if (!have_effective_cap(CAP_IPC_LOCK))
		SKIP(return, "needs CAP_IPC_LOCK (run as root)");
	set_memlock(_metadata, 0);
	h = test_cmd_register(&r, 1, NULL);
	EXPECT_EQ(base + (long long)(64 * PAGE_SZ / 1024), vmpin_kb());
	test_cmd_unregister(h);
	EXPECT_EQ(base, vmpin_kb());
}

/* Uncharge exactly what was charged, whatever the limit is meanwhile. */
TEST_F(rollback, memlock_uncharge_after_limit_change)
{
	struct svmbatch_range r = mkrange(self->buf, 32 * PAGE_SZ, 0);
	struct svmbatch_snapshot s0, s1;
	__u32 h1, h2;

	snapshot_take(_metadata, self->fd, &s0);
	/* Charged while CAP_IPC_LOCK bypassed a zero limit... */
	h1 = 0;
	if (have_effective_cap(CAP_IPC_LOCK)) {
		set_memlock(_metadata, 0);
		h1 = test_cmd_register(&r, 1, NULL);
	}
	drop_ipc_lock(_metadata);
	set_memlock(_metadata, RLIM_INFINITY);
	/* ... and while the limit allowed it ... */
	h2 = test_cmd_register(&r, 1, NULL);
	/* ... then the limit drops below what is pinned. */
	set_memlock(_metadata, 0);
	if (h1)
		test_cmd_unregister(h1);
	test_cmd_unregister(h2);
	snapshot_take(_metadata, self->fd, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
}

TEST_HARNESS_MAIN
