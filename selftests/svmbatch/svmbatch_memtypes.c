// SPDX-License-Identifier: GPL-2.0
/*
 * Memory types: anonymous (4 KiB, untouched, zero page, THP), hugetlb,
 * shmem (memfd, MAP_SHARED anonymous), private and read-only file mappings,
 * and writable shared mappings of a file on a filesystem with writeback
 * (ext4 at $SVMBATCH_WRITEBACK_DIR), which REGISTER refuses with EOPNOTSUPP
 * on every kernel, before pinning and before RLIMIT_MEMLOCK.
 */
#include <sys/vfs.h>
#include <linux/magic.h>

#include "svmbatch_utils.h"

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << 26)	/* log2(2 MiB) << MAP_HUGE_SHIFT */
#endif

/* A scratch file made by make_file(), removed by the teardown. */
struct scratch_file {
	int fd;
	char path[256];
};

FIXTURE(memtypes) {
	int fd;
	struct scratch_file file;
};

FIXTURE_SETUP(memtypes)
{
	svmbatch_open_or_skip(self->fd);
	self->file.fd = -1;
}

FIXTURE_TEARDOWN(memtypes)
{
	if (self->file.fd >= 0) {
		close(self->file.fd);
		unlink(self->file.path);
	}
	if (self->fd > 0)
		close(self->fd);
}

/*
 * REGISTER one range, check nr_pages, VmPin and the QUERY round trip,
 * then UNREGISTER and check VmPin is back.  Returns the QUERY result.
 */
static struct svmbatch_query
register_one(struct __test_metadata *_metadata, int fd, const void *addr,
	     size_t len, __u32 flags)
{
	struct svmbatch_range r = mkrange(addr, len, flags);
	long long pin0 = vmpin_kb();
	struct svmbatch_query q;
	__u64 nr;
	__u32 h;

	h = test_cmd_register_fd(fd, &r, 1, &nr);
	EXPECT_EQ(len / PAGE_SZ, nr);
	EXPECT_EQ(pin0 + (long long)(len / 1024), vmpin_kb());
	ASSERT_EQ(0, _test_cmd_query(fd, h, NULL, 0, RANGE_SZ, &q));
	EXPECT_EQ(len / PAGE_SZ, q.nr_pages);
	EXPECT_LE(1ULL, q.nr_segments);
	EXPECT_GE(q.nr_pages, q.nr_segments);
	EXPECT_LE(1ULL, q.nr_folios);
	EXPECT_GE(q.nr_pages, q.nr_folios);
	test_query_ranges_eq(fd, h, &r, 1);
	test_cmd_unregister_fd(fd, h);
	EXPECT_EQ(pin0, vmpin_kb());
	return q;
}

/* A file in @dir holding @len bytes of a pattern, removed by the teardown. */
static int make_file(struct __test_metadata *_metadata,
		     struct scratch_file *f, const char *dir, size_t len)
{
	f->fd = pattern_file(dir, f->path, sizeof(f->path), len, 3);
	ASSERT_LE(0, f->fd) TH_LOG("%s: %s", f->path, strerror(errno));
	return f->fd;
}

static bool fs_has_no_writeback(const char *dir)
{
	struct statfs st;

	return !statfs(dir, &st) &&
	       (st.f_type == TMPFS_MAGIC || st.f_type == RAMFS_MAGIC);
}

#define writeback_dir_or_skip()						\
	({								\
		const char *__d = getenv(WRITEBACK_DIR_ENV);		\
		if (!__d || !*__d)					\
			skip_absent("writeback", return, WRITEBACK_DIR_ENV \
				    " not set (ext4 mount for writeback tests)"); \
		ASSERT_FALSE(fs_has_no_writeback(__d)) {		\
			TH_LOG("%s is tmpfs/ramfs, not a writeback fs", __d); \
		}							\
		__d;							\
	})

/* ------------------------------------------------------------ anonymous */

TEST_F(memtypes, anon_private)
{
	const size_t len = 32 * PAGE_SZ;
	char *p = anon_map(len);

	ASSERT_NE(NULL, p);
	register_one(_metadata, self->fd, p, len, 0);
	register_one(_metadata, self->fd, p, len, SVMBATCH_RANGE_READ_ONLY);
	munmap(p, len);
}

