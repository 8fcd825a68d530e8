/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Tiny wrappers around the svmbatch ioctls, in the style of iommufd's
 * selftests: test_cmd_*() must succeed, test_err_*() must fail with a given
 * errno and, for REGISTER, a given error_index and leave nothing behind.
 *
 * "Nothing behind" is a struct svmbatch_snapshot: VmPin of this process, the
 * module's global debugfs gauges (svmbatch_gauges[]) and this fd's fdinfo
 * registrations and pinned pages.  Failure counters (failed_registrations,
 * injected_failures, svmbatch-failed) are left out of the comparison because
 * a failing call changes them by design.
 */
#ifndef __SELFTEST_SVMBATCH_UTILS_H
#define __SELFTEST_SVMBATCH_UTILS_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <linux/capability.h>
#include <linux/svmbatch.h>
/* As in a kernel tree; here the Makefile points <drm/> at libdrm's copy. */
#include <drm/drm.h>

#include "kselftest_harness.h"
#include "svmbatch_counters.h"

#define SVMBATCH_DEV		"/dev/svmbatch"
#define SVMBATCH_CLIENTS	SVMBATCH_DEBUGFS "/clients"
#define SVMBATCH_FAIL_NTH	SVMBATCH_DEBUGFS "/fail_nth"
#define SVMBATCH_FAIL_NTH_ERRNO	SVMBATCH_DEBUGFS "/fail_nth_errno"
#define SVMBATCH_FAKE_INVAL	SVMBATCH_DEBUGFS "/fake_invalidations"
#define SVMBATCH_SKIP_MSG	"svmbatch module not loaded (/dev/svmbatch missing)"
#define WRITEBACK_DIR_ENV	"SVMBATCH_WRITEBACK_DIR"

/* Defaults of the module parameters, from the contract. */
#define DEFAULT_MAX_RANGES		16384U
#define DEFAULT_MAX_REGISTRATIONS	65536U
#define DEFAULT_MAX_RANGE_BYTES		(64ULL << 30)

#define SZ_2M		(2UL << 20)
#define RANGE_SZ	((__u32)sizeof(struct svmbatch_range))

/* A value the kernel never writes, to see whether an output was written. */
#define CANARY32	0x5a5a5a5aU

static size_t PAGE_SZ;

static __attribute__((constructor)) void svmbatch_utils_init(void)
{
	PAGE_SZ = sysconf(_SC_PAGESIZE);

	/* Mount debugfs if the guest's init did not, so counters are there. */
	if (!access(SVMBATCH_DEV, F_OK) && access(SVMBATCH_DEBUGFS, F_OK))
		mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL);
}

static inline __u64 ptr_u64(const void *p)
{
	return (__u64)(uintptr_t)p;
}

static inline void *u64_ptr(__u64 v)
{
	return (void *)(uintptr_t)v;
}

/* Every fixture opens its own fd in FIXTURE_SETUP (the test's own mm). */
#define svmbatch_open_or_skip(_fd)					\
	do {								\
		if (access(SVMBATCH_DEV, F_OK))				\
			SKIP(return, SVMBATCH_SKIP_MSG);		\
		_fd = open(SVMBATCH_DEV, O_RDWR | O_CLOEXEC);		\
		ASSERT_LE(0, _fd);					\
	} while (0)

/*
 * The usual FIXTURE_SETUP: an fd of the test's own in self->fd and @_npages
 * of anonymous memory in self->buf, which svmbatch_fixture_release() (in the
 * FIXTURE_TEARDOWN) gives back.
 */
#define svmbatch_fixture_setup(_npages)					\
	do {								\
		svmbatch_open_or_skip(self->fd);			\
		self->buf = anon_map((_npages) * PAGE_SZ);		\
		ASSERT_NE(NULL, self->buf);				\
	} while (0)

static inline void svmbatch_fixture_release(int fd, void *buf, size_t npages)
{
	if (buf)
		munmap(buf, npages * PAGE_SZ);
	/* 0: the setup skipped before it opened anything. */
	if (fd > 0)
		close(fd);
}

#define EXPECT_ERRNO(expected_errno, cmd)				\
	({								\
		ASSERT_EQ(-1, cmd);					\
		EXPECT_EQ(expected_errno, errno);			\
	})

/* ---------------------------------------------------------------- memory */

/* Anonymous private read-write memory, every page touched. */
static inline void *anon_map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	memset(p, 0xa5, len);
	return p;
}

/* A memfd of @len bytes, mapped shared read-write; its fd in *@mfd. */
static inline void *memfd_map(size_t len, int *mfd)
{
	void *p;

	*mfd = memfd_create("svmbatch", MFD_CLOEXEC);
	if (*mfd < 0)
		return NULL;
	p = ftruncate(*mfd, len) ? MAP_FAILED :
	    mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, *mfd, 0);
	if (p == MAP_FAILED) {
		close(*mfd);
		*mfd = -1;
		return NULL;
	}
	return p;
}

