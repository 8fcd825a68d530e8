// SPDX-License-Identifier: GPL-2.0
/*
 * EXPORT_DMABUF: scattered anonymous memory as one dma-buf.  Its mmap is a
 * contiguous CPU alias of the ranges in order; vgem imports it (PRIME) and
 * sees the same bytes both ways; the dma-buf keeps the pages pinned until
 * the handle and every dma-buf are gone, in any order and across processes.
 */
#include <linux/dma-buf.h>
#include <linux/io_uring.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <dirent.h>
#include <sys/stat.h>

#include <drm/drm.h>

#include "svmbatch_utils.h"

#define NPAGES 64
#define NR 3
#define EXPORT_PAGES 8	/* 4 + 3 + 1 */

FIXTURE(dmabuf) {
	int fd;
	char *buf;
	struct svmbatch_range r[NR];
	__u32 handle;
};

FIXTURE_SETUP(dmabuf)
{
	int i;

	svmbatch_open_or_skip(self->fd);
	self->buf = anon_map(NPAGES * PAGE_SZ);
	ASSERT_NE(NULL, self->buf);
	for (i = 0; i < NPAGES * (int)PAGE_SZ; i++)
		self->buf[i] = (char)(i * 7 + i / 4096);
	/* Out of address order on purpose: the dma-buf follows this order. */
	self->r[0] = mkrange(self->buf + 10 * PAGE_SZ, 4 * PAGE_SZ, 0);
	self->r[1] = mkrange(self->buf, 3 * PAGE_SZ, 0);
	self->r[2] = mkrange(self->buf + 30 * PAGE_SZ, PAGE_SZ, 0);
	self->handle = test_cmd_register(self->r, NR, NULL);
}

FIXTURE_TEARDOWN(dmabuf)
{
	if (self->buf)
		munmap(self->buf, NPAGES * PAGE_SZ);
	if (self->fd > 0)
		close(self->fd);
}

static int export_dmabuf(int fd, __u32 handle, __u32 flags)
{
	struct svmbatch_export_dmabuf cmd = {
		.size = sizeof(cmd),
		.flags = flags,
		.handle = handle,
		.fd = -1,
	};

	if (ioctl(fd, SVMBATCH_EXPORT_DMABUF, &cmd))
		return -errno;
	return cmd.fd;
}

/* Byte @off of the dma-buf: the ranges concatenated in REGISTER order. */
static char *dmabuf_byte(struct svmbatch_range *r, size_t off)
{
	int i;

	for (i = 0; i < NR; i++) {
		if (off < r[i].len)
			return (char *)u64_ptr(r[i].addr) + off;
		off -= r[i].len;
	}
	return NULL;
}

static int count_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

TEST_F(dmabuf, advertised_sized_and_counted)
{
	struct svmbatch_info info;
	long long exports = stat_get("exports");
	int dfd;

	test_cmd_get_info(&info);
	EXPECT_TRUE(info.features & SVMBATCH_FEATURE_DMABUF);
	dfd = export_dmabuf(self->fd, self->handle, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd);
	EXPECT_EQ((off_t)(EXPORT_PAGES * PAGE_SZ), lseek(dfd, 0, SEEK_END));
	EXPECT_EQ(FD_CLOEXEC, fcntl(dfd, F_GETFD) & FD_CLOEXEC);
	EXPECT_EQ(O_RDWR, fcntl(dfd, F_GETFL) & O_ACCMODE);
	EXPECT_EQ(exports + 1, stat_get("exports"));
	close(dfd);
	EXPECT_EQ(exports, stat_get("exports"));
}

TEST_F(dmabuf, mmap_is_a_contiguous_alias_in_order)
{
	size_t len = EXPORT_PAGES * PAGE_SZ, off;
	struct dma_buf_sync sync = { DMA_BUF_SYNC_START | DMA_BUF_SYNC_RW };
	char *alias;
	int dfd;

	dfd = export_dmabuf(self->fd, self->handle, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd);
	alias = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, dfd, 0);
	ASSERT_NE(MAP_FAILED, alias);
	ASSERT_EQ(0, ioctl(dfd, DMA_BUF_IOCTL_SYNC, &sync));
	for (off = 0; off < len; off++)
		ASSERT_EQ(*dmabuf_byte(self->r, off), alias[off])
			TH_LOG("byte %zu", off);
	alias[5 * PAGE_SZ + 3] = 0x5a;		/* range 1, page 1 */
	EXPECT_EQ(0x5a, self->buf[PAGE_SZ + 3]);
	self->buf[30 * PAGE_SZ + 9] = 0x6b;	/* range 2 */
	EXPECT_EQ(0x6b, alias[7 * PAGE_SZ + 9]);
	sync.flags = DMA_BUF_SYNC_END | DMA_BUF_SYNC_RW;
	ASSERT_EQ(0, ioctl(dfd, DMA_BUF_IOCTL_SYNC, &sync));
	/* A private (copy-on-write) mapping of device memory is refused. */
	EXPECT_EQ(MAP_FAILED, mmap(NULL, len, PROT_READ, MAP_PRIVATE, dfd, 0));
	munmap(alias, len);
	close(dfd);
}

