// SPDX-License-Identifier: GPL-2.0
/*
 * Scale: thousands of scattered malloc'd ranges in one batch, a batch of
 * exactly max_ranges, max_registrations live handles per fd (ENOSPC), and
 * a bad range at the start, middle and end of a 1000-range batch.
 */
#include "svmbatch_utils.h"

FIXTURE(scale) {
	int fd;
	struct svmbatch_info info;
};

FIXTURE_SETUP(scale)
{
	svmbatch_open_or_skip(self->fd);
	test_cmd_get_info(&self->info);
}

FIXTURE_TEARDOWN(scale)
{
	if (self->fd > 0)
		close(self->fd);
}

/* 2000 page-aligned subranges of malloc'd blocks of 4 KiB .. 1 MiB. */
TEST_F_TIMEOUT(scale, scattered_malloc_2000, 300)
{
	const unsigned int nr = 2000, seed = 0x5eed;
	struct svmbatch_range *r = calloc(nr, RANGE_SZ);
	struct svmbatch_query q;
	void **blocks = calloc(nr, sizeof(void *));
	__u64 total = 0, nr_pages;
	long long pin0 = vmpin_kb();
	unsigned int i, pages;
	uintptr_t a;
	__u32 h;

	ASSERT_NE(NULL, r);
	ASSERT_NE(NULL, blocks);
	srand(seed);
	for (i = 0; i < nr; i++) {
		/* log-uniform-ish sizes, 1..256 pages, ~120 KiB on average */
		pages = 1 + rand() % (1U << (rand() % 9));
		blocks[i] = malloc((pages + 1) * PAGE_SZ);
		ASSERT_NE(NULL, blocks[i]);
		memset(blocks[i], i & 0xff, (pages + 1) * PAGE_SZ);
		a = ((uintptr_t)blocks[i] + PAGE_SZ - 1) & ~(PAGE_SZ - 1);
		r[i] = mkrange((void *)a, pages * PAGE_SZ,
			       i % 7 ? 0 : SVMBATCH_RANGE_READ_ONLY);
		total += pages;
	}
	TH_LOG("%u ranges, %llu pages (seed 0x%x)", nr,
	       (unsigned long long)total, seed);

	h = test_cmd_register(r, nr, &nr_pages);
	EXPECT_EQ(total, nr_pages);
	EXPECT_EQ(pin0 + (long long)(total * PAGE_SZ / 1024), vmpin_kb());
	test_cmd_query(h, &q);
	EXPECT_EQ(nr, q.nr_ranges);
	EXPECT_EQ(total, q.nr_pages);
	EXPECT_GE(total, q.nr_segments);
	EXPECT_LT(0ULL, q.meta_bytes);
	test_query_ranges_eq(self->fd, h, r, nr);
	EXPECT_ERRNO(EMSGSIZE, _test_cmd_query(self->fd, h, r, nr - 1,
					       RANGE_SZ, &q));
	EXPECT_EQ(nr, q.nr_ranges);
	test_cmd_unregister(h);
	EXPECT_EQ(pin0, vmpin_kb());

	for (i = 0; i < nr; i++)
		free(blocks[i]);
	free(blocks);
	free(r);
}

/* max_ranges one-page ranges (every other page) work; one more is E2BIG. */
TEST_F_TIMEOUT(scale, max_ranges_one_page_each, 300)
{
	const __u32 n = self->info.max_ranges;
	const size_t len = (2 * (size_t)n + 2) * PAGE_SZ;
	struct svmbatch_range *r;
	long long pin0 = vmpin_kb();
	char *mem;
	__u64 nr;
	__u32 i, h;

	if (n > 65536)
		SKIP(return, "max_ranges %u too large for this test", n);
	mem = mmap(NULL, len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, mem);
	r = calloc(n + 1, RANGE_SZ);
	ASSERT_NE(NULL, r);
	scatter_ranges(r, n + 1, mem, 2, 0, 0);
	/* Populate only the pages registered. */
	for (i = 0; i <= n; i++)
		*(char *)u64_ptr(r[i].addr) = 1;
	h = test_cmd_register(r, n, &nr);
	EXPECT_EQ((__u64)n, nr);
	EXPECT_EQ(pin0 + (long long)(n * PAGE_SZ / 1024), vmpin_kb());
	test_query_ranges_eq(self->fd, h, r, n);
	test_cmd_unregister(h);
	EXPECT_EQ(pin0, vmpin_kb());

	test_err_register(E2BIG, SVMBATCH_NO_INDEX, r, n + 1);
	free(r);
	munmap(mem, len);
}

