// SPDX-License-Identifier: GPL-2.0
/*
 * REGISTER under the kernel's own fault injection: failslab, fail_page_alloc
 * and fail_usercopy, scoped to this thread with /proc/self/task/TID/fail-nth.
 * Unlike svmbatch_fail_nth.c (the module's own knob) this also fails the
 * allocations and copies of the kernel code the module calls: xarray nodes,
 * GUP, the sort buffer.  Each failure must leave nothing behind; a failure
 * the kernel absorbs (a fallback path) must still give a working handle.
 *
 * Needs CONFIG_FAULT_INJECTION, FAILSLAB, FAIL_PAGE_ALLOC and
 * FAULT_INJECTION_USERCOPY with debugfs: the project's debug kernel.
 */
#include "svmbatch_utils.h"

#define NR_RANGES	64
#define NPAGES		(3 * NR_RANGES)
#define MAX_ITERS	5000

/* Fault attributes changed for the sweep, restored afterwards. */
static const char * const kfault_knobs[][2] = {
	/* Also fail GFP_KERNEL allocations, order 0 pages included. */
	{ "/sys/kernel/debug/failslab/ignore-gfp-wait", "N" },
	{ "/sys/kernel/debug/fail_page_alloc/ignore-gfp-wait", "N" },
	{ "/sys/kernel/debug/fail_page_alloc/min-order", "0" },
	/* No stack dump per injected failure: it would look like a splat. */
	{ "/sys/kernel/debug/failslab/verbose", "0" },
	{ "/sys/kernel/debug/fail_page_alloc/verbose", "0" },
	{ "/sys/kernel/debug/fail_usercopy/verbose", "0" },
};

#define NR_KNOBS ARRAY_SIZE(kfault_knobs)

FIXTURE(kfault) {
	int fd;
	char *mem;
	char fail_nth_path[64];
	char saved[NR_KNOBS][32];
	bool knobs_set;
	struct svmbatch_range r[NR_RANGES];
	__u64 nr_pages;
};

FIXTURE_SETUP(kfault)
{
	unsigned int i;

	svmbatch_open_or_skip(self->fd);
	snprintf(self->fail_nth_path, sizeof(self->fail_nth_path),
		 "/proc/self/task/%d/fail-nth", gettid());
	if (access(self->fail_nth_path, W_OK))
		SKIP(return,
		     "%s missing: kernel without CONFIG_FAULT_INJECTION (the debug kernel has it)",
		     self->fail_nth_path);
	for (i = 0; i < NR_KNOBS; i++) {
		if (read_file(kfault_knobs[i][0], self->saved[i],
			      sizeof(self->saved[i])) < 0)
			SKIP(return,
			     "%s missing: kernel without FAILSLAB, FAIL_PAGE_ALLOC or FAULT_INJECTION_USERCOPY",
			     kfault_knobs[i][0]);
	}
	for (i = 0; i < NR_KNOBS; i++)
		ASSERT_EQ(0, write_file(kfault_knobs[i][0], kfault_knobs[i][1]));
	self->knobs_set = true;

	self->mem = anon_map(NPAGES * PAGE_SZ);
	ASSERT_NE(NULL, self->mem);
	for (i = 0; i < NR_RANGES; i++) {
		self->r[i] = mkrange(self->mem + 3 * i * PAGE_SZ,
				     (i % 3 ? 1 : 2) * PAGE_SZ,
				     i == 5 ? SVMBATCH_RANGE_READ_ONLY : 0);
		self->nr_pages += self->r[i].len / PAGE_SZ;
	}
}

FIXTURE_TEARDOWN(kfault)
{
	unsigned int i;

	if (self->knobs_set)
		for (i = 0; i < NR_KNOBS; i++)
			write_file(kfault_knobs[i][0], self->saved[i]);
	if (self->mem)
		munmap(self->mem, NPAGES * PAGE_SZ);
	if (self->fd > 0)
		close(self->fd);
}

/*
 * Arm fail-nth, REGISTER, and read back what is left of the countdown,
 * with as few other syscalls in between as possible: every should_fail
 * site of this thread counts.
 */
static int armed_register(const char *fail_nth_path, int fd,
			  const struct svmbatch_range *r, unsigned long n,
			  struct svmbatch_register *reg, int *err, long *left)
{
	char buf[32];
	int nth_fd, ret, len;

	nth_fd = open(fail_nth_path, O_RDWR | O_CLOEXEC);
	if (nth_fd < 0)
		return -1;
	len = snprintf(buf, sizeof(buf), "%lu", n);
	if (write(nth_fd, buf, len) != len) {
		close(nth_fd);
		return -1;
	}
	ret = _test_cmd_register(fd, r, NR_RANGES,
				 sizeof(struct svmbatch_range), reg);
	*err = errno;
	/*
	 * Reading fail-nth gives the remaining count; writing 0 disarms.  If
	 * the read fails, its own copy to user space was the last site: the
	 * call never reached site n.
	 */
	len = pread(nth_fd, buf, sizeof(buf) - 1, 0);
	if (len > 0) {
		buf[len] = 0;
		*left = strtol(buf, NULL, 10);
	} else {
		*left = 1;
	}
	/*
	 * Disarming copies from user space, itself a site: EFAULT there means
	 * the countdown ran out in this write, which disarmed it as well.
	 */
	if (pwrite(nth_fd, "0", 1, 0) != 1 && errno != EFAULT)
		*left = -1;
	close(nth_fd);
	return ret;
}

TEST_F_TIMEOUT(kfault, register_sweep, 1500)
{
	struct svmbatch_snapshot before, after;
	unsigned long n, failed = 0, absorbed = 0;
	struct svmbatch_register reg;
	bool done = false;
	long left = -1;
	int ret, err = 0;

	for (n = 1; n <= MAX_ITERS && !done; n++) {
		snapshot_take(_metadata, self->fd, &before);
		ret = armed_register(self->fail_nth_path, self->fd, self->r, n,
				     &reg, &err, &left);
		ASSERT_LE(0, left) TH_LOG("cannot use %s", self->fail_nth_path);
		snapshot_take(_metadata, self->fd, &after);

		if (!ret) {
			/* Whether or not it fired, the handle must be whole. */
			EXPECT_EQ(self->nr_pages, reg.nr_pages);
			test_query_ranges_eq(self->fd, reg.handle, self->r,
					     NR_RANGES);
			test_cmd_unregister(reg.handle);
			if (left > 0)
				done = true;	/* never reached site n */
			else
				absorbed++;
			continue;
		}
		failed++;
		EXPECT_TRUE(err == ENOMEM || err == EFAULT) {
			TH_LOG("fail-nth %lu: unexpected %s", n, strerror(err));
		}
		EXPECT_EQ(0, left) TH_LOG("fail-nth %lu: failed, not fired", n);
		ASSERT_SNAPSHOT_EQ(&before, &after);
		EXPECT_ERRNO(ENOENT, _test_unregister(self->fd, reg.handle ?: 1));
	}
	ASSERT_TRUE(done) TH_LOG("no end after %d sites", MAX_ITERS);
	ksft_print_msg("REGISTER, kernel fault injection: %lu sites failed it, %lu absorbed\n",
		       failed, absorbed);
	ASSERT_LE(5UL, failed);
}

TEST_HARNESS_MAIN