/* The vgem card node, or -1. */
static int open_vgem(void)
{
	char name[32], path[64];
	int i, fd;

	for (i = 0; i < 16; i++) {
		struct drm_version v = { .name = name, .name_len = sizeof(name) - 1 };

		snprintf(path, sizeof(path), "/dev/dri/card%d", i);
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		memset(name, 0, sizeof(name));
		if (!ioctl(fd, DRM_IOCTL_VERSION, &v) && !strcmp(name, "vgem"))
			return fd;
		close(fd);
	}
	return -1;
}

/*
 * vgem imports the dma-buf (PRIME): it attaches and maps it for its device,
 * one scatterlist segment per physically contiguous run.  vgem cannot mmap
 * an imported object (drm_gem_dumb_map_offset() refuses imports), so the
 * bytes are checked through the dma-buf's own mmap above; here, that the
 * import is this dma-buf and that a read-only export cannot be imported
 * for device writes.
 */
TEST_F(dmabuf, vgem_imports_it)
{
	struct drm_prime_handle prime = { 0 }, back = { 0 };
	struct svmbatch_range ro = mkrange(self->buf + 40 * PAGE_SZ, PAGE_SZ,
					    SVMBATCH_RANGE_READ_ONLY);
	struct drm_gem_close gclose = { 0 };
	long long segs = stat_get("dmabuf_segments");
	struct stat st_export, st_back;
	struct svmbatch_query q;
	int vgem, dfd, rofd;
	__u32 h;

	vgem = open_vgem();
	if (vgem < 0)
		SKIP(return, "no vgem device (CONFIG_DRM_VGEM, module vgem)");
	dfd = export_dmabuf(self->fd, self->handle, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd);
	prime.fd = dfd;
	ASSERT_EQ(0, ioctl(vgem, DRM_IOCTL_PRIME_FD_TO_HANDLE, &prime));
	test_cmd_query(self->handle, &q);
	EXPECT_EQ(segs + (long long)q.nr_segments, stat_get("dmabuf_segments"));

	back.handle = prime.handle;
	back.flags = DRM_CLOEXEC;
	ASSERT_EQ(0, ioctl(vgem, DRM_IOCTL_PRIME_HANDLE_TO_FD, &back));
	ASSERT_EQ(0, fstat(dfd, &st_export));
	ASSERT_EQ(0, fstat(back.fd, &st_back));
	EXPECT_EQ(st_export.st_ino, st_back.st_ino);
	close(back.fd);

	gclose.handle = prime.handle;
	ASSERT_EQ(0, ioctl(vgem, DRM_IOCTL_GEM_CLOSE, &gclose));
	EXPECT_EQ(segs, stat_get("dmabuf_segments"));
	close(dfd);

	h = test_cmd_register(&ro, 1, NULL);
	rofd = export_dmabuf(self->fd, h, O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, rofd);
	prime.fd = rofd;
	EXPECT_EQ(-1, ioctl(vgem, DRM_IOCTL_PRIME_FD_TO_HANDLE, &prime));
	EXPECT_EQ(EACCES, errno);
	close(rofd);
	test_cmd_unregister(h);
	close(vgem);
}

TEST_F(dmabuf, unregister_first_keeps_pages_until_close)
{
	struct svmbatch_snapshot s0;
	char *alias;
	int dfd;

	snapshot_take(_metadata, self->fd, &s0);
	dfd = export_dmabuf(self->fd, self->handle, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd);
	test_cmd_unregister(self->handle);
	test_err_query(ENOENT, self->handle);
	/* The handle is gone, the pages are still pinned and charged. */
	EXPECT_EQ(s0.vmpin_kb, vmpin_kb());
	EXPECT_EQ(stat_get("registrations"), (long long)snap_stat(&s0, "registrations")->val);
	alias = mmap(NULL, PAGE_SZ, PROT_READ, MAP_SHARED, dfd, 0);
	ASSERT_NE(MAP_FAILED, alias);
	EXPECT_EQ(self->buf[10 * PAGE_SZ + 1], alias[1]);
	munmap(alias, PAGE_SZ);
	close(dfd);
	EXPECT_EQ(s0.vmpin_kb - (long long)(EXPORT_PAGES * PAGE_SZ / 1024),
		  vmpin_kb());
	EXPECT_EQ((long long)snap_stat(&s0, "registrations")->val - 1,
		  stat_get("registrations"));
}

