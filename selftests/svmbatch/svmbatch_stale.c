// SPDX-License-Identifier: GPL-2.0
/*
 * Stale-VA detection: a registration goes STALE (QUERY out_flags, an
 * optional eventfd signalled once) when a registered address is unmapped,
 * has its pages dropped or moved, or is mapped over; never because of
 * fork, mprotect, accesses, or changes outside the registered ranges.
 */
#include <sys/eventfd.h>
#include <sys/wait.h>

#include "svmbatch_utils.h"

#define NPAGES 32

FIXTURE(stale) {
	int fd;
	char *buf;
	__u32 handle;
};

/* Two ranges, pages [0, 4) and [8, 12), with a hole of pages between. */
static void stale_ranges(char *buf, struct svmbatch_range r[2])
{
	r[0] = mkrange(buf, 4 * PAGE_SZ, 0);
	r[1] = mkrange(buf + 8 * PAGE_SZ, 4 * PAGE_SZ, 0);
}

FIXTURE_SETUP(stale)
{
	struct svmbatch_range r[2];

	svmbatch_fixture_setup(NPAGES);
	stale_ranges(self->buf, r);
	self->handle = test_cmd_register(r, 2, NULL);
}

FIXTURE_TEARDOWN(stale)
{
	svmbatch_fixture_release(self->fd, self->buf, NPAGES);
}

static int query_out_flags(int fd, __u32 handle)
{
	struct svmbatch_query q;

	if (_test_cmd_query(fd, handle, NULL, 0, RANGE_SZ, &q))
		return -errno;
	return q.out_flags;
}

#define ASSERT_STALE(_want)						\
	ASSERT_EQ((_want) ? SVMBATCH_QUERY_STALE : 0,			\
		  query_out_flags(self->fd, self->handle))

TEST_F(stale, advertised_and_fresh)
{
	struct svmbatch_info info;

	test_cmd_get_info(&info);
	EXPECT_TRUE(info.features & SVMBATCH_FEATURE_STALE_NOTIFY);
	ASSERT_STALE(false);
}

TEST_F(stale, no_false_positive_from_access_mprotect_fork)
{
	pid_t pid;
	int status;

	memset(self->buf, 0x11, NPAGES * PAGE_SZ);
	EXPECT_EQ(0x11, self->buf[9 * PAGE_SZ]);
	ASSERT_EQ(0, mprotect(self->buf, NPAGES * PAGE_SZ, PROT_READ));
	ASSERT_EQ(0, mprotect(self->buf, NPAGES * PAGE_SZ,
			      PROT_READ | PROT_WRITE));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		self->buf[PAGE_SZ] = 0x22;	/* the child's own copy */
		_exit(self->buf[9 * PAGE_SZ] == 0x11 ? 0 : 1);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_EQ(0, status);
	self->buf[PAGE_SZ] = 0x33;
	ASSERT_STALE(false);
}

TEST_F(stale, changes_outside_the_ranges_are_ignored)
{
	ASSERT_EQ(0, munmap(self->buf + 5 * PAGE_SZ, PAGE_SZ));
	ASSERT_EQ(0, madvise(self->buf + 16 * PAGE_SZ, PAGE_SZ,
			     MADV_DONTNEED));
	ASSERT_STALE(false);
}

TEST_F(stale, munmap_marks_stale_and_keeps_the_pin)
{
	long long pin = vmpin_kb();
	long long stale = stat_get("stale_total");

	ASSERT_EQ(0, munmap(self->buf + PAGE_SZ, PAGE_SZ));
	ASSERT_STALE(true);
	EXPECT_EQ(pin, vmpin_kb());
	EXPECT_EQ(stale + 1, stat_get("stale_total"));
	/* Once stale, stays stale; counted once. */
	ASSERT_EQ(0, munmap(self->buf + 9 * PAGE_SZ, PAGE_SZ));
	ASSERT_STALE(true);
	EXPECT_EQ(stale + 1, stat_get("stale_total"));
}

TEST_F(stale, madv_dontneed_marks_stale)
{
	ASSERT_EQ(0, madvise(self->buf + 10 * PAGE_SZ, PAGE_SZ,
			     MADV_DONTNEED));
	ASSERT_STALE(true);
}

