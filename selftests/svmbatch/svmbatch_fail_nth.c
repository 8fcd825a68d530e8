// SPDX-License-Identifier: GPL-2.0
/*
 * Sweep every fault-injection point of REGISTER, QUERY and UNREGISTER, in
 * the spirit of iommufd_fail_nth.c, through the module's own knob
 * /sys/kernel/debug/svmbatch/fail_nth: writing N arms it for the writing
 * process, the Nth injection point that process then reaches fails, and the
 * knob disarms itself.  Each injected failure must leave nothing behind.
 *
 * Needs a module built with CONFIG_SVMBATCH_FAULT_INJECTION; best run with
 * panic_on_warn and a debug kernel (KASAN, kmemleak, lockdep).
 */
#include "svmbatch_utils.h"

#define NR_RANGES	64
#define STRIDE		3	/* one- and two-page ranges, gaps between */
#define NPAGES		(STRIDE * NR_RANGES)
#define RO_EVERY	8
#define MAX_ITERS	10000

FIXTURE(fail_nth) {
	int fd;
	char *buf;
	struct svmbatch_range r[NR_RANGES];
	__u64 nr_pages;
};

FIXTURE_SETUP(fail_nth)
{
	svmbatch_open_or_skip(self->fd);
	if (!have_fault_injection(self->fd))
		skip_absent("faultinject", return,
			    "no fault injection (SVMBATCH_FEATURE_FAULT_INJECTION unset or %s missing)",
			    SVMBATCH_FAIL_NTH);
	ASSERT_EQ(0, fail_nth_set(0));
	self->buf = anon_map(NPAGES * PAGE_SZ);
	ASSERT_NE(NULL, self->buf);
	self->nr_pages = scatter_ranges(self->r, NR_RANGES, self->buf, STRIDE,
					RO_EVERY, 0);
}

FIXTURE_TEARDOWN(fail_nth)
{
	fail_nth_set(0);
	svmbatch_fixture_release(self->fd, self->buf, NPAGES);
}

/*
 * A sweep of the module's own injection points of @_what: each failure
 * must give the errno its point documents (fail_nth_errno).
 */
#define MODULE_SWEEP(_what, _fd)					\
	{								\
		.what = _what, .path = SVMBATCH_FAIL_NTH, .fd = _fd,	\
		.max = MAX_ITERS,					\
	}

/* Nothing registered under any plausible handle. */
static void check_no_handles(struct __test_metadata *_metadata, int fd,
			     __u32 written, __u32 live)
{
	__u32 h;

	for (h = 1; h <= 16; h++) {
		if (h == live)
			continue;
		EXPECT_ERRNO(ENOENT, _test_unregister(fd, h));
	}
	if (written && written != CANARY32 && written != live)
		EXPECT_ERRNO(ENOENT, _test_unregister(fd, written));
}