/* Never touched: a writable pin faults the pages in. */
TEST_F(memtypes, anon_untouched)
{
	const size_t len = 32 * PAGE_SZ;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ASSERT_NE(MAP_FAILED, p);
	register_one(_metadata, self->fd, p, len, 0);
	munmap(p, len);
}

/* Never written, pinned read-only: may pin the shared zero page. */
TEST_F(memtypes, anon_zero_page_read_only)
{
	const size_t len = 32 * PAGE_SZ;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	size_t i;
	char sum = 0;

	ASSERT_NE(MAP_FAILED, p);
	/* Read faults map the shared zero page; the asm keeps the reads. */
	for (i = 0; i < len; i += PAGE_SZ)
		sum += p[i];
	asm volatile("" : : "r"(sum) : "memory");
	ASSERT_EQ(0, sum);
	register_one(_metadata, self->fd, p, len, SVMBATCH_RANGE_READ_ONLY);
	munmap(p, len);
}

/* Two adjacent VMAs (different protections) under one range. */
TEST_F(memtypes, anon_range_spans_vmas)
{
	const size_t len = 16 * PAGE_SZ;
	char *p = anon_map(len);

	ASSERT_NE(NULL, p);
	ASSERT_EQ(0, mprotect(p + 8 * PAGE_SZ, 8 * PAGE_SZ, PROT_READ));
	register_one(_metadata, self->fd, p, len, SVMBATCH_RANGE_READ_ONLY);
	register_one(_metadata, self->fd, p, 8 * PAGE_SZ, 0);
	munmap(p, len);
}

TEST_F(memtypes, thp)
{
	char *raw = mmap(NULL, 2 * SZ_2M, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct svmbatch_query q;
	char thp_mode[128] = "?";
	char *p;

	ASSERT_NE(MAP_FAILED, raw);
	p = (char *)(((uintptr_t)raw + SZ_2M - 1) & ~(SZ_2M - 1));
	if (madvise(p, SZ_2M, MADV_HUGEPAGE))
		skip_absent("thp", return, "MADV_HUGEPAGE: %s (CONFIG_TRANSPARENT_HUGEPAGE)",
			    strerror(errno));
	memset(p, 0x11, SZ_2M);
	if (smaps_kb(p, "AnonHugePages") < (long long)(SZ_2M / 1024)) {
		read_file("/sys/kernel/mm/transparent_hugepage/enabled",
			  thp_mode, sizeof(thp_mode));
		skip_absent("thp", return,
			    "no THP backed the range (AnonHugePages %lld kB, enabled: %s)",
			    smaps_kb(p, "AnonHugePages"), strtok(thp_mode, "\n"));
	}
	q = register_one(_metadata, self->fd, p, SZ_2M, 0);
	EXPECT_EQ(1ULL, q.nr_folios);
	EXPECT_EQ(1ULL, q.nr_segments);
	q = register_one(_metadata, self->fd, p, SZ_2M,
			 SVMBATCH_RANGE_READ_ONLY);
	EXPECT_EQ(1ULL, q.nr_folios);
	EXPECT_EQ(1ULL, q.nr_segments);
	/* Part of the folio: still one folio and one segment. */
	q = register_one(_metadata, self->fd, p + 64 * PAGE_SZ,
			 16 * PAGE_SZ, 0);
	EXPECT_EQ(1ULL, q.nr_folios);
	EXPECT_EQ(1ULL, q.nr_segments);
	munmap(raw, 2 * SZ_2M);
}

TEST_F(memtypes, hugetlb)
{
	struct svmbatch_query q;
	char *p;

	p = mmap(NULL, SZ_2M, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB,
		 -1, 0);
	if (p == MAP_FAILED && errno == ENOMEM &&
	    proc_field("/proc/meminfo", "HugePages_Total") <= 0)
		skip_absent("hugetlb", return,
			    "no 2 MiB hugetlb pages (HugePages_Total 0; boot with hugepages=N)");
	ASSERT_NE(MAP_FAILED, p) TH_LOG("MAP_HUGETLB: %s", strerror(errno));
	memset(p, 0x22, SZ_2M);
	q = register_one(_metadata, self->fd, p, SZ_2M, 0);
	EXPECT_EQ(1ULL, q.nr_folios);
	EXPECT_EQ(1ULL, q.nr_segments);
	register_one(_metadata, self->fd, p + PAGE_SZ, 8 * PAGE_SZ,
		     SVMBATCH_RANGE_READ_ONLY);
	munmap(p, SZ_2M);
}

/* ---------------------------------------------------------------- shmem */

TEST_F(memtypes, memfd_shared_writable)
{
	const size_t len = 32 * PAGE_SZ;
	char *p;
	int mfd;

	p = memfd_map(len, &mfd);
	ASSERT_NE(NULL, p);
	memset(p, 0x33, len / 2);	/* half populated, half not */
	register_one(_metadata, self->fd, p, len, 0);
	munmap(p, len);
	close(mfd);
}

TEST_F(memtypes, shared_anonymous_writable)
{
	const size_t len = 32 * PAGE_SZ;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	ASSERT_NE(MAP_FAILED, p);
	memset(p, 0x44, len);
	register_one(_metadata, self->fd, p, len, 0);
	munmap(p, len);
}

/* ----------------------------------------------------------------- files */

static void private_file_writable(struct __test_metadata *_metadata,
				  int svm_fd, struct scratch_file *f,
				  const char *dir)
{
	const size_t len = 16 * PAGE_SZ;
	int fd = make_file(_metadata, f, dir, len);
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);

	ASSERT_NE(MAP_FAILED, p);
	register_one(_metadata, svm_fd, p, len, 0);
	register_one(_metadata, svm_fd, p, len, SVMBATCH_RANGE_READ_ONLY);
	munmap(p, len);
}

