// SPDX-License-Identifier: GPL-2.0
/*
 * Every errno of the svmbatch uapi, one behaviour per test, each failing
 * REGISTER checked to leave nothing behind (VmPin, global and per-fd
 * counters).  Ordering tests combine two faults and check that the earlier
 * check of the contract wins.
 */
#include "svmbatch_utils.h"

#define NPAGES 64

/* Anything at or above this is outside every x86-64 user address space. */
#define KERNEL_ADDR 0xffff800000000000ULL

FIXTURE(svmbatch) {
	int fd;
	struct svmbatch_info info;
	char *buf;		/* NPAGES pages of anonymous memory */
};

FIXTURE_SETUP(svmbatch)
{
	svmbatch_fixture_setup(NPAGES);
	test_cmd_get_info(&self->info);
}

FIXTURE_TEARDOWN(svmbatch)
{
	svmbatch_fixture_release(self->fd, self->buf, NPAGES);
}

static char *page(char *buf, unsigned int n)
{
	return buf + n * PAGE_SZ;
}

/* ------------------------------------------------------------ GET_INFO */

TEST_F(svmbatch, get_info)
{
	const __u64 known = SVMBATCH_FEATURE_DMABUF |
			    SVMBATCH_FEATURE_STALE_NOTIFY |
			    SVMBATCH_FEATURE_FAULT_INJECTION;
	struct svmbatch_info *info = &self->info;

	EXPECT_EQ(SVMBATCH_ABI_VERSION, info->abi_version);
	EXPECT_EQ(PAGE_SZ, info->page_size);
	EXPECT_EQ(0U, info->flags);
	EXPECT_EQ(DEFAULT_MAX_RANGES, info->max_ranges);
	EXPECT_EQ(DEFAULT_MAX_REGISTRATIONS, info->max_registrations);
	EXPECT_EQ(DEFAULT_MAX_RANGE_BYTES, info->max_range_bytes);
	EXPECT_EQ(0ULL, info->features & ~known);
	EXPECT_EQ(SVMBATCH_FEATURE_DMABUF | SVMBATCH_FEATURE_STALE_NOTIFY,
		  info->features & (SVMBATCH_FEATURE_DMABUF |
				    SVMBATCH_FEATURE_STALE_NOTIFY));
	TH_LOG("features 0x%llx%s", (unsigned long long)info->features,
	       info->features & SVMBATCH_FEATURE_FAULT_INJECTION ?
	       " (fault injection)" : "");
}

TEST_F(svmbatch, get_info_unknown_flags)
{
	static const __u32 bad[] = { 1U << 0, 1U << 7, 1U << 31 };
	struct svmbatch_info info;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		memset(&info, 0, sizeof(info));
		info.size = sizeof(info);
		info.flags = bad[i];
		EXPECT_ERRNO(EOPNOTSUPP,
			     ioctl(self->fd, SVMBATCH_GET_INFO, &info));
	}
}

TEST_F(svmbatch, export_dmabuf_size_and_handle)
{
	struct svmbatch_export_dmabuf cmd = { sizeof(cmd), O_RDWR, 12345, -1 };

	EXPECT_ERRNO(ENOENT, ioctl(self->fd, SVMBATCH_EXPORT_DMABUF, &cmd));
	EXPECT_EQ(-1, cmd.fd);
	cmd.size = sizeof(cmd) - 4;
	EXPECT_ERRNO(EINVAL, ioctl(self->fd, SVMBATCH_EXPORT_DMABUF, &cmd));
}

TEST_F(svmbatch, unknown_ioctls)
{
	const unsigned long bad[] = {
		_IO(SVMBATCH_TYPE, SVMBATCH_CMD_BASE - 1),
		_IO(SVMBATCH_TYPE, SVMBATCH_CMD_EXPORT_DMABUF + 1),
		_IO(SVMBATCH_TYPE, 0xff),
		_IO(SVMBATCH_TYPE + 1, SVMBATCH_CMD_GET_INFO),
		/* Right number, wrong encoding: commands are plain _IO(). */
		_IOWR(SVMBATCH_TYPE, SVMBATCH_CMD_GET_INFO,
		      struct svmbatch_info),
	};
	struct svmbatch_info info = { .size = sizeof(info) };
	size_t i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		TH_LOG("ioctl 0x%lx", bad[i]);
		EXPECT_ERRNO(ENOTTY, ioctl(self->fd, bad[i], &info));
	}
}

/* ------------------------------------------------- REGISTER success path */

TEST_F(svmbatch, register_basic)
{
	struct svmbatch_range r[3] = {
		mkrange(page(self->buf, 0), 2 * PAGE_SZ, 0),
		mkrange(page(self->buf, 10), PAGE_SZ, SVMBATCH_RANGE_READ_ONLY),
		mkrange(page(self->buf, 20), 5 * PAGE_SZ, 0),
	};
	long long pin0 = vmpin_kb();
	__u32 h1, h2;
	__u64 nr;

	h1 = test_cmd_register(r, 3, &nr);
	EXPECT_EQ(8ULL, nr);
	EXPECT_EQ(pin0 + (long long)(8 * PAGE_SZ / 1024), vmpin_kb());

	/* Separate calls may pin the same pages; handles are distinct. */
	h2 = test_cmd_register(r, 1, &nr);
	EXPECT_EQ(2ULL, nr);
	EXPECT_NE(h1, h2);

	test_cmd_unregister(h1);
	test_cmd_unregister(h2);
	EXPECT_EQ(pin0, vmpin_kb());
}

TEST_F(svmbatch, register_touching_ranges)
{
	/* Adjacent but not overlapping, in both address orders. */
	struct svmbatch_range r[4] = {
		mkrange(page(self->buf, 4), 2 * PAGE_SZ, 0),
		mkrange(page(self->buf, 6), PAGE_SZ, SVMBATCH_RANGE_READ_ONLY),
		mkrange(page(self->buf, 2), 2 * PAGE_SZ, 0),
		mkrange(page(self->buf, 7), PAGE_SZ, 0),
	};
	__u32 h;
	__u64 nr;

	h = test_cmd_register(r, 4, &nr);
	EXPECT_EQ(6ULL, nr);
	test_cmd_unregister(h);
}

