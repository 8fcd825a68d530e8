// SPDX-License-Identifier: GPL-2.0
/*
 * Races: REGISTER and the other commands against threads and processes
 * that change the same memory or the same handle at the same time.
 *
 * Each test runs for a bounded time (SVMBATCH_RACE_SECONDS, default 4 s)
 * and checks every result, not a sample, so the verdict does not depend on
 * how the threads happened to interleave:
 *  - every call ends in success or in one of the errnos the race allows,
 *    and a failed REGISTER leaves VmPin exactly where it was;
 *  - every successful REGISTER is checked page by page: a token written
 *    through the process's address must be seen through the registration's
 *    dma-buf (same page), or QUERY must report STALE.  A mismatch without
 *    STALE is a missed invalidation;
 *  - iterations in which the other thread does nothing must succeed;
 *  - at the end VmPin and the module's gauges are back where they were;
 *  - the race happened: each test requires the outcome only a race can
 *    produce (an error, STALE, a pin attempt repeated, a lost lookup) at
 *    least once, running on past its time, bounded, until it has, and
 *    fails when it never came.
 * The counts are printed (ksft_print_msg) for the record.
 */
#include <pthread.h>
#include <time.h>

#include "svmbatch_utils.h"

#define NPAGES		16
#define MAX_ITERS	100000
#define SPIN_MAX	20000	/* busy-loop iterations before a step */
#define FILE_MARKER	0xf11ef11ef11ef11eULL
#define BIG_PAGES	512	/* an anonymous range pinned before the file */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double race_seconds(void)
{
	const char *s = getenv("SVMBATCH_RACE_SECONDS");
	double v = s ? atof(s) : 0;

	return v > 0 && v <= 20 ? v : 4;
}

/* How long past its time a test runs on while its race has not happened. */
#define RACE_GRACE_FACTOR 4

/* Go on: before the deadline, or after it while @raced is still 0. */
static bool race_go_on(double deadline, unsigned long raced)
{
	double t = now_s();

	return t < deadline ||
	       (!raced && t < deadline + RACE_GRACE_FACTOR * race_seconds());
}

/* A short busy wait that the compiler keeps. */
static void spin(unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		asm volatile("" : : : "memory");
}

static unsigned int race_seed(void)
{
	const char *s = getenv("SVMBATCH_RACE_SEED");

	return s ? (unsigned int)strtoul(s, NULL, 0) :
		   (unsigned int)time(NULL) ^ (unsigned int)getpid();
}

static int query_stale(int fd, __u32 handle)
{
	struct svmbatch_query q;

	if (_test_cmd_query(fd, handle, NULL, 0, RANGE_SZ, &q))
		return -errno;
	return !!(q.out_flags & SVMBATCH_QUERY_STALE);
}

/* ------------------------------------------------ REGISTER vs a mutator */

struct race;
typedef void (*mutate_fn)(struct race *rc);

/* Shared by the test thread (REGISTER) and the mutator thread. */
struct race {
	int fd;
	char *buf;		/* NPAGES pages, mapped read-write between steps */
	char *spare;		/* NPAGES pages of scratch address space */
	struct svmbatch_range r[NPAGES];
	unsigned int nr_ranges;
	mutate_fn mutate;
	pthread_barrier_t start, done;
	/* Set by the test thread before each start barrier. */
	bool mutate_now, stop;
	/* Set by the test thread when its call returned: the mutator stops. */
	bool call_done;
	unsigned int spin_mutator, first, count;
	/* Results, written by the test thread only. */
	unsigned long iters, quiet, ok, quiet_ok, stale, mismatched, missed;
	/* When the call ran, and the mutator from its first step to its last. */
	double call_start, call_end, mut_start, mut_end;
	unsigned long overlapped; /* mutated calls the mutator overlapped */
	unsigned long retried;	/* calls that pinned again (pin_retries) */
	unsigned long raced;	/* mutated calls with an outcome of the race */
	unsigned long errs[4];	/* EFAULT, EAGAIN, EOPNOTSUPP, other */
};

static void *mutator_thread(void *arg)
{
	struct race *rc = arg;

	for (;;) {
		pthread_barrier_wait(&rc->start);
		if (rc->stop)
			break;
		/* Once at least, then on until the call has returned. */
		if (rc->mutate_now) {
			spin(rc->spin_mutator);
			rc->mut_start = now_s();
			do {
				rc->mutate(rc);
			} while (!__atomic_load_n(&rc->call_done,
						  __ATOMIC_ACQUIRE));
			rc->mut_end = now_s();
		}
		pthread_barrier_wait(&rc->done);
	}
	return NULL;
}

/* The pages [first, first + count) of buf, the part the mutator changes. */
static char *mut_addr(struct race *rc)
{
	return rc->buf + (size_t)rc->first * PAGE_SZ;
}

static size_t mut_len(struct race *rc)
{
	return (size_t)rc->count * PAGE_SZ;
}