/* A page-aligned address nothing is mapped at (reserve then unmap). */
static inline void *unmapped_hole(size_t len)
{
	void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	munmap(p, len);
	return p;
}

static inline struct svmbatch_range mkrange(const void *addr, size_t len,
					    __u32 flags)
{
	struct svmbatch_range r = {
		.addr = ptr_u64(addr),
		.len = len,
		.flags = flags,
	};

	return r;
}

/* scatter_ranges() flag: list the ranges last address first. */
#define SCATTER_REVERSE	1U

/*
 * @nr separate buffers, as a program would hand them over, in @r: range i
 * starts at page i * @stride of @base and has 1 + i % (@stride - 1) pages,
 * so at least one page lies between two ranges; with @ro_every, every
 * @ro_every-th range from the first is READ_ONLY.  The memory must span
 * @nr * @stride pages.  Returns the number of pages of all the ranges.
 */
static inline __u64 scatter_ranges(struct svmbatch_range *r, unsigned int nr,
				   void *base, unsigned int stride,
				   unsigned int ro_every, unsigned int flags)
{
	unsigned int i, slot;
	__u64 pages = 0;

	for (i = 0; i < nr; i++) {
		slot = flags & SCATTER_REVERSE ? nr - 1 - i : i;
		r[i] = mkrange((char *)base + (size_t)slot * stride * PAGE_SZ,
			       (1 + slot % (stride - 1)) * PAGE_SZ,
			       ro_every && !(slot % ro_every) ?
			       SVMBATCH_RANGE_READ_ONLY : 0);
		pages += r[i].len / PAGE_SZ;
	}
	return pages;
}

/*
 * The address of byte @off of the ranges @r laid end to end in their order:
 * what a registration's dma-buf holds at @off.  NULL past their end.
 */
static inline char *range_va(const struct svmbatch_range *r, unsigned int nr,
			     size_t off)
{
	unsigned int i;

	for (i = 0; i < nr; i++) {
		if (off < r[i].len)
			return (char *)u64_ptr(r[i].addr) + off;
		off -= r[i].len;
	}
	return NULL;
}

/*
 * Byte @i of test pattern @seed: neighbouring bytes, pages and seeds
 * differ, so a misplaced page or a stale copy shows.
 */
static inline unsigned char pattern_byte(size_t i, unsigned int seed)
{
	return (unsigned char)(i * 31 + (i >> 12) + seed);
}

static inline void pattern_fill(void *p, size_t len, unsigned int seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		((unsigned char *)p)[i] = pattern_byte(i, seed);
}

/* Whether @p holds @len bytes of pattern @seed. */
static inline bool pattern_check(const void *p, size_t len, unsigned int seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (((const unsigned char *)p)[i] != pattern_byte(i, seed))
			return false;
	return true;
}

/* ------------------------------------------------------------ /proc, sys */

static inline int read_file(const char *path, char *buf, size_t len)
{
	ssize_t n, off = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	while ((size_t)off < len - 1) {
		n = read(fd, buf + off, len - 1 - off);
		if (n < 0) {
			close(fd);
			return -1;
		}
		if (!n)
			break;
		off += n;
	}
	buf[off] = 0;
	close(fd);
	return off;
}

static inline int write_file(const char *path, const char *val)
{
	ssize_t n;
	int fd = open(path, O_WRONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	n = write(fd, val, strlen(val));
	close(fd);
	return n == (ssize_t)strlen(val) ? 0 : -1;
}

/*
 * A new file in @dir holding @len bytes of pattern @seed, its name in @path
 * (@pathlen bytes) for the caller to unlink.  Its fd, or -1 with errno.
 */
static inline int pattern_file(const char *dir, char *path, size_t pathlen,
			       size_t len, unsigned int seed)
{
	void *data = malloc(len);
	int fd, err;

	snprintf(path, pathlen, "%s/svmbatch-test.XXXXXX", dir);
	if (!data)
		return -1;
	pattern_fill(data, len, seed);
	fd = mkostemp(path, O_CLOEXEC);
	if (fd >= 0 && pwrite(fd, data, len, 0) != (ssize_t)len) {
		err = errno;
		close(fd);
		unlink(path);
		errno = err;
		fd = -1;
	}
	free(data);
	return fd;
}

/*
 * Field @key (e.g. "AnonHugePages", "VmFlags") of the /proc/self/smaps
 * entry of the mapping that contains @addr, copied to @out.
 */
static inline int smaps_field(const void *addr, const char *key, char *out,
			      size_t outlen)
{
	unsigned long a = (unsigned long)addr, start, end;
	size_t klen = strlen(key);
	bool inside = false;
	char line[512];
	int ret = -1;
	FILE *f = fopen("/proc/self/smaps", "re");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx ", &start, &end) == 2 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			inside = a >= start && a < end;
			continue;
		}
		if (inside && !strncmp(line, key, klen) && line[klen] == ':') {
			size_t n = strlen(line + klen + 1);

			if (n >= outlen)
				n = outlen - 1;
			memcpy(out, line + klen + 1, n);
			out[n] = 0;
			ret = 0;
			break;
		}
	}
	fclose(f);
	return ret;
}

