// SPDX-License-Identifier: GPL-2.0
/*
 * Lifetime and mm binding: close releases everything, munmap does not unpin,
 * a context only answers the mm that opened it (fork, SCM_RIGHTS), and two
 * threads of that mm can share one fd.
 */
#include <pthread.h>
#include <sys/socket.h>

#include "svmbatch_utils.h"

#define NPAGES 64

FIXTURE(lifetime) {
	int fd;
	char *buf;
};

FIXTURE_SETUP(lifetime)
{
	svmbatch_fixture_setup(NPAGES);
}

FIXTURE_TEARDOWN(lifetime)
{
	svmbatch_fixture_release(self->fd, self->buf, NPAGES);
}

TEST_F(lifetime, close_releases_registrations)
{
	struct svmbatch_range r[2] = {
		mkrange(self->buf, 4 * PAGE_SZ, 0),
		mkrange(self->buf + 8 * PAGE_SZ, 4 * PAGE_SZ,
			SVMBATCH_RANGE_READ_ONLY),
	};
	struct svmbatch_snapshot s0, s1;
	int fd2, i;

	snapshot_take(_metadata, self->fd, &s0);
	fd2 = open(SVMBATCH_DEV, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd2);
	for (i = 0; i < 5; i++)
		test_cmd_register_fd(fd2, r, 2, NULL);
	EXPECT_EQ(s0.vmpin_kb + (long long)(40 * PAGE_SZ / 1024), vmpin_kb());
	close(fd2);
	snapshot_take(_metadata, self->fd, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
}

TEST_F(lifetime, munmap_keeps_pages_pinned)
{
	struct svmbatch_range r = mkrange(self->buf, 16 * PAGE_SZ, 0);
	struct svmbatch_snapshot s0, s1, s2;
	struct svmbatch_query q;
	__u32 h;

	snapshot_take(_metadata, self->fd, &s0);
	h = test_cmd_register(&r, 1, NULL);
	snapshot_take(_metadata, self->fd, &s1);
	ASSERT_EQ(0, munmap(self->buf, 16 * PAGE_SZ));
	snapshot_take(_metadata, self->fd, &s2);
	ASSERT_SNAPSHOT_EQ(&s1, &s2);
	test_cmd_query(h, &q);
	EXPECT_EQ(16ULL, q.nr_pages);
	test_cmd_unregister(h);
	snapshot_take(_metadata, self->fd, &s2);
	ASSERT_SNAPSHOT_EQ(&s0, &s2);
}

TEST_F(lifetime, close_after_munmap)
{
	struct svmbatch_snapshot s0, s1;
	struct svmbatch_range r;
	char *mem = anon_map(8 * PAGE_SZ);
	int fd2;

	ASSERT_NE(NULL, mem);
	r = mkrange(mem, 8 * PAGE_SZ, 0);
	snapshot_take(_metadata, self->fd, &s0);
	fd2 = open(SVMBATCH_DEV, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd2);
	test_cmd_register_fd(fd2, &r, 1, NULL);
	munmap(mem, 8 * PAGE_SZ);
	close(fd2);
	snapshot_take(_metadata, self->fd, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
}

/* shmem pages pinned, unmapped, remapped: the data is intact throughout. */
TEST_F(lifetime, memfd_munmap_remap_content)
{
	const size_t len = 16 * PAGE_SZ;
	struct svmbatch_range r;
	long long pinned;
	unsigned char *p, *back;
	int mfd;
	__u32 h;

	p = memfd_map(len, &mfd);
	ASSERT_NE(NULL, p);
	pattern_fill(p, len, 1);
	r = mkrange(p, len, 0);
	h = test_cmd_register(&r, 1, NULL);
	pinned = vmpin_kb();
	ASSERT_EQ(0, munmap(p, len));
	EXPECT_EQ(pinned, vmpin_kb());

	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_TRUE(pattern_check(p, len, 1));
	pattern_fill(p, len, 2);	/* writes reach the still-pinned pages */
	test_cmd_unregister(h);
	EXPECT_EQ(pinned - (long long)(len / 1024), vmpin_kb());
	ASSERT_TRUE(pattern_check(p, len, 2));
	back = malloc(len);
	ASSERT_NE(NULL, back);
	ASSERT_EQ((ssize_t)len, pread(mfd, back, len, 0));
	ASSERT_TRUE(pattern_check(back, len, 2));
	free(back);
	munmap(p, len);
	close(mfd);
}

/* Pinned shmem pages truncated out of the file: unregister still works. */
TEST_F(lifetime, memfd_truncate_while_pinned)
{
	const size_t len = 8 * PAGE_SZ;
	struct svmbatch_snapshot s0, s1, s2;
	struct svmbatch_range r;
	char *p;
	int mfd;
	__u32 h;

	p = memfd_map(len, &mfd);
	ASSERT_NE(NULL, p);
	memset(p, 0x77, len);
	r = mkrange(p, len, 0);
	snapshot_take(_metadata, self->fd, &s0);
	h = test_cmd_register(&r, 1, NULL);
	snapshot_take(_metadata, self->fd, &s1);
	ASSERT_EQ(0, munmap(p, len));
	ASSERT_EQ(0, ftruncate(mfd, 0));
	close(mfd);
	snapshot_take(_metadata, self->fd, &s2);
	ASSERT_SNAPSHOT_EQ(&s1, &s2);
	test_cmd_unregister(h);
	snapshot_take(_metadata, self->fd, &s2);
	ASSERT_SNAPSHOT_EQ(&s0, &s2);
}

/* ------------------------------------------------------------ mm binding */

enum { R_GET_INFO, R_REGISTER, R_QUERY, R_UNREGISTER, R_NR };
static const char * const r_names[] = {
	"GET_INFO", "REGISTER", "QUERY", "UNREGISTER",
};

/* Run every command on @fd, storing each errno (0 on success) in @res. */
static void try_all_commands(int fd, __u32 handle, void *mem, int *res)
{
	struct svmbatch_range r = mkrange(mem, PAGE_SZ, 0);
	struct svmbatch_register reg;
	struct svmbatch_query q;
	struct svmbatch_info info;

	res[R_GET_INFO] = _test_cmd_get_info(fd, &info) ? errno : 0;
	res[R_REGISTER] = _test_cmd_register(fd, &r, 1, RANGE_SZ, &reg) ?
			  errno : 0;
	res[R_QUERY] = _test_cmd_query(fd, handle, NULL, 0, RANGE_SZ, &q) ?
		       errno : 0;
	res[R_UNREGISTER] = _test_unregister(fd, handle) ? errno : 0;
}

static void expect_all_eperm(struct __test_metadata *_metadata,
			     const int *res)
{
	int i;

	for (i = 0; i < R_NR; i++)
		EXPECT_EQ(EPERM, res[i]) {
			TH_LOG("%s from another mm: %s", r_names[i],
			       res[i] ? strerror(res[i]) : "succeeded");
		}
}

static int *shared_results(void)
{
	int *res = mmap(NULL, PAGE_SZ, PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (res == MAP_FAILED)
		return NULL;
	memset(res, 0xff, PAGE_SZ);
	return res;
}

static int wait_child(pid_t pid)
{
	int status;

	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

FIXTURE(fork_child) {
	int fd;
	char *buf;
};

FIXTURE_VARIANT(fork_child) {
	bool child_closes;
};

FIXTURE_VARIANT_ADD(fork_child, exits) { .child_closes = false };
FIXTURE_VARIANT_ADD(fork_child, closes_then_exits) { .child_closes = true };

FIXTURE_SETUP(fork_child)
{
	svmbatch_fixture_setup(NPAGES);
}

FIXTURE_TEARDOWN(fork_child)
{
	svmbatch_fixture_release(self->fd, self->buf, NPAGES);
}

/*
 * A forked child using the inherited fd gets EPERM for every command; its
 * exit (or close) leaves the parent's context and registrations alone.
 */
TEST_F(fork_child, inherited_fd_eperm)
{
	struct svmbatch_range r = mkrange(self->buf, 8 * PAGE_SZ, 0);
	struct svmbatch_snapshot s0, s1;
	struct svmbatch_query q;
	int *res = shared_results();
	pid_t pid;
	__u32 h;

	ASSERT_NE(NULL, res);
	h = test_cmd_register(&r, 1, NULL);
	snapshot_take(_metadata, self->fd, &s0);
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		try_all_commands(self->fd, h, self->buf + 20 * PAGE_SZ, res);
		if (variant->child_closes)
			close(self->fd);
		_exit(0);
	}
	ASSERT_EQ(0, wait_child(pid));
	expect_all_eperm(_metadata, res);

	/* The parent's context and registration are intact... */
	snapshot_take(_metadata, self->fd, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
	test_cmd_query(h, &q);
	EXPECT_EQ(8ULL, q.nr_pages);
	/* ... and the parent keeps working. */
	test_cmd_unregister(test_cmd_register(&r, 1, NULL));
	test_cmd_unregister(h);
}

/* A child's own fd works: the binding is to the opener's mm. */
TEST_F(lifetime, fork_child_opens_its_own)
{
	int *res = shared_results();
	pid_t pid;

	ASSERT_NE(NULL, res);
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		int fd = open(SVMBATCH_DEV, O_RDWR | O_CLOEXEC);
		struct svmbatch_range r = mkrange(self->buf, PAGE_SZ, 0);
		struct svmbatch_register reg;

		if (fd < 0)
			_exit(1);
		if (_test_cmd_register(fd, &r, 1, RANGE_SZ, &reg))
			_exit(2);
		try_all_commands(fd, reg.handle, self->buf + PAGE_SZ, res);
		_exit(0);
	}
	ASSERT_EQ(0, wait_child(pid));
	EXPECT_EQ(0, res[R_GET_INFO]);
	EXPECT_EQ(0, res[R_REGISTER]);
	EXPECT_EQ(0, res[R_QUERY]);
	EXPECT_EQ(0, res[R_UNREGISTER]);
}

/* An fd opened after fork and passed with SCM_RIGHTS: EPERM there too. */
TEST_F(lifetime, scm_rights_receiver_eperm)
{
	struct svmbatch_range r = mkrange(self->buf, 4 * PAGE_SZ, 0);
	struct svmbatch_snapshot s0, s1;
	struct svmbatch_query q;
	int *res = shared_results();
	int sv[2], fd2;
	pid_t pid;
	__u32 h;

	ASSERT_NE(NULL, res);
	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		int fd;
		__u32 hh;

		close(self->fd);	/* only the received fd from here */
		close(sv[0]);
		fd = recv_fd(sv[1]);
		if (fd < 0)
			_exit(1);
		if (read(sv[1], &hh, sizeof(hh)) != sizeof(hh))
			_exit(2);
		try_all_commands(fd, hh, self->buf + 32 * PAGE_SZ, res);
		close(fd);
		_exit(0);
	}
	close(sv[1]);
	fd2 = open(SVMBATCH_DEV, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd2);
	h = test_cmd_register_fd(fd2, &r, 1, NULL);
	snapshot_take(_metadata, fd2, &s0);
	ASSERT_EQ(0, send_fd(sv[0], fd2));
	ASSERT_EQ((ssize_t)sizeof(h), write(sv[0], &h, sizeof(h)));
	ASSERT_EQ(0, wait_child(pid));
	expect_all_eperm(_metadata, res);

	snapshot_take(_metadata, fd2, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
	ASSERT_EQ(0, _test_cmd_query(fd2, h, NULL, 0, RANGE_SZ, &q));
	EXPECT_EQ(4ULL, q.nr_pages);
	test_cmd_unregister_fd(fd2, h);
	close(fd2);
	close(sv[0]);
}

/* ----------------------------------------------------------- threads */

#define THREAD_ITERS 5000

struct thread_arg {
	int fd;
	char *mem;
	unsigned int failures;
	int first_errno;
};

static void *register_loop(void *p)
{
	struct thread_arg *a = p;
	struct svmbatch_range r[2] = {
		mkrange(a->mem, PAGE_SZ, 0),
		mkrange(a->mem + 2 * PAGE_SZ, 2 * PAGE_SZ,
			SVMBATCH_RANGE_READ_ONLY),
	};
	struct svmbatch_register reg;
	struct svmbatch_query q;
	unsigned int i;

	for (i = 0; i < THREAD_ITERS; i++) {
		if (_test_cmd_register(a->fd, r, 2, RANGE_SZ, &reg) ||
		    reg.nr_pages != 3 ||
		    _test_cmd_query(a->fd, reg.handle, NULL, 0, RANGE_SZ,
				    &q) ||
		    q.nr_pages != 3 ||
		    _test_unregister(a->fd, reg.handle)) {
			if (!a->failures++)
				a->first_errno = errno;
		}
	}
	return NULL;
}

TEST_F_TIMEOUT(lifetime, two_threads_one_fd, 300)
{
	struct svmbatch_snapshot s0, s1;
	struct thread_arg a[2];
	pthread_t t[2];
	int i;

	snapshot_take(_metadata, self->fd, &s0);
	for (i = 0; i < 2; i++) {
		a[i] = (struct thread_arg){
			.fd = self->fd,
			.mem = self->buf + i * 16 * PAGE_SZ,
		};
		ASSERT_EQ(0, pthread_create(&t[i], NULL, register_loop, &a[i]));
	}
	for (i = 0; i < 2; i++) {
		ASSERT_EQ(0, pthread_join(t[i], NULL));
		EXPECT_EQ(0U, a[i].failures) {
			TH_LOG("thread %d: %u failures, first: %s", i,
			       a[i].failures, strerror(a[i].first_errno));
		}
	}
	snapshot_take(_metadata, self->fd, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
}

TEST_HARNESS_MAIN