TEST_F(svmbatch, register_read_only_of_writable_memory)
{
	struct svmbatch_range r = mkrange(self->buf, NPAGES * PAGE_SZ,
					  SVMBATCH_RANGE_READ_ONLY);
	__u32 h;
	__u64 nr;

	h = test_cmd_register(&r, 1, &nr);
	EXPECT_EQ((__u64)NPAGES, nr);
	test_cmd_unregister(h);
}

/* Larger range_size whose extra bytes are zero: accepted. */
TEST_F(svmbatch, register_range_size_larger_zero_tail)
{
	const __u32 rsz = RANGE_SZ + 8;
	struct svmbatch_register cmd;
	char *arr = calloc(3, rsz);
	unsigned int i;

	ASSERT_NE(NULL, arr);
	for (i = 0; i < 3; i++)
		*(struct svmbatch_range *)(arr + i * rsz) =
			mkrange(page(self->buf, 3 * i), PAGE_SZ, 0);
	ASSERT_EQ(0, _test_cmd_register(self->fd, arr, 3, rsz, &cmd));
	EXPECT_EQ(SVMBATCH_NO_INDEX, cmd.error_index);
	EXPECT_EQ(3ULL, cmd.nr_pages);
	test_query_ranges_eq(self->fd, cmd.handle,
			     ((struct svmbatch_range[]){
				mkrange(page(self->buf, 0), PAGE_SZ, 0),
				mkrange(page(self->buf, 3), PAGE_SZ, 0),
				mkrange(page(self->buf, 6), PAGE_SZ, 0) }), 3);
	test_cmd_unregister(cmd.handle);
	free(arr);
}

/* Larger range_size with non-zero extra bytes in element k: E2BIG at k. */
TEST_F(svmbatch, register_range_size_larger_nonzero_tail)
{
	const __u32 rsz = RANGE_SZ + 8;
	unsigned int i, k;
	char *arr = calloc(4, rsz);

	ASSERT_NE(NULL, arr);
	for (k = 0; k < 4; k++) {
		memset(arr, 0, 4 * rsz);
		for (i = 0; i < 4; i++)
			*(struct svmbatch_range *)(arr + i * rsz) =
				mkrange(page(self->buf, 2 * i), PAGE_SZ, 0);
		arr[k * rsz + rsz - 1] = 1;
		test_err_register_sz(E2BIG, k, arr, 4, rsz);
	}
	/* The tail check comes before that element's own flags check. */
	memset(arr, 0, 4 * rsz);
	for (i = 0; i < 4; i++)
		*(struct svmbatch_range *)(arr + i * rsz) =
			mkrange(page(self->buf, 2 * i), PAGE_SZ, 0);
	arr[2 * rsz + RANGE_SZ] = 1;
	((struct svmbatch_range *)(arr + 2 * rsz))->flags = 1U << 30;
	test_err_register_sz(E2BIG, 2, arr, 4, rsz);
	free(arr);
}

/* --------------------------------------------- REGISTER, whole-call checks */

TEST_F(svmbatch, register_unknown_flags)
{
	static const __u32 bad[] = { 1U << 1, 1U << 2, 1U << 31 };
	struct svmbatch_range r = mkrange(self->buf, PAGE_SZ, 0);
	struct svmbatch_register cmd;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		memset(&cmd, 0, sizeof(cmd));
		cmd.size = sizeof(cmd);
		cmd.flags = bad[i];
		cmd.ranges = ptr_u64(&r);
		cmd.nr_ranges = 1;
		cmd.range_size = RANGE_SZ;
		test_err_register_cmd(EOPNOTSUPP, SVMBATCH_NO_INDEX, &cmd);
	}
}

TEST_F(svmbatch, register_zero_ranges)
{
	struct svmbatch_range r = mkrange(self->buf, PAGE_SZ, 0);

	test_err_register(EINVAL, SVMBATCH_NO_INDEX, &r, 0);
}

TEST_F(svmbatch, register_too_many_ranges)
{
	__u32 max = self->info.max_ranges;
	struct svmbatch_range *r;

	/* Zeroed (invalid) ranges: the count check comes first. */
	r = calloc((size_t)max + 1, RANGE_SZ);
	ASSERT_NE(NULL, r);
	test_err_register(E2BIG, SVMBATCH_NO_INDEX, r, max + 1);
	test_err_register(E2BIG, SVMBATCH_NO_INDEX, r, 0xffffffffU);
	free(r);
}

TEST_F(svmbatch, register_range_size_too_small)
{
	static const __u32 bad[] = { 0, 8, sizeof(struct svmbatch_range) - 1 };
	struct svmbatch_range r = mkrange(self->buf, PAGE_SZ, 0);
	size_t i;

	for (i = 0; i < ARRAY_SIZE(bad); i++)
		test_err_register_sz(EINVAL, SVMBATCH_NO_INDEX, &r, 1, bad[i]);
}

TEST_F(svmbatch, register_ranges_unreadable)
{
	struct svmbatch_range *arr;
	char *guard;

	test_err_register(EFAULT, SVMBATCH_NO_INDEX, NULL, 1);
	test_err_register(EFAULT, SVMBATCH_NO_INDEX, (void *)KERNEL_ADDR, 1);

	/* One readable element, the second one on a PROT_NONE page. */
	guard = mmap(NULL, 2 * PAGE_SZ, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, guard);
	ASSERT_EQ(0, mprotect(guard + PAGE_SZ, PAGE_SZ, PROT_NONE));
	test_err_register(EFAULT, SVMBATCH_NO_INDEX, guard + PAGE_SZ, 1);
	arr = (struct svmbatch_range *)(guard + PAGE_SZ) - 1;
	arr[0] = mkrange(self->buf, PAGE_SZ, 0);
	test_err_register(EFAULT, SVMBATCH_NO_INDEX, arr, 2);
	munmap(guard, 2 * PAGE_SZ);
}