TEST_F(fail_nth, knob_basics)
{
	struct svmbatch_register reg;
	int *child_ret;
	pid_t pid;
	int status;

	EXPECT_EQ(0, fail_nth_get());
	ASSERT_EQ(0, fail_nth_set(1000));
	EXPECT_EQ(1000, fail_nth_get());
	ASSERT_EQ(0, fail_nth_set(0));
	EXPECT_EQ(0, fail_nth_get());
	ASSERT_EQ(0, _test_cmd_register(self->fd, self->r, NR_RANGES,
					RANGE_SZ, &reg));
	test_cmd_unregister(reg.handle);

	/* Armed for this process only: another process is not affected. */
	child_ret = mmap(NULL, PAGE_SZ, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, child_ret);
	ASSERT_EQ(0, fail_nth_set(1));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		int fd = open(SVMBATCH_DEV, O_RDWR | O_CLOEXEC);
		struct svmbatch_register creg;

		*child_ret = fd < 0 ? -2 :
			     _test_cmd_register(fd, self->r, NR_RANGES,
						RANGE_SZ, &creg) ? errno : 0;
		_exit(0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_EQ(0, *child_ret) {
		TH_LOG("child's REGISTER failed: %d", *child_ret);
	}
	EXPECT_EQ(1, fail_nth_get());
	/* Point 1 is the copy-in of the command struct. */
	ASSERT_EQ(-1, _test_cmd_register(self->fd, self->r, NR_RANGES,
					 RANGE_SZ, &reg));
	EXPECT_EQ(EFAULT, errno);
	EXPECT_EQ(EFAULT, knob_get(SVMBATCH_FAIL_NTH_ERRNO));
	EXPECT_EQ(0, fail_nth_get());
	/* Arming again forgets the errno of the last point fired. */
	ASSERT_EQ(0, fail_nth_set(1000));
	EXPECT_EQ(0, knob_get(SVMBATCH_FAIL_NTH_ERRNO));
	ASSERT_EQ(0, fail_nth_set(0));
}

TEST_F_TIMEOUT(fail_nth, register_sweep, 600)
{
	struct fail_nth nth = MODULE_SWEEP("REGISTER", self->fd);
	struct svmbatch_register reg;

	FAIL_NTH_SWEEP(&nth, _test_cmd_register(self->fd, self->r, NR_RANGES,
						RANGE_SZ, &reg)) {
		if (nth.ret < 0) {
			/*
			 * Point 1 is the copy-in of the command struct:
			 * nothing was read, so there is nothing to write
			 * error_index back to.
			 */
			EXPECT_TRUE(nth.n == 1 ||
				    reg.error_index == SVMBATCH_NO_INDEX ||
				    reg.error_index < NR_RANGES) {
				TH_LOG("fail_nth %lu: error_index %u", nth.n,
				       reg.error_index);
			}
			check_no_handles(_metadata, self->fd, reg.handle, 0);
			continue;
		}
		/* Whether point n fired (absorbed) or not, the handle is whole. */
		EXPECT_EQ(self->nr_pages, reg.nr_pages);
		EXPECT_EQ(SVMBATCH_NO_INDEX, reg.error_index);
		test_query_ranges_eq(self->fd, reg.handle, self->r, NR_RANGES);
		test_cmd_unregister(reg.handle);
	}
	fail_nth_end(_metadata, &nth);
	ASSERT_LE(5UL, nth.failed);
	/* Every injection point is a real failure path of the command. */
	ASSERT_EQ(0UL, nth.absorbed);
}

TEST_F_TIMEOUT(fail_nth, query_sweep, 300)
{
	struct fail_nth nth = MODULE_SWEEP("QUERY", self->fd);
	struct svmbatch_range out[NR_RANGES];
	struct svmbatch_query q, ref;
	__u32 h;

	h = test_cmd_register(self->r, NR_RANGES, NULL);
	test_cmd_query(h, &ref);
	FAIL_NTH_SWEEP(&nth, _test_cmd_query(self->fd, h, out, NR_RANGES,
					     RANGE_SZ, &q)) {
		if (nth.ret < 0) {
			/* The registration is unharmed. */
			test_query_ranges_eq(self->fd, h, self->r, NR_RANGES);
			continue;
		}
		EXPECT_EQ(ref.nr_pages, q.nr_pages);
		EXPECT_EQ(0, memcmp(out, self->r, sizeof(out)));
	}
	fail_nth_end(_metadata, &nth);
	ASSERT_LE(1UL, nth.failed);
	test_cmd_unregister(h);
}

TEST_F_TIMEOUT(fail_nth, unregister_sweep, 300)
{
	struct fail_nth nth = MODULE_SWEEP("UNREGISTER", self->fd);
	struct svmbatch_snapshot s0, s1;
	struct svmbatch_query q;
	__u32 h;

	snapshot_take(_metadata, self->fd, &s0);
	h = test_cmd_register(self->r, NR_RANGES, NULL);
	FAIL_NTH_SWEEP(&nth, _test_unregister(self->fd, h)) {
		if (nth.ret < 0) {
			/* A failed UNREGISTER leaves the registration intact. */
			test_cmd_query(h, &q);
			EXPECT_EQ(self->nr_pages, q.nr_pages);
			continue;
		}
		/* The handle is gone, fired or not: nothing left to sweep. */
		if (!nth.left)
			TH_LOG("point %lu absorbed by UNREGISTER", nth.n);
		nth.done = true;
	}
	fail_nth_end(_metadata, &nth);
	test_err_unregister(ENOENT, h);
	snapshot_take(_metadata, self->fd, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
}

TEST_HARNESS_MAIN