/* max_registrations live handles: then ENOSPC, until one is dropped. */
TEST_F_TIMEOUT(scale, max_registrations, 600)
{
	const __u32 n = self->info.max_registrations;
	const unsigned int npages = 64;
	struct svmbatch_snapshot s0, s1;
	struct svmbatch_range r;
	struct svmbatch_register cmd;
	char *mem;
	__u32 i, *h;
	int fd;

	if (n > 262144)
		SKIP(return, "max_registrations %u too large for this test", n);
	if (!have_effective_cap(CAP_IPC_LOCK))
		SKIP(return, "needs CAP_IPC_LOCK to pin %u pages", n);
	mem = anon_map(npages * PAGE_SZ);
	ASSERT_NE(NULL, mem);
	h = calloc(n, sizeof(*h));
	ASSERT_NE(NULL, h);
	snapshot_take(_metadata, self->fd, &s0);
	fd = open(SVMBATCH_DEV, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd);

	for (i = 0; i < n; i++) {
		r = mkrange(mem + (i % npages) * PAGE_SZ, PAGE_SZ, 0);
		ASSERT_EQ(0, _test_cmd_register(fd, &r, 1, RANGE_SZ, &cmd)) {
			TH_LOG("registration %u of %u: %s", i, n,
			       strerror(errno));
		}
		h[i] = cmd.handle;
	}
	TH_LOG("%u live registrations", n);

	r = mkrange(mem, PAGE_SZ, 0);
	memset(&cmd, 0, sizeof(cmd));
	cmd.size = sizeof(cmd);
	cmd.ranges = ptr_u64(&r);
	cmd.nr_ranges = 1;
	cmd.range_size = RANGE_SZ;
	test_err_register_cmd_fd(fd, ENOSPC, SVMBATCH_NO_INDEX, &cmd);
	/* ENOSPC comes after the count checks and before the pointer. */
	cmd.ranges = 0;
	test_err_register_cmd_fd(fd, ENOSPC, SVMBATCH_NO_INDEX, &cmd);
	cmd.nr_ranges = 0;
	test_err_register_cmd_fd(fd, EINVAL, SVMBATCH_NO_INDEX, &cmd);
	cmd.nr_ranges = 1;
	cmd.range_size = 0;
	test_err_register_cmd_fd(fd, EINVAL, SVMBATCH_NO_INDEX, &cmd);

	/* Another fd has its own budget. */
	test_cmd_unregister(test_cmd_register(&r, 1, NULL));

	test_cmd_unregister_fd(fd, h[n / 2]);
	h[n / 2] = test_cmd_register_fd(fd, &r, 1, NULL);
	cmd.range_size = RANGE_SZ;
	cmd.ranges = ptr_u64(&r);
	test_err_register_cmd_fd(fd, ENOSPC, SVMBATCH_NO_INDEX, &cmd);

	close(fd);
	snapshot_take(_metadata, self->fd, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
	free(h);
	munmap(mem, npages * PAGE_SZ);
}

/* ---------------------------------------- a bad range among 1000 good */

FIXTURE(bad_in_1000) {
	int fd;
	char *buf;
	struct svmbatch_range *r;
};

FIXTURE_VARIANT(bad_in_1000) {
	unsigned int k;
};

FIXTURE_VARIANT_ADD(bad_in_1000, first) { .k = 0 };
FIXTURE_VARIANT_ADD(bad_in_1000, middle) { .k = 500 };
FIXTURE_VARIANT_ADD(bad_in_1000, last) { .k = 999 };

#define NR_1000 1000U

/* One-page ranges, every other page. */
FIXTURE_SETUP(bad_in_1000)
{
	svmbatch_fixture_setup(2 * NR_1000);
	self->r = calloc(NR_1000, RANGE_SZ);
	ASSERT_NE(NULL, self->r);
	scatter_ranges(self->r, NR_1000, self->buf, 2, 0, 0);
}

FIXTURE_TEARDOWN(bad_in_1000)
{
	free(self->r);
	svmbatch_fixture_release(self->fd, self->buf, 2 * NR_1000);
}

TEST_F_TIMEOUT(bad_in_1000, unmapped, 120)
{
	char *bad = u64_ptr(self->r[variant->k].addr);
	__u32 h;

	ASSERT_EQ(0, munmap(bad, PAGE_SZ));
	test_err_register(EFAULT, variant->k, self->r, NR_1000);
	/* Map it back: the very same batch now works. */
	ASSERT_EQ(bad, mmap(bad, PAGE_SZ, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
	h = test_cmd_register(self->r, NR_1000, NULL);
	test_cmd_unregister(h);
}

TEST_F_TIMEOUT(bad_in_1000, read_only_mapping, 120)
{
	char *bad = u64_ptr(self->r[variant->k].addr);

	ASSERT_EQ(0, mprotect(bad, PAGE_SZ, PROT_READ));
	test_err_register(EFAULT, variant->k, self->r, NR_1000);
	self->r[variant->k].flags = SVMBATCH_RANGE_READ_ONLY;
	test_cmd_unregister(test_cmd_register(self->r, NR_1000, NULL));
}

TEST_F_TIMEOUT(bad_in_1000, overlaps_previous, 120)
{
	unsigned int k = variant->k ? variant->k : 1;

	self->r[k] = self->r[k - 1];
	test_err_register(EINVAL, k, self->r, NR_1000);
}

TEST_HARNESS_MAIN