/* Several whole-call faults at once: the first check of the list wins. */
TEST_F(svmbatch, register_call_check_order)
{
	struct svmbatch_range r = mkrange(self->buf, PAGE_SZ, 0);
	struct svmbatch_register cmd = {
		.size = sizeof(cmd),
		.flags = 1U << 31,
		.ranges = 0,
		.nr_ranges = 0,
		.range_size = 0,
	};

	/* flags, then nr_ranges == 0 ... */
	test_err_register_cmd(EOPNOTSUPP, SVMBATCH_NO_INDEX, &cmd);
	cmd.flags = 0;
	test_err_register_cmd(EINVAL, SVMBATCH_NO_INDEX, &cmd);
	/* ... nr_ranges too big before range_size and the pointer ... */
	cmd.nr_ranges = self->info.max_ranges + 1;
	test_err_register_cmd(E2BIG, SVMBATCH_NO_INDEX, &cmd);
	/* ... range_size before the pointer ... */
	cmd.nr_ranges = 1;
	test_err_register_cmd(EINVAL, SVMBATCH_NO_INDEX, &cmd);
	/* ... the pointer last. */
	cmd.range_size = RANGE_SZ;
	test_err_register_cmd(EFAULT, SVMBATCH_NO_INDEX, &cmd);
	cmd.ranges = ptr_u64(&r);
	_test_unregister(self->fd, test_cmd_register(&r, 1, NULL));
}

/* ------------------------------------------------ REGISTER, per range */

enum bad_kind {
	BAD_FLAGS_LOW, BAD_FLAGS_HIGH, BAD_RESERVED, BAD_LEN_ZERO,
	BAD_ADDR_UNALIGNED, BAD_ADDR_HALF_PAGE, BAD_LEN_UNALIGNED,
	BAD_LEN_TOO_BIG, BAD_LEN_TOO_BIG_UNALIGNED, BAD_WRAP, BAD_WRAP_LONG,
	BAD_WRAP_AND_TOO_BIG, BAD_BEYOND_TASK_SIZE, BAD_KERNEL_ADDR,
	BAD_FLAGS_AND_RESERVED,
};

FIXTURE(bad_range) {
	int fd;
	struct svmbatch_info info;
	char *buf;
};

FIXTURE_VARIANT(bad_range) {
	enum bad_kind kind;
	int err;
};

FIXTURE_VARIANT_ADD(bad_range, flags_low) { BAD_FLAGS_LOW, EOPNOTSUPP };
FIXTURE_VARIANT_ADD(bad_range, flags_high) { BAD_FLAGS_HIGH, EOPNOTSUPP };
FIXTURE_VARIANT_ADD(bad_range, flags_and_reserved) {
	BAD_FLAGS_AND_RESERVED, EOPNOTSUPP };
FIXTURE_VARIANT_ADD(bad_range, reserved) { BAD_RESERVED, EINVAL };
FIXTURE_VARIANT_ADD(bad_range, len_zero) { BAD_LEN_ZERO, EINVAL };
FIXTURE_VARIANT_ADD(bad_range, addr_unaligned) { BAD_ADDR_UNALIGNED, EINVAL };
FIXTURE_VARIANT_ADD(bad_range, addr_half_page) { BAD_ADDR_HALF_PAGE, EINVAL };
FIXTURE_VARIANT_ADD(bad_range, len_unaligned) { BAD_LEN_UNALIGNED, EINVAL };
FIXTURE_VARIANT_ADD(bad_range, len_too_big) { BAD_LEN_TOO_BIG, E2BIG };
FIXTURE_VARIANT_ADD(bad_range, len_too_big_unaligned) {
	BAD_LEN_TOO_BIG_UNALIGNED, EINVAL };
FIXTURE_VARIANT_ADD(bad_range, wrap) { BAD_WRAP, EOVERFLOW };
FIXTURE_VARIANT_ADD(bad_range, wrap_long) { BAD_WRAP_LONG, EOVERFLOW };
FIXTURE_VARIANT_ADD(bad_range, wrap_and_too_big) {
	BAD_WRAP_AND_TOO_BIG, E2BIG };
FIXTURE_VARIANT_ADD(bad_range, beyond_task_size) {
	BAD_BEYOND_TASK_SIZE, EFAULT };
FIXTURE_VARIANT_ADD(bad_range, kernel_addr) { BAD_KERNEL_ADDR, EFAULT };

FIXTURE_SETUP(bad_range)
{
	svmbatch_fixture_setup(NPAGES);
	test_cmd_get_info(&self->info);
}

FIXTURE_TEARDOWN(bad_range)
{
	svmbatch_fixture_release(self->fd, self->buf, NPAGES);
}

static void make_bad(struct svmbatch_range *r, enum bad_kind kind,
		     const struct svmbatch_info *info)
{
	const __u64 top = 0ULL - PAGE_SZ;	/* last page of 2^64 */

	switch (kind) {
	case BAD_FLAGS_LOW:
		r->flags |= 1U << 1;
		break;
	case BAD_FLAGS_HIGH:
		r->flags |= 1U << 31;
		break;
	case BAD_FLAGS_AND_RESERVED:
		r->flags |= 1U << 5;
		r->reserved = 1;
		break;
	case BAD_RESERVED:
		r->reserved = 0x80000000U;
		break;
	case BAD_LEN_ZERO:
		r->len = 0;
		break;
	case BAD_ADDR_UNALIGNED:
		r->addr += 1;
		break;
	case BAD_ADDR_HALF_PAGE:
		r->addr += PAGE_SZ / 2;
		break;
	case BAD_LEN_UNALIGNED:
		r->len = PAGE_SZ + 8;
		break;
	case BAD_LEN_TOO_BIG:
		r->len = info->max_range_bytes + PAGE_SZ;
		break;
	case BAD_LEN_TOO_BIG_UNALIGNED:
		r->len = info->max_range_bytes + 1;
		break;
	case BAD_WRAP:
		r->addr = top;
		r->len = 2 * PAGE_SZ;
		break;
	case BAD_WRAP_LONG:
		r->addr = top - 15 * PAGE_SZ;
		r->len = 1ULL << 30;
		break;
	case BAD_WRAP_AND_TOO_BIG:
		r->addr = top;
		r->len = info->max_range_bytes + PAGE_SZ;
		break;
	case BAD_BEYOND_TASK_SIZE:
		r->addr = task_size() - PAGE_SZ;
		r->len = 2 * PAGE_SZ;
		break;
	case BAD_KERNEL_ADDR:
		r->addr = KERNEL_ADDR;
		r->len = PAGE_SZ;
		break;
	}
}

