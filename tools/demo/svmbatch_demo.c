// SPDX-License-Identifier: MIT
/*
 * svmbatch demo: pin 2000 scattered malloc'd buffers in one transactional
 * REGISTER, compare with 2000 one-range REGISTER calls, and show that a
 * batch with one bad range leaves nothing pinned.  Prints a readable
 * report and a one-test TAP stream so the guest runner can judge it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <linux/svmbatch.h>

#define NR_BUFFERS 2000
#define PAGE 4096UL

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long vmpin_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPin: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static int do_register(int fd, struct svmbatch_range *r, unsigned int n,
		       struct svmbatch_register *out)
{
	*out = (struct svmbatch_register) {
		.size = sizeof(*out),
		.ranges = (uintptr_t)r,
		.nr_ranges = n,
		.range_size = sizeof(*r),
	};
	return ioctl(fd, SVMBATCH_REGISTER, out) ? -errno : 0;
}

static int do_unregister(int fd, unsigned int handle)
{
	struct svmbatch_unregister u = { .size = sizeof(u), .handle = handle };

	return ioctl(fd, SVMBATCH_UNREGISTER, &u) ? -errno : 0;
}

static int fail(const char *what, int err)
{
	printf("demo: %s: %s\nnot ok 1 svmbatch demo\n", what, strerror(-err));
	return 1;
}

int main(void)
{
	static struct svmbatch_range ranges[NR_BUFFERS];
	struct svmbatch_info info = { .size = sizeof(info) };
	struct svmbatch_query q = { .size = sizeof(q) };
	struct svmbatch_register reg;
	unsigned long total = 0;
	double t0, single_ms, batch_ms;
	long pin0, pin1;
	int fd, ret, i;
	void *hole;

	printf("TAP version 13\n1..1\n");
	fd = open("/dev/svmbatch", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return fail("open /dev/svmbatch", -errno);
	if (ioctl(fd, SVMBATCH_GET_INFO, &info))
		return fail("GET_INFO", -errno);
	printf("svmbatch ABI %u, page %u, max %u ranges/batch, %u registrations/fd\n",
	       info.abi_version, info.page_size, info.max_ranges,
	       info.max_registrations);

	/* Scattered buffers of 4 KiB .. 256 KiB, touched so they exist. */
	srand(42);
	for (i = 0; i < NR_BUFFERS; i++) {
		size_t len = PAGE * (1 + rand() % 64);
		void *p = aligned_alloc(PAGE, len);

		if (!p)
			return fail("aligned_alloc", -ENOMEM);
		memset(p, i & 0xff, len);
		ranges[i] = (struct svmbatch_range) {
			.addr = (uintptr_t)p, .len = len,
		};
		total += len;
	}
	printf("%d buffers, %lu KiB in all\n", NR_BUFFERS, total >> 10);

	t0 = now_ms();
	for (i = 0; i < NR_BUFFERS; i++) {
		ret = do_register(fd, &ranges[i], 1, &reg);
		if (ret)
			return fail("single REGISTER", ret);
		ret = do_unregister(fd, reg.handle);
		if (ret)
			return fail("UNREGISTER", ret);
	}
	single_ms = now_ms() - t0;

	pin0 = vmpin_kb();
	t0 = now_ms();
	ret = do_register(fd, ranges, NR_BUFFERS, &reg);
	if (ret)
		return fail("batch REGISTER", ret);
	batch_ms = now_ms() - t0;
	pin1 = vmpin_kb();
	q.handle = reg.handle;
	if (ioctl(fd, SVMBATCH_QUERY, &q))
		return fail("QUERY", -errno);
	printf("one REGISTER pinned %llu pages: VmPin %ld -> %ld kB\n",
	       (unsigned long long)reg.nr_pages, pin0, pin1);
	printf("  %llu contiguous segments, %llu folios, %llu metadata bytes (%.1f/page)\n",
	       (unsigned long long)q.nr_segments,
	       (unsigned long long)q.nr_folios,
	       (unsigned long long)q.meta_bytes,
	       (double)q.meta_bytes / reg.nr_pages);
	t0 = now_ms();
	ret = do_unregister(fd, reg.handle);
	if (ret)
		return fail("UNREGISTER", ret);
	batch_ms += now_ms() - t0;
	printf("register+unregister: %d calls %.2f ms, one batch %.2f ms (%.1fx)\n",
	       NR_BUFFERS, single_ms, batch_ms, single_ms / batch_ms);
	printf("  (an emulated guest: only the ratio means something)\n");

	/* Poison the last range: the whole batch must fail and roll back. */
	hole = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(hole, PAGE);
	ranges[NR_BUFFERS - 1] = (struct svmbatch_range) {
		.addr = (uintptr_t)hole, .len = PAGE,
	};
	pin0 = vmpin_kb();
	ret = do_register(fd, ranges, NR_BUFFERS, &reg);
	pin1 = vmpin_kb();
	printf("batch with an unmapped last range: %s, error_index %u, VmPin %ld -> %ld kB\n",
	       strerror(-ret), reg.error_index, pin0, pin1);
	if (ret != -EFAULT || reg.error_index != NR_BUFFERS - 1 || pin0 != pin1)
		return fail("rollback", ret ? ret : -EINVAL);

	printf("ok 1 svmbatch demo\n");
	return 0;
}