TEST_F(stale, mremap_marks_stale)
{
	char *dst = anon_map(4 * PAGE_SZ);

	ASSERT_NE(NULL, dst);
	ASSERT_EQ(dst, mremap(self->buf + 8 * PAGE_SZ, 4 * PAGE_SZ,
			      4 * PAGE_SZ, MREMAP_MAYMOVE | MREMAP_FIXED, dst));
	ASSERT_STALE(true);
	munmap(dst, 4 * PAGE_SZ);
}

TEST_F(stale, mapping_over_marks_stale)
{
	ASSERT_EQ(self->buf + 2 * PAGE_SZ,
		  mmap(self->buf + 2 * PAGE_SZ, PAGE_SZ, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
	ASSERT_STALE(true);
}

/*
 * Fill @r with the stale_ranges() of @buf, and @cmd with a REGISTER of them
 * that asks for eventfd @efd to be signalled.
 */
static void eventfd_register_cmd(struct svmbatch_register *cmd, char *buf,
				 struct svmbatch_range r[2], int efd)
{
	stale_ranges(buf, r);
	memset(cmd, 0, sizeof(*cmd));
	cmd->size = sizeof(*cmd);
	cmd->flags = SVMBATCH_REGISTER_EVENTFD;
	cmd->ranges = ptr_u64(r);
	cmd->nr_ranges = 2;
	cmd->range_size = RANGE_SZ;
	cmd->eventfd = efd;
}

/* REGISTER with an eventfd: signalled once, when the first change lands. */
TEST_F(stale, eventfd_signalled_once)
{
	struct svmbatch_register cmd;
	struct svmbatch_range r[2];
	__u64 v;
	int efd;

	efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ASSERT_LE(0, efd);
	eventfd_register_cmd(&cmd, self->buf, r, efd);
	test_cmd_unregister(self->handle);
	ASSERT_EQ(0, ioctl(self->fd, SVMBATCH_REGISTER, &cmd));
	self->handle = cmd.handle;

	EXPECT_EQ(-1, read(efd, &v, sizeof(v)));
	EXPECT_EQ(EAGAIN, errno);
	ASSERT_EQ(0, madvise(self->buf, PAGE_SZ, MADV_DONTNEED));
	ASSERT_EQ(sizeof(v), read(efd, &v, sizeof(v)));
	EXPECT_EQ(1ULL, v);
	ASSERT_EQ(0, munmap(self->buf + 8 * PAGE_SZ, PAGE_SZ));
	EXPECT_EQ(-1, read(efd, &v, sizeof(v)));
	EXPECT_EQ(EAGAIN, errno);
	ASSERT_STALE(true);
	/* Unregistering drops the eventfd reference; the fd stays usable. */
	test_cmd_unregister(self->handle);
	self->handle = 0;
	v = 5;
	EXPECT_EQ(sizeof(v), write(efd, &v, sizeof(v)));
	close(efd);
}

TEST_F(stale, bad_eventfd_and_flags_leave_nothing)
{
	struct svmbatch_register cmd;
	struct svmbatch_range r[2];

	eventfd_register_cmd(&cmd, self->buf, r, -1);
	test_err_register_cmd(EBADF, SVMBATCH_NO_INDEX, &cmd);
	cmd.eventfd = self->fd;		/* an fd, but not an eventfd */
	test_err_register_cmd(EINVAL, SVMBATCH_NO_INDEX, &cmd);
	cmd.flags = 1U << 1;
	test_err_register_cmd(EOPNOTSUPP, SVMBATCH_NO_INDEX, &cmd);
	cmd.flags = 0;
	cmd.reserved = 1;
	test_err_register_cmd(EINVAL, SVMBATCH_NO_INDEX, &cmd);
	/* Without the flag the eventfd field is not looked at. */
	cmd.reserved = 0;
	cmd.eventfd = -1;
	ASSERT_EQ(0, ioctl(self->fd, SVMBATCH_REGISTER, &cmd));
	test_cmd_unregister(cmd.handle);
}

/* ---------------------------------------- invalidations racing the pin */

/* REGISTER pins at most this often (SVMBATCH_PIN_ATTEMPTS in the module). */
#define PIN_ATTEMPTS 4

#define fake_invalidations_or_skip(_fd)					\
	do {								\
		if (!have_fault_injection(_fd) ||			\
		    access(SVMBATCH_FAKE_INVAL, W_OK))			\
			skip_absent("faultinject", return,		\
				    "no fault injection (%s missing)",	\
				    SVMBATCH_FAKE_INVAL);		\
	} while (0)

/* Each page of the registration seen through its dma-buf is the mapped one. */
static void check_pages_mapped(struct __test_metadata *_metadata, int fd,
			       __u32 handle, const struct svmbatch_range *r,
			       unsigned int nr, __u32 export_flags)
{
	int dfd = export_dmabuf(fd, handle, export_flags);
	size_t off = 0, len = 0;
	unsigned int i;
	char *alias;

	for (i = 0; i < nr; i++)
		len += r[i].len;
	ASSERT_LE(0, dfd);
	alias = mmap(NULL, len, PROT_READ, MAP_SHARED, dfd, 0);
	ASSERT_NE(MAP_FAILED, alias);
	for (i = 0; i < nr; i++) {
		ASSERT_EQ(0, memcmp(alias + off, u64_ptr(r[i].addr), r[i].len))
			TH_LOG("range %u differs from its dma-buf bytes", i);
		off += r[i].len;
	}
	munmap(alias, len);
	close(dfd);
}

/* An invalidation during the pin: REGISTER pins again and succeeds. */
TEST_F(stale, raced_invalidation_pins_again)
{
	long long retries = stat_get("pin_retries");
	struct svmbatch_range r[2];
	__u32 h;

	fake_invalidations_or_skip(self->fd);
	stale_ranges(self->buf, r);
	ASSERT_EQ(0, fake_invalidations_set(PIN_ATTEMPTS - 1));
	h = test_cmd_register(r, 2, NULL);
	EXPECT_EQ(0, fake_invalidations_get());
	EXPECT_EQ(retries + PIN_ATTEMPTS - 1, stat_get("pin_retries"));
	EXPECT_EQ(0, query_out_flags(self->fd, h));
	memset(self->buf, 0x6b, NPAGES * PAGE_SZ);
	check_pages_mapped(_metadata, self->fd, h, r, 2, O_CLOEXEC);
	test_cmd_unregister(h);
}

/* Invalidations in every attempt: EAGAIN, and nothing left behind. */
TEST_F(stale, invalidations_in_every_attempt_give_eagain)
{
	struct svmbatch_register cmd;
	struct svmbatch_range r[2];

	fake_invalidations_or_skip(self->fd);
	stale_ranges(self->buf, r);
	memset(&cmd, 0, sizeof(cmd));
	cmd.size = sizeof(cmd);
	cmd.ranges = ptr_u64(r);
	cmd.nr_ranges = 2;
	cmd.range_size = RANGE_SZ;
	ASSERT_EQ(0, fake_invalidations_set(PIN_ATTEMPTS));
	test_err_register_cmd(EAGAIN, SVMBATCH_NO_INDEX, &cmd);
	EXPECT_EQ(0, fake_invalidations_get());
	/* The next attempt is clean. */
	ASSERT_EQ(0, fake_invalidations_set(0));
	test_cmd_unregister(test_cmd_register(r, 2, NULL));
}

/*
 * A read-only pin of private memory that was only read (the shared zero
 * page) must not be replaced by the first CPU write: on 6.2+ GUP unshares,
 * on 6.1 the module pins such ranges for writing (compat.h).
 */
TEST_F(stale, read_only_pin_of_untouched_memory_stays_coherent)
{
	const size_t len = 8 * PAGE_SZ;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct svmbatch_range r;
	long long stale0 = stat_get("stale_total");
	char sum = 0;
	size_t i;
	__u32 h;

	ASSERT_NE(MAP_FAILED, p);
	for (i = 0; i < len; i += PAGE_SZ)
		sum += p[i];
	asm volatile("" : : "r"(sum) : "memory");
	r = mkrange(p, len, SVMBATCH_RANGE_READ_ONLY);
	h = test_cmd_register(&r, 1, NULL);
	memset(p, 0x7e, len);
	EXPECT_EQ(0, query_out_flags(self->fd, h));
	EXPECT_EQ(stale0, stat_get("stale_total"));
	check_pages_mapped(_metadata, self->fd, h, &r, 1, O_CLOEXEC);
	test_cmd_unregister(h);
	munmap(p, len);
}

TEST_HARNESS_MAIN