TEST_F(memtypes, private_file_tmp)
{
	private_file_writable(_metadata, self->fd, &self->file, "/tmp");
}

/* MAP_PRIVATE of an ext4 file is not a shared writeback mapping. */
TEST_F(memtypes, private_file_writeback_dir)
{
	const char *dir = writeback_dir_or_skip();

	private_file_writable(_metadata, self->fd, &self->file, dir);
}

TEST_F(memtypes, read_only_shared_file_tmp)
{
	const size_t len = 16 * PAGE_SZ;
	int fd = make_file(_metadata, &self->file, "/tmp", len);
	struct svmbatch_range r;
	char *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);

	ASSERT_NE(MAP_FAILED, p);
	register_one(_metadata, self->fd, p, len, SVMBATCH_RANGE_READ_ONLY);
	if (fs_has_no_writeback("/tmp")) {
		/* No writeback on tmpfs: GUP refuses a write pin of PROT_READ */
		r = mkrange(p, len, 0);
		test_err_register(EFAULT, 0, &r, 1);
	}
	munmap(p, len);
}

TEST_F(memtypes, read_only_shared_file_writeback_dir)
{
	const char *dir = writeback_dir_or_skip();
	const size_t len = 16 * PAGE_SZ;
	int fd = make_file(_metadata, &self->file, dir, len);
	char *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);

	ASSERT_NE(MAP_FAILED, p);
	register_one(_metadata, self->fd, p, len, SVMBATCH_RANGE_READ_ONLY);
	munmap(p, len);
}