/* Range k of five is bad; a later range is bad in another way. */
TEST_F(bad_range, first_bad_range_wins)
{
	static const unsigned int idx[] = { 0, 1, 4 };
	struct svmbatch_range r[5];
	unsigned int i, k;

	for (k = 0; k < ARRAY_SIZE(idx); k++) {
		for (i = 0; i < 5; i++)
			r[i] = mkrange(self->buf + 2 * i * PAGE_SZ, PAGE_SZ,
				       i & 1 ? SVMBATCH_RANGE_READ_ONLY : 0);
		make_bad(&r[idx[k]], variant->kind, &self->info);
		if (idx[k] < 4)
			make_bad(&r[4], variant->kind == BAD_LEN_ZERO ?
				 BAD_WRAP : BAD_LEN_ZERO, &self->info);
		test_err_register(variant->err, idx[k], r, 5);
	}
}

/* Per-range checks run over the whole array before overlap and pinning. */
TEST_F(bad_range, before_overlap_and_pinning)
{
	void *hole = unmapped_hole(PAGE_SZ);
	struct svmbatch_range r[4] = {
		mkrange(hole, PAGE_SZ, 0),		/* would fail to pin */
		mkrange(self->buf, 2 * PAGE_SZ, 0),
		mkrange(self->buf + PAGE_SZ, PAGE_SZ, 0),	/* overlaps 1 */
		mkrange(self->buf + 8 * PAGE_SZ, PAGE_SZ, 0),
	};

	ASSERT_NE(NULL, hole);
	make_bad(&r[3], variant->kind, &self->info);
	test_err_register(variant->err, 3, r, 4);
}

/* ----------------------------------------------------- REGISTER, overlap */

struct overlap_case {
	const char *name;
	unsigned int nr;
	/* {first page, pages} per range */
	unsigned int pg[6][2];
	unsigned int err_index;
};

static const struct overlap_case overlap_cases[] = {
	{ "identical", 2, { { 0, 1 }, { 0, 1 } }, 1 },
	{ "partial", 2, { { 0, 2 }, { 1, 2 } }, 1 },
	{ "partial_lower_later", 2, { { 1, 2 }, { 0, 2 } }, 1 },
	{ "contained", 3, { { 0, 8 }, { 20, 1 }, { 3, 2 } }, 2 },
	{ "containing", 3, { { 3, 2 }, { 20, 1 }, { 0, 8 } }, 2 },
	{ "later_lower_address", 3, { { 10, 2 }, { 5, 1 }, { 11, 1 } }, 2 },
	{ "smallest_later_index", 5,
	  { { 0, 2 }, { 10, 1 }, { 20, 1 }, { 1, 1 }, { 10, 1 } }, 3 },
	{ "pair_not_neighbours", 5,
	  { { 30, 1 }, { 4, 4 }, { 20, 1 }, { 6, 1 }, { 30, 1 } }, 3 },
	{ "big_first", 4, { { 0, 16 }, { 20, 1 }, { 15, 1 }, { 20, 1 } }, 2 },
};

TEST_F(svmbatch, register_overlap)
{
	struct svmbatch_range r[6];
	const struct overlap_case *c;
	unsigned int i, j;

	for (i = 0; i < ARRAY_SIZE(overlap_cases); i++) {
		c = &overlap_cases[i];
		TH_LOG("case %s", c->name);
		for (j = 0; j < c->nr; j++)
			r[j] = mkrange(page(self->buf, c->pg[j][0]),
				       c->pg[j][1] * PAGE_SZ,
				       j == 0 ? SVMBATCH_RANGE_READ_ONLY : 0);
		test_err_register(EINVAL, c->err_index, r, c->nr);
	}
}

/* Only the last of 1000 ranges overlaps, with the first. */
TEST_F_TIMEOUT(svmbatch, register_overlap_far_apart, 120)
{
	const unsigned int nr = 1000;
	struct svmbatch_range *r = calloc(nr, RANGE_SZ);
	char *mem = anon_map(2 * nr * PAGE_SZ);
	unsigned int i;
	__u32 h;

	ASSERT_NE(NULL, r);
	ASSERT_NE(NULL, mem);
	for (i = 0; i < nr; i++)
		r[i] = mkrange(mem + 2 * i * PAGE_SZ, PAGE_SZ, 0);
	h = test_cmd_register(r, nr, NULL);
	test_cmd_unregister(h);
	r[nr - 1] = mkrange(mem, PAGE_SZ, 0);
	test_err_register(EINVAL, nr - 1, r, nr);
	munmap(mem, 2 * nr * PAGE_SZ);
	free(r);
}

/* Overlap is checked before pinning: an unpinnable range 0 does not win. */
TEST_F(svmbatch, register_overlap_before_pinning)
{
	void *hole = unmapped_hole(PAGE_SZ);
	struct svmbatch_range r[3] = {
		mkrange(hole, PAGE_SZ, 0),
		mkrange(page(self->buf, 2), PAGE_SZ, 0),
		mkrange(page(self->buf, 2), PAGE_SZ, 0),
	};

	ASSERT_NE(NULL, hole);
	test_err_register(EINVAL, 2, r, 3);
}

