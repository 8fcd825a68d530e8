/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Tiny wrappers around the svmbatch ioctls, in the style of iommufd's
 * selftests: test_cmd_*() must succeed, test_err_*() must fail with a given
 * errno and, for REGISTER, a given error_index and leave nothing behind.
 *
 * "Nothing behind" is a struct svmbatch_snapshot: VmPin of this process, the
 * module's global debugfs gauges (contexts, registrations, pinned_pages,
 * meta_bytes) and this fd's fdinfo registrations and pinned pages.  Failure
 * counters (failed_registrations, injected_failures, svmbatch-failed) are
 * left out of the comparison because a failing call changes them by design.
 */
#ifndef __SELFTEST_SVMBATCH_UTILS_H
#define __SELFTEST_SVMBATCH_UTILS_H

#include <errno.h>
#include <fcntl.h>
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

#include "kselftest_harness.h"

#define SVMBATCH_DEV		"/dev/svmbatch"
#define SVMBATCH_DEBUGFS	"/sys/kernel/debug/svmbatch"
#define SVMBATCH_STATS		SVMBATCH_DEBUGFS "/stats"
#define SVMBATCH_CLIENTS	SVMBATCH_DEBUGFS "/clients"
#define SVMBATCH_FAIL_NTH	SVMBATCH_DEBUGFS "/fail_nth"
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

/* "Key:   value" from a /proc file, -1 if absent. */
static inline long long proc_field(const char *path, const char *key)
{
	char line[256];
	long long val = -1;
	size_t klen = strlen(key);
	FILE *f = fopen(path, "re");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, klen) && line[klen] == ':') {
			val = strtoll(line + klen + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	return val;
}

/* VmPin of this process (mm->pinned_vm) in kB. */
static inline long long vmpin_kb(void)
{
	return proc_field("/proc/self/status", "VmPin");
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

#define SNAP_MAX_STATS 32

struct svmbatch_stat {
	char name[48];
	unsigned long long val;
};

struct svmbatch_snapshot {
	long long vmpin_kb;
	int nr_stats;
	struct svmbatch_stat stats[SNAP_MAX_STATS];
	unsigned long long fd_id;
	unsigned long long fd_registrations;
	unsigned long long fd_pinned_pages;
	unsigned long long fd_failed;
};

/*
 * The global counters that describe current state (gauges).  Others in the
 * stats file are cumulative (failed_registrations, injected_failures, any
 * "*_total") and legitimately move; they are checked where relevant.
 */
static const char * const svmbatch_gauges[] = {
	"contexts", "registrations", "pinned_pages", "meta_bytes",
};

static inline int read_stats(struct svmbatch_stat *stats, int max)
{
	char line[256];
	int n = 0;
	FILE *f = fopen(SVMBATCH_STATS, "re");

	if (!f)
		return -1;
	while (n < max && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%47s %llu", stats[n].name, &stats[n].val) == 2)
			n++;
	}
	fclose(f);
	return n;
}

/* Value of global counter @name, or -1 if the stats file lacks it. */
static inline long long stat_get(const char *name)
{
	struct svmbatch_stat stats[SNAP_MAX_STATS];
	int i, n = read_stats(stats, SNAP_MAX_STATS);

	for (i = 0; i < n; i++)
		if (!strcmp(stats[i].name, name))
			return stats[i].val;
	return -1;
}

static inline const struct svmbatch_stat *
snap_stat(const struct svmbatch_snapshot *s, const char *name)
{
	int i;

	for (i = 0; i < s->nr_stats; i++)
		if (!strcmp(s->stats[i].name, name))
			return &s->stats[i];
	return NULL;
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
	s->nr_stats = read_stats(s->stats, SNAP_MAX_STATS);
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

static inline void snapshot_assert_eq(struct __test_metadata *_metadata,
				      const struct svmbatch_snapshot *a,
				      const struct svmbatch_snapshot *b)
{
	const struct svmbatch_stat *sa, *sb;
	bool same = true;
	int i;

	if (a->vmpin_kb != b->vmpin_kb) {
		TH_LOG("VmPin changed: %lld kB -> %lld kB", a->vmpin_kb,
		       b->vmpin_kb);
		same = false;
	}
	for (i = 0; i < (int)ARRAY_SIZE(svmbatch_gauges); i++) {
		sa = snap_stat(a, svmbatch_gauges[i]);
		sb = snap_stat(b, svmbatch_gauges[i]);
		if (!sa || !sb || sb->val != sa->val) {
			TH_LOG("global %s changed: %llu -> %llu",
			       svmbatch_gauges[i], sa ? sa->val : 0ULL,
			       sb ? sb->val : 0ULL);
			same = false;
		}
	}
	if (a->fd_registrations != b->fd_registrations ||
	    a->fd_pinned_pages != b->fd_pinned_pages) {
		TH_LOG("fdinfo changed: registrations %llu -> %llu, pinned-pages %llu -> %llu",
		       a->fd_registrations, b->fd_registrations,
		       a->fd_pinned_pages, b->fd_pinned_pages);
		same = false;
	}
	ASSERT_TRUE(same);
}

#define ASSERT_SNAPSHOT_EQ(a, b) snapshot_assert_eq(_metadata, a, b)

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
#endif /* LIB_URING_H */

#endif /* __SELFTEST_SVMBATCH_UTILS_H */
