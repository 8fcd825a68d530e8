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
#define STRIDE		3	/* one- and two-page ranges, gaps between */
#define NPAGES		(STRIDE * NR_RANGES)
#define RO_EVERY	8
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
	char *buf;
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
		skip_absent("kfault", return,
			    "%s missing: kernel without CONFIG_FAULT_INJECTION (the debug kernel has it)",
			    self->fail_nth_path);
	for (i = 0; i < NR_KNOBS; i++) {
		if (read_file(kfault_knobs[i][0], self->saved[i],
			      sizeof(self->saved[i])) < 0)
			skip_absent("kfault", return,
				    "%s missing: kernel without FAILSLAB, FAIL_PAGE_ALLOC or FAULT_INJECTION_USERCOPY",
				    kfault_knobs[i][0]);
	}
	for (i = 0; i < NR_KNOBS; i++)
		ASSERT_EQ(0, write_file(kfault_knobs[i][0], kfault_knobs[i][1]));
	self->knobs_set = true;

	self->buf = anon_map(NPAGES * PAGE_SZ);
	ASSERT_NE(NULL, self->buf);
	self->nr_pages = scatter_ranges(self->r, NR_RANGES, self->buf, STRIDE,
					RO_EVERY, 0);
}

FIXTURE_TEARDOWN(kfault)
{
	unsigned int i;

	if (self->knobs_set)
		for (i = 0; i < NR_KNOBS; i++)
			write_file(kfault_knobs[i][0], self->saved[i]);
	svmbatch_fixture_release(self->fd, self->buf, NPAGES);
}

/*
 * Every site of this thread counts, so FAIL_NTH_SWEEP() keeps the knob
 * open and makes no other system call between arming it and REGISTER.
 */
TEST_F_TIMEOUT(kfault, register_sweep, 1500)
{
	struct fail_nth nth = {
		.what = "REGISTER", .path = self->fail_nth_path,
		.fd = self->fd, .errnos = FAIL_NTH_ERRNOS(ENOMEM, EFAULT),
		.max = MAX_ITERS,
	};
	struct svmbatch_register reg;

	FAIL_NTH_SWEEP(&nth, _test_cmd_register(self->fd, self->r, NR_RANGES,
						RANGE_SZ, &reg)) {
		if (nth.ret < 0) {
			EXPECT_ERRNO(ENOENT,
				     _test_unregister(self->fd, reg.handle ?: 1));
			continue;
		}
		/* Whether or not site n fired, the handle must be whole. */
		EXPECT_EQ(self->nr_pages, reg.nr_pages);
		test_query_ranges_eq(self->fd, reg.handle, self->r, NR_RANGES);
		test_cmd_unregister(reg.handle);
	}
	fail_nth_end(_metadata, &nth);
	ASSERT_LE(5UL, nth.failed);
}

TEST_HARNESS_MAIN