/* The writable-shared-file check, its index and its place in the order. */
TEST_F(memtypes, shared_writable_file_writeback_dir)
{
	const char *dir = writeback_dir_or_skip();
	const size_t len = 16 * PAGE_SZ;
	int fd = make_file(_metadata, &self->file, dir, len);
	char *anon = anon_map(16 * PAGE_SZ);
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	struct svmbatch_range r[4];

	ASSERT_NE(NULL, anon);
	ASSERT_NE(MAP_FAILED, p);
	memset(p, 0x55, len);

	r[0] = mkrange(anon, PAGE_SZ, 0);
	r[1] = mkrange(p + 4 * PAGE_SZ, 4 * PAGE_SZ, 0);
	r[2] = mkrange(anon + 2 * PAGE_SZ, PAGE_SZ, 0);
	test_err_register(EOPNOTSUPP, 1, r, 3);

	/* Read-only pins of the same mapping are fine. */
	r[1].flags = SVMBATCH_RANGE_READ_ONLY;
	register_one(_metadata, self->fd, p, len, SVMBATCH_RANGE_READ_ONLY);
	test_cmd_unregister(test_cmd_register(r, 3, NULL));
	r[1].flags = 0;

	/* Overlap (stage 3) wins over the writeback check (stage 4)... */
	r[3] = r[2];
	test_err_register(EINVAL, 3, r, 4);
	/* ... which wins over pinning failures (stage 6) ... */
	r[0] = mkrange(unmapped_hole(PAGE_SZ), PAGE_SZ, 0);
	test_err_register(EOPNOTSUPP, 1, r, 3);
	/* ... and over RLIMIT_MEMLOCK (stage 5). */
	r[0] = mkrange(anon, PAGE_SZ, 0);
	ASSERT_EQ(0, drop_effective_cap(CAP_IPC_LOCK));
	ASSERT_EQ(0, setrlimit(RLIMIT_MEMLOCK,
			       &(struct rlimit){ 0, RLIM_INFINITY }));
	test_err_register(EOPNOTSUPP, 1, r, 3);

	munmap(p, len);
	munmap(anon, 16 * PAGE_SZ);
}

/* One range over an anonymous VMA and a shared ext4 VMA right after it. */
TEST_F(memtypes, range_spans_anon_and_shared_file)
{
	const char *dir = writeback_dir_or_skip();
	const size_t len = 8 * PAGE_SZ;
	int fd = make_file(_metadata, &self->file, dir, len);
	char *p = anon_map(2 * len), *f;
	struct svmbatch_range r[2];

	ASSERT_NE(NULL, p);
	f = mmap(p + len, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		 fd, 0);
	ASSERT_EQ(p + len, f);
	r[0] = mkrange(p, len, 0);
	r[1] = mkrange(p + len - 2 * PAGE_SZ, 4 * PAGE_SZ, 0);
	r[0].len -= 2 * PAGE_SZ;
	test_err_register(EOPNOTSUPP, 1, r, 2);
	r[1].flags = SVMBATCH_RANGE_READ_ONLY;
	test_cmd_unregister(test_cmd_register(r, 2, NULL));
	munmap(p, 2 * len);
}

/* ---------------------------------------------------- special mappings */

/* Start and end of the /proc/self/maps line naming @name, e.g. "[vdso]". */
static int find_mapping(const char *name, char **start, char **end)
{
	unsigned long s, e;
	char line[512];
	int ret = -1;
	FILE *f = fopen("/proc/self/maps", "re");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, name) &&
		    sscanf(line, "%lx-%lx", &s, &e) == 2) {
			*start = (char *)s;
			*end = (char *)e;
			ret = 0;
			break;
		}
	}
	fclose(f);
	return ret;
}

/*
 * The kernel's own vDSO and vvar pages are no user memory to pin: EFAULT
 * for the range, read-only or not, before any page is pinned.
 */
TEST_F(memtypes, vdso_and_vvar_refused)
{
	static const char * const names[] = { "[vdso]", "[vvar]" };
	char *anon = anon_map(PAGE_SZ), *start, *end;
	struct svmbatch_range r[2];
	unsigned int i, found = 0;

	ASSERT_NE(NULL, anon);
	for (i = 0; i < ARRAY_SIZE(names); i++) {
		if (find_mapping(names[i], &start, &end))
			continue;
		found++;
		r[0] = mkrange(anon, PAGE_SZ, 0);
		r[1] = mkrange(start, end - start, SVMBATCH_RANGE_READ_ONLY);
		test_err_register(EFAULT, 1, r, 2);
		r[1] = mkrange(start, PAGE_SZ, SVMBATCH_RANGE_READ_ONLY);
		test_err_register(EFAULT, 1, r, 2);
		r[1].flags = 0;
		test_err_register(EFAULT, 1, r, 2);
	}
	if (!found)
		SKIP(return, "no [vdso] or [vvar] in /proc/self/maps");
	munmap(anon, PAGE_SZ);
}

TEST_HARNESS_MAIN
