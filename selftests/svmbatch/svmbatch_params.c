// SPDX-License-Identifier: GPL-2.0
/*
 * Module parameters: each one takes only values within its documented
 * bounds, and at the largest value the calls they limit still fail cleanly
 * (no kernel WARN from an allocation sized by them; the guest runner fails
 * the run on any splat).  Every test restores the values it changed.
 */
#include "svmbatch_utils.h"

#define PARAM_DIR	"/sys/module/svmbatch/parameters/"
#define RANGES_LIMIT	65536U
#define REGS_LIMIT	1048576U
#define BYTES_LIMIT	1099511627776ULL

static const char * const params[] = {
	"max_ranges", "max_registrations", "max_range_bytes",
};

FIXTURE(params) {
	int fd;
	char saved[3][64];
};

static int param_read(const char *name, char *buf, size_t len)
{
	char path[128];

	snprintf(path, sizeof(path), PARAM_DIR "%s", name);
	return read_file(path, buf, len) < 0 ? -1 : 0;
}

/* 0, or the errno with which the kernel refused the value. */
static int param_write(const char *name, const char *val)
{
	char path[128];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), PARAM_DIR "%s", name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	n = write(fd, val, strlen(val));
	n = n < 0 ? errno : 0;
	close(fd);
	return n;
}

FIXTURE_SETUP(params)
{
	unsigned int i;

	svmbatch_open_or_skip(self->fd);
	for (i = 0; i < ARRAY_SIZE(params); i++)
		ASSERT_EQ(0, param_read(params[i], self->saved[i],
					sizeof(self->saved[i])));
}

FIXTURE_TEARDOWN(params)
{
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(params); i++)
		if (self->saved[i][0])
			param_write(params[i], self->saved[i]);
	if (self->fd > 0)
		close(self->fd);
}

/* Values outside the bounds are refused with EINVAL and change nothing. */
TEST_F(params, out_of_bounds_refused)
{
	static const struct {
		const char *name, *val;
	} bad[] = {
		{ "max_ranges", "0" }, { "max_ranges", "65537" },
		{ "max_ranges", "4294967295" }, { "max_ranges", "-1" },
		{ "max_ranges", "many" },
		{ "max_registrations", "0" },
		{ "max_registrations", "1048577" },
		{ "max_registrations", "4294967295" },
		{ "max_range_bytes", "0" }, { "max_range_bytes", "4095" },
		{ "max_range_bytes", "1099511627777" },
		{ "max_range_bytes", "18446744073709551615" },
		{ "max_range_bytes", "-1" },
	};
	char before[64], after[64];
	unsigned int i;
	int err;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		ASSERT_EQ(0, param_read(bad[i].name, before, sizeof(before)));
		err = param_write(bad[i].name, bad[i].val);
		EXPECT_EQ(EINVAL, err) {
			TH_LOG("%s=%s: %s", bad[i].name, bad[i].val,
			       err ? strerror(err) : "accepted");
		}
		ASSERT_EQ(0, param_read(bad[i].name, after, sizeof(after)));
		EXPECT_STREQ(before, after);
	}
}

/* The bounds themselves are accepted, reported by GET_INFO, and hold. */
TEST_F(params, limits_accepted_and_reported)
{
	struct svmbatch_info info;

	ASSERT_EQ(0, param_write("max_ranges", "65536"));
	ASSERT_EQ(0, param_write("max_registrations", "1048576"));
	ASSERT_EQ(0, param_write("max_range_bytes", "1099511627776"));
	test_cmd_get_info(&info);
	EXPECT_EQ(RANGES_LIMIT, info.max_ranges);
	EXPECT_EQ(REGS_LIMIT, info.max_registrations);
	EXPECT_EQ(BYTES_LIMIT, info.max_range_bytes);
	ASSERT_EQ(0, param_write("max_ranges", "1"));
	ASSERT_EQ(0, param_write("max_range_bytes", "4096"));
	test_cmd_get_info(&info);
	EXPECT_EQ(1U, info.max_ranges);
	EXPECT_EQ(4096ULL, info.max_range_bytes);
}

/*
 * At max_ranges = 2^16, a REGISTER of 2^16 one-page ranges allocates every
 * table at its largest (ranges, overlap check, address index, notifier),
 * checks and charges them, and fails at the first pin (the pages are
 * PROT_NONE) with nothing left behind; one range more is E2BIG, and so is
 * a huge nr_ranges.
 */
TEST_F_TIMEOUT(params, max_ranges_at_its_bound, 300)
{
	const size_t n = RANGES_LIMIT;
	struct svmbatch_range *r;
	struct svmbatch_register cmd = {
		.size = sizeof(cmd), .range_size = RANGE_SZ,
	};
	char *va;

	if (!have_effective_cap(CAP_IPC_LOCK))
		SKIP(return, "needs CAP_IPC_LOCK to charge 4 GiB");
	ASSERT_EQ(0, param_write("max_ranges", "65536"));
	va = mmap(NULL, 2 * n * PAGE_SZ, PROT_NONE,
		  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	ASSERT_NE(MAP_FAILED, va);
	r = calloc(n + 1, sizeof(*r));
	ASSERT_NE(NULL, r);
	/* Every other page, last to first: sorting has work to do. */
	scatter_ranges(r, n, va + PAGE_SZ, 2, 0, SCATTER_REVERSE);
	r[n] = mkrange(va, PAGE_SZ, 0);
	cmd.ranges = ptr_u64(r);

	cmd.nr_ranges = n;
	test_err_register_cmd(EFAULT, 0, &cmd);
	cmd.nr_ranges = n + 1;
	test_err_register_cmd(E2BIG, SVMBATCH_NO_INDEX, &cmd);
	cmd.nr_ranges = 0xffffffffU;
	test_err_register_cmd(E2BIG, SVMBATCH_NO_INDEX, &cmd);
	free(r);
	munmap(va, 2 * n * PAGE_SZ);
}

/* At max_range_bytes = 1 TiB one range of 1 TiB fails cleanly at the pin. */
TEST_F(params, max_range_bytes_at_its_bound)
{
	const size_t len = BYTES_LIMIT;
	struct svmbatch_range r;
	char *va;

	if (!have_effective_cap(CAP_IPC_LOCK))
		SKIP(return, "needs CAP_IPC_LOCK to charge 1 TiB");
	ASSERT_EQ(0, param_write("max_range_bytes", "1099511627776"));
	va = mmap(NULL, len, PROT_NONE,
		  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (va == MAP_FAILED)
		SKIP(return, "cannot reserve 1 TiB of address space: %s",
		     strerror(errno));
	r = mkrange(va, len, 0);
	test_err_register(EFAULT, 0, &r, 1);
	r.len += PAGE_SZ;
	test_err_register(E2BIG, 0, &r, 1);
	munmap(va, len);
}

TEST_HARNESS_MAIN
