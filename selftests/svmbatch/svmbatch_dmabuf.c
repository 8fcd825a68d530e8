// SPDX-License-Identifier: GPL-2.0
/*
 * EXPORT_DMABUF: scattered anonymous memory as one dma-buf.  Its mmap is a
 * contiguous CPU alias of the ranges in order; vgem imports it (PRIME, one
 * attachment per importing file) and hands back the same dma-buf, whose
 * bytes are the original buffers both ways; the dma-buf keeps the pages
 * pinned until the handle, every dma-buf and every import are gone, in any
 * order and across processes.
 */
#include <linux/dma-buf.h>
#include <liburing.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <dirent.h>
#include <sys/stat.h>

#include "svmbatch_utils.h"

#define NPAGES 64
#define NR 3
#define EXPORT_PAGES 8	/* 4 + 3 + 1 */
#define SWEEP_MAX 63

FIXTURE(dmabuf) {
	int fd;
	char *buf;
	struct svmbatch_range r[NR];
	__u32 handle;
};

FIXTURE_SETUP(dmabuf)
{
	svmbatch_fixture_setup(NPAGES);
	pattern_fill(self->buf, NPAGES * PAGE_SZ, 0);
	/* Out of address order on purpose: the dma-buf follows this order. */
	self->r[0] = mkrange(self->buf + 10 * PAGE_SZ, 4 * PAGE_SZ, 0);
	self->r[1] = mkrange(self->buf, 3 * PAGE_SZ, 0);
	self->r[2] = mkrange(self->buf + 30 * PAGE_SZ, PAGE_SZ, 0);
	self->handle = test_cmd_register(self->r, NR, NULL);
}

FIXTURE_TEARDOWN(dmabuf)
{
	svmbatch_fixture_release(self->fd, self->buf, NPAGES);
}

/* Byte @off of the dma-buf: the ranges concatenated in REGISTER order. */
static char *dmabuf_byte(struct svmbatch_range *r, size_t off)
{
	return range_va(r, NR, off);
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

/* An mmap at an offset starts at that byte of the concatenation. */
TEST_F(dmabuf, mmap_honours_the_offset)
{
	size_t off;
	char *p;
	int dfd;

	dfd = export_dmabuf(self->fd, self->handle, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd);
	/* Pages 4..6 of the dma-buf are range 1, the first 3 pages of buf. */
	p = mmap(NULL, 3 * PAGE_SZ, PROT_READ | PROT_WRITE, MAP_SHARED, dfd,
		 4 * PAGE_SZ);
	ASSERT_NE(MAP_FAILED, p);
	for (off = 0; off < 3 * PAGE_SZ; off++)
		ASSERT_EQ(self->buf[off], p[off]) TH_LOG("byte %zu", off);
	p[2 * PAGE_SZ] = 0x3c;
	EXPECT_EQ(0x3c, self->buf[2 * PAGE_SZ]);
	munmap(p, 3 * PAGE_SZ);
	/* The last page alone, then one page too far. */
	p = mmap(NULL, PAGE_SZ, PROT_READ, MAP_SHARED, dfd,
		 (EXPORT_PAGES - 1) * PAGE_SZ);
	ASSERT_NE(MAP_FAILED, p);
	EXPECT_EQ(0, memcmp(p, self->buf + 30 * PAGE_SZ, PAGE_SZ));
	munmap(p, PAGE_SZ);
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 2 * PAGE_SZ, PROT_READ, MAP_SHARED,
				   dfd, (EXPORT_PAGES - 1) * PAGE_SZ));
	EXPECT_EQ(EINVAL, errno);
	close(dfd);
}

/* The global counters that exports and their imports move. */
struct import_counters {
	long long segs;		/* dmabuf_segments */
	long long atts;		/* dmabuf_attachments */
	long long exports;
};

static struct import_counters read_import_counters(void)
{
	struct import_counters c = {
		.segs = stat_get("dmabuf_segments"),
		.atts = stat_get("dmabuf_attachments"),
		.exports = stat_get("exports"),
	};

	return c;
}

static int vgem_import(int vgem, int dfd, __u32 *gem)
{
	struct drm_prime_handle prime = { .fd = dfd };

	if (ioctl(vgem, DRM_IOCTL_PRIME_FD_TO_HANDLE, &prime))
		return -errno;
	*gem = prime.handle;
	return 0;
}

static int gem_close(int vgem, __u32 gem)
{
	struct drm_gem_close c = { .handle = gem };

	return ioctl(vgem, DRM_IOCTL_GEM_CLOSE, &c);
}

