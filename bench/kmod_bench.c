// SPDX-License-Identifier: MIT
/*
 * Kernel benchmark of svmbatch, run inside a guest (make bench-kmod).
 *
 * For N ranges of one size it measures, median over REPS repetitions
 * (method (b) may take fewer: see SLOW_REP_US):
 *   batch   one REGISTER of all N ranges + UNREGISTER
 *   single  N one-range REGISTER + UNREGISTER calls
 *   floor   the same pages pinned and unpinned by the kernel's gup_test
 *           (PIN_FAST_BENCHMARK, FOLL_WRITE | FOLL_LONGTERM): the kernel's
 *           own get + put time, summed over the N ranges, no syscall cost;
 *           only where /sys/kernel/debug/gup_test exists (debug kernel)
 *   uring   IORING_REGISTER_BUFFERS + UNREGISTER of the same iovecs
 * and the module's metadata per pinned page (QUERY meta_bytes).  After
 * each configuration VmPin and the module's registrations and pinned_pages
 * must be back where they started: pins left behind would skew every
 * later number, so the run stops there.
 *
 * Prints a table, then the JSON between SVMBATCH-BENCH-JSON-BEGIN/END
 * lines, then a one-test TAP stream for the guest runner.  Not a test:
 * numbers are reported, never judged.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>
#include <linux/svmbatch.h>

#include "../selftests/svmbatch/svmbatch_counters.h"

#define PAGE	    4096UL
#define REPS	    21
/*
 * N single-range calls under KASAN + TCG take up to a minute per
 * repetition: when the first one takes longer than this, method (b)
 * stops at SLOW_REPS repetitions (reported as single_reps).
 */
#define SLOW_REP_US 5e6
#define SLOW_REPS   5
#define THP_SIZE    (2UL << 20)
/* Largest configuration: a 3 GiB guest; under TCG + KASAN more is too slow. */
#define MAX_BYTES   (512UL << 20)

/* mm/gup_test.h (not uapi) */
struct gup_test {
	uint64_t get_delta_usec;
	uint64_t put_delta_usec;
	uint64_t addr;
	uint64_t size;
	uint32_t nr_pages_per_call;
	uint32_t gup_flags;
	uint32_t test_flags;
	uint32_t which_pages[8];
};

#define PIN_FAST_BENCHMARK _IOWR('g', 2, struct gup_test)
#define FOLL_WRITE	   0x01
#define FOLL_LONGTERM	   0x100 /* 1 << 8 in 6.1 and 6.12 */
#define GUP_CHUNK_PAGES	   8192 /* svmbatch's pin chunk too */

struct config {
	unsigned int n;
	unsigned long size;
	int thp;
	const char *name;
};

struct result {
	double batch_us, single_us, floor_us, uring_us;
	double meta_per_page;
	int single_reps;
	unsigned long long segments, folios, pages;
};

static int svm_fd, gup_fd = -1;

/* What is pinned now; -1 where it cannot be read (no debugfs). */
struct pinned {
	long long vmpin_kb, registrations, pinned_pages;
};

static struct pinned pinned_now(void)
{
	struct pinned p = {
		.vmpin_kb = vmpin_kb(),
		.registrations = stat_get("registrations"),
		.pinned_pages = stat_get("pinned_pages"),
	};

	return p;
}

/* Say what @now holds beyond @start; 0 if nothing. */
static int pinned_left(const struct pinned *start, const struct pinned *now,
		       const struct config *c)
{
	if (now->vmpin_kb == start->vmpin_kb &&
	    now->registrations == start->registrations &&
	    now->pinned_pages == start->pinned_pages)
		return 0;
	printf("not ok 1 kmod_bench # %u x %s left pins behind: ", c->n,
	       c->name);
	printf("VmPin %lld -> %lld kB, registrations %lld -> %lld, ",
	       start->vmpin_kb, now->vmpin_kb, start->registrations,
	       now->registrations);
	printf("pinned_pages %lld -> %lld\n", start->pinned_pages,
	       now->pinned_pages);
	return 1;
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return v[n / 2];
}

