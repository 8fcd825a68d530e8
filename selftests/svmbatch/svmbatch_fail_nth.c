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
#define NPAGES		(3 * NR_RANGES)
#define MAX_ITERS	10000
#define RO_RANGE	7

FIXTURE(fail_nth) {
	int fd;
	char *mem;
	struct svmbatch_range r[NR_RANGES];
	__u64 nr_pages;
};

FIXTURE_SETUP(fail_nth)
{
	unsigned int i;

	svmbatch_open_or_skip(self->fd);
	if (!have_fault_injection(self->fd))
		SKIP(return,
		     "no fault injection (SVMBATCH_FEATURE_FAULT_INJECTION unset or %s missing)",
		     SVMBATCH_FAIL_NTH);
	ASSERT_EQ(0, fail_nth_set(0));
	self->mem = anon_map(NPAGES * PAGE_SZ);
	ASSERT_NE(NULL, self->mem);
	/* Scattered one- and two-page ranges, one of them read-only. */
	for (i = 0; i < NR_RANGES; i++) {
		self->r[i] = mkrange(self->mem + 3 * i * PAGE_SZ,
				     (i % 3 ? 1 : 2) * PAGE_SZ,
				     i == RO_RANGE ? SVMBATCH_RANGE_READ_ONLY :
						     0);
		self->nr_pages += self->r[i].len / PAGE_SZ;
	}
}

FIXTURE_TEARDOWN(fail_nth)
{
	fail_nth_set(0);
	if (self->mem)
		munmap(self->mem, NPAGES * PAGE_SZ);
	if (self->fd > 0)
		close(self->fd);
}

static long long injected(const struct svmbatch_snapshot *s)
{
	const struct svmbatch_stat *st = snap_stat(s, "injected_failures");

	return st ? (long long)st->val : -1;
}

/* The outcome of one armed call. */
struct nth_result {
	int ret, err;
	long left;	/* fail_nth after the call: >0 means it never fired */
	struct svmbatch_snapshot before, after;
};

/*
 * Check an injected failure: an injection errno, the knob disarmed, one more
 * injected failure counted and nothing else changed.
 */
static void check_injected_failure(struct __test_metadata *_metadata,
				   const char *what, unsigned long n,
				   const struct nth_result *res)
{
	EXPECT_TRUE(res->err == ENOMEM || res->err == EFAULT) {
		TH_LOG("%s, fail_nth %lu: unexpected %s", what, n,
		       strerror(res->err));
	}
	EXPECT_EQ(0, res->left) {
		TH_LOG("%s, fail_nth %lu: failed but knob still armed", what,
		       n);
	}
	EXPECT_EQ(injected(&res->before) + 1, injected(&res->after));
	ASSERT_SNAPSHOT_EQ(&res->before, &res->after);
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
	ASSERT_EQ(-1, _test_cmd_register(self->fd, self->r, NR_RANGES,
					 RANGE_SZ, &reg));
	EXPECT_TRUE(errno == ENOMEM || errno == EFAULT);
	EXPECT_EQ(0, fail_nth_get());
}