/*
 * vgem imports the dma-buf (PRIME): it attaches and maps it for its device,
 * one scatterlist segment per physically contiguous run.  vgem cannot mmap
 * an imported object itself (drm_gem_dumb_map_offset() refuses imports with
 * EINVAL), but exporting the import again gives this very dma-buf, and its
 * mmap shows the original scattered buffers byte for byte, both ways.  A
 * read-only export cannot be imported for device writes.
 */
TEST_F(dmabuf, vgem_imports_it)
{
	struct drm_prime_handle back = { 0 };
	struct drm_mode_map_dumb map = { 0 };
	struct svmbatch_range ro = mkrange(self->buf + 40 * PAGE_SZ, PAGE_SZ,
					    SVMBATCH_RANGE_READ_ONLY);
	const struct import_counters c0 = read_import_counters();
	size_t len = EXPORT_PAGES * PAGE_SZ, off;
	struct stat st_export, st_back;
	struct svmbatch_query q;
	int vgem, dfd, rofd;
	__u32 h, gem = 0;
	char *alias;

	vgem_open_or_skip(vgem);
	dfd = export_dmabuf(self->fd, self->handle, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd);
	ASSERT_EQ(0, vgem_import(vgem, dfd, &gem));
	test_cmd_query(self->handle, &q);
	EXPECT_EQ(c0.segs + (long long)q.nr_segments, stat_get("dmabuf_segments"));
	EXPECT_EQ(c0.atts + 1, stat_get("dmabuf_attachments"));

	map.handle = gem;
	EXPECT_EQ(-1, ioctl(vgem, DRM_IOCTL_MODE_MAP_DUMB, &map));
	EXPECT_EQ(EINVAL, errno);

	back.handle = gem;
	back.flags = DRM_CLOEXEC | DRM_RDWR;
	ASSERT_EQ(0, ioctl(vgem, DRM_IOCTL_PRIME_HANDLE_TO_FD, &back));
	ASSERT_EQ(0, fstat(dfd, &st_export));
	ASSERT_EQ(0, fstat(back.fd, &st_back));
	EXPECT_EQ(st_export.st_ino, st_back.st_ino);
	close(dfd);
	alias = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, back.fd, 0);
	ASSERT_NE(MAP_FAILED, alias);
	for (off = 0; off < len; off++)
		ASSERT_EQ(*dmabuf_byte(self->r, off), alias[off])
			TH_LOG("byte %zu", off);
	self->buf[11 * PAGE_SZ + 17] = 0x21;		/* range 0, page 1 */
	EXPECT_EQ(0x21, alias[PAGE_SZ + 17]);
	alias[6 * PAGE_SZ + 5] = 0x42;			/* range 1, page 2 */
	EXPECT_EQ(0x42, self->buf[2 * PAGE_SZ + 5]);
	munmap(alias, len);
	close(back.fd);

	ASSERT_EQ(0, gem_close(vgem, gem));
	EXPECT_EQ(c0.segs, stat_get("dmabuf_segments"));
	EXPECT_EQ(c0.atts, stat_get("dmabuf_attachments"));

	h = test_cmd_register(&ro, 1, NULL);
	rofd = export_dmabuf(self->fd, h, O_CLOEXEC);
	ASSERT_LE(0, rofd);
	EXPECT_EQ(-EACCES, vgem_import(vgem, rofd, &gem));
	EXPECT_EQ(c0.atts, stat_get("dmabuf_attachments"));
	close(rofd);
	test_cmd_unregister(h);
	close(vgem);
}

/*
 * Two exports of one registration, imported by two vgem files (three
 * attachments): every import holds its dma-buf, so the pages stay pinned
 * after the handle and both dma-buf fds are gone, until the last import.
 */