static inline long long smaps_kb(const void *addr, const char *key)
{
	char buf[128];

	if (smaps_field(addr, key, buf, sizeof(buf)))
		return -1;
	return strtoll(buf, NULL, 10);
}

/* Whether VmFlags of the mapping at @addr has the two-letter flag @flag. */
static inline bool smaps_has_vmflag(const void *addr, const char *flag)
{
	char buf[256], *tok, *save = NULL;

	if (smaps_field(addr, "VmFlags", buf, sizeof(buf)))
		return false;
	for (tok = strtok_r(buf, "\n ", &save); tok;
	     tok = strtok_r(NULL, "\n ", &save))
		if (!strcmp(tok, flag))
			return true;
	return false;
}

/* ------------------------------------------------------------- counters */

struct svmbatch_snapshot {
	long long vmpin_kb;
	int nr_stats;
	struct svmbatch_stat stats[SVMBATCH_MAX_STATS];
	unsigned long long fd_id;
	unsigned long long fd_registrations;
	unsigned long long fd_pinned_pages;
	unsigned long long fd_failed;
};

/*
 * The global counters that describe current state (gauges): what is
 * registered, pinned, exported and attached.  Others in the stats file are
 * cumulative (failed_registrations, injected_failures, any "*_total") and
 * legitimately move; they are checked where relevant.
 */
static const char * const svmbatch_gauges[] = {
	"contexts", "registrations", "pinned_pages", "meta_bytes",
	"exports", "dmabuf_segments", "dmabuf_attachments",
};

static inline const struct svmbatch_stat *
snap_stat(const struct svmbatch_snapshot *s, const char *name)
{
	return stat_find(s->stats, s->nr_stats, name);
}

/* Parse the svmbatch-* lines of /proc/self/fdinfo/@fd; 0 if all found. */
static inline int read_fdinfo(int fd, struct svmbatch_snapshot *s)
{
	static const char * const formats[] = {
		"svmbatch-id: %llu", "svmbatch-registrations: %llu",
		"svmbatch-pinned-pages: %llu", "svmbatch-failed: %llu",
	};
	unsigned long long *fields[] = {
		&s->fd_id, &s->fd_registrations, &s->fd_pinned_pages,
		&s->fd_failed,
	};
	char path[64], line[256];
	int found = 0;
	size_t i;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		for (i = 0; i < ARRAY_SIZE(formats); i++)
			if (sscanf(line, formats[i], fields[i]) == 1)
				found++;
	fclose(f);
	return found == 4 ? 0 : -1;
}

static inline void snapshot_take(struct __test_metadata *_metadata, int fd,
				 struct svmbatch_snapshot *s)
{
	static const char * const required[] = {
		"contexts", "registrations", "pinned_pages",
		"failed_registrations", "meta_bytes",
	};
	size_t i;

	memset(s, 0, sizeof(*s));
	s->vmpin_kb = vmpin_kb();
	ASSERT_LE(0, s->vmpin_kb);
	s->nr_stats = read_stats(s->stats, SVMBATCH_MAX_STATS);
	ASSERT_LT(0, s->nr_stats) {
		TH_LOG("cannot read %s (CONFIG_DEBUG_FS, debugfs mounted?)",
		       SVMBATCH_STATS);
	}
	for (i = 0; i < ARRAY_SIZE(required); i++) {
		ASSERT_NE(NULL, snap_stat(s, required[i])) {
			TH_LOG("%s has no '%s' line", SVMBATCH_STATS,
			       required[i]);
		}
	}
	if (fd >= 0) {
		ASSERT_EQ(0, read_fdinfo(fd, s)) {
			TH_LOG("fdinfo of fd %d lacks svmbatch-* lines", fd);
		}
	}
}

/*
 * Whether @b shows what @a showed: VmPin, the global gauges and the fd's
 * registrations and pinned pages.  Each difference is logged unless
 * @_metadata is NULL (a caller that waits for the counters to settle).
 */
#define SNAP_LOG(...)							\
	do {								\
		if (_metadata)						\
			TH_LOG(__VA_ARGS__);				\
	} while (0)

static inline bool snapshot_same(struct __test_metadata *_metadata,
				 const struct svmbatch_snapshot *a,
				 const struct svmbatch_snapshot *b)
{
	const struct svmbatch_stat *sa, *sb;
	bool same = true;
	size_t i;

	if (a->vmpin_kb != b->vmpin_kb) {
		SNAP_LOG("VmPin changed: %lld kB -> %lld kB", a->vmpin_kb,
			 b->vmpin_kb);
		same = false;
	}
	for (i = 0; i < ARRAY_SIZE(svmbatch_gauges); i++) {
		sa = snap_stat(a, svmbatch_gauges[i]);
		sb = snap_stat(b, svmbatch_gauges[i]);
		if (!sa || !sb || sb->val != sa->val) {
			SNAP_LOG("global %s changed: %llu -> %llu",
				 svmbatch_gauges[i], sa ? sa->val : 0ULL,
				 sb ? sb->val : 0ULL);
			same = false;
		}
	}
	if (a->fd_registrations != b->fd_registrations ||
	    a->fd_pinned_pages != b->fd_pinned_pages) {
		SNAP_LOG("fdinfo changed: registrations %llu -> %llu, pinned-pages %llu -> %llu",
			 a->fd_registrations, b->fd_registrations,
			 a->fd_pinned_pages, b->fd_pinned_pages);
		same = false;
	}
	return same;
}