static int svm_register(struct svmbatch_range *r, unsigned int n,
			uint32_t *handle)
{
	struct svmbatch_register reg = {
		.size = sizeof(reg),
		.ranges = (uintptr_t)r,
		.nr_ranges = n,
		.range_size = sizeof(*r),
	};

	if (ioctl(svm_fd, SVMBATCH_REGISTER, &reg))
		return -errno;
	*handle = reg.handle;
	return 0;
}

static int svm_unregister(uint32_t handle)
{
	struct svmbatch_unregister u = { .size = sizeof(u), .handle = handle };

	return ioctl(svm_fd, SVMBATCH_UNREGISTER, &u) ? -errno : 0;
}

/*
 * N ranges of one size, every other slot of one mapping so that no two
 * ranges touch; THP configurations are 2 MiB aligned with MADV_HUGEPAGE.
 */
static char *map_ranges(const struct config *c, struct svmbatch_range *r,
			struct iovec *iov, size_t *map_len)
{
	size_t stride = 2 * c->size, len = c->n * stride + THP_SIZE;
	char *base, *p;
	unsigned int i;
	size_t off;

	base = mmap(NULL, len, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED)
		return NULL;
	madvise(base, len, c->thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	p = (char *)(((uintptr_t)base + THP_SIZE - 1) & ~(THP_SIZE - 1));
	for (i = 0; i < c->n; i++) {
		char *a = p + i * stride;

		for (off = 0; off < c->size; off += PAGE)
			a[off] = (char)i;
		r[i] = (struct svmbatch_range){
			.addr = (uintptr_t)a,
			.len = c->size,
		};
		iov[i] = (struct iovec){ .iov_base = a, .iov_len = c->size };
	}
	*map_len = len;
	return base;
}

/* What one configuration's methods work on. */
struct run {
	const struct config *c;
	struct svmbatch_range *r;
	const struct iovec *iov;
	struct io_uring ring;
	struct result *res;
};

/* Repetition @rep of a method: its time in *@us, or -errno. */
typedef int (*once_fn)(struct run *run, int rep, double *us);

/*
 * The median time of REPS repetitions of @once in *@median_us; with
 * @may_shorten, only SLOW_REPS when the first took over SLOW_REP_US.  The
 * number of repetitions in *@reps.
 */
static int time_reps(once_fn once, struct run *run, int may_shorten,
		     double *median_us, int *reps)
{
	double t[REPS];
	int i, ret;

	*reps = REPS;
	for (i = 0; i < *reps; i++) {
		ret = once(run, i, &t[i]);
		if (ret)
			return ret;
		if (may_shorten && i == 0 && t[0] > SLOW_REP_US)
			*reps = SLOW_REPS;
	}
	*median_us = median(t, *reps);
	return 0;
}

/* (a) one REGISTER of all N ranges + UNREGISTER; the first also QUERYs. */
static int batch_once(struct run *run, int rep, double *us)
{
	struct svmbatch_query q = { .size = sizeof(q) };
	double t0 = now_us(), t1;
	uint32_t h;
	int ret;

	ret = svm_register(run->r, run->c->n, &h);
	if (ret)
		return ret;
	if (rep == 0) {
		t1 = now_us();
		q.handle = h;
		if (ioctl(svm_fd, SVMBATCH_QUERY, &q))
			return -errno;
		run->res->pages = q.nr_pages;
		run->res->segments = q.nr_segments;
		run->res->folios = q.nr_folios;
		run->res->meta_per_page = (double)q.meta_bytes / q.nr_pages;
		t0 += now_us() - t1; /* QUERY is not timed */
	}
	ret = svm_unregister(h);
	*us = now_us() - t0;
	return ret;
}

/* (b) N one-range REGISTER + UNREGISTER calls. */
static int single_once(struct run *run, int rep, double *us)
{
	double t0 = now_us();
	unsigned int k;
	uint32_t h;
	int ret;

	(void)rep;
	for (k = 0; k < run->c->n; k++) {
		ret = svm_register(&run->r[k], 1, &h);
		if (!ret)
			ret = svm_unregister(h);
		if (ret)
			return ret;
	}
	*us = now_us() - t0;
	return 0;
}

/* (c) gup_test's own get + put time for the same ranges. */
static int floor_once(struct run *run, int rep, double *us)
{
	unsigned int k;

	(void)rep;
	*us = 0;
	for (k = 0; k < run->c->n; k++) {
		struct gup_test g = {
			.addr = run->r[k].addr,
			.size = run->r[k].len,
			.nr_pages_per_call = GUP_CHUNK_PAGES,
			.gup_flags = FOLL_WRITE | FOLL_LONGTERM,
		};

		if (ioctl(gup_fd, PIN_FAST_BENCHMARK, &g))
			return -errno;
		*us += g.get_delta_usec + g.put_delta_usec;
	}
	return 0;
}

/* (d) IORING_REGISTER_BUFFERS + UNREGISTER of the same iovecs. */
static int uring_once(struct run *run, int rep, double *us)
{
	double t0 = now_us();
	int ret;

	(void)rep;
	ret = io_uring_register_buffers(&run->ring, run->iov, run->c->n);
	if (!ret)
		ret = io_uring_unregister_buffers(&run->ring);
	*us = now_us() - t0;
	return ret;
}

/* Every method over one configuration's ranges. */
static int bench_config(struct run *run)
{
	struct result *res = run->res;
	int reps, ret;

	ret = time_reps(batch_once, run, 0, &res->batch_us, &reps);
	if (!ret)
		ret = time_reps(single_once, run, 1, &res->single_us,
				&res->single_reps);
	res->floor_us = -1;
	if (!ret && gup_fd >= 0)
		ret = time_reps(floor_once, run, 0, &res->floor_us, &reps);
	if (ret)
		return ret;
	ret = io_uring_queue_init(4, &run->ring, 0);
	if (ret)
		return ret;
	ret = time_reps(uring_once, run, 0, &res->uring_us, &reps);
	io_uring_queue_exit(&run->ring);
	return ret;
}

static const struct config configs[] = {
	{ 1, 4096, 0, "4KiB" },
	{ 16, 4096, 0, "4KiB" },
	{ 256, 4096, 0, "4KiB" },
	{ 2000, 4096, 0, "4KiB" },
	{ 16384, 4096, 0, "4KiB" },
	{ 1, 65536, 0, "64KiB" },
	{ 16, 65536, 0, "64KiB" },
	{ 256, 65536, 0, "64KiB" },
	{ 2000, 65536, 0, "64KiB" },
	{ 16384, 65536, 0, "64KiB" },
	{ 1, THP_SIZE, 1, "2MiB-THP" },
	{ 16, THP_SIZE, 1, "2MiB-THP" },
	{ 256, THP_SIZE, 1, "2MiB-THP" },
	{ 2000, THP_SIZE, 1, "2MiB-THP" },
	{ 16384, THP_SIZE, 1, "2MiB-THP" },
	{ 1, 64UL << 20, 0, "64MiB" },
	{ 16, 64UL << 20, 0, "64MiB" },
	{ 256, 64UL << 20, 0, "64MiB" },
	{ 2000, 64UL << 20, 0, "64MiB" },
	{ 16384, 64UL << 20, 0, "64MiB" },
};

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define NR_CONFIGS    ARRAY_SIZE(configs)

static double ratio(double a, double b)
{
	return a > 0 && b > 0 ? a / b : -1;
}

static void print_json_number(const char *key, double v, const char *sep)
{
	if (v < 0)
		printf("\"%s\": null%s", key, sep);
	else
		printf("\"%s\": %.3f%s", key, v, sep);
}

int main(void)
{
	static struct result res[NR_CONFIGS];
	static int skipped[NR_CONFIGS];
	struct pinned start, now;
	struct utsname u;
	unsigned int i;
	int ret;

	printf("TAP version 13\n1..1\n");
	svm_fd = open("/dev/svmbatch", O_RDWR | O_CLOEXEC);
	if (svm_fd < 0) {
		printf("not ok 1 kmod_bench # /dev/svmbatch: %s\n",
		       strerror(errno));
		return 1;
	}
	gup_fd = open("/sys/kernel/debug/gup_test", O_RDWR | O_CLOEXEC);
	uname(&u);
	start = pinned_now();
	printf("# checked after each configuration: VmPin%s\n",
	       start.registrations < 0 ?
		       " (no debugfs: not the module's counters)" :
		       " and the module's registrations and pinned_pages");

	printf("# %-9s %6s %12s %12s %12s %12s %8s %8s %8s %9s\n", "size", "N",
	       "batch_us", "single_us", "floor_us", "uring_us", "a/c", "b/a",
	       "a/d", "meta_B/pg");
	for (i = 0; i < NR_CONFIGS; i++) {
		const struct config *c = &configs[i];
		struct run run = { .c = c, .res = &res[i] };
		struct svmbatch_range *r;
		struct iovec *iov;
		size_t map_len;
		char *base;

		if ((unsigned long)c->n * c->size > MAX_BYTES) {
			skipped[i] = 1;
			continue;
		}
		r = calloc(c->n, sizeof(*r));
		iov = calloc(c->n, sizeof(*iov));
		base = r && iov ? map_ranges(c, r, iov, &map_len) : NULL;
		if (!base) {
			printf("not ok 1 kmod_bench # no memory for %u x %s\n",
			       c->n, c->name);
			return 1;
		}
		run.r = r;
		run.iov = iov;
		ret = bench_config(&run);
		munmap(base, map_len);
		free(r);
		free(iov);
		if (ret) {
			printf("not ok 1 kmod_bench # %u x %s: %s\n", c->n,
			       c->name, strerror(-ret));
			return 1;
		}
		now = pinned_now();
		if (pinned_left(&start, &now, c))
			return 1;
		printf("# %-9s %6u %12.1f %12.1f %12.1f %12.1f %8.2f %8.2f %8.2f %9.2f\n",
		       c->name, c->n, res[i].batch_us, res[i].single_us,
		       res[i].floor_us, res[i].uring_us,
		       ratio(res[i].batch_us, res[i].floor_us),
		       ratio(res[i].single_us, res[i].batch_us),
		       ratio(res[i].batch_us, res[i].uring_us),
		       res[i].meta_per_page);
		fflush(stdout);
	}

	printf("SVMBATCH-BENCH-JSON-BEGIN\n");
	printf("{\n  \"benchmark\": \"kmod\",\n  \"kernel\": \"%s\",\n",
	       u.release);
	printf("  \"reps\": %d,\n  \"statistic\": \"median\",\n", REPS);
	printf("  \"gup_test_floor\": %s,\n  \"results\": [\n",
	       gup_fd >= 0 ? "true" : "false");
	for (i = 0; i < NR_CONFIGS; i++) {
		const struct config *c = &configs[i];
		const struct result *x = &res[i];
		int last = i == NR_CONFIGS - 1;

		if (skipped[i]) {
			printf("    {\"size\": \"%s\", \"n\": %u, ", c->name,
			       c->n);
			printf("\"skipped\": \"over %lu MiB\"}%s\n",
			       MAX_BYTES >> 20, last ? "" : ",");
			continue;
		}
		printf("    {\"size\": \"%s\", \"range_bytes\": %lu, \"n\": %u, \"pages\": %llu, ",
		       c->name, c->size, c->n, x->pages);
		printf("\"segments\": %llu, \"folios\": %llu, ", x->segments,
		       x->folios);
		printf("\"single_reps\": %d, ", x->single_reps);
		print_json_number("batch_us", x->batch_us, ", ");
		print_json_number("single_us", x->single_us, ", ");
		print_json_number("gup_floor_us", x->floor_us, ", ");
		print_json_number("io_uring_us", x->uring_us, ", ");
		print_json_number("batch_over_floor",
				  ratio(x->batch_us, x->floor_us), ", ");
		print_json_number("single_over_batch",
				  ratio(x->single_us, x->batch_us), ", ");
		print_json_number("batch_over_io_uring",
				  ratio(x->batch_us, x->uring_us), ", ");
		print_json_number("meta_bytes_per_page", x->meta_per_page, "}");
		printf("%s\n", last ? "" : ",");
	}
	printf("  ]\n}\nSVMBATCH-BENCH-JSON-END\n");
	printf("ok 1 kmod_bench\n");
	return 0;
}