/* A range beyond TASK_SIZE is a per-range check, not left to GUP. */
TEST_F(svmbatch, register_task_size_before_overlap)
{
	struct svmbatch_range r[4] = {
		mkrange(page(self->buf, 0), PAGE_SZ, 0),
		mkrange((void *)KERNEL_ADDR, PAGE_SZ, 0),
		mkrange(page(self->buf, 2), PAGE_SZ, 0),
		mkrange(page(self->buf, 2), PAGE_SZ, 0),
	};

	test_err_register(EFAULT, 1, r, 4);
}

/* len == max_range_bytes passes validation (then fails to pin PROT_NONE). */
TEST_F(svmbatch, register_len_at_max_range_bytes)
{
	__u64 max = self->info.max_range_bytes;
	struct svmbatch_range r[2];
	void *resv;

	if (max > (1ULL << 40))
		SKIP(return, "max_range_bytes %llu too big to reserve",
		     (unsigned long long)max);
	resv = mmap(NULL, max + PAGE_SZ, PROT_NONE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	ASSERT_NE(MAP_FAILED, resv);
	r[0] = mkrange(self->buf, PAGE_SZ, 0);
	r[1] = mkrange(resv, max, SVMBATCH_RANGE_READ_ONLY);
	test_err_register(EFAULT, 1, r, 2);
	r[1].len = max + PAGE_SZ;
	test_err_register(E2BIG, 1, r, 2);
	munmap(resv, max + PAGE_SZ);
}

/* ----------------------------------------------------- REGISTER, pinning */

TEST_F(svmbatch, pin_hole_inside_range)
{
	struct svmbatch_range r[3] = {
		mkrange(page(self->buf, 0), PAGE_SZ, 0),
		mkrange(page(self->buf, 10), 3 * PAGE_SZ, 0),
		mkrange(page(self->buf, 20), PAGE_SZ, 0),
	};

	ASSERT_EQ(0, munmap(page(self->buf, 11), PAGE_SZ));
	test_err_register(EFAULT, 1, r, 3);
	r[1].flags = SVMBATCH_RANGE_READ_ONLY;
	test_err_register(EFAULT, 1, r, 3);
	/* A hole at the very end of the range, after a pinned part. */
	r[1] = mkrange(page(self->buf, 9), 3 * PAGE_SZ, 0);
	test_err_register(EFAULT, 1, r, 3);
}

TEST_F(svmbatch, pin_prot_none)
{
	struct svmbatch_range r[2] = {
		mkrange(page(self->buf, 0), PAGE_SZ, 0),
		mkrange(page(self->buf, 4), 4 * PAGE_SZ, 0),
	};

	ASSERT_EQ(0, mprotect(page(self->buf, 6), PAGE_SZ, PROT_NONE));
	test_err_register(EFAULT, 1, r, 2);
	r[1].flags = SVMBATCH_RANGE_READ_ONLY;
	test_err_register(EFAULT, 1, r, 2);
}

TEST_F(svmbatch, pin_write_of_read_only_mapping)
{
	struct svmbatch_range r[3] = {
		mkrange(page(self->buf, 0), PAGE_SZ, 0),
		mkrange(page(self->buf, 30), PAGE_SZ, 0),
		mkrange(page(self->buf, 8), 2 * PAGE_SZ, 0),
	};
	__u32 h;

	ASSERT_EQ(0, mprotect(page(self->buf, 8), 2 * PAGE_SZ, PROT_READ));
	test_err_register(EFAULT, 2, r, 3);
	/* Read-only pin of the same mapping works. */
	r[2].flags = SVMBATCH_RANGE_READ_ONLY;
	h = test_cmd_register(r, 3, NULL);
	test_cmd_unregister(h);
}

/*
 * VM_PFNMAP sources.  vgem GEM objects are drm_gem_shmem objects whose
 * mmap sets VM_PFNMAP and inserts PFNs (vmf_insert_pfn), on 6.1 and 6.12;
 * /dev/mem uses remap_pfn_range (VM_IO | VM_PFNMAP) where it is available.
 * The test checks smaps' "pf" flag so it cannot pass on a normal mapping.
 */
TEST_F(svmbatch, pin_pfnmap_vgem)
{
	struct drm_mode_create_dumb create = {
		.height = 4, .width = PAGE_SZ / 4, .bpp = 32,
	};
	struct drm_mode_map_dumb map = { 0 };
	struct svmbatch_range r[2];
	char *p;
	int card;

	vgem_open_or_skip(card);
	ASSERT_EQ(0, ioctl(card, DRM_IOCTL_MODE_CREATE_DUMB, &create));
	map.handle = create.handle;
	ASSERT_EQ(0, ioctl(card, DRM_IOCTL_MODE_MAP_DUMB, &map));
	p = mmap(NULL, create.size, PROT_READ | PROT_WRITE, MAP_SHARED, card,
		 map.offset);
	ASSERT_NE(MAP_FAILED, p);
	memset(p, 0x3c, create.size);	/* populate the PFNs */
	ASSERT_TRUE(smaps_has_vmflag(p, "pf")) {
		TH_LOG("vgem mapping is not VM_PFNMAP on this kernel");
	}

	r[0] = mkrange(self->buf, PAGE_SZ, 0);
	r[1] = mkrange(p, create.size & ~(PAGE_SZ - 1),
		       SVMBATCH_RANGE_READ_ONLY);
	test_err_register(EFAULT, 1, r, 2);
	r[1].flags = 0;
	test_err_register(EFAULT, 1, r, 2);
	munmap(p, create.size);
	close(card);
}

TEST_F(svmbatch, pin_pfnmap_devmem)
{
	struct svmbatch_range r[2];
	int mem = open("/dev/mem", O_RDONLY | O_CLOEXEC);
	char *p;

	if (mem < 0)
		SKIP(return, "/dev/mem: %s", strerror(errno));
	/* The BIOS area below 1 MiB is readable even with STRICT_DEVMEM. */
	p = mmap(NULL, PAGE_SZ, PROT_READ, MAP_SHARED, mem, 0xf0000);
	if (p == MAP_FAILED)
		SKIP(goto out, "mmap /dev/mem: %s", strerror(errno));
	ASSERT_TRUE(smaps_has_vmflag(p, "pf"));
	r[0] = mkrange(self->buf, PAGE_SZ, 0);
	r[1] = mkrange(p, PAGE_SZ, SVMBATCH_RANGE_READ_ONLY);
	test_err_register(EFAULT, 1, r, 2);
	munmap(p, PAGE_SZ);
out:
	close(mem);
}

/* ---------------------------------------------------------- UNREGISTER */

TEST_F(svmbatch, unregister_unknown_handle)
{
	struct svmbatch_range r = mkrange(self->buf, PAGE_SZ, 0);
	long long pin0 = vmpin_kb();
	__u32 h;

	test_err_unregister(ENOENT, 0);
	test_err_unregister(ENOENT, 12345);
	test_err_unregister(ENOENT, 0xffffffffU);
	h = test_cmd_register(&r, 1, NULL);
	test_err_unregister(ENOENT, h + 1);
	test_cmd_unregister(h);
	EXPECT_EQ(pin0, vmpin_kb());
	test_err_unregister(ENOENT, h);
}

/*
 * Handles are allocated cyclically: a dropped handle is not handed out
 * again at once, so a stale handle cannot name a newer registration.
 */
TEST_F(svmbatch, handles_not_reused_at_once)
{
	struct svmbatch_range r = mkrange(self->buf, PAGE_SZ, 0);
	__u32 h1, h2, h3;

	h1 = test_cmd_register(&r, 1, NULL);
	test_cmd_unregister(h1);
	h2 = test_cmd_register(&r, 1, NULL);
	EXPECT_NE(h1, h2);
	EXPECT_EQ(h1 + 1, h2);
	test_err_unregister(ENOENT, h1);
	test_cmd_unregister(h2);
	h3 = test_cmd_register(&r, 1, NULL);
	EXPECT_EQ(h2 + 1, h3);
	test_cmd_unregister(h3);
}

/* Handles are per open file: another fd of the same process cannot use it. */
TEST_F(svmbatch, handles_are_per_fd)
{
	struct svmbatch_range r = mkrange(self->buf, PAGE_SZ, 0);
	struct svmbatch_query q;
	int fd2 = open(SVMBATCH_DEV, O_RDWR | O_CLOEXEC);
	__u32 h;

	ASSERT_LE(0, fd2);
	h = test_cmd_register(&r, 1, NULL);
	EXPECT_ERRNO(ENOENT, _test_cmd_query(fd2, h, NULL, 0, RANGE_SZ, &q));
	EXPECT_ERRNO(ENOENT, _test_unregister(fd2, h));
	test_cmd_query(h, &q);
	test_cmd_unregister(h);
	close(fd2);
}

/* --------------------------------------------------------------- QUERY */

TEST_F(svmbatch, query_basic)
{
	struct svmbatch_range r[3] = {
		mkrange(page(self->buf, 20), 2 * PAGE_SZ, 0),
		mkrange(page(self->buf, 2), PAGE_SZ, SVMBATCH_RANGE_READ_ONLY),
		mkrange(page(self->buf, 40), 3 * PAGE_SZ, 0),
	};
	struct svmbatch_query q;
	__u32 h;

	h = test_cmd_register(r, 3, NULL);
	test_cmd_query(h, &q);
	EXPECT_EQ(3U, q.nr_ranges);
	EXPECT_EQ(6ULL, q.nr_pages);
	EXPECT_LE(1ULL, q.nr_segments);
	EXPECT_GE(6ULL, q.nr_segments);
	EXPECT_LE(1ULL, q.nr_folios);
	EXPECT_GE(6ULL, q.nr_folios);
	EXPECT_LT(0ULL, q.meta_bytes);
	EXPECT_EQ(0U, q.out_flags);
	EXPECT_EQ(0U, q.reserved);
	EXPECT_EQ(h, q.handle);
	/* Ranges come back in the caller's order, not sorted. */
	test_query_ranges_eq(self->fd, h, r, 3);
	test_cmd_unregister(h);
}

TEST_F(svmbatch, query_ranges_cap_too_small)
{
	struct svmbatch_range r[3] = {
		mkrange(page(self->buf, 0), PAGE_SZ, 0),
		mkrange(page(self->buf, 4), PAGE_SZ, 0),
		mkrange(page(self->buf, 8), PAGE_SZ, 0),
	};
	struct svmbatch_range out[4];
	struct svmbatch_query q;
	unsigned int cap;
	size_t i;
	__u32 h;

	h = test_cmd_register(r, 3, NULL);
	for (cap = 0; cap < 3; cap++) {
		memset(out, 0xa5, sizeof(out));
		EXPECT_ERRNO(EMSGSIZE, _test_cmd_query(self->fd, h, out, cap,
						       RANGE_SZ, &q));
		EXPECT_EQ(3U, q.nr_ranges);
		for (i = 0; i < sizeof(out); i++)
			ASSERT_EQ(0xa5, ((unsigned char *)out)[i]) {
				TH_LOG("cap %u: byte %zu was written", cap, i);
			}
	}
	/* cap > nr_ranges: entries past nr_ranges are untouched. */
	memset(out, 0xa5, sizeof(out));
	test_cmd_query_ranges(h, out, 4, &q);
	EXPECT_EQ(3U, q.nr_ranges);
	EXPECT_EQ(r[2].addr, out[2].addr);
	for (i = 0; i < sizeof(out[3]); i++)
		ASSERT_EQ(0xa5, ((unsigned char *)&out[3])[i]);
	/* No array: no cap needed. */
	test_cmd_query(h, &q);
	EXPECT_EQ(3U, q.nr_ranges);
	test_cmd_unregister(h);
}

TEST_F(svmbatch, query_range_size_larger)
{
	const __u32 rsz = RANGE_SZ + 16;
	struct svmbatch_range r[3] = {
		mkrange(page(self->buf, 9), PAGE_SZ, 0),
		mkrange(page(self->buf, 1), 2 * PAGE_SZ,
			SVMBATCH_RANGE_READ_ONLY),
		mkrange(page(self->buf, 5), PAGE_SZ, 0),
	};
	struct svmbatch_range *got;
	struct svmbatch_query q;
	char out[3 * (sizeof(struct svmbatch_range) + 16)];
	unsigned int i;
	__u32 h;

	h = test_cmd_register(r, 3, NULL);
	memset(out, 0xa5, sizeof(out));
	ASSERT_EQ(0, _test_cmd_query(self->fd, h, out, 3, rsz, &q));
	for (i = 0; i < 3; i++) {
		got = (struct svmbatch_range *)(out + i * rsz);
		EXPECT_EQ(r[i].addr, got->addr);
		EXPECT_EQ(r[i].len, got->len);
		EXPECT_EQ(r[i].flags, got->flags);
	}
	test_cmd_unregister(h);
}

TEST_F(svmbatch, query_unknown_handle)
{
	struct svmbatch_range r = mkrange(self->buf, PAGE_SZ, 0);
	__u32 h;

	test_err_query(ENOENT, 0);
	test_err_query(ENOENT, 777);
	h = test_cmd_register(&r, 1, NULL);
	test_err_query(ENOENT, h + 1);
	test_cmd_unregister(h);
	test_err_query(ENOENT, h);
}

TEST_F(svmbatch, query_flags_and_reserved)
{
	struct svmbatch_range r = mkrange(self->buf, PAGE_SZ, 0);
	struct svmbatch_query q;
	__u32 h;

	h = test_cmd_register(&r, 1, NULL);
	memset(&q, 0, sizeof(q));
	q.size = sizeof(q);
	q.handle = h;
	q.flags = 1U << 0;
	EXPECT_ERRNO(EOPNOTSUPP, ioctl(self->fd, SVMBATCH_QUERY, &q));
	q.flags = 1U << 31;
	EXPECT_ERRNO(EOPNOTSUPP, ioctl(self->fd, SVMBATCH_QUERY, &q));
	q.flags = 0;
	q.reserved = 1;
	EXPECT_ERRNO(EINVAL, ioctl(self->fd, SVMBATCH_QUERY, &q));
	q.reserved = 0;
	EXPECT_EQ(0, ioctl(self->fd, SVMBATCH_QUERY, &q));
	test_cmd_unregister(h);
}

/* ------------------------------------------ struct size rules, per command */

FIXTURE(struct_size) {
	int fd;
	char *buf;
	__u32 handle;	/* a live registration for UNREGISTER and QUERY */
	struct svmbatch_range range;
};

/*
 * v1_size: the struct as this ABI knows it; min_size: the first ABI's
 * struct (REGISTER grew @eventfd and @reserved), the least the module takes.
 */
FIXTURE_VARIANT(struct_size) {
	unsigned long cmd;
	size_t v1_size;
	size_t min_size;
};

FIXTURE_VARIANT_ADD(struct_size, get_info) {
	SVMBATCH_GET_INFO, sizeof(struct svmbatch_info),
	sizeof(struct svmbatch_info) };
FIXTURE_VARIANT_ADD(struct_size, register) {
	SVMBATCH_REGISTER, sizeof(struct svmbatch_register),
	offsetof(struct svmbatch_register, eventfd) };
FIXTURE_VARIANT_ADD(struct_size, unregister) {
	SVMBATCH_UNREGISTER, sizeof(struct svmbatch_unregister),
	sizeof(struct svmbatch_unregister) };
FIXTURE_VARIANT_ADD(struct_size, query) {
	SVMBATCH_QUERY, sizeof(struct svmbatch_query),
	sizeof(struct svmbatch_query) };

FIXTURE_SETUP(struct_size)
{
	svmbatch_open_or_skip(self->fd);
	self->buf = anon_map(4 * PAGE_SZ);
	ASSERT_NE(NULL, self->buf);
	self->range = mkrange(self->buf, 2 * PAGE_SZ, 0);
	self->handle = test_cmd_register_fd(self->fd, &self->range, 1, NULL);
}

FIXTURE_TEARDOWN(struct_size)
{
	if (self->fd > 0)
		close(self->fd);
	if (self->buf)
		munmap(self->buf, 4 * PAGE_SZ);
}

#define ARG_TAIL 16	/* bytes beyond the v1 struct */
#define ARG_SLACK 16	/* canary bytes beyond "size" */

/* A valid v1 argument for the variant's command, zero up to @len. */
static void prep_arg(unsigned long cmd, size_t v1_size,
		     const struct svmbatch_range *range, __u32 handle,
		     void *arg, size_t len)
{
	struct svmbatch_register *reg = arg;
	struct svmbatch_unregister *unreg = arg;
	struct svmbatch_query *q = arg;

	memset(arg, 0, len);
	*(__u32 *)arg = v1_size;
	switch (cmd) {
	case SVMBATCH_REGISTER:
		reg->ranges = ptr_u64(range);
		reg->nr_ranges = 1;
		reg->range_size = RANGE_SZ;
		break;
	case SVMBATCH_UNREGISTER:
		unreg->handle = handle;
		break;
	case SVMBATCH_QUERY:
		q->handle = handle;
		q->range_size = RANGE_SZ;
		break;
	}
}

/* Every failed REGISTER counts, whatever step refused it. */
static void check_failure_counted(struct __test_metadata *_metadata,
				  unsigned long cmd,
				  const struct svmbatch_snapshot *before,
				  const struct svmbatch_snapshot *after)
{
	unsigned long long want = cmd == SVMBATCH_REGISTER;

	EXPECT_EQ(before->fd_failed + want, after->fd_failed);
	EXPECT_EQ(snap_stat(before, "failed_registrations")->val + want,
		  snap_stat(after, "failed_registrations")->val);
}

/*
 * @cmd with @arg must fail with @err (@what and @at say which case, in the
 * log), leave nothing behind, and count as a failure where it should.
 */
static void expect_refused(struct __test_metadata *_metadata, int fd,
			   unsigned long cmd, void *arg, int err,
			   const char *what, size_t at)
{
	struct svmbatch_snapshot before, after;

	snapshot_take(_metadata, fd, &before);
	errno = 0;
	EXPECT_EQ(-1, ioctl(fd, cmd, arg));
	EXPECT_EQ(err, errno) TH_LOG("%s %zu", what, at);
	snapshot_take(_metadata, fd, &after);
	ASSERT_SNAPSHOT_EQ(&before, &after);
	check_failure_counted(_metadata, cmd, &before, &after);
}

/* Undo what a successful call did, so that snapshots compare. */
static void undo_arg(int fd, unsigned long cmd, void *arg)
{
	if (cmd == SVMBATCH_REGISTER)
		_test_unregister(fd,
				 ((struct svmbatch_register *)arg)->handle);
}

TEST_F(struct_size, too_small)
{
	const size_t v1 = variant->min_size;
	const size_t sizes[] = { 0, 4, 8, v1 - 4, v1 - 1 };
	unsigned char arg[256], ref[256];
	size_t i, b;

	for (i = 0; i < ARRAY_SIZE(sizes); i++) {
		if (sizes[i] >= v1)
			continue;
		prep_arg(variant->cmd, variant->v1_size, &self->range,
			 self->handle, arg, sizeof(arg));
		*(__u32 *)arg = sizes[i];
		memset(arg + v1, 0xa5, sizeof(arg) - v1);
		memcpy(ref, arg, sizeof(arg));
		expect_refused(_metadata, self->fd, variant->cmd, arg, EINVAL,
			       "size", sizes[i]);
		/* Never more than "size" bytes written back. */
		for (b = sizes[i] > 4 ? sizes[i] : 4; b < sizeof(arg); b++)
			ASSERT_EQ(ref[b], arg[b]) {
				TH_LOG("size %zu: byte %zu written", sizes[i],
				       b);
			}
	}
}

TEST_F(struct_size, larger_nonzero_tail)
{
	const size_t v1 = variant->v1_size;
	unsigned char arg[256];
	size_t t;

	for (t = v1; t < v1 + ARG_TAIL; t += 5) {
		prep_arg(variant->cmd, variant->v1_size, &self->range,
			 self->handle, arg, sizeof(arg));
		*(__u32 *)arg = v1 + ARG_TAIL;
		arg[t] = 0x01;
		expect_refused(_metadata, self->fd, variant->cmd, arg, E2BIG,
			       "non-zero byte at", t);
	}
}

/* A caller built against the first ABI (REGISTER without @eventfd). */
TEST_F(struct_size, first_abi_size)
{
	const size_t min = variant->min_size;
	struct svmbatch_snapshot before, after;
	unsigned char arg[256];
	size_t b;

	prep_arg(variant->cmd, min, &self->range, self->handle, arg,
		 sizeof(arg));
	memset(arg + min, 0xa5, sizeof(arg) - min);
	snapshot_take(_metadata, self->fd, &before);
	ASSERT_EQ(0, ioctl(self->fd, variant->cmd, arg)) {
		TH_LOG("size %zu: %s", min, strerror(errno));
	}
	for (b = min; b < sizeof(arg); b++)
		ASSERT_EQ(0xa5, arg[b]) TH_LOG("byte %zu past size written", b);
	undo_arg(self->fd, variant->cmd, arg);
	if (variant->cmd == SVMBATCH_UNREGISTER)
		return;
	snapshot_take(_metadata, self->fd, &after);
	ASSERT_SNAPSHOT_EQ(&before, &after);
}

TEST_F(struct_size, larger_zero_tail)
{
	const size_t v1 = variant->v1_size;
	struct svmbatch_snapshot before, after;
	unsigned char arg[256];
	size_t b;

	prep_arg(variant->cmd, variant->v1_size, &self->range,
		 self->handle, arg, sizeof(arg));
	*(__u32 *)arg = v1 + ARG_TAIL;
	memset(arg + v1 + ARG_TAIL, 0xa5, ARG_SLACK);
	snapshot_take(_metadata, self->fd, &before);
	ASSERT_EQ(0, ioctl(self->fd, variant->cmd, arg)) {
		TH_LOG("size %zu with zero tail: %s", v1 + ARG_TAIL,
		       strerror(errno));
	}
	for (b = v1; b < v1 + ARG_TAIL; b++)
		ASSERT_EQ(0, arg[b]) TH_LOG("tail byte %zu written", b);
	for (; b < v1 + ARG_TAIL + ARG_SLACK; b++)
		ASSERT_EQ(0xa5, arg[b]) TH_LOG("byte %zu past size written", b);
	if (variant->cmd == SVMBATCH_GET_INFO)
		EXPECT_EQ(SVMBATCH_ABI_VERSION,
			  ((struct svmbatch_info *)arg)->abi_version);
	if (variant->cmd == SVMBATCH_QUERY)
		EXPECT_EQ(2ULL, ((struct svmbatch_query *)arg)->nr_pages);
	if (variant->cmd == SVMBATCH_REGISTER)
		EXPECT_EQ(2ULL, ((struct svmbatch_register *)arg)->nr_pages);
	undo_arg(self->fd, variant->cmd, arg);
	if (variant->cmd == SVMBATCH_UNREGISTER) {
		test_err_query(ENOENT, self->handle);
		return;
	}
	snapshot_take(_metadata, self->fd, &after);
	ASSERT_SNAPSHOT_EQ(&before, &after);
}

TEST_HARNESS_MAIN