#define ASSERT_SNAPSHOT_EQ(a, b) ASSERT_TRUE(snapshot_same(_metadata, a, b))

/* "<id> <tgid> <registrations> <pinned_pages> <failed>" of one client. */
struct svmbatch_client {
	unsigned long long id, tgid, registrations, pinned_pages, failed;
};

/* Find the clients line of context @id; 0 if found, -1 if not. */
static inline int read_client(unsigned long long id, struct svmbatch_client *c)
{
	char line[256];
	int ret = -1;
	FILE *f = fopen(SVMBATCH_CLIENTS, "re");

	if (!f)
		return -1;
	if (!fgets(line, sizeof(line), f)) {	/* header */
		fclose(f);
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llu %llu %llu %llu %llu", &c->id, &c->tgid,
			   &c->registrations, &c->pinned_pages,
			   &c->failed) == 5 && c->id == id) {
			ret = 0;
			break;
		}
	}
	fclose(f);
	return ret;
}

/* ------------------------------------------------------------- commands */

static inline int _test_cmd_get_info(int fd, struct svmbatch_info *info)
{
	memset(info, 0, sizeof(*info));
	info->size = sizeof(*info);
	return ioctl(fd, SVMBATCH_GET_INFO, info);
}

#define test_cmd_get_info(_info) \
	ASSERT_EQ(0, _test_cmd_get_info(self->fd, _info))

static inline int _test_unregister(int fd, __u32 handle)
{
	struct svmbatch_unregister cmd = {
		.size = sizeof(cmd),
		.handle = handle,
	};

	return ioctl(fd, SVMBATCH_UNREGISTER, &cmd);
}

/*
 * REGISTER @nr ranges of @range_size bytes each at @ranges.  @cmd receives
 * the struct as the kernel left it; error_index and handle start as canaries
 * so that the caller can tell whether they were written.
 */
static inline int _test_cmd_register(int fd, const void *ranges, __u32 nr,
				     __u32 range_size,
				     struct svmbatch_register *cmd)
{
	memset(cmd, 0, sizeof(*cmd));
	cmd->size = sizeof(*cmd);
	cmd->ranges = ptr_u64(ranges);
	cmd->nr_ranges = nr;
	cmd->range_size = range_size;
	cmd->handle = CANARY32;
	cmd->error_index = CANARY32;
	return ioctl(fd, SVMBATCH_REGISTER, cmd);
}

/* Successful REGISTER on @fd; evaluates to the handle. */
#define test_cmd_register_fd(_fd, _ranges, _nr, _nr_pages)		\
	({								\
		struct svmbatch_register __reg;				\
		ASSERT_EQ(0, _test_cmd_register(_fd, _ranges, _nr,	\
						RANGE_SZ, &__reg)) {	\
			TH_LOG("REGISTER of %u ranges: %s, error_index %u", \
			       (unsigned int)(_nr), strerror(errno),	\
			       __reg.error_index);			\
		}							\
		EXPECT_EQ(SVMBATCH_NO_INDEX, __reg.error_index);	\
		ASSERT_NE(0U, __reg.handle);				\
		ASSERT_NE(CANARY32, __reg.handle);			\
		__u64 *__np = (_nr_pages);				\
		if (__np)						\
			*__np = __reg.nr_pages;				\
		__reg.handle;						\
	})

#define test_cmd_register(_ranges, _nr, _nr_pages) \
	test_cmd_register_fd(self->fd, _ranges, _nr, _nr_pages)

/*
 * REGISTER must fail with @_errno and @_index and leave nothing behind: VmPin,
 * global counters and this fd's counters as before, no handle.
 */
#define test_err_register_cmd_fd(_fd, _errno, _index, _cmd)		\
	({								\
		struct svmbatch_snapshot __before, __after;		\
		int __ret, __err;					\
		snapshot_take(_metadata, _fd, &__before);		\
		(_cmd)->handle = CANARY32;				\
		(_cmd)->error_index = CANARY32;				\
		__ret = ioctl(_fd, SVMBATCH_REGISTER, _cmd);		\
		__err = errno;						\
		if (!__ret)						\
			_test_unregister(_fd, (_cmd)->handle);		\
		ASSERT_EQ(-1, __ret) {					\
			TH_LOG("REGISTER succeeded, expected %s",	\
			       strerror(_errno));			\
		}							\
		EXPECT_EQ(_errno, __err) {				\
			TH_LOG("got %s, expected %s", strerror(__err),	\
			       strerror(_errno));			\
		}							\
		EXPECT_EQ((__u32)(_index), (_cmd)->error_index);	\
		snapshot_take(_metadata, _fd, &__after);		\
		ASSERT_SNAPSHOT_EQ(&__before, &__after);		\
		EXPECT_EQ(__before.fd_failed + 1, __after.fd_failed);	\
	})