TEST_F(dmabuf, close_first_and_closing_the_svmbatch_fd)
{
	long long pin = vmpin_kb(), regs = stat_get("registrations");
	int dfd;

	dfd = export_dmabuf(self->fd, self->handle, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd);
	close(dfd);
	EXPECT_EQ(pin, vmpin_kb());
	test_cmd_unregister(self->handle);
	EXPECT_EQ(pin - (long long)(EXPORT_PAGES * PAGE_SZ / 1024), vmpin_kb());

	/* The whole svmbatch file closed while a dma-buf lives on. */
	self->handle = test_cmd_register(self->r, NR, NULL);
	dfd = export_dmabuf(self->fd, self->handle, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd);
	close(self->fd);
	self->fd = -1;
	EXPECT_EQ(pin, vmpin_kb());
	close(dfd);
	EXPECT_EQ(pin - (long long)(EXPORT_PAGES * PAGE_SZ / 1024), vmpin_kb());
	EXPECT_EQ(regs - 1, stat_get("registrations"));
}

static int send_fd(int sock, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	char byte = 'x';
	struct iovec iov = { &byte, 1 };
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
	};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	char byte;
	struct iovec iov = { &byte, 1 };
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
	};
	struct cmsghdr *c;
	int fd;

	if (recvmsg(sock, &msg, 0) != 1)
		return -1;
	c = CMSG_FIRSTHDR(&msg);
	if (!c || c->cmsg_type != SCM_RIGHTS)
		return -1;
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

/*
 * A child registers and exports, passes the dma-buf over SCM_RIGHTS and
 * exits; this process still reads the child's bytes, and closing the
 * dma-buf releases the child's registration.
 */
TEST_F(dmabuf, outlives_the_exporting_process)
{
	long long regs = stat_get("registrations");
	long long pinned = stat_get("pinned_pages");
	int sv[2], status, dfd;
	char *alias;
	pid_t pid;

	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		int fd = open(SVMBATCH_DEV, O_RDWR | O_CLOEXEC);
		char *mem = anon_map(2 * PAGE_SZ);
		struct svmbatch_range r;
		struct svmbatch_register cmd;

		if (fd < 0 || !mem)
			_exit(1);
		memset(mem, 0x77, 2 * PAGE_SZ);
		r = mkrange(mem, 2 * PAGE_SZ, 0);
		if (_test_cmd_register(fd, &r, 1, RANGE_SZ, &cmd))
			_exit(2);
		if (send_fd(sv[1], export_dmabuf(fd, cmd.handle, O_RDWR)))
			_exit(3);
		_exit(0);	/* exit with the handle still registered */
	}
	close(sv[1]);
	dfd = recv_fd(sv[0]);
	close(sv[0]);
	ASSERT_LE(0, dfd);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_EQ(0, status);
	EXPECT_EQ(regs + 1, stat_get("registrations"));
	alias = mmap(NULL, 2 * PAGE_SZ, PROT_READ | PROT_WRITE, MAP_SHARED,
		     dfd, 0);
	ASSERT_NE(MAP_FAILED, alias);
	EXPECT_EQ(0x77, alias[2 * PAGE_SZ - 1]);
	munmap(alias, 2 * PAGE_SZ);
	close(dfd);
	EXPECT_EQ(regs, stat_get("registrations"));
	EXPECT_EQ(pinned, stat_get("pinned_pages"));
}