static void mutate_remap(struct race *rc)
{
	munmap(mut_addr(rc), mut_len(rc));
	mmap(mut_addr(rc), mut_len(rc), PROT_READ | PROT_WRITE,
	     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

static void mutate_dontneed(struct race *rc)
{
	madvise(mut_addr(rc), mut_len(rc), MADV_DONTNEED);
}

/* Move the pages away, map fresh memory in their place, drop the moved. */
static void mutate_mremap(struct race *rc)
{
	mremap(mut_addr(rc), mut_len(rc), mut_len(rc),
	       MREMAP_MAYMOVE | MREMAP_FIXED, rc->spare);
	mmap(mut_addr(rc), mut_len(rc), PROT_READ | PROT_WRITE,
	     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	mmap(rc->spare, NPAGES * PAGE_SZ, PROT_NONE,
	     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

static void mutate_mprotect_none(struct race *rc)
{
	mprotect(mut_addr(rc), mut_len(rc), PROT_NONE);
	mprotect(mut_addr(rc), mut_len(rc), PROT_READ | PROT_WRITE);
}

/* A child that writes all of buf (its copy) and exits. */
static void mutate_fork(struct race *rc)
{
	pid_t pid = fork();

	if (!pid) {
		memset(rc->buf, 0xcc, NPAGES * PAGE_SZ);
		_exit(0);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

/*
 * Check a successful registration page by page, then drop it.  Returns the
 * number of pages whose dma-buf page is not the page mapped at the address.
 */
static unsigned int verify_registration(struct __test_metadata *_metadata,
					struct race *rc, __u32 handle,
					__u64 nr_pages, bool *stale)
{
	unsigned int k, bad = 0;
	int dfd, st;
	char *alias;

	for (k = 0; k < nr_pages; k++) {
		char *va = range_va(rc->r, rc->nr_ranges, (size_t)k * PAGE_SZ);

		ASSERT_NE(NULL, va);
		*(__u64 *)va = ((__u64)rc->iters << 20) | k;
	}
	dfd = export_dmabuf(rc->fd, handle, O_CLOEXEC);
	ASSERT_LE(0, dfd) TH_LOG("EXPORT_DMABUF: %s", strerror(-dfd));
	alias = mmap(NULL, nr_pages * PAGE_SZ, PROT_READ, MAP_SHARED, dfd, 0);
	ASSERT_NE(MAP_FAILED, alias);
	for (k = 0; k < nr_pages; k++)
		if (*(__u64 *)(alias + (size_t)k * PAGE_SZ) !=
		    (((__u64)rc->iters << 20) | k))
			bad++;
	munmap(alias, nr_pages * PAGE_SZ);
	close(dfd);
	st = query_stale(rc->fd, handle);
	ASSERT_LE(0, st);
	*stale = st;
	test_cmd_unregister_fd(rc->fd, handle);
	return bad;
}

static void race_setup_ranges(struct race *rc, bool multi)
{
	if (!multi) {
		rc->r[0] = mkrange(rc->buf, NPAGES * PAGE_SZ, 0);
		rc->nr_ranges = 1;
		return;
	}
	/* Every other page, in reverse address order. */
	rc->nr_ranges = NPAGES / 2;
	scatter_ranges(rc->r, rc->nr_ranges, rc->buf, 2, 0, SCATTER_REVERSE);
}

static void race_log(const char *name, const struct race *rc)
{
	ksft_print_msg("%s: %lu iterations, %lu registered (%lu unraced)\n",
		       name, rc->iters, rc->ok, rc->quiet_ok);
	ksft_print_msg("%s: %lu stale, %lu not the mapped pages, %lu missed\n",
		       name, rc->stale, rc->mismatched, rc->missed);
	ksft_print_msg("%s: EFAULT %lu EAGAIN %lu EOPNOTSUPP %lu other %lu\n",
		       name, rc->errs[0], rc->errs[1], rc->errs[2],
		       rc->errs[3]);
	ksft_print_msg("%s: %lu calls overlapped, %lu pinned again, %lu raced\n",
		       name, rc->overlapped, rc->retried, rc->raced);
}

/* How a register_race test changes the memory under REGISTER. */
struct mutator {
	const char *name;	/* the test's, for the record */
	mutate_fn mutate;
	bool mapped;		/* every registration must hold the mapped pages */
	bool must_succeed;	/* every call must succeed, and none be stale */
};

/*
 * REGISTER the ranges over and over while, in every other iteration,
 * @m changes a random part of the buffer again and again until the call
 * has returned; then check the result.
 */
static void run_register_race(struct __test_metadata *_metadata,
			      const struct mutator *m, bool multi)
{
	const char *name = m->name;
	struct svmbatch_snapshot s0, s1;
	double deadline = now_s() + race_seconds();
	unsigned int seed = race_seed();
	struct race rc = { .mutate = m->mutate };
	long long pin0;
	pthread_t t;

	svmbatch_open_or_skip(rc.fd);
	rc.buf = anon_map(NPAGES * PAGE_SZ);
	ASSERT_NE(NULL, rc.buf);
	rc.spare = mmap(NULL, NPAGES * PAGE_SZ, PROT_NONE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, rc.spare);
	race_setup_ranges(&rc, multi);
	ksft_print_msg("%s: seed %u (SVMBATCH_RACE_SEED replays)\n", name, seed);
	snapshot_take(_metadata, rc.fd, &s0);
	pin0 = s0.vmpin_kb;
	ASSERT_EQ(0, pthread_barrier_init(&rc.start, NULL, 2));
	ASSERT_EQ(0, pthread_barrier_init(&rc.done, NULL, 2));
	ASSERT_EQ(0, pthread_create(&t, NULL, mutator_thread, &rc));

	while (rc.iters < MAX_ITERS && race_go_on(deadline, rc.raced)) {
		struct svmbatch_register cmd;
		unsigned int spin_me;
		long long retries;
		bool retried, overlap;
		int ret, err;

		memset(rc.buf, 0x5a, NPAGES * PAGE_SZ);
		rc.mutate_now = rc.iters & 1;
		rc.first = rand_r(&seed) % NPAGES;
		rc.count = 1 + rand_r(&seed) % (NPAGES - rc.first);
		rc.spin_mutator = rand_r(&seed) % SPIN_MAX;
		spin_me = rand_r(&seed) % SPIN_MAX;

		rc.call_done = false;
		retries = stat_get("pin_retries");
		pthread_barrier_wait(&rc.start);
		spin(spin_me);
		rc.call_start = now_s();
		ret = _test_cmd_register(rc.fd, rc.r, rc.nr_ranges, RANGE_SZ,
					 &cmd);
		err = errno;
		rc.call_end = now_s();
		__atomic_store_n(&rc.call_done, true, __ATOMIC_RELEASE);
		pthread_barrier_wait(&rc.done);
		retried = stat_get("pin_retries") != retries;
		overlap = rc.mutate_now && rc.mut_start < rc.call_end &&
			  rc.mut_end > rc.call_start;
		rc.retried += retried;
		rc.overlapped += overlap;
		/*
		 * Beside a mutator that must change nothing (fork), the race
		 * is the overlap itself; it may or may not make an attempt
		 * pin again.
		 */
		rc.raced += rc.mutate_now &&
			    (ret || retried || (m->must_succeed && overlap));
		EXPECT_FALSE(retried && !rc.mutate_now) {
			TH_LOG("iteration %lu: pinned again, nothing racing",
			       rc.iters);
		}
		EXPECT_FALSE(ret && m->must_succeed) {
			TH_LOG("iteration %lu: %s beside %s", rc.iters,
			       strerror(err), name);
		}

		if (ret) {
			EXPECT_FALSE(!rc.mutate_now) {
				TH_LOG("iteration %lu: %s, nothing racing",
				       rc.iters, strerror(err));
			}
			rc.errs[err == EFAULT ? 0 : err == EAGAIN ? 1 :
				err == EOPNOTSUPP ? 2 : 3]++;
			EXPECT_TRUE(err == EFAULT || err == EAGAIN) {
				TH_LOG("iteration %lu: unexpected %s", rc.iters,
				       strerror(err));
			}
			ASSERT_EQ(pin0, vmpin_kb()) {
				TH_LOG("iteration %lu: failed REGISTER (%s) left pages charged",
				       rc.iters, strerror(err));
			}
		} else {
			bool stale;
			unsigned int bad;

			rc.ok++;
			rc.quiet_ok += !rc.mutate_now;
			bad = verify_registration(_metadata, &rc, cmd.handle,
						  cmd.nr_pages, &stale);
			rc.stale += stale;
			rc.mismatched += !!bad;
			rc.missed += bad && !stale;
			rc.raced += rc.mutate_now && !retried && (stale || bad);
			EXPECT_FALSE(stale && m->must_succeed) {
				TH_LOG("iteration %lu: STALE beside %s",
				       rc.iters, name);
			}
			EXPECT_FALSE(bad && !stale) {
				TH_LOG("iteration %lu: %u pages not mapped, not STALE",
				       rc.iters, bad);
			}
			EXPECT_FALSE(m->mapped && bad) {
				TH_LOG("iteration %lu: %u pages not the mapped ones",
				       rc.iters, bad);
			}
			ASSERT_EQ(pin0, vmpin_kb());
		}
		rc.quiet += !rc.mutate_now;
		rc.iters++;
	}
	rc.stop = true;
	pthread_barrier_wait(&rc.start);
	pthread_join(t, NULL);
	race_log(name, &rc);
	/* Every other iteration raced nothing and must have succeeded. */
	EXPECT_EQ(rc.quiet, rc.quiet_ok);
	EXPECT_EQ(0UL, rc.missed);
	/* The race happened: some mutated call shows it. */
	EXPECT_LT(0UL, rc.raced) {
		TH_LOG("%s: no call in %lu showed the race", name, rc.iters);
	}
	snapshot_take(_metadata, rc.fd, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
	close(rc.fd);
	munmap(rc.buf, NPAGES * PAGE_SZ);
	munmap(rc.spare, NPAGES * PAGE_SZ);
}

FIXTURE(register_race) {
	int unused;
};

FIXTURE_VARIANT(register_race) {
	bool multi;
};

/* One range of 16 pages. */
FIXTURE_VARIANT_ADD(register_race, single) {
	.multi = false,
};

/* Eight one-page ranges, every other page, in reverse order. */
FIXTURE_VARIANT_ADD(register_race, multi) {
	.multi = true,
};

FIXTURE_SETUP(register_race)
{
}

FIXTURE_TEARDOWN(register_race)
{
}

static const struct mutator remap = {
	"REGISTER vs munmap+mmap", mutate_remap, false, false,
};

static const struct mutator dontneed = {
	"REGISTER vs MADV_DONTNEED", mutate_dontneed, false, false,
};

static const struct mutator moved = {
	"REGISTER vs mremap", mutate_mremap, false, false,
};

/* PROT_NONE changes no page: every registration must hold the mapped ones. */
static const struct mutator prot_none = {
	"REGISTER vs mprotect(PROT_NONE)", mutate_mprotect_none, true, false,
};

/*
 * The child's writes go to its copies; the parent keeps its pinned pages.
 * fork() changes no page of the parent: every call must succeed, none be
 * stale, though the pin's copy-on-write breaks make attempts pin again.
 */
static const struct mutator forked = {
	"REGISTER vs fork", mutate_fork, true, true,
};

TEST_F_TIMEOUT(register_race, vs_munmap_mmap, 120)
{
	run_register_race(_metadata, &remap, variant->multi);
}

TEST_F_TIMEOUT(register_race, vs_madv_dontneed, 120)
{
	run_register_race(_metadata, &dontneed, variant->multi);
}

TEST_F_TIMEOUT(register_race, vs_mremap, 120)
{
	run_register_race(_metadata, &moved, variant->multi);
}

TEST_F_TIMEOUT(register_race, vs_mprotect_none, 120)
{
	run_register_race(_metadata, &prot_none, variant->multi);
}

TEST_F_TIMEOUT(register_race, vs_fork, 120)
{
	run_register_race(_metadata, &forked, variant->multi);
}

/* ------------------------------- REGISTER beside a fork() or system() loop */

#define LOOP_RANGES	 64
#define LOOP_RANGE_PAGES 16
#define LOOP_PAGES	 (LOOP_RANGES * LOOP_RANGE_PAGES)

/*
 * Another thread forks (a child that keeps the parent's pages shared for a
 * while, then writes its copy) or calls system() over and over, as a
 * process with data-loader workers or subprocesses does.
 */
struct spawn_loop {
	char *buf;
	bool use_system;
	bool stop;
	bool in_spawn; /* a fork() or system() is under way */
	unsigned long spawned, failed;
};

static void *spawn_loop_thread(void *arg)
{
	struct spawn_loop *l = arg;

	while (!__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE)) {
		bool ok;

		__atomic_store_n(&l->in_spawn, true, __ATOMIC_RELEASE);
		if (l->use_system) {
			ok = system("exit 0") == 0;
		} else {
			pid_t pid = fork();
			int status;

			if (!pid) {
				/* Not the parent's dma-buf: its pins are the parent's. */
				syscall(SYS_close_range, 3, ~0U, 0);
				usleep(500);
				memset(l->buf, 0xcc, LOOP_PAGES * PAGE_SZ);
				_exit(0);
			}
			ok = pid > 0 && waitpid(pid, &status, 0) == pid &&
			     WIFEXITED(status) && !WEXITSTATUS(status);
		}
		__atomic_store_n(&l->in_spawn, false, __ATOMIC_RELEASE);
		__atomic_add_fetch(ok ? &l->spawned : &l->failed, 1,
				   __ATOMIC_ACQ_REL);
	}
	return NULL;
}

/*
 * VmPin once it is back at @kb, or after 5 s.  A child forked while the
 * dma-buf was open holds it, and so the registration, until it closes its
 * copy of the fd (first thing), exits or execs.
 */
static long long vmpin_kb_settled(long long kb)
{
	long long now = vmpin_kb();
	int i;

	for (i = 0; i < 5000 && now != kb; i++) {
		usleep(1000);
		now = vmpin_kb();
	}
	return now;
}

static unsigned long spawns_seen(struct spawn_loop *l)
{
	return __atomic_load_n(&l->spawned, __ATOMIC_ACQUIRE) +
	       __atomic_load_n(&l->failed, __ATOMIC_ACQUIRE);
}

/*
 * REGISTER 64 ranges over and over beside the loop: every call must
 * succeed, no registration may be stale, and each must hold the pages the
 * process maps (a token written at the address is read through the
 * dma-buf).  Calls that overlapped a fork() or system() are counted, and
 * at least one must have; beside fork(), the pin's copy-on-write breaks
 * must have made some attempt pin again (the race the module absorbs).
 *
 * With @fake_races, the first @fake_races pin attempts of every call end
 * as if raced (fake_invalidations), so every call lives on its last
 * attempts, where a fork() between two attempts used to make the next one
 * break copy-on-write again, and the call fail with EAGAIN.
 */
static void run_spawn_loop(struct __test_metadata *_metadata, bool use_system,
			   unsigned int fake_races)
{
	const char *name = use_system ? "REGISTER beside a system() loop" :
			   fake_races ? "REGISTER beside a fork() loop, raced" :
					"REGISTER beside a fork() loop";
	unsigned long iters = 0, failures = 0, stale = 0, mismatched = 0;
	unsigned long overlapped = 0, retried = 0;
	double deadline = now_s() + race_seconds();
	struct svmbatch_range r[LOOP_RANGES];
	struct spawn_loop l = { .use_system = use_system };
	struct svmbatch_snapshot s0, s1;
	unsigned int i;
	pthread_t t;
	int fd;

	svmbatch_open_or_skip(fd);
	if (fake_races && (!have_fault_injection(fd) ||
			   access(SVMBATCH_FAKE_INVAL, W_OK)))
		skip_absent("faultinject", return, "no fault injection (%s missing)",
			    SVMBATCH_FAKE_INVAL);
	l.buf = anon_map(LOOP_PAGES * PAGE_SZ);
	ASSERT_NE(NULL, l.buf);
	/* A THP split at fork() is a page-replacing event: 4 KiB pages. */
	ASSERT_EQ(0, madvise(l.buf, LOOP_PAGES * PAGE_SZ, MADV_NOHUGEPAGE));
	/* Last address first, so the pin order is not the address order. */
	for (i = 0; i < LOOP_RANGES; i++)
		r[i] = mkrange(l.buf + (size_t)(LOOP_RANGES - 1 - i) *
					       LOOP_RANGE_PAGES * PAGE_SZ,
			       LOOP_RANGE_PAGES * PAGE_SZ, 0);
	snapshot_take(_metadata, fd, &s0);
	ASSERT_EQ(0, pthread_create(&t, NULL, spawn_loop_thread, &l));
	while (iters < MAX_ITERS &&
	       race_go_on(deadline,
			  use_system || fake_races ? overlapped : retried)) {
		struct svmbatch_register cmd;
		unsigned long seen;
		long long retries;
		bool busy;
		int ret, err;

		memset(l.buf, 0x5a + iters, LOOP_PAGES * PAGE_SZ);
		retries = stat_get("pin_retries");
		seen = spawns_seen(&l);
		busy = __atomic_load_n(&l.in_spawn, __ATOMIC_ACQUIRE);
		if (fake_races)
			ASSERT_EQ(0, fake_invalidations_set(fake_races));
		ret = _test_cmd_register(fd, r, LOOP_RANGES, RANGE_SZ, &cmd);
		err = errno;
		if (fake_races)
			EXPECT_EQ(0, fake_invalidations_get());
		busy |= __atomic_load_n(&l.in_spawn, __ATOMIC_ACQUIRE);
		overlapped += busy || spawns_seen(&l) != seen;
		retried += stat_get("pin_retries") != retries;
		iters++;
		if (ret) {
			failures++;
			EXPECT_EQ(0, ret) {
				TH_LOG("%s: call %lu: %s", name, iters,
				       strerror(err));
			}
			ASSERT_EQ(s0.vmpin_kb, vmpin_kb());
			continue;
		}
		{
			unsigned int k, bad = 0;
			char *alias;
			int dfd, st;

			for (k = 0; k < LOOP_PAGES; k++)
				*(__u64 *)(l.buf + (size_t)k * PAGE_SZ) =
					(__u64)iters << 20 | k;
			dfd = export_dmabuf(fd, cmd.handle, O_CLOEXEC);
			ASSERT_LE(0, dfd);
			alias = mmap(NULL, LOOP_PAGES * PAGE_SZ, PROT_READ,
				     MAP_SHARED, dfd, 0);
			ASSERT_NE(MAP_FAILED, alias);
			ASSERT_EQ(0, madvise(alias, LOOP_PAGES * PAGE_SZ,
					     MADV_DONTFORK));
			/* The dma-buf is in range order: last address first. */
			for (k = 0; k < LOOP_PAGES; k++) {
				unsigned int range = k / LOOP_RANGE_PAGES;
				unsigned int page = (LOOP_RANGES - 1 - range) *
							    LOOP_RANGE_PAGES +
						    k % LOOP_RANGE_PAGES;

				bad += *(__u64 *)(alias +
						  (size_t)k * PAGE_SZ) !=
				       ((__u64)iters << 20 | page);
			}
			munmap(alias, LOOP_PAGES * PAGE_SZ);
			close(dfd);
			st = query_stale(fd, cmd.handle);
			ASSERT_LE(0, st);
			stale += st;
			mismatched += !!bad;
			EXPECT_FALSE(st || bad) {
				TH_LOG("%s: call %lu: %s, %u pages not mapped",
				       name, iters, st ? "STALE" : "live", bad);
			}
			test_cmd_unregister_fd(fd, cmd.handle);
			ASSERT_EQ(s0.vmpin_kb, vmpin_kb_settled(s0.vmpin_kb));
		}
	}
	__atomic_store_n(&l.stop, true, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	ksft_print_msg("%s: %lu calls, %lu failed, %lu stale, %lu not mapped\n",
		       name, iters, failures, stale, mismatched);
	ksft_print_msg("%s: %lu overlapped a %s (%lu done, %lu failed), %lu pinned again\n",
		       name, overlapped, use_system ? "system()" : "fork()",
		       l.spawned, l.failed, retried);
	EXPECT_EQ(0UL, failures);
	EXPECT_EQ(0UL, stale);
	EXPECT_EQ(0UL, mismatched);
	EXPECT_EQ(0UL, l.failed);
	EXPECT_LT(0UL, overlapped);
	if (!use_system)
		EXPECT_LT(0UL, retried);
	if (fake_races)
		fake_invalidations_set(0);
	snapshot_take(_metadata, fd, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
	close(fd);
	munmap(l.buf, LOOP_PAGES * PAGE_SZ);
}

/* The races below need no variants. */
FIXTURE(race) {
	int unused;
};

FIXTURE_SETUP(race)
{
}

FIXTURE_TEARDOWN(race)
{
}

/* ------------------------------------------------- RLIMIT_MEMLOCK charge */

struct charge_race {
	int fd;
	double deadline;
	char *mem;		/* 2 pages per fitting thread, 5 for the other */
	unsigned int pages;
	unsigned long ok, enomem, other;
	/* REGISTER calls begun and ended (atomics): one is in flight between */
	unsigned long begun, ended;
	/* the threads of the other kind, whose calls are watched */
	struct charge_race *rivals[2];
	unsigned int nr_rivals;
	/* shared: calls of this kind that a rival's call spanned */
	unsigned long *overlaps;
};

static void *charge_thread(void *arg)
{
	struct charge_race *c = arg;
	struct svmbatch_range r = mkrange(c->mem, c->pages * PAGE_SZ, 0);
	struct svmbatch_register cmd;
	unsigned long rival_call[2];
	unsigned int i;
	int ret;

	while (race_go_on(c->deadline, __atomic_load_n(c->overlaps, __ATOMIC_RELAXED))) {
		/*
		 * A rival's call begun before this one and not ended after it
		 * spans it: both were in flight at once, the race this test is
		 * about.  Call k of a thread has ended once its "ended" is k.
		 */
		for (i = 0; i < c->nr_rivals; i++)
			rival_call[i] = __atomic_load_n(&c->rivals[i]->begun, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&c->begun, 1, __ATOMIC_SEQ_CST);
		ret = _test_cmd_register(c->fd, &r, 1, RANGE_SZ, &cmd) ? errno : 0;
		__atomic_add_fetch(&c->ended, 1, __ATOMIC_SEQ_CST);
		for (i = 0; i < c->nr_rivals; i++)
			if (__atomic_load_n(&c->rivals[i]->ended, __ATOMIC_SEQ_CST) <
			    rival_call[i])
				__atomic_add_fetch(c->overlaps, 1, __ATOMIC_RELAXED);
		if (!ret) {
			c->ok++;
			if (_test_unregister(c->fd, cmd.handle))
				c->other++;
		} else if (ret == ENOMEM) {
			c->enomem++;
		} else {
			c->other++;
		}
	}
	return NULL;
}

TEST_F_TIMEOUT(race, register_beside_fork_loop, 120)
{
	run_spawn_loop(_metadata, false, 0);
}

/* Only the last of REGISTER's 4 attempts is left to each call. */
TEST_F_TIMEOUT(race, register_beside_fork_loop_on_the_last_attempt, 120)
{
	run_spawn_loop(_metadata, false, 3);
}

TEST_F_TIMEOUT(race, register_beside_system_loop, 120)
{
	run_spawn_loop(_metadata, true, 0);
}

/*
 * RLIMIT_MEMLOCK of 4 pages: two threads register 2 pages each (together
 * exactly the limit) while a third asks for 5 pages, which never fit.  The
 * fitting ones must never fail; the other must always get ENOMEM.  The
 * over-limit charge fails alone too: the race is only run where a fitting
 * call and an over-limit one were in flight at once (overlaps), which the
 * test requires, running on past its time until one was.
 */
TEST_F_TIMEOUT(race, fitting_vs_over_limit_charges, 120)
{
	struct charge_race c[3];
	struct svmbatch_snapshot s0, s1;
	double deadline = now_s() + race_seconds();
	unsigned long overlaps = 0;
	pthread_t t[3];
	char *mem;
	int fd, i;

	svmbatch_open_or_skip(fd);
	mem = anon_map(9 * PAGE_SZ);
	ASSERT_NE(NULL, mem);
	ASSERT_EQ(0, drop_effective_cap(CAP_IPC_LOCK));
	ASSERT_EQ(0, setrlimit(RLIMIT_MEMLOCK,
			       &(struct rlimit){ 4 * PAGE_SZ, RLIM_INFINITY }));
	snapshot_take(_metadata, fd, &s0);
	for (i = 0; i < 3; i++) {
		c[i] = (struct charge_race){
			.fd = fd, .deadline = deadline,
			.mem = mem + 2 * i * PAGE_SZ, .pages = i < 2 ? 2 : 5,
			.overlaps = &overlaps,
		};
	}
	/* Each fitting thread watches the over-limit one, and it both. */
	c[0].rivals[0] = &c[2];
	c[1].rivals[0] = &c[2];
	c[0].nr_rivals = 1;
	c[1].nr_rivals = 1;
	c[2].rivals[0] = &c[0];
	c[2].rivals[1] = &c[1];
	c[2].nr_rivals = 2;
	for (i = 0; i < 3; i++)
		ASSERT_EQ(0, pthread_create(&t[i], NULL, charge_thread, &c[i]));
	for (i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	ksft_print_msg("fitting charges: %lu+%lu ok, %lu+%lu ENOMEM\n",
		       c[0].ok, c[1].ok, c[0].enomem, c[1].enomem);
	ksft_print_msg("over-limit charges: %lu ENOMEM, %lu ok; other errors %lu\n",
		       c[2].enomem, c[2].ok,
		       c[0].other + c[1].other + c[2].other);
	ksft_print_msg("calls spanned by a call of the other kind: %lu\n", overlaps);
	EXPECT_LT(0UL, overlaps) {
		TH_LOG("no fitting and over-limit charges overlapped: no race ran");
	}
	EXPECT_EQ(0UL, c[0].enomem + c[1].enomem);
	EXPECT_EQ(0UL, c[2].ok);
	EXPECT_EQ(0UL, c[0].other + c[1].other + c[2].other);
	EXPECT_LT(0UL, c[0].ok);
	EXPECT_LT(0UL, c[1].ok);
	EXPECT_LT(0UL, c[2].enomem);
	snapshot_take(_metadata, fd, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
	close(fd);
	munmap(mem, 9 * PAGE_SZ);
}

/* ------------------------------------- UNREGISTER vs QUERY vs EXPORT */

struct handle_race {
	int fd;
	__u32 handle;
	__u64 nr_pages;
	pthread_barrier_t start;
	int unreg_ret, query_ret, export_ret;
	__u64 query_pages;
	bool export_ok;
};

static void *unregister_thread(void *arg)
{
	struct handle_race *h = arg;

	pthread_barrier_wait(&h->start);
	h->unreg_ret = _test_unregister(h->fd, h->handle) ? errno : 0;
	return NULL;
}

static void *query_thread(void *arg)
{
	struct handle_race *h = arg;
	struct svmbatch_query q;

	pthread_barrier_wait(&h->start);
	h->query_ret = _test_cmd_query(h->fd, h->handle, NULL, 0, RANGE_SZ,
				       &q) ? errno : 0;
	h->query_pages = q.nr_pages;
	return NULL;
}

/* An exported dma-buf must be whole: its size and bytes are the pages'. */
static void *export_thread(void *arg)
{
	struct handle_race *h = arg;
	int dfd;

	pthread_barrier_wait(&h->start);
	dfd = export_dmabuf(h->fd, h->handle, O_CLOEXEC);
	h->export_ret = dfd < 0 ? -dfd : 0;
	h->export_ok = false;
	if (dfd >= 0) {
		off_t size = lseek(dfd, 0, SEEK_END);
		char *m = mmap(NULL, h->nr_pages * PAGE_SZ, PROT_READ,
			       MAP_SHARED, dfd, 0);

		h->export_ok = size == (off_t)(h->nr_pages * PAGE_SZ) &&
			       m != MAP_FAILED && m[0] == 0x3c &&
			       m[h->nr_pages * PAGE_SZ - 1] == 0x3c;
		if (m != MAP_FAILED)
			munmap(m, h->nr_pages * PAGE_SZ);
		close(dfd);
	}
	return NULL;
}

TEST_F_TIMEOUT(race, unregister_vs_query_vs_export, 120)
{
	void *(*fns[3])(void *) = {
		unregister_thread, query_thread, export_thread,
	};
	unsigned long iters = 0, queried = 0, exported = 0, lost = 0;
	double deadline = now_s() + race_seconds();
	struct svmbatch_snapshot s0, s1;
	struct handle_race h = { 0 };
	struct svmbatch_range r;
	char *mem;
	int i;

	svmbatch_open_or_skip(h.fd);
	mem = anon_map(NPAGES * PAGE_SZ);
	ASSERT_NE(NULL, mem);
	memset(mem, 0x3c, NPAGES * PAGE_SZ);
	r = mkrange(mem, NPAGES * PAGE_SZ, 0);
	snapshot_take(_metadata, h.fd, &s0);
	while (iters < MAX_ITERS &&
	       race_go_on(deadline, lost && queried + exported)) {
		pthread_t t[3];

		h.handle = test_cmd_register_fd(h.fd, &r, 1, &h.nr_pages);
		ASSERT_EQ(0, pthread_barrier_init(&h.start, NULL, 3));
		for (i = 0; i < 3; i++)
			ASSERT_EQ(0, pthread_create(&t[i], NULL, fns[i], &h));
		for (i = 0; i < 3; i++)
			pthread_join(t[i], NULL);
		pthread_barrier_destroy(&h.start);

		ASSERT_EQ(0, h.unreg_ret) TH_LOG("UNREGISTER: %s",
						 strerror(h.unreg_ret));
		ASSERT_TRUE(!h.query_ret || h.query_ret == ENOENT);
		if (!h.query_ret) {
			ASSERT_EQ(h.nr_pages, h.query_pages);
			queried++;
		}
		ASSERT_TRUE(!h.export_ret || h.export_ret == ENOENT)
			TH_LOG("EXPORT_DMABUF: %s", strerror(h.export_ret));
		if (!h.export_ret) {
			ASSERT_TRUE(h.export_ok);
			exported++;
		}
		lost += h.query_ret || h.export_ret;
		EXPECT_ERRNO(ENOENT, _test_unregister(h.fd, h.handle));
		ASSERT_EQ(s0.vmpin_kb, vmpin_kb());
		iters++;
	}
	ksft_print_msg("UNREGISTER vs QUERY vs EXPORT: %lu rounds, %lu QUERY, %lu EXPORT\n",
		       iters, queried, exported);
	ksft_print_msg("UNREGISTER vs QUERY vs EXPORT: %lu rounds lost one\n",
		       lost);
	/* Both orders happened: a command beat UNREGISTER, one lost to it. */
	EXPECT_LT(0UL, queried + exported);
	EXPECT_LT(0UL, lost);
	snapshot_take(_metadata, h.fd, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
	close(h.fd);
	munmap(mem, NPAGES * PAGE_SZ);
}

/* -------------------------------------------- close() vs REGISTER */

struct close_race {
	int fd;
	char *mem;
	unsigned int spin_closer;
	pthread_barrier_t start;
	unsigned long ok, ebadf, other;
};

static void *register_until_closed(void *arg)
{
	struct close_race *c = arg;
	struct svmbatch_range r = mkrange(c->mem, 64 * PAGE_SZ, 0);
	struct svmbatch_register cmd;

	pthread_barrier_wait(&c->start);
	for (;;) {
		if (!_test_cmd_register(c->fd, &r, 1, RANGE_SZ, &cmd)) {
			/* Kept: closing the file must drop it. */
			c->ok++;
			continue;
		}
		if (errno == EBADF) {
			c->ebadf++;
			break;
		}
		/* ENOSPC: the file is full; anything else is wrong. */
		if (errno != ENOSPC)
			c->other++;
	}
	return NULL;
}

TEST_F_TIMEOUT(race, close_vs_register, 120)
{
	double deadline = now_s() + race_seconds();
	struct svmbatch_snapshot s0, s1;
	unsigned int seed = race_seed();
	unsigned long iters = 0, ok = 0;
	struct close_race c = { 0 };
	int probe;

	svmbatch_open_or_skip(probe);
	close(probe);
	c.mem = anon_map(64 * PAGE_SZ);
	ASSERT_NE(NULL, c.mem);
	snapshot_take(_metadata, -1, &s0);
	while (iters < MAX_ITERS && race_go_on(deadline, ok)) {
		pthread_t t;

		c.fd = open(SVMBATCH_DEV, O_RDWR | O_CLOEXEC);
		ASSERT_LE(0, c.fd);
		c.ok = 0;
		c.ebadf = 0;
		c.other = 0;
		c.spin_closer = rand_r(&seed) % (4 * SPIN_MAX);
		ASSERT_EQ(0, pthread_barrier_init(&c.start, NULL, 2));
		ASSERT_EQ(0, pthread_create(&t, NULL, register_until_closed,
					    &c));
		pthread_barrier_wait(&c.start);
		spin(c.spin_closer);
		ASSERT_EQ(0, close(c.fd));
		pthread_join(t, NULL);
		pthread_barrier_destroy(&c.start);
		ASSERT_EQ(1UL, c.ebadf);
		ASSERT_EQ(0UL, c.other);
		/* Every registration of the closed file is gone. */
		ASSERT_EQ(s0.vmpin_kb, vmpin_kb());
		ok += c.ok;
		iters++;
	}
	ksft_print_msg("close vs REGISTER: %lu files, %lu registrations closed\n",
		       iters, ok);
	/* close() came while registrations were held (and being made). */
	EXPECT_LT(0UL, ok);
	snapshot_take(_metadata, -1, &s1);
	ASSERT_SNAPSHOT_EQ(&s0, &s1);
	munmap(c.mem, 64 * PAGE_SZ);
}

/* ---------------------------- writable pins vs shared ext4 mappings */

struct file_race {
	int fd, file;
	char *buf;
	bool mprotect_only;
	unsigned int spin_mutator;
	bool mutate_now, stop, call_done;
	pthread_barrier_t start, done;
};

/*
 * Swap buf between anonymous memory and a MAP_SHARED mapping of an ext4
 * file, ending on anonymous memory; or, with @mprotect_only, flip the
 * shared mapping between read-only and read-write.
 */
static void *file_mutator(void *arg)
{
	struct file_race *f = arg;
	size_t len = NPAGES * PAGE_SZ;

	for (;;) {
		pthread_barrier_wait(&f->start);
		if (f->stop)
			break;
		if (f->mutate_now)
			spin(f->spin_mutator);
		while (f->mutate_now) {
			if (f->mprotect_only) {
				mprotect(f->buf, len, PROT_READ);
				mprotect(f->buf, len, PROT_READ | PROT_WRITE);
			} else {
				mmap(f->buf, len, PROT_READ | PROT_WRITE,
				     MAP_SHARED | MAP_FIXED, f->file, 0);
				mmap(f->buf, len, PROT_READ | PROT_WRITE,
				     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
				     -1, 0);
			}
			if (__atomic_load_n(&f->call_done, __ATOMIC_ACQUIRE))
				break;
		}
		pthread_barrier_wait(&f->done);
	}
	return NULL;
}

/* A file whose every page starts with FILE_MARKER. */
static int marker_file(struct __test_metadata *_metadata, char *path,
		       size_t pathlen)
{
	const char *dir = getenv(WRITEBACK_DIR_ENV);
	__u64 page[512] = { 0 };
	unsigned int i;
	int fd;

	snprintf(path, pathlen, "%s/svmbatch-race.XXXXXX", dir);
	fd = mkostemp(path, O_CLOEXEC);
	ASSERT_LE(0, fd) TH_LOG("%s: %s", path, strerror(errno));
	page[0] = FILE_MARKER;
	for (i = 0; i < NPAGES; i++)
		ASSERT_EQ((ssize_t)PAGE_SZ,
			  pwrite(fd, page, PAGE_SZ, (off_t)i * PAGE_SZ));
	return fd;
}

/*
 * Writable REGISTERs while another thread swaps the memory under them: no
 * successful registration may hold a page of the file (its dma-buf would
 * show FILE_MARKER), whatever QUERY says.
 */
static void run_file_race(struct __test_metadata *_metadata, const char *name,
			  bool mprotect_only)
{
	unsigned long iters = 0, ok = 0, file_pages = 0, quiet_failed = 0;
	unsigned long errs[4] = { 0 }, raced = 0;
	double deadline = now_s() + race_seconds();
	struct svmbatch_range r[2];
	struct file_race f = { .mprotect_only = mprotect_only };
	unsigned int seed = race_seed();
	long long pin0;
	char path[256], *big;
	pthread_t t;

	if (!getenv(WRITEBACK_DIR_ENV) || !*getenv(WRITEBACK_DIR_ENV))
		skip_absent("writeback", return, WRITEBACK_DIR_ENV
			    " not set (ext4 mount for writeback tests)");
	svmbatch_open_or_skip(f.fd);
	f.file = marker_file(_metadata, path, sizeof(path));
	if (mprotect_only)
		f.buf = mmap(NULL, NPAGES * PAGE_SZ, PROT_READ | PROT_WRITE,
			     MAP_SHARED, f.file, 0);
	else
		f.buf = mmap(NULL, NPAGES * PAGE_SZ, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, f.buf);
	/*
	 * The file range comes last after a large anonymous one: REGISTER
	 * checks every mapping before it pins any page, so the check of the
	 * file mapping and its pin are a whole large pin apart, and the
	 * mprotect thread gets its chance to flip it in between.
	 */
	big = anon_map(BIG_PAGES * PAGE_SZ);
	ASSERT_NE(NULL, big);
	r[0] = mkrange(big, BIG_PAGES * PAGE_SZ, 0);
	r[1] = mkrange(f.buf, NPAGES * PAGE_SZ, 0);
	ksft_print_msg("%s: seed %u\n", name, seed);
	pin0 = vmpin_kb();
	ASSERT_EQ(0, pthread_barrier_init(&f.start, NULL, 2));
	ASSERT_EQ(0, pthread_barrier_init(&f.done, NULL, 2));
	ASSERT_EQ(0, pthread_create(&t, NULL, file_mutator, &f));
	while (iters < MAX_ITERS && race_go_on(deadline, raced)) {
		struct svmbatch_register cmd;
		unsigned int spin_me;
		int ret, err;

		f.mutate_now = iters & 1;
		f.spin_mutator = rand_r(&seed) % SPIN_MAX;
		spin_me = rand_r(&seed) % SPIN_MAX;
		f.call_done = false;
		pthread_barrier_wait(&f.start);
		spin(spin_me);
		ret = _test_cmd_register(f.fd, r, 2, RANGE_SZ, &cmd);
		err = errno;
		__atomic_store_n(&f.call_done, true, __ATOMIC_RELEASE);
		pthread_barrier_wait(&f.done);
		iters++;
		if (ret) {
			errs[err == EFAULT ? 0 : err == EAGAIN ? 1 :
			     err == EOPNOTSUPP ? 2 : 3]++;
			EXPECT_TRUE(err == EFAULT || err == EAGAIN ||
				    err == EOPNOTSUPP)
				TH_LOG("unexpected %s", strerror(err));
			quiet_failed += !f.mutate_now && !mprotect_only;
			/* Over the shared mapping every call fails anyway. */
			raced += f.mutate_now && !mprotect_only;
			raced += mprotect_only && err == EFAULT;
			ASSERT_EQ(pin0, vmpin_kb());
			continue;
		}
		ok++;
		{
			int dfd = export_dmabuf(f.fd, cmd.handle, O_CLOEXEC);
			unsigned int k;
			char *m;

			ASSERT_LE(0, dfd);
			m = mmap(NULL, cmd.nr_pages * PAGE_SZ, PROT_READ,
				 MAP_SHARED, dfd, 0);
			ASSERT_NE(MAP_FAILED, m);
			for (k = 0; k < cmd.nr_pages; k++)
				file_pages += *(__u64 *)(m + (size_t)k * PAGE_SZ) ==
					      FILE_MARKER;
			munmap(m, cmd.nr_pages * PAGE_SZ);
			close(dfd);
		}
		test_cmd_unregister_fd(f.fd, cmd.handle);
		ASSERT_EQ(pin0, vmpin_kb());
	}
	f.stop = true;
	pthread_barrier_wait(&f.start);
	pthread_join(t, NULL);
	ksft_print_msg("%s: %lu iterations, %lu registered, %lu file pages\n",
		       name, iters, ok, file_pages);
	ksft_print_msg("%s: EFAULT %lu EAGAIN %lu EOPNOTSUPP %lu other %lu\n",
		       name, errs[0], errs[1], errs[2], errs[3]);
	EXPECT_EQ(0UL, file_pages);
	EXPECT_EQ(0UL, errs[3]);
	/*
	 * The race happened: a swap made a call fail, or (with
	 * @mprotect_only) a call found the mapping read-only (EFAULT) rather
	 * than refusing the writable shared one.
	 */
	EXPECT_LT(0UL, raced);
	/*
	 * Over the writable shared mapping no writable pin may succeed;
	 * over anonymous memory every unraced one must.
	 */
	EXPECT_EQ(0UL, mprotect_only ? ok : quiet_failed);
	close(f.fd);
	munmap(f.buf, NPAGES * PAGE_SZ);
	munmap(big, BIG_PAGES * PAGE_SZ);
	close(f.file);
	unlink(path);
}

TEST_F_TIMEOUT(race, vs_swap_anon_and_shared_file, 120)
{
	run_file_race(_metadata, "REGISTER vs anon <-> shared ext4 swap", false);
}

TEST_F_TIMEOUT(race, vs_mprotect_shared_file, 120)
{
	run_file_race(_metadata, "REGISTER vs mprotect of a shared ext4 mapping",
		      true);
}

TEST_HARNESS_MAIN