#define test_err_register_cmd(_errno, _index, _cmd) \
	test_err_register_cmd_fd(self->fd, _errno, _index, _cmd)

#define test_err_register_sz(_errno, _index, _ranges, _nr, _range_size)	\
	({								\
		struct svmbatch_register __cmd = {			\
			.size = sizeof(__cmd),				\
			.ranges = ptr_u64(_ranges),			\
			.nr_ranges = _nr,				\
			.range_size = _range_size,			\
		};							\
		test_err_register_cmd(_errno, _index, &__cmd);		\
	})

#define test_err_register(_errno, _index, _ranges, _nr) \
	test_err_register_sz(_errno, _index, _ranges, _nr, RANGE_SZ)

#define test_cmd_unregister_fd(_fd, _handle) \
	ASSERT_EQ(0, _test_unregister(_fd, _handle))
#define test_cmd_unregister(_handle) \
	test_cmd_unregister_fd(self->fd, _handle)
#define test_err_unregister(_errno, _handle) \
	EXPECT_ERRNO(_errno, _test_unregister(self->fd, _handle))

static inline int _test_cmd_query(int fd, __u32 handle, void *ranges,
				  __u32 cap, __u32 range_size,
				  struct svmbatch_query *q)
{
	memset(q, 0, sizeof(*q));
	q->size = sizeof(*q);
	q->handle = handle;
	q->ranges = ptr_u64(ranges);
	q->ranges_cap = cap;
	q->range_size = range_size;
	return ioctl(fd, SVMBATCH_QUERY, q);
}

#define test_cmd_query(_handle, _q) \
	ASSERT_EQ(0, _test_cmd_query(self->fd, _handle, NULL, 0, RANGE_SZ, _q))
#define test_cmd_query_ranges(_handle, _ranges, _cap, _q)		\
	ASSERT_EQ(0, _test_cmd_query(self->fd, _handle, _ranges, _cap,	\
				     RANGE_SZ, _q))
#define test_err_query(_errno, _handle)					\
	({								\
		struct svmbatch_query __q;				\
		EXPECT_ERRNO(_errno, _test_cmd_query(self->fd, _handle,	\
						     NULL, 0, RANGE_SZ,	\
						     &__q));		\
	})

/* QUERY must return exactly @nr ranges equal to @expect, in order. */
#define test_query_ranges_eq(_fd, _handle, _expect, _nr)		\
	({								\
		struct svmbatch_range *__got;				\
		struct svmbatch_query __q;				\
		__u32 __i;						\
		__got = calloc((_nr) + 1, RANGE_SZ);			\
		ASSERT_NE(NULL, __got);					\
		ASSERT_EQ(0, _test_cmd_query(_fd, _handle, __got,	\
					     (_nr) + 1, RANGE_SZ, &__q));\
		ASSERT_EQ((__u32)(_nr), __q.nr_ranges);			\
		for (__i = 0; __i < (__u32)(_nr); __i++) {		\
			ASSERT_EQ((_expect)[__i].addr, __got[__i].addr)	\
				TH_LOG("range %u", __i);		\
			ASSERT_EQ((_expect)[__i].len, __got[__i].len);	\
			ASSERT_EQ((_expect)[__i].flags, __got[__i].flags); \
			ASSERT_EQ(0U, __got[__i].reserved);		\
		}							\
		free(__got);						\
	})

/* EXPORT_DMABUF of @handle with @flags: the dma-buf fd or -errno. */
static inline int export_dmabuf(int fd, __u32 handle, __u32 flags)
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

/* Exclusive end of the user address space, TASK_SIZE_MAX on x86-64. */
static inline __u64 task_size(void)
{
	char line[4096];
	bool la57 = false;
	FILE *f = fopen("/proc/cpuinfo", "re");

	while (f && fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "flags", 5)) {
			la57 = strstr(line, " la57");
			break;
		}
	}
	if (f)
		fclose(f);
	return la57 ? 0x00fffffffffff000ULL : 0x00007ffffffff000ULL;
}

/* ------------------------------------------------------- capabilities */

/* Drop @cap from the effective set of this process (no libcap). */
static inline int drop_effective_cap(int cap)
{
	struct __user_cap_header_struct hdr = {
		.version = _LINUX_CAPABILITY_VERSION_3,
	};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

	if (syscall(SYS_capget, &hdr, data))
		return -1;
	data[CAP_TO_INDEX(cap)].effective &= ~CAP_TO_MASK(cap);
	return syscall(SYS_capset, &hdr, data);
}