TEST_F(dmabuf, bad_requests)
{
	struct svmbatch_snapshot s0, s1;
	struct svmbatch_range ro = mkrange(self->buf + 40 * PAGE_SZ, PAGE_SZ,
					    SVMBATCH_RANGE_READ_ONLY);
	int fds = count_open_fds(), dfd;
	__u32 h;

	snapshot_take(_metadata, self->fd, &s0);
	/* Flags are O_CLOEXEC and O_RDWR; anything else is unknown. */
	EXPECT_EQ(-EOPNOTSUPP, export_dmabuf(self->fd, self->handle, O_NONBLOCK));
	EXPECT_EQ(-EOPNOTSUPP, export_dmabuf(self->fd, self->handle, O_WRONLY));
	EXPECT_EQ(-EOPNOTSUPP, export_dmabuf(self->fd, self->handle,
					     O_RDWR | O_WRONLY));
	EXPECT_EQ(-EOPNOTSUPP, export_dmabuf(self->fd, self->handle + 100,
					     O_RDWR | O_APPEND));
	EXPECT_EQ(-ENOENT, export_dmabuf(self->fd, self->handle + 100, O_RDWR));
	EXPECT_EQ(-ENOENT, export_dmabuf(self->fd, 0, O_RDWR));
	snapshot_take(_metadata, self->fd, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
	EXPECT_EQ(fds, count_open_fds());

	/* Read-only pins export read-only, and map read-only. */
	h = test_cmd_register(&ro, 1, NULL);
	EXPECT_EQ(-EACCES, export_dmabuf(self->fd, h, O_RDWR));
	dfd = export_dmabuf(self->fd, h, O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, dfd);
	EXPECT_EQ(MAP_FAILED, mmap(NULL, PAGE_SZ, PROT_READ | PROT_WRITE,
				   MAP_SHARED, dfd, 0));
	EXPECT_NE(MAP_FAILED, mmap(NULL, PAGE_SZ, PROT_READ, MAP_SHARED, dfd, 0));
	close(dfd);
	test_cmd_unregister(h);
}

/*
 * io_uring cannot register the dma-buf's CPU alias: it maps page frames
 * (VM_PFNMAP), because anonymous pages cannot be inserted as struct pages
 * into a second mapping, and GUP refuses VM_PFNMAP with EFAULT on 6.1 and
 * 6.12 alike (6.1 would refuse the file-backed vma next, with EOPNOTSUPP).
 */
TEST_F(dmabuf, io_uring_refuses_the_alias)
{
	struct io_uring_params p = { 0 };
	struct iovec iov;
	int ring, dfd, ret, err;
	char *alias;

	dfd = export_dmabuf(self->fd, self->handle, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd);
	alias = mmap(NULL, EXPORT_PAGES * PAGE_SZ, PROT_READ | PROT_WRITE,
		     MAP_SHARED, dfd, 0);
	ASSERT_NE(MAP_FAILED, alias);
	ring = syscall(__NR_io_uring_setup, 4, &p);
	if (ring < 0)
		SKIP(goto out, "io_uring_setup: %s", strerror(errno));
	iov.iov_base = alias;
	iov.iov_len = EXPORT_PAGES * PAGE_SZ;
	ret = syscall(__NR_io_uring_register, ring, IORING_REGISTER_BUFFERS,
		      &iov, 1);
	err = errno;
	EXPECT_EQ(-1, ret);
	EXPECT_EQ(EFAULT, err);
	TH_LOG("io_uring_register of the alias: %s", strerror(err));
	close(ring);
out:
	munmap(alias, EXPORT_PAGES * PAGE_SZ);
	close(dfd);
}

/* Every injection point of EXPORT_DMABUF fails cleanly. */
TEST_F(dmabuf, fail_nth_sweep)
{
	struct svmbatch_snapshot s0, s1;
	int fds = count_open_fds(), dfd = -1;
	unsigned long n;

	if (!have_fault_injection(self->fd))
		SKIP(return, "no svmbatch fault injection in this build");
	for (n = 1; n < 64; n++) {
		snapshot_take(_metadata, self->fd, &s0);
		ASSERT_EQ(0, fail_nth_set(n));
		dfd = export_dmabuf(self->fd, self->handle, O_RDWR | O_CLOEXEC);
		fail_nth_set(0);
		if (dfd >= 0)
			break;
		/* EFAULT: the command's own copy in or out failed. */
		EXPECT_TRUE(dfd == -ENOMEM || dfd == -EMFILE || dfd == -EFAULT)
			TH_LOG("fail_nth %lu: %s", n, strerror(-dfd));
		EXPECT_EQ(fds, count_open_fds());
		snapshot_take(_metadata, self->fd, &s1);
		ASSERT_SNAPSHOT_EQ(&s0, &s1);
		EXPECT_EQ(s0.fd_pinned_pages, s1.fd_pinned_pages);
		EXPECT_EQ(0, stat_get("exports"));
	}
	ASSERT_LE(0, dfd);
	TH_LOG("%lu injection points", n - 1);
	EXPECT_LE(3UL, n - 1);
	close(dfd);
}

TEST_HARNESS_MAIN