TEST_F_TIMEOUT(fail_nth, register_sweep, 600)
{
	struct svmbatch_register reg;
	struct nth_result res;
	unsigned long n, points = 0, absorbed = 0;
	bool done = false;

	for (n = 1; n <= MAX_ITERS && !done; n++) {
		snapshot_take(_metadata, self->fd, &res.before);
		ASSERT_EQ(0, fail_nth_set(n));
		res.ret = _test_cmd_register(self->fd, self->r, NR_RANGES,
					     RANGE_SZ, &reg);
		res.err = errno;
		res.left = fail_nth_get();
		ASSERT_EQ(0, fail_nth_set(0));
		snapshot_take(_metadata, self->fd, &res.after);

		if (!res.ret) {
			EXPECT_EQ(self->nr_pages, reg.nr_pages);
			EXPECT_EQ(SVMBATCH_NO_INDEX, reg.error_index);
			test_query_ranges_eq(self->fd, reg.handle, self->r,
					     NR_RANGES);
			test_cmd_unregister(reg.handle);
			if (res.left > 0) {
				/* Ran to the end without reaching point n. */
				EXPECT_EQ(injected(&res.before),
					  injected(&res.after));
				done = true;
			} else {
				/* Fired, yet the call succeeded: recovered. */
				TH_LOG("point %lu absorbed by REGISTER", n);
				absorbed++;
			}
			continue;
		}
		points++;
		check_injected_failure(_metadata, "REGISTER", n, &res);
		/*
		 * Point 1 is the copy-in of the command struct: nothing was
		 * read, so there is nothing to write error_index back to.
		 */
		EXPECT_TRUE(n == 1 || reg.error_index == SVMBATCH_NO_INDEX ||
			    reg.error_index < NR_RANGES) {
			TH_LOG("fail_nth %lu: error_index %u", n,
			       reg.error_index);
		}
		check_no_handles(_metadata, self->fd, reg.handle, 0);
	}
	ASSERT_TRUE(done) TH_LOG("no end after %d injection points", MAX_ITERS);
	TH_LOG("REGISTER of %d ranges: %lu injection points failed the call, %lu absorbed",
	       NR_RANGES, points, absorbed);
	ksft_print_msg("REGISTER fail_nth sweep: %lu points\n", points);
	ASSERT_LE(5UL, points);
	/* Every injection point is a real failure path of the command. */
	ASSERT_EQ(0UL, absorbed);
}

TEST_F_TIMEOUT(fail_nth, query_sweep, 300)
{
	struct svmbatch_range out[NR_RANGES];
	struct svmbatch_query q, ref;
	struct nth_result res;
	unsigned long n, points = 0;
	bool done = false;
	__u32 h;

	h = test_cmd_register(self->r, NR_RANGES, NULL);
	test_cmd_query(h, &ref);
	for (n = 1; n <= MAX_ITERS && !done; n++) {
		snapshot_take(_metadata, self->fd, &res.before);
		ASSERT_EQ(0, fail_nth_set(n));
		res.ret = _test_cmd_query(self->fd, h, out, NR_RANGES,
					  RANGE_SZ, &q);
		res.err = errno;
		res.left = fail_nth_get();
		ASSERT_EQ(0, fail_nth_set(0));
		snapshot_take(_metadata, self->fd, &res.after);
		if (!res.ret) {
			EXPECT_EQ(ref.nr_pages, q.nr_pages);
			EXPECT_EQ(0, memcmp(out, self->r, sizeof(out)));
			done = res.left > 0;
			continue;
		}
		points++;
		check_injected_failure(_metadata, "QUERY", n, &res);
		/* The registration is unharmed. */
		test_query_ranges_eq(self->fd, h, self->r, NR_RANGES);
	}
	ASSERT_TRUE(done);
	ksft_print_msg("QUERY fail_nth sweep: %lu points\n", points);
	ASSERT_LE(1UL, points);
	test_cmd_unregister(h);
}

TEST_F_TIMEOUT(fail_nth, unregister_sweep, 300)
{
	struct svmbatch_snapshot s0, s1;
	struct nth_result res;
	unsigned long n, points = 0;
	struct svmbatch_query q;
	__u32 h;

	snapshot_take(_metadata, self->fd, &s0);
	h = test_cmd_register(self->r, NR_RANGES, NULL);
	for (n = 1; n <= MAX_ITERS; n++) {
		snapshot_take(_metadata, self->fd, &res.before);
		ASSERT_EQ(0, fail_nth_set(n));
		res.ret = _test_unregister(self->fd, h);
		res.err = errno;
		res.left = fail_nth_get();
		ASSERT_EQ(0, fail_nth_set(0));
		snapshot_take(_metadata, self->fd, &res.after);
		if (!res.ret)
			break;
		points++;
		check_injected_failure(_metadata, "UNREGISTER", n, &res);
		/* A failed UNREGISTER leaves the registration intact. */
		test_cmd_query(h, &q);
		EXPECT_EQ(self->nr_pages, q.nr_pages);
	}
	ASSERT_GE(MAX_ITERS, n);
	if (res.left == 0)
		TH_LOG("point %lu absorbed by UNREGISTER", n);
	ksft_print_msg("UNREGISTER fail_nth sweep: %lu points\n", points);
	test_err_unregister(ENOENT, h);
	snapshot_take(_metadata, self->fd, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
}

TEST_HARNESS_MAIN