static inline bool have_effective_cap(int cap)
{
	struct __user_cap_header_struct hdr = {
		.version = _LINUX_CAPABILITY_VERSION_3,
	};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

	if (syscall(SYS_capget, &hdr, data))
		return false;
	return data[CAP_TO_INDEX(cap)].effective & CAP_TO_MASK(cap);
}

/* ------------------------------------------------------ fault injection */

static inline bool have_fault_injection(int fd)
{
	struct svmbatch_info info;

	return !_test_cmd_get_info(fd, &info) &&
	       (info.features & SVMBATCH_FEATURE_FAULT_INJECTION) &&
	       !access(SVMBATCH_FAIL_NTH, W_OK);
}

/* Write @n to the debugfs knob @path; 0 or -1. */
static inline int knob_set(const char *path, unsigned long n)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%lu\n", n);
	return write_file(path, buf);
}

/* The value of the debugfs knob @path, -1 on error. */
static inline long knob_get(const char *path)
{
	char buf[32];

	if (read_file(path, buf, sizeof(buf)) < 0)
		return -1;
	return strtol(buf, NULL, 10);
}

static inline int fail_nth_set(unsigned long n)
{
	return knob_set(SVMBATCH_FAIL_NTH, n);
}

/* Remaining countdown of this process, 0 if not armed, -1 on error. */
static inline long fail_nth_get(void)
{
	return knob_get(SVMBATCH_FAIL_NTH);
}

/*
 * Make the next @n pin attempts of this process end as if an invalidation
 * had raced them (fault-injection builds).
 */
static inline int fake_invalidations_set(unsigned long n)
{
	return knob_set(SVMBATCH_FAKE_INVAL, n);
}

static inline long fake_invalidations_get(void)
{
	return knob_get(SVMBATCH_FAKE_INVAL);
}

/*
 * A fault-injection sweep, after iommufd_fail_nth.c: fail injection point 1
 * of one call, then point 2, and so on, until the call runs to its end
 * without reaching the point armed.  The knob is the module's fail_nth (its
 * own points, per process) or the kernel's /proc/self/task/TID/fail-nth
 * (failslab, fail_page_alloc and fail_usercopy: every should_fail site of
 * the thread).  Every step checks what any injected failure must do: fail
 * the call with the errno the point documents (the module's own points
 * say which in fail_nth_errno; for the kernel's, one of @errnos), fire the
 * knob, count in injected_failures when the module injected it, and leave
 * nothing behind (VmPin, the module's gauges, @fd's counters).  The test
 * checks the rest in the body of FAIL_NTH_SWEEP().
 */
struct fail_nth {
	/* Set by the test. */
	const char *what;	/* the call swept, for the messages */
	const char *path;	/* the knob */
	int fd;			/* the svmbatch fd whose fdinfo counts, or -1 */
	/* The kernel's knob: what a failure may give, 0-terminated. */
	const int *errnos;
	unsigned long max;	/* injection points at most */
	/* The step that the body of FAIL_NTH_SWEEP() looks at. */
	unsigned long n;	/* the injection point armed */
	int ret;		/* the call's value: failure if < 0 ... */
	int err;		/* ... with this errno */
	long left;		/* countdown after it: > 0, point n never reached */
	bool done;		/* the sweep is over: the call ran to its end */
	struct svmbatch_snapshot before, after;
	/* Totals. */
	unsigned long failed;	/* points whose failure failed the call */
	unsigned long absorbed;	/* points the call recovered from */
	int knob;		/* the knob's fd while armed */
};

#define FAIL_NTH_ERRNOS(...) ((const int[]){ __VA_ARGS__, 0 })

/* Move to the next point; false when the sweep is over. */
static inline bool fail_nth_next(struct fail_nth *s)
{
	if (s->done || s->n >= s->max)
		return false;
	s->n++;
	return true;
}

/*
 * Arm point n, last thing before the call: with the kernel's knob every
 * site of the thread counts, opening the knob included.  Neither knob
 * moves the file position on a write, and the module's cannot seek, so
 * the step reads and writes it with plain read() and write().
 */
static inline void fail_nth_arm(struct __test_metadata *_metadata,
				struct fail_nth *s)
{
	char buf[32];
	int len = snprintf(buf, sizeof(buf), "%lu", s->n);

	snapshot_take(_metadata, s->fd, &s->before);
	s->knob = open(s->path, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, s->knob) TH_LOG("%s: %s", s->path, strerror(errno));
	ASSERT_EQ((ssize_t)len, write(s->knob, buf, len)) {
		TH_LOG("arming %s: %s", s->path, strerror(errno));
	}
}

static inline bool fail_nth_errno_allowed(const struct fail_nth *s)
{
	const int *e;

	for (e = s->errnos; *e; e++)
		if (*e == s->err)
			return true;
	return false;
}