TEST_F(dmabuf, several_exports_and_importers)
{
	const struct import_counters c0 = read_import_counters();
	long long regs = stat_get("registrations");
	long long pin = vmpin_kb();
	struct stat st1, st2;
	struct svmbatch_query q;
	int vgem1, vgem2, dfd1, dfd2;
	__u32 g1 = 0, g2 = 0, g3 = 0;

	vgem_open_or_skip(vgem1);
	vgem2 = open_vgem();
	ASSERT_LE(0, vgem2);
	test_cmd_query(self->handle, &q);

	dfd1 = export_dmabuf(self->fd, self->handle, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd1);
	dfd2 = export_dmabuf(self->fd, self->handle, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd2);
	ASSERT_EQ(0, fstat(dfd1, &st1));
	ASSERT_EQ(0, fstat(dfd2, &st2));
	EXPECT_NE(st1.st_ino, st2.st_ino);
	EXPECT_EQ(c0.exports + 2, stat_get("exports"));

	ASSERT_EQ(0, vgem_import(vgem1, dfd1, &g1));
	ASSERT_EQ(0, vgem_import(vgem2, dfd1, &g2));
	ASSERT_EQ(0, vgem_import(vgem1, dfd2, &g3));
	EXPECT_EQ(c0.atts + 3, stat_get("dmabuf_attachments"));
	EXPECT_EQ(c0.segs + 3 * (long long)q.nr_segments,
		  stat_get("dmabuf_segments"));

	test_cmd_unregister(self->handle);
	close(dfd1);
	close(dfd2);
	EXPECT_EQ(pin, vmpin_kb());
	EXPECT_EQ(regs, stat_get("registrations"));
	EXPECT_EQ(c0.exports + 2, stat_get("exports"));

	ASSERT_EQ(0, gem_close(vgem1, g1));
	EXPECT_EQ(c0.exports + 2, stat_get("exports"));	/* vgem2 holds it */
	close(vgem2);					/* drops g2 */
	EXPECT_EQ(c0.exports + 1, stat_get("exports"));
	EXPECT_EQ(pin, vmpin_kb());
	close(vgem1);					/* drops g3 */
	EXPECT_EQ(c0.exports, stat_get("exports"));
	EXPECT_EQ(c0.atts, stat_get("dmabuf_attachments"));
	EXPECT_EQ(c0.segs, stat_get("dmabuf_segments"));
	EXPECT_EQ(regs - 1, stat_get("registrations"));
	EXPECT_EQ(pin - (long long)(EXPORT_PAGES * PAGE_SZ / 1024), vmpin_kb());
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

/* An io_uring instance, or SKIP with the reason. */
#define ring_init_or_skip(_ring, _label)				\
	do {								\
		int __r = io_uring_queue_init(4, _ring, 0);		\
		if (__r == -ENOSYS || __r == -EPERM)			\
			SKIP(goto _label, "io_uring_queue_init: %s",	\
			     strerror(-__r));				\
		ASSERT_EQ(0, __r);					\
	} while (0)

/* A pattern file to read from and the dma-buf's alias to read into. */
struct alias_io {
	size_t len;
	unsigned char *file;	/* the file's bytes */
	int src;		/* the file */
	int dfd;		/* the registration, exported read-write */
	char *alias;		/* all of it mapped, shared, with the given prot */
};

static void alias_io_setup(struct __test_metadata *_metadata, int fd,
			   __u32 handle, unsigned int seed, int prot,
			   struct alias_io *io)
{
	char path[PATH_MAX];

	io->len = EXPORT_PAGES * PAGE_SZ;
	io->file = malloc(io->len);
	ASSERT_NE(NULL, io->file);
	pattern_fill(io->file, io->len, seed);
	io->src = pattern_file("/tmp", path, sizeof(path), io->len, seed);
	ASSERT_LE(0, io->src) TH_LOG("%s: %s", path, strerror(errno));
	unlink(path);
	io->dfd = export_dmabuf(fd, handle, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, io->dfd);
	io->alias = mmap(NULL, io->len, prot, MAP_SHARED, io->dfd, 0);
	ASSERT_NE(MAP_FAILED, io->alias);
}

static void alias_io_cleanup(struct alias_io *io)
{
	munmap(io->alias, io->len);
	close(io->dfd);
	close(io->src);
	free(io->file);
}

/*
 * io_uring cannot register the dma-buf's CPU alias as fixed buffers, on
 * 6.1 and 6.12 alike: the alias maps page frames (VM_PFNMAP, see
 * kmod/dmabuf.c for why it cannot map struct pages), and GUP's
 * check_vma_flags() refuses VM_PFNMAP with EFAULT.  6.1 would refuse it a
 * second time: its io_pin_pages() rejects every file-backed vma other than
 * shmem and hugetlbfs with EOPNOTSUPP (removed in 6.5, when GUP took over
 * the file-backed checks).
 */
TEST_F(dmabuf, io_uring_refuses_the_alias)
{
	struct io_uring ring;
	struct iovec iov;
	int dfd, ret;
	char *alias;

	dfd = export_dmabuf(self->fd, self->handle, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd);
	alias = mmap(NULL, EXPORT_PAGES * PAGE_SZ, PROT_READ | PROT_WRITE,
		     MAP_SHARED, dfd, 0);
	ASSERT_NE(MAP_FAILED, alias);
	ring_init_or_skip(&ring, out);
	iov.iov_base = alias;
	iov.iov_len = EXPORT_PAGES * PAGE_SZ;
	ret = io_uring_register_buffers(&ring, &iov, 1);
	EXPECT_EQ(-EFAULT, ret);
	TH_LOG("io_uring_register_buffers of the alias: %s", strerror(-ret));
	io_uring_queue_exit(&ring);
out:
	munmap(alias, EXPORT_PAGES * PAGE_SZ);
	close(dfd);
}

/* A plain (not fixed) io_uring read into the alias lands in the ranges. */
TEST_F(dmabuf, io_uring_read_into_the_alias)
{
	struct io_uring_sqe *sqe;
	struct io_uring ring;
	struct alias_io io;
	size_t off;

	alias_io_setup(_metadata, self->fd, self->handle, 0x11,
		       PROT_READ | PROT_WRITE, &io);
	ring_init_or_skip(&ring, out);
	sqe = io_uring_get_sqe(&ring);
	ASSERT_NE(NULL, sqe);
	io_uring_prep_read(sqe, io.src, io.alias, io.len, 0);
	ASSERT_EQ((int)io.len, uring_submit_wait(&ring));
	for (off = 0; off < io.len; off++)
		ASSERT_EQ((char)io.file[off], *dmabuf_byte(self->r, off))
			TH_LOG("byte %zu", off);
	io_uring_queue_exit(&ring);
out:
	alias_io_cleanup(&io);
}

/*
 * The path that works: the original ranges as io_uring fixed buffers,
 * READ_FIXED from a file into them, and the dma-buf (what a device
 * imports) holds the file's bytes in order.
 */
TEST_F(dmabuf, io_uring_read_fixed_shows_in_the_dmabuf)
{
	struct iovec iov[NR];
	struct io_uring ring;
	struct alias_io io;
	int i;

	alias_io_setup(_metadata, self->fd, self->handle, 0x77, PROT_READ,
		       &io);
	ring_init_or_skip(&ring, out);
	for (i = 0; i < NR; i++) {
		iov[i].iov_base = u64_ptr(self->r[i].addr);
		iov[i].iov_len = self->r[i].len;
	}
	ASSERT_EQ(0, io_uring_register_buffers(&ring, iov, NR));
	uring_fixed_io(_metadata, &ring, io.src, iov, NR, false);
	EXPECT_EQ(0, memcmp(io.alias, io.file, io.len));
	ASSERT_EQ(0, io_uring_unregister_buffers(&ring));
	io_uring_queue_exit(&ring);
out:
	alias_io_cleanup(&io);
}

/*
 * Importing runs the exporter's attach and map_dma_buf; each of their
 * injection points fails the import cleanly: no attachment, no mapped
 * segment, no GEM handle, and the dma-buf is still ours alone.
 */
TEST_F(dmabuf, fail_nth_import_sweep)
{
	struct fail_nth nth = {
		.what = "vgem import", .path = SVMBATCH_FAIL_NTH,
		.fd = self->fd, .errnos = FAIL_NTH_ERRNOS(ENOMEM),
		.max = SWEEP_MAX,
	};
	const struct import_counters c0 = read_import_counters();
	int vgem, dfd;
	__u32 gem = 0;

	if (!have_fault_injection(self->fd))
		skip_absent("faultinject", return, "no svmbatch fault injection in this build");
	vgem_open_or_skip(vgem);
	dfd = export_dmabuf(self->fd, self->handle, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd);
	/* The snapshots' gauges hold attachments, segments and exports. */
	FAIL_NTH_SWEEP(&nth, vgem_import(vgem, dfd, &gem)) {
		if (nth.ret >= 0)
			ASSERT_EQ(0, gem_close(vgem, gem));
	}
	fail_nth_end(_metadata, &nth);
	EXPECT_EQ(3UL, nth.failed);	/* attach, the sg table, its DMA mapping */
	close(dfd);
	close(vgem);
	EXPECT_EQ(c0.exports, stat_get("exports"));
	EXPECT_EQ(c0.atts, stat_get("dmabuf_attachments"));
}

/* Every injection point of EXPORT_DMABUF fails cleanly. */
TEST_F(dmabuf, fail_nth_sweep)
{
	/* EFAULT: the command's own copy in or out failed. */
	struct fail_nth nth = {
		.what = "EXPORT_DMABUF", .path = SVMBATCH_FAIL_NTH,
		.fd = self->fd,
		.errnos = FAIL_NTH_ERRNOS(ENOMEM, EMFILE, EFAULT),
		.max = SWEEP_MAX,
	};
	int fds = count_open_fds();

	if (!have_fault_injection(self->fd))
		skip_absent("faultinject", return, "no svmbatch fault injection in this build");
	FAIL_NTH_SWEEP(&nth, export_dmabuf(self->fd, self->handle,
					   O_RDWR | O_CLOEXEC)) {
		if (nth.ret >= 0)
			close(nth.ret);
		/* No dma-buf fd installed by a failed call, none kept. */
		EXPECT_EQ(fds, count_open_fds());
	}
	fail_nth_end(_metadata, &nth);
	EXPECT_LE(3UL, nth.failed);
}

TEST_HARNESS_MAIN
