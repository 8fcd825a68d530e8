// SPDX-License-Identifier: GPL-2.0
/*
 * io_uring fixed buffers on memory registered with svmbatch: the same pages
 * pinned by both, READ_FIXED from a file into them and WRITE_FIXED back,
 * byte-exact.
 */
#include <liburing.h>

#include "svmbatch_utils.h"

#define NR_BUFS 3

FIXTURE(uring) {
	int fd;
	struct io_uring ring;
	bool ring_ok;
	int src, dst;
	char src_path[64], dst_path[64];
};

FIXTURE_SETUP(uring)
{
	char sysctl[16] = "";
	int ret;

	svmbatch_open_or_skip(self->fd);
	self->src = -1;
	self->dst = -1;
	ret = io_uring_queue_init(8, &self->ring, 0);
	if (ret == -ENOSYS)
		SKIP(return, "io_uring_queue_init: ENOSYS (CONFIG_IO_URING off)");
	if (ret == -EPERM) {
		read_file("/proc/sys/kernel/io_uring_disabled", sysctl,
			  sizeof(sysctl));
		SKIP(return, "io_uring_queue_init: EPERM (kernel.io_uring_disabled=%s)",
		     strtok(sysctl, "\n") ?: "?");
	}
	ASSERT_EQ(0, ret) TH_LOG("io_uring_queue_init: %s", strerror(-ret));
	self->ring_ok = true;

	snprintf(self->src_path, sizeof(self->src_path),
		 "/tmp/svmbatch-uring-src.XXXXXX");
	snprintf(self->dst_path, sizeof(self->dst_path),
		 "/tmp/svmbatch-uring-dst.XXXXXX");
	self->src = mkostemp(self->src_path, O_CLOEXEC);
	ASSERT_LE(0, self->src);
	self->dst = mkostemp(self->dst_path, O_CLOEXEC);
	ASSERT_LE(0, self->dst);
}

FIXTURE_TEARDOWN(uring)
{
	if (self->ring_ok)
		io_uring_queue_exit(&self->ring);
	if (self->src >= 0) {
		close(self->src);
		unlink(self->src_path);
	}
	if (self->dst >= 0) {
		close(self->dst);
		unlink(self->dst_path);
	}
	if (self->fd > 0)
		close(self->fd);
}

TEST_F_TIMEOUT(uring, read_write_fixed, 120)
{
	/* Scattered buffers of different sizes inside one mapping. */
	static const unsigned int pg_off[NR_BUFS] = { 0, 40, 100 };
	static const unsigned int pg_len[NR_BUFS] = { 16, 32, 1 };
	const size_t map_len = 128 * PAGE_SZ;
	struct svmbatch_range r[NR_BUFS];
	struct iovec iov[NR_BUFS];
	struct svmbatch_query q;
	size_t total = 0, off, i;
	unsigned char *mem, *file, *back;
	long long pin0;
	__u32 h;
	int b;

	mem = anon_map(map_len);
	ASSERT_NE(NULL, mem);
	for (b = 0; b < NR_BUFS; b++) {
		r[b] = mkrange(mem + pg_off[b] * PAGE_SZ,
			       pg_len[b] * PAGE_SZ, 0);
		iov[b].iov_base = u64_ptr(r[b].addr);
		iov[b].iov_len = r[b].len;
		total += r[b].len;
	}
	file = malloc(total);
	back = malloc(total);
	ASSERT_NE(NULL, file);
	ASSERT_NE(NULL, back);
	pattern_fill(file, total, 0x5a);
	ASSERT_EQ((ssize_t)total, pwrite(self->src, file, total, 0));

	pin0 = vmpin_kb();
	h = test_cmd_register(r, NR_BUFS, NULL);
	ASSERT_EQ(0, io_uring_register_buffers(&self->ring, iov, NR_BUFS));

	/* READ_FIXED: file -> registered buffers. */
	uring_fixed_io(_metadata, &self->ring, self->src, iov, NR_BUFS, false);
	for (b = 0, off = 0; b < NR_BUFS; off += iov[b].iov_len, b++)
		ASSERT_EQ(0, memcmp(iov[b].iov_base, file + off,
				    iov[b].iov_len)) {
			TH_LOG("buffer %d differs from the file", b);
		}

	/* WRITE_FIXED: registered buffers (changed by the CPU) -> file. */
	for (b = 0; b < NR_BUFS; b++)
		for (i = 0; i < iov[b].iov_len; i++)
			((unsigned char *)iov[b].iov_base)[i] ^= 0xff;
	uring_fixed_io(_metadata, &self->ring, self->dst, iov, NR_BUFS, true);
	ASSERT_EQ((ssize_t)total, pread(self->dst, back, total, 0));
	for (i = 0; i < total; i++)
		ASSERT_EQ((unsigned char)(file[i] ^ 0xff), back[i]) {
			TH_LOG("written file differs at byte %zu", i);
		}

	/* svmbatch's view is unchanged by io_uring's own pins. */
	test_cmd_query(h, &q);
	EXPECT_EQ(total / PAGE_SZ, q.nr_pages);
	test_query_ranges_eq(self->fd, h, r, NR_BUFS);

	ASSERT_EQ(0, io_uring_unregister_buffers(&self->ring));
	test_cmd_unregister(h);
	EXPECT_EQ(pin0, vmpin_kb());

	/* The data outlives both registrations. */
	for (b = 0, off = 0; b < NR_BUFS; off += iov[b].iov_len, b++)
		ASSERT_EQ(0, memcmp(iov[b].iov_base, back + off,
				    iov[b].iov_len));
	free(file);
	free(back);
	munmap(mem, map_len);
}

/* io_uring may pin first and svmbatch second; unregister in either order. */
TEST_F_TIMEOUT(uring, register_order_swapped, 120)
{
	const size_t len = 8 * PAGE_SZ;
	unsigned char *mem = anon_map(len), *file = malloc(len);
	struct iovec iov;
	struct svmbatch_range r;
	struct io_uring_sqe *sqe;
	long long pin0 = vmpin_kb();
	__u32 h;

	ASSERT_NE(NULL, mem);
	ASSERT_NE(NULL, file);
	pattern_fill(file, len, 0xc3);
	ASSERT_EQ((ssize_t)len, pwrite(self->src, file, len, 0));
	iov.iov_base = mem;
	iov.iov_len = len;
	r = mkrange(mem, len, 0);

	ASSERT_EQ(0, io_uring_register_buffers(&self->ring, &iov, 1));
	h = test_cmd_register(&r, 1, NULL);
	ASSERT_EQ(0, io_uring_unregister_buffers(&self->ring));
	sqe = io_uring_get_sqe(&self->ring);
	ASSERT_NE(NULL, sqe);
	io_uring_prep_read(sqe, self->src, mem, len, 0);
	ASSERT_EQ((int)len, uring_submit_wait(&self->ring));
	ASSERT_EQ(0, memcmp(mem, file, len));
	test_cmd_unregister(h);
	EXPECT_EQ(pin0, vmpin_kb());
	free(file);
	munmap(mem, len);
}

TEST_HARNESS_MAIN