static inline long long snap_val(const struct svmbatch_snapshot *s,
				 const char *name)
{
	const struct svmbatch_stat *st = snap_stat(s, name);

	return st ? (long long)st->val : -1;
}

/*
 * Right after the call, which gave @ret and errno: read what is left of
 * the countdown, disarm, and check the step.  True, for FAIL_NTH_SWEEP().
 */
static inline bool fail_nth_step(struct __test_metadata *_metadata,
				 struct fail_nth *s, int ret)
{
	bool module = !strcmp(s->path, SVMBATCH_FAIL_NTH);
	char buf[32];
	ssize_t len;

	s->ret = ret;
	s->err = errno;

	/*
	 * If the read fails, its own copy to user space was the site armed:
	 * the call itself never reached it.
	 */
	len = read(s->knob, buf, sizeof(buf) - 1);
	if (len > 0) {
		buf[len] = 0;
		s->left = strtol(buf, NULL, 10);
	} else {
		s->left = 1;
	}
	/*
	 * Disarming copies from user space, a site of its own: EFAULT there
	 * means the countdown ran out in this write, which disarmed it too.
	 */
	ASSERT_TRUE(write(s->knob, "0", 1) == 1 || errno == EFAULT) {
		TH_LOG("disarming %s: %s", s->path, strerror(errno));
	}
	close(s->knob);
	snapshot_take(_metadata, s->fd, &s->after);
	/* The module counts the failures it injects, and only those. */
	EXPECT_EQ(module && !s->left ? 1 : 0,
		  snap_val(&s->after, "injected_failures") -
		  snap_val(&s->before, "injected_failures")) {
		TH_LOG("%s, point %lu: injected_failures off", s->what, s->n);
	}
	if (s->ret >= 0) {
		if (s->left > 0)
			s->done = true;
		else
			s->absorbed++;
		return true;
	}
	s->failed++;
	if (module) {
		long want = knob_get(SVMBATCH_FAIL_NTH_ERRNO);

		EXPECT_EQ(want, s->err) {
			TH_LOG("%s, point %lu: %s, but the point gives %s",
			       s->what, s->n, strerror(s->err),
			       want > 0 ? strerror(want) : "nothing");
		}
	} else {
		EXPECT_TRUE(fail_nth_errno_allowed(s)) {
			TH_LOG("%s, point %lu: unexpected %s", s->what, s->n,
			       strerror(s->err));
		}
	}
	EXPECT_EQ(0, s->left) {
		TH_LOG("%s, point %lu: failed, but the knob did not fire",
		       s->what, s->n);
	}
	ASSERT_SNAPSHOT_EQ(&s->before, &s->after);
	return true;
}

/*
 * Sweep @_call, an expression whose value is < 0 on failure (with errno),
 * over the injection points of (_nth)->path; the statement that follows is
 * run after every step, with the step in @_nth.  Each step arms the knob,
 * evaluates @_call, disarms and checks it (fail_nth_step()).  The sweep
 * ends when the call ran to its end without reaching the point armed, or
 * when the body sets (_nth)->done.
 */
#define FAIL_NTH_SWEEP(_nth, _call)					\
	for (; fail_nth_next(_nth) &&					\
	       fail_nth_step(_metadata, _nth,				\
			     (fail_nth_arm(_metadata, _nth), (_call)));)

/* After FAIL_NTH_SWEEP(): it came to its end; the count for the record. */
static inline void fail_nth_end(struct __test_metadata *_metadata,
				const struct fail_nth *s)
{
	ASSERT_TRUE(s->done) {
		TH_LOG("%s: no end after %lu injection points", s->what,
		       s->max);
	}
	ksft_print_msg("%s, %s: %lu injection points failed it, %lu absorbed\n",
		       s->what, s->path, s->failed, s->absorbed);
}

/* ------------------------------------------------------------------- vgem */

#define VGEM_SKIP_MSG \
	"no vgem device among /dev/dri/card0-15 (CONFIG_DRM_VGEM, module vgem)"

/* The vgem card node, or -1. */
static inline int open_vgem(void)
{
	char name[32], path[64];
	int i, fd;

	for (i = 0; i < 16; i++) {
		struct drm_version v = {
			.name = name, .name_len = sizeof(name) - 1,
		};

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
 * Is @what in SVMBATCH_EXPECT, the comma separated list of what the test
 * guest was built to have (tools/vmtest/init exports it)?  There, an
 * absence is a failure, not a skip.
 */
static inline bool svmbatch_expects(const char *what)
{
	const char *list = getenv("SVMBATCH_EXPECT");
	size_t n = strlen(what);

	while (list && *list) {
		if (!strncmp(list, what, n) && (list[n] == ',' || !list[n]))
			return true;
		list = strchr(list, ',');
		if (list)
			list++;
	}
	return false;
}

/*
 * @feature is absent, as @fmt says: SKIP the test (running @statement),
 * unless the guest was built to have @feature (SVMBATCH_EXPECT): then it
 * fails, saying so.  The rule of the library tests' SVMBATCH_SKIP_ABSENT
 * (libsvmbatch/tests/test_util.hpp), with the same feature names.
 */
#define skip_absent(feature, statement, fmt, ...)			\
	do {								\
		if (svmbatch_expects(feature)) {			\
			TH_LOG("%s is absent, but this guest is built to have it " \
			       "(SVMBATCH_EXPECT=%s): " fmt, feature,	\
			       getenv("SVMBATCH_EXPECT"), ##__VA_ARGS__); \
			ASSERT_FALSE(svmbatch_expects(feature));	\
		}							\
		SKIP(statement, fmt, ##__VA_ARGS__);			\
	} while (0)

/*
 * A vgem card node in @_vgem, or SKIP the test: unless the guest was built
 * with vgem (SVMBATCH_EXPECT), where no vgem node fails it.
 */
#define vgem_open_or_skip(_vgem)					\
	do {								\
		_vgem = open_vgem();					\
		if (_vgem < 0)						\
			skip_absent("vgem", return, VGEM_SKIP_MSG);	\
	} while (0)

/* ------------------------------------------------------------ fd passing */

/* One byte of data with room for one fd, as send_fd() and recv_fd() use. */
struct fd_msg {
	struct msghdr msg;
	struct iovec iov;
	char byte;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} control;
};

static inline struct msghdr *fd_msg_init(struct fd_msg *m)
{
	memset(m, 0, sizeof(*m));
	m->byte = 'x';
	m->iov.iov_base = &m->byte;
	m->iov.iov_len = 1;
	m->msg.msg_iov = &m->iov;
	m->msg.msg_iovlen = 1;
	m->msg.msg_control = m->control.buf;
	m->msg.msg_controllen = sizeof(m->control.buf);
	return &m->msg;
}

/* Pass @fd (SCM_RIGHTS) over the unix socket @sock; 0 or -1. */
static inline int send_fd(int sock, int fd)
{
	struct fd_msg m;
	struct msghdr *msg = fd_msg_init(&m);
	struct cmsghdr *cmsg = CMSG_FIRSTHDR(msg);

	cmsg->cmsg_level = SOL_SOCKET;
	cmsg->cmsg_type = SCM_RIGHTS;
	cmsg->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
	return sendmsg(sock, msg, 0) == 1 ? 0 : -1;
}

/* The fd that send_fd() passed over @sock, close-on-exec; -1 on error. */
static inline int recv_fd(int sock)
{
	struct fd_msg m;
	struct msghdr *msg = fd_msg_init(&m);
	struct cmsghdr *cmsg;
	int fd;

	if (recvmsg(sock, msg, MSG_CMSG_CLOEXEC) != 1)
		return -1;
	cmsg = CMSG_FIRSTHDR(msg);
	if (!cmsg || cmsg->cmsg_level != SOL_SOCKET ||
	    cmsg->cmsg_type != SCM_RIGHTS ||
	    cmsg->cmsg_len != CMSG_LEN(sizeof(int)))
		return -1;
	memcpy(&fd, CMSG_DATA(cmsg), sizeof(int));
	return fd;
}

/* --------------------------------------------------------------- io_uring */

/*
 * Only for the tests that include <liburing.h> (before this header): the
 * Makefile links liburing into those and no others.
 */
#ifdef LIB_URING_H
/* Submit the one prepared SQE; its completion result or a negative errno. */
static inline int uring_submit_wait(struct io_uring *ring)
{
	struct io_uring_cqe *cqe;
	int ret = io_uring_submit(ring);

	if (ret != 1)
		return ret < 0 ? ret : -EIO;
	ret = io_uring_wait_cqe(ring, &cqe);
	if (ret)
		return ret;
	ret = cqe->res;
	io_uring_cqe_seen(ring, cqe);
	return ret;
}

/*
 * READ_FIXED into (or, with @write, WRITE_FIXED from) each of the @nr
 * fixed buffers @iov registered with @ring, in order, the buffers laid end
 * to end in @file from offset 0.
 */
static inline void uring_fixed_io(struct __test_metadata *_metadata,
				  struct io_uring *ring, int file,
				  const struct iovec *iov, int nr, bool write)
{
	struct io_uring_sqe *sqe;
	off_t off = 0;
	int i;

	for (i = 0; i < nr; off += iov[i].iov_len, i++) {
		sqe = io_uring_get_sqe(ring);
		ASSERT_NE(NULL, sqe);
		if (write)
			io_uring_prep_write_fixed(sqe, file, iov[i].iov_base,
						  iov[i].iov_len, off, i);
		else
			io_uring_prep_read_fixed(sqe, file, iov[i].iov_base,
						 iov[i].iov_len, off, i);
		ASSERT_EQ((int)iov[i].iov_len, uring_submit_wait(ring)) {
			TH_LOG("%s_FIXED of buffer %d", write ? "WRITE" : "READ",
			       i);
		}
	}
}
#endif /* LIB_URING_H */

#endif /* __SELFTEST_SVMBATCH_UTILS_H */
