// SPDX-License-Identifier: GPL-2.0
/*
 * A deterministic ioctl fuzzer for /dev/svmbatch.
 *
 * Several threads issue 100000 ioctls (by default) on one fd: mostly the
 * five commands, with random, bit-flipped and hostile arguments (struct
 * sizes, flags, reserved members, pointers, range arrays, handles), plus
 * unknown command numbers.  Another thread keeps changing the memory that
 * REGISTER pins and that one of the range arrays lives in (munmap, mmap,
 * mremap, madvise, mprotect), and now and then forks a child whose commands
 * must give EPERM.  With a fault-injection build, fail_nth and
 * fake_invalidations are armed at random too.  Every call must give 0 or one of a few
 * errnos, and a few results are checked further: handles, dma-buf fds,
 * error_index, and that nothing is written past "size".  At the end every
 * handle is dropped and every dma-buf closed, the fd is closed, and VmPin
 * and the module's gauges must be back where they were.  The guest runner
 * checks kmemleak (debug kernel) and the kernel log after all the tests.
 *
 * "# seed N" comes first.  SVMBATCH_FUZZ_SEED, SVMBATCH_FUZZ_CALLS,
 * SVMBATCH_FUZZ_THREADS and SVMBATCH_FUZZ_SECONDS (a wall-clock budget,
 * 150 s, 600 s on a kernel with kmemleak) override the defaults, so that a
 * failure can be replayed: each thread draws from its own generator seeded
 * with seed + thread index, so it makes the same calls in every run with
 * that seed but for the handles it picks among the live ones; what the
 * calls find also depends on how the threads and the memory changes
 * interleave.
 *
 * The kernel writes only to a command's own struct (at most "size" bytes)
 * and to QUERY's range buffer (at most ranges_cap elements).  All the memory
 * used here is in one reserved arena, laid out so that neither write can
 * land on memory that this program reads:
 *
 *   per thread: guard | command pages | guard | range pages | guard
 *   read-only structs | guard | memfd | ext4 file | guard
 *   pool (what the mutator changes) | volatile range array | guard
 *   window (QUERY's buffer) | 68 GiB PROT_NONE
 *
 * A REGISTER or EXPORT_DMABUF argument is only ever placed in the calling
 * thread's own command pages or in memory that cannot be written, so that
 * every handle and fd the kernel returns is seen.  QUERY range buffers are
 * only ever above the thread pages, with ranges_cap at most QUERY_CAP_MAX:
 * even with range_size 2^32 - 1 the writes stay inside the arena.
 */
#include <pthread.h>
#include <time.h>
#include <sys/eventfd.h>

#include "svmbatch_utils.h"

#define FUZZ_SEED		12345ULL
#define FUZZ_CALLS		100000UL
#define FUZZ_THREADS		4U
#define FUZZ_THREADS_MAX	16U
/* Wall-clock budget of the calls; the debug kernel is several times slower. */
#define FUZZ_SECONDS		150U
#define FUZZ_SECONDS_DEBUG	600U
#define FUZZ_SECONDS_MAX	800U
#define FUZZ_TIMEOUT		900

#define CMD_PAGES	2
#define RANGES_PAGES	6
#define RO_PAGES	2
#define MEMFD_PAGES	16
#define FILE_PAGES	16
#define POOL_PAGES	512
#define CELL_PAGES	8
#define NR_CELLS	(POOL_PAGES / CELL_PAGES)
#define VOL_PAGES	4
#define WINDOW_PAGES	16
#define QUERY_CAP_MAX	16U
#define TAIL_BYTES	((__u64)(QUERY_CAP_MAX + 1) << 32)

/* What replays a run. */
#define REPLAY_FMT \
	"SVMBATCH_FUZZ_SEED=%llu SVMBATCH_FUZZ_CALLS=%lu SVMBATCH_FUZZ_THREADS=%u"

#define ARG_MAX		512	/* bytes of a command buffer we fill */
#define RO_SLOT		256	/* bytes between the read-only structs */
#define LIVE_MAX	128	/* handles remembered at once */
#define STALE_MAX	16
#define DMABUF_KEEP	4	/* dma-bufs a thread keeps open for a while */
#define ERRNO_MAX	256
#define CANARY8		0xa5
#define CANARY64	0x5a5a5a5a5a5a5a5aULL

enum { C_GET_INFO, C_REGISTER, C_UNREGISTER, C_QUERY, C_EXPORT, C_OTHER,
	NR_C };

static const char * const cmd_name[NR_C] = {
	"GET_INFO", "REGISTER", "UNREGISTER", "QUERY", "EXPORT_DMABUF",
	"unknown",
};

static const unsigned long cmd_num[C_OTHER] = {
	SVMBATCH_GET_INFO, SVMBATCH_REGISTER, SVMBATCH_UNREGISTER,
	SVMBATCH_QUERY, SVMBATCH_EXPORT_DMABUF,
};

static const __u32 cmd_ksz[C_OTHER] = {
	sizeof(struct svmbatch_info), sizeof(struct svmbatch_register),
	sizeof(struct svmbatch_unregister), sizeof(struct svmbatch_query),
	sizeof(struct svmbatch_export_dmabuf),
};

/* The least "size" each command takes (REGISTER: the first ABI's). */
static const __u32 cmd_min[C_OTHER] = {
	sizeof(struct svmbatch_info),
	offsetof(struct svmbatch_register, eventfd),
	sizeof(struct svmbatch_unregister), sizeof(struct svmbatch_query),
	sizeof(struct svmbatch_export_dmabuf),
};

static const struct {
	int err;
	const char *name;
} allowed[] = {
	{ EINVAL, "EINVAL" }, { EOPNOTSUPP, "EOPNOTSUPP" }, { E2BIG, "E2BIG" },
	{ EFAULT, "EFAULT" }, { ENOMEM, "ENOMEM" }, { ENOENT, "ENOENT" },
	{ EOVERFLOW, "EOVERFLOW" }, { ENOSPC, "ENOSPC" },
	{ EMSGSIZE, "EMSGSIZE" }, { EACCES, "EACCES" }, { EBADF, "EBADF" },
	{ ENOTTY, "ENOTTY" }, { EPERM, "EPERM" }, { EAGAIN, "EAGAIN" },
	{ EINTR, "EINTR" }, { EMFILE, "EMFILE" }, { ENFILE, "ENFILE" },
};

/* Where a command's argument is. */
enum place {
	PL_OWN,		/* the thread's command pages, 8-byte aligned */
	PL_OWN_ODD,	/* same, unaligned or across a page boundary */
	PL_OWN_EDGE,	/* same, running into the guard page after them */
	PL_GUARD,	/* a PROT_NONE page */
	PL_RO,		/* a valid struct in read-only memory */
	PL_BAD,		/* never mapped: NULL, low, kernel, non-canonical */
	PL_WINDOW,	/* writable memory that other threads' QUERYs write */
	PL_POOL,	/* the memory the mutator changes */
	NR_PL,
};

static const char * const place_name[NR_PL] = {
	"own", "own, odd offset", "own, into the guard page", "guard page",
	"read-only", "never mapped", "shared window", "mutated pool",
};

union fuzz_arg {
	struct svmbatch_info info;
	struct svmbatch_register reg;
	struct svmbatch_unregister unreg;
	struct svmbatch_query query;
	struct svmbatch_export_dmabuf exp;
	unsigned char bytes[ARG_MAX];
};

struct fuzz {
	int fd;
	int evfd;
	int memfd;
	int filefd;
	struct svmbatch_info info;
	bool fault_injection;
	bool fake_inval;	/* debugfs fake_invalidations is there */
	int fi_armed;
	__u64 seed;
	__u64 task_size;
	unsigned long calls;
	unsigned int nthreads;
	unsigned int seconds;
	struct timespec deadline;
	int stop;

	char *arena;
	size_t arena_len;
	char *blocks;		/* the threads' pages */
	char *ro;
	char *memfd_map;
	char *file_map;
	char *pool;
	char *vol;
	char *window;

	pthread_mutex_t lock;	/* live[] and max_handle */
	__u32 live[LIVE_MAX];
	unsigned int nr_live;
	__u32 max_handle;
	unsigned long reg_ok;
	unsigned long unreg_ok;
	unsigned long mutations;
	pthread_barrier_t start;

	int failures;		/* under lock */
	char failure[2048];
};

struct fuzz_thread {
	struct fuzz *f;
	unsigned int idx;
	__u64 rng;
	unsigned long ncalls;
	unsigned long calls;
	char *cmd;		/* CMD_PAGES of our own */
	char *ranges;		/* RANGES_PAGES of our own */
	size_t cmd_lo, cmd_hi;	/* what may be non-zero in cmd */
	size_t ranges_hi;	/* what may be non-zero in ranges */
	__u32 stale[STALE_MAX];
	unsigned int nr_stale;
	int dmabuf[DMABUF_KEEP];
	unsigned int nr_dmabuf;
	unsigned long exported;
	unsigned long stale_seen;	/* QUERYs that said STALE */
	unsigned long errnos[ERRNO_MAX];	/* [0]: successes */
	unsigned long per_cmd[NR_C];
	unsigned long ok[NR_C];
	pthread_t tid;
};

/* One call, as made. */
struct call {
	unsigned long cmd;
	unsigned int ci;	/* C_* of cmd */
	unsigned int built;	/* C_* the argument was built for */
	enum place place;
	char *arg;
	size_t avail;		/* own bytes from arg to the guard page */
	size_t copied;		/* bytes of in placed at arg */
	__u32 size;		/* the size member as placed */
	bool planned;		/* UNREGISTER of a handle taken from live[] */
	__u32 taken;		/* that handle */
	const char *ranges;	/* where REGISTER's or QUERY's ranges are */
	unsigned int nbuilt;	/* elements written for REGISTER */
	union fuzz_arg in;
	union fuzz_arg out;
};

#define CMD_LEN		(CMD_PAGES * PAGE_SZ)
#define RANGES_LEN	(RANGES_PAGES * PAGE_SZ)
#define BLOCK_LEN	((CMD_PAGES + RANGES_PAGES + 2) * PAGE_SZ)
#define POOL_LEN	(POOL_PAGES * PAGE_SZ)
#define CELL_LEN	(CELL_PAGES * PAGE_SZ)
#define VOL_LEN		(VOL_PAGES * PAGE_SZ)
#define WINDOW_LEN	(WINDOW_PAGES * PAGE_SZ)

/* ------------------------------------------------------------ randomness */

/* splitmix64: one 64-bit state, good enough and trivially seeded. */
static __u64 rnd(__u64 *s)
{
	__u64 z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static __u64 rnd_seed(__u64 seed, unsigned int idx)
{
	__u64 s = seed + idx;

	return rnd(&s);
}

/* Uniform in [0, n). */
static __u32 rnd_below(__u64 *s, __u32 n)
{
	return ((rnd(s) >> 32) * n) >> 32;
}

static bool rnd_pct(__u64 *s, __u32 pct)
{
	return rnd_below(s, 100) < pct;
}

/* ---------------------------------------------------------------- helpers */

static size_t min_sz(size_t a, size_t b)
{
	return a < b ? a : b;
}

static size_t max_sz(size_t a, size_t b)
{
	return a > b ? a : b;
}

static bool stopped(struct fuzz *f)
{
	return __atomic_load_n(&f->stop, __ATOMIC_RELAXED);
}

static void stop_all(struct fuzz *f)
{
	__atomic_store_n(&f->stop, 1, __ATOMIC_RELAXED);
}

static const char *errno_name(int err)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(allowed); i++)
		if (allowed[i].err == err)
			return allowed[i].name;
	return NULL;
}

static unsigned int cmd_index(unsigned long cmd)
{
	unsigned int i;

	for (i = 0; i < C_OTHER; i++)
		if (cmd_num[i] == (unsigned int)cmd)
			return i;
	return C_OTHER;
}

/* An address nothing is ever mapped at. */
static __u64 bad_addr(struct fuzz *f, __u64 *rng)
{
	static const __u64 fixed[] = {
		0, 1, 0x1000, 0x8000 - 8,
		0xffff888000000000ULL,	/* direct map */
		0xffffffff81000000ULL,	/* kernel text */
		0xffffffffff600000ULL,	/* vsyscall page */
		0xfffffffffffff000ULL,
		0xfffffffffffffff8ULL,
		0x8000000000000000ULL,	/* non-canonical */
		0xdead000000000000ULL,
		0x0000800000000000ULL,	/* above 47 bits */
	};

	switch (rnd_below(rng, 4)) {
	case 0:
		return f->task_size;
	case 1:
		return f->task_size + rnd_below(rng, 16) * PAGE_SZ +
		       rnd_below(rng, 64);
	default:
		return fixed[rnd_below(rng, ARRAY_SIZE(fixed))];
	}
}

static __u64 env_u64(const char *name, __u64 def)
{
	const char *v = getenv(name);
	char *end;
	__u64 val;

	if (!v || !*v)
		return def;
	errno = 0;
	val = strtoull(v, &end, 0);
	if (errno || *end)
		return def;
	return val;
}

static bool is_dmabuf(int fd)
{
	char path[64], target[128];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return false;
	target[n] = 0;
	return strstr(target, "dmabuf");
}

/* Close every dma-buf fd of this process; how many there were. */
static unsigned int close_all_dmabufs(void)
{
	unsigned int n = 0;
	int fd;

	for (fd = 3; fd < 4096; fd++) {
		if (is_dmabuf(fd)) {
			close(fd);
			n++;
		}
	}
	return n;
}

/* --------------------------------------------------------------- handles */

static void live_add(struct fuzz_thread *t, __u32 h)
{
	struct fuzz *f = t->f;
	bool full;

	pthread_mutex_lock(&f->lock);
	full = f->nr_live == LIVE_MAX;
	if (!full)
		f->live[f->nr_live++] = h;
	if (h > f->max_handle)
		f->max_handle = h;
	pthread_mutex_unlock(&f->lock);
	/* Cannot remember it: drop it now. */
	if (full && !_test_unregister(f->fd, h))
		__atomic_add_fetch(&f->unreg_ok, 1, __ATOMIC_RELAXED);
}

/*
 * A live handle, chosen by the random value @r and taken out of the table
 * if @take; false if none.  Callers draw @r whatever the table holds, so a
 * thread's draws do not depend on the other threads.
 */
static bool live_pick(struct fuzz *f, __u64 r, bool take, __u32 *h)
{
	unsigned int i;
	bool any;

	pthread_mutex_lock(&f->lock);
	any = f->nr_live;
	if (any) {
		i = ((r >> 32) * f->nr_live) >> 32;
		*h = f->live[i];
		if (take)
			f->live[i] = f->live[--f->nr_live];
	}
	pthread_mutex_unlock(&f->lock);
	return any;
}

static void live_forget(struct fuzz *f, __u32 h)
{
	unsigned int i;

	pthread_mutex_lock(&f->lock);
	for (i = 0; i < f->nr_live; i++) {
		if (f->live[i] == h) {
			f->live[i] = f->live[--f->nr_live];
			break;
		}
	}
	pthread_mutex_unlock(&f->lock);
}

static unsigned int live_count(struct fuzz *f)
{
	return __atomic_load_n(&f->nr_live, __ATOMIC_RELAXED);
}

static void stale_add(struct fuzz_thread *t, __u32 h)
{
	t->stale[t->nr_stale++ % STALE_MAX] = h;
}

static __u32 pick_handle(struct fuzz_thread *t)
{
	__u64 *rng = &t->rng;
	__u32 pct = rnd_below(rng, 100);
	__u64 r = rnd(rng);
	__u32 h;

	if (pct < 55 && live_pick(t->f, r, false, &h))
		return h;
	if (pct < 70 && t->nr_stale)
		return t->stale[(r >> 32) % min_sz(t->nr_stale, STALE_MAX)];
	if (pct < 85)
		return 1 + r % 512;
	if (pct < 90)
		return 0;
	if (pct < 95)
		return __atomic_load_n(&t->f->max_handle, __ATOMIC_RELAXED) +
		       r % 3;
	return r;
}

/* ---------------------------------------------------------------- ranges */

/* One range: mostly a valid one in pool cell @cell, else something odd. */
static void gen_range(struct fuzz_thread *t, struct svmbatch_range *r,
		      unsigned int cell, bool clean)
{
	struct fuzz *f = t->f;
	__u64 *rng = &t->rng;
	unsigned int s = rnd_below(rng, CELL_PAGES);
	unsigned int l = 1 + rnd_below(rng, CELL_PAGES - s);
	__u32 pct = rnd_below(rng, 100);

	memset(r, 0, sizeof(*r));
	r->addr = ptr_u64(f->pool + (cell * CELL_PAGES + s) * PAGE_SZ);
	r->len = l * PAGE_SZ;
	r->flags = rnd_pct(rng, 30) ? SVMBATCH_RANGE_READ_ONLY : 0;
	if (clean || pct < 80)
		return;

	switch (pct) {
	case 80:	/* long, across cells, maybe beyond the pool */
		r->addr = ptr_u64(f->pool +
				  rnd_below(rng, POOL_PAGES) * PAGE_SZ);
		r->len = (1 + rnd_below(rng, POOL_PAGES / 2)) * PAGE_SZ;
		break;
	case 81 ... 82:
		r->addr = ptr_u64(f->memfd_map + s * PAGE_SZ);
		break;
	case 83:	/* writable ext4 file pages: EOPNOTSUPP */
		r->addr = ptr_u64(f->file_map + s * PAGE_SZ);
		break;
	case 84:
		r->addr = ptr_u64(f->ro);
		r->len = PAGE_SZ * (1 + rnd_below(rng, RO_PAGES));
		break;
	case 85:
		r->addr = ptr_u64(rnd_pct(rng, 50) ? t->cmd : f->window);
		r->len = PAGE_SZ;
		break;
	case 86:
		r->addr += 1 + rnd_below(rng, PAGE_SZ - 1);
		break;
	case 87:
		r->len += 1 + rnd_below(rng, PAGE_SZ - 1);
		break;
	case 88:
		r->len = 0;
		break;
	case 89:
		r->len = f->info.max_range_bytes +
			 (rnd_pct(rng, 50) ? PAGE_SZ : 0);
		break;
	case 90:	/* wraps around 2^64 */
		r->addr = 0ULL - (1 + rnd_below(rng, 8)) * PAGE_SZ;
		r->len = (9 + rnd_below(rng, 8)) * PAGE_SZ;
		break;
	case 91:
		r->addr = bad_addr(f, rng) & ~(__u64)(PAGE_SZ - 1);
		break;
	case 92:	/* across the end of the user address space */
		r->addr = f->task_size - PAGE_SZ;
		r->len = 2 * PAGE_SZ;
		break;
	case 93:
		r->addr = 0;
		break;
	case 94:
		r->addr = rnd(rng);
		r->len = rnd(rng) >> rnd_below(rng, 64);
		break;
	case 95:
		r->flags |= 1U << (1 + rnd_below(rng, 31));
		break;
	case 96:
		r->reserved = 1 + rnd_below(rng, 0xffffffffU);
		break;
	case 97:	/* our own guard page */
		r->addr = ptr_u64(t->cmd + CMD_LEN);
		break;
	case 98:
		r->addr = ptr_u64(f->vol);
		r->len = PAGE_SZ * (1 + rnd_below(rng, VOL_PAGES));
		break;
	default:	/* page aligned, up to 1 GiB: runs off the pool */
		r->len = (1 + rnd_below(rng, 1U << 18)) * PAGE_SZ;
		break;
	}
}

/*
 * Write @n ranges @rs bytes apart at @base, as far as @end; an element cut
 * by @end is written in part.  Distinct pool cells keep valid ranges apart.
 */
static size_t build_ranges(struct fuzz_thread *t, char *base, char *end,
			   unsigned int n, __u32 rs, bool clean)
{
	unsigned char cells[NR_CELLS], tmp;
	struct svmbatch_range r;
	size_t off, len, avail = end - base, hi = 0;
	unsigned int i, j;

	for (i = 0; i < NR_CELLS; i++)
		cells[i] = i;
	for (i = 0; i < n; i++) {
		off = (size_t)i * rs;
		if (off >= avail)
			break;
		if (i < NR_CELLS) {	/* a random permutation, lazily */
			j = i + rnd_below(&t->rng, NR_CELLS - i);
			tmp = cells[j];
			cells[j] = cells[i];
			cells[i] = tmp;
		}
		gen_range(t, &r, cells[i % NR_CELLS], clean);
		if (!clean && rnd_pct(&t->rng, 3))	/* a flipped bit */
			((unsigned char *)&r)[rnd_below(&t->rng, sizeof(r))] ^=
				1U << rnd_below(&t->rng, 8);
		len = min_sz(avail - off, sizeof(r));
		memcpy(base + off, &r, len);
		hi = off + len;
		/* A non-zero byte in a larger element's tail: E2BIG. */
		if (rs > sizeof(r) && rnd_pct(&t->rng, 2)) {
			size_t k = sizeof(r) +
				   rnd_below(&t->rng, min_sz(rs, 4096) -
						      sizeof(r));

			if (off + k < avail) {
				base[off + k] = 1 + rnd_below(&t->rng, 255);
				hi = max_sz(hi, off + k + 1);
			}
		}
	}
	return hi;
}

/* ------------------------------------------------------- building calls */

static __u32 pick_range_size(__u64 *rng)
{
	static const __u32 odd[] = {
		0, 1, 8, RANGE_SZ - 1, 4096, 1U << 20, 0x7fffffffU,
		0xffffffffU,
	};
	__u32 pct = rnd_below(rng, 100);

	if (pct < 75)
		return RANGE_SZ;
	if (pct < 90)
		return RANGE_SZ + 8 * (1 + rnd_below(rng, 8));
	if (pct < 95)
		return RANGE_SZ + 1 + rnd_below(rng, 256);
	return odd[rnd_below(rng, ARRAY_SIZE(odd))];
}

static void build_register(struct fuzz_thread *t, struct call *c)
{
	struct svmbatch_register *reg = &c->in.reg;
	struct fuzz *f = t->f;
	__u64 *rng = &t->rng;
	bool clean = rnd_pct(rng, 40);
	__u32 rs = clean ? RANGE_SZ : pick_range_size(rng);
	__u32 pct = rnd_below(rng, 100);
	unsigned int n;
	char *base = t->ranges;
	char *end = t->ranges + RANGES_LEN;

	n = rnd_pct(rng, 90) ? 1 + rnd_below(rng, 16) :
			       17 + rnd_below(rng, 1000);
	c->ranges = "own";
	if (pct < 70) {
		if (rnd_pct(rng, 10))
			base += 8 * rnd_below(rng, 64);
	} else if (pct < 75) {	/* element k runs into the guard page */
		size_t span = (size_t)(1 + rnd_below(rng, n)) * rs;

		span = max_sz(RANGE_SZ, min_sz(span, RANGES_LEN));
		base = end - span + rnd_below(rng, RANGE_SZ);
		c->ranges = "own, into the guard page";
	} else {
		base = NULL;
	}
	if (base) {
		t->ranges_hi = max_sz(t->ranges_hi,
				      (size_t)(base - t->ranges) +
				      build_ranges(t, base, end, n, rs, clean));
		c->nbuilt = n;
	} else if (pct < 80) {	/* the command struct itself */
		base = c->arg + 8 * rnd_below(rng, 3);
		c->ranges = "the command struct";
	} else if (pct < 86) {
		base = f->vol + RANGE_SZ * rnd_below(rng, 2);
		c->ranges = "the volatile array";
	} else if (pct < 89) {
		base = f->ro + PAGE_SZ;
		n = 8;
		c->ranges = "read-only";
	} else if (pct < 94) {
		base = u64_ptr(bad_addr(f, rng));
		c->ranges = "never mapped";
	} else if (pct < 97) {
		base = u64_ptr(rnd(rng));
		c->ranges = "random";
	} else {
		base = f->pool + rnd_below(rng, POOL_LEN);
		c->ranges = "the pool";
	}

	memset(reg, 0, sizeof(*reg));
	reg->size = sizeof(*reg);
	reg->ranges = ptr_u64(base);
	reg->range_size = rs;
	pct = rnd_below(rng, 100);
	if (pct < 85)
		reg->nr_ranges = n;
	else if (pct < 88)
		reg->nr_ranges = 0;
	else if (pct < 92)
		reg->nr_ranges = n + 1 + rnd_below(rng, 4);
	else if (pct < 94)
		reg->nr_ranges = f->info.max_ranges;
	else if (pct < 96)
		reg->nr_ranges = f->info.max_ranges + 1;
	else if (pct < 98)
		reg->nr_ranges = 0xffffffffU;
	else
		reg->nr_ranges = rnd(rng);

	pct = rnd_below(rng, 100);
	if (pct >= 85 && pct < 95) {
		reg->flags = SVMBATCH_REGISTER_EVENTFD;
		switch (rnd_below(rng, 6)) {
		case 0:
			reg->eventfd = -1;
			break;
		case 1:
			reg->eventfd = f->fd;	/* not an eventfd */
			break;
		case 2:
			reg->eventfd = rnd_below(rng, 1024);
			break;
		default:
			reg->eventfd = f->evfd;
			break;
		}
	} else if (pct >= 95) {
		reg->flags = rnd(rng);
		reg->eventfd = f->evfd;
	}
	if (rnd_pct(rng, 3))
		reg->reserved = 1 + rnd_below(rng, 0xffffffffU);
}

/* A QUERY range buffer: anywhere above the thread pages, or nowhere. */
static void build_query(struct fuzz_thread *t, struct call *c)
{
	struct svmbatch_query *q = &c->in.query;
	struct fuzz *f = t->f;
	__u64 *rng = &t->rng;
	__u32 pct = rnd_below(rng, 100);
	bool capped = true;

	memset(q, 0, sizeof(*q));
	q->size = sizeof(*q);
	q->handle = pick_handle(t);
	q->range_size = rnd_pct(rng, 80) ? RANGE_SZ : pick_range_size(rng);
	c->ranges = "none";
	if (pct < 40) {
		q->ranges = 0;
	} else if (pct < 75) {
		q->ranges = ptr_u64(f->window +
				    8 * rnd_below(rng, WINDOW_LEN / 8));
		c->ranges = "the window";
	} else if (pct < 82) {
		q->ranges = ptr_u64(f->pool + rnd_below(rng, POOL_LEN));
		c->ranges = "the pool";
	} else if (pct < 85) {
		q->ranges = ptr_u64(f->memfd_map +
				    rnd_below(rng, MEMFD_PAGES * PAGE_SZ));
		c->ranges = "memfd";
	} else if (pct < 90) {
		q->ranges = ptr_u64(f->ro + rnd_below(rng, RO_PAGES * PAGE_SZ));
		c->ranges = "read-only";
		capped = false;
	} else {
		q->ranges = bad_addr(f, rng);
		c->ranges = "never mapped";
		capped = false;
	}
	pct = rnd_below(rng, 100);
	if (capped || pct < 80)
		q->ranges_cap = rnd_below(rng, QUERY_CAP_MAX + 1);
	else
		q->ranges_cap = pct < 90 ? 0xffffffffU : rnd(rng);
	if (rnd_pct(rng, 4))
		q->flags = 1U << rnd_below(rng, 32);
	if (rnd_pct(rng, 3))
		q->reserved = 1 + rnd_below(rng, 0xffffffffU);
}

static void build_export(struct fuzz_thread *t, struct call *c)
{
	static const __u32 flags[] = {
		0, O_RDWR, O_CLOEXEC, O_RDWR | O_CLOEXEC, O_RDWR | O_CLOEXEC,
		O_WRONLY, O_RDONLY | O_CLOEXEC, O_NONBLOCK, O_RDWR | O_APPEND,
	};
	struct svmbatch_export_dmabuf *e = &c->in.exp;
	__u64 *rng = &t->rng;

	memset(e, 0, sizeof(*e));
	e->size = sizeof(*e);
	e->handle = pick_handle(t);
	e->fd = -1;
	if (rnd_pct(rng, 90))
		e->flags = flags[rnd_below(rng, ARRAY_SIZE(flags))];
	else
		e->flags = 1U << rnd_below(rng, 32);
}

/* The argument for command @ci into c->in, without its size yet. */
static void build_arg(struct fuzz_thread *t, struct call *c)
{
	__u64 *rng = &t->rng;
	__u64 r;

	memset(&c->in, 0, sizeof(c->in));
	switch (c->built) {
	case C_GET_INFO:
		c->in.info.size = sizeof(c->in.info);
		if (rnd_pct(rng, 8))
			c->in.info.flags = rnd(rng);
		break;
	case C_REGISTER:
		build_register(t, c);
		break;
	case C_UNREGISTER:
		c->in.unreg.size = sizeof(c->in.unreg);
		if (rnd_pct(rng, 50))
			c->planned = true;
		r = rnd(rng);
		if (c->planned && live_pick(t->f, r, true, &c->taken)) {
			c->in.unreg.handle = c->taken;
		} else {
			c->planned = false;
			c->in.unreg.handle = pick_handle(t);
		}
		break;
	case C_QUERY:
		build_query(t, c);
		break;
	case C_EXPORT:
		build_export(t, c);
		break;
	}
}

/*
 * The size member and what follows the struct: exact, the first ABI's,
 * too small, larger with a zero or a non-zero tail, huge.  Bytes past
 * "size" hold a canary: the kernel must not write them.
 */
static void set_size(struct fuzz_thread *t, struct call *c)
{
	__u32 ksz = cmd_ksz[c->built], size = ksz, pct;
	__u64 *rng = &t->rng;
	bool junk = false;

	pct = rnd_below(rng, 100);
	if (pct < 62)
		size = ksz;
	else if (pct < 67)
		size = cmd_min[c->built];
	else if (pct < 71)
		size = 0;
	else if (pct < 79)
		size = 1 + rnd_below(rng, cmd_min[c->built] - 1);
	else if (pct < 87)
		size = ksz + 1 + rnd_below(rng, 64);
	else if (pct < 93)
		junk = true;
	else if (pct < 97)
		size = rnd_pct(rng, 50) ? 0xffffffffU : 2 * CMD_LEN;
	else
		size = rnd(rng);

	if (junk)
		size = ksz + 1 + rnd_below(rng, 64);
	c->in.info.size = size;
	c->size = size;
	if (size < ARG_MAX)
		memset(c->in.bytes + max_sz(size, 4), CANARY8,
		       ARG_MAX - max_sz(size, 4));
	if (junk)
		c->in.bytes[ksz + rnd_below(rng, size - ksz)] =
			1 + rnd_below(rng, 255);
	/* A flipped bit or three anywhere in the struct. */
	if (rnd_pct(rng, 8)) {
		unsigned int i, n = 1 + rnd_below(rng, 3);

		for (i = 0; i < n; i++)
			c->in.bytes[rnd_below(rng, ksz)] ^=
				1U << rnd_below(rng, 8);
		c->size = c->in.info.size;
	}
	/* REGISTER's outputs start as canaries so we see what was written. */
	if (c->built == C_REGISTER) {
		c->in.reg.handle = CANARY32;
		c->in.reg.error_index = CANARY32;
		c->in.reg.nr_pages = CANARY64;
	}
}

static unsigned long pick_cmd(struct fuzz_thread *t, struct call *c)
{
	/* Types the VFS handles itself (FIOCLEX, FIFREEZE, FIGETBSZ, ...). */
	static const unsigned char vfs_types[] = {
		0x00, 0x15, 'T', 'X', 'f', 0x94,
	};
	unsigned int *built = &c->built;
	__u64 *rng = &t->rng;
	__u32 pct = rnd_below(rng, 100);
	unsigned long cmd;
	unsigned int type, i;

	*built = rnd_below(rng, C_OTHER);
	if (live_count(t->f) >= LIVE_MAX - 16) {
		/* Too many handles: drop one. */
		*built = C_UNREGISTER;
		c->planned = true;
		return SVMBATCH_UNREGISTER;
	}
	if (pct < 88) {
		if (pct < 33)
			*built = C_REGISTER;
		else if (pct < 48)
			*built = C_QUERY;
		else if (pct < 64)
			*built = C_UNREGISTER;
		else if (pct < 76)
			*built = C_EXPORT;
		else if (pct < 80)
			*built = C_GET_INFO;
		return cmd_num[*built];
	}
	if (pct < 94) {		/* our type, any number, direction, size */
		return _IOC(rnd_below(rng, 4), SVMBATCH_TYPE,
			    rnd_pct(rng, 70) ?
			    SVMBATCH_CMD_BASE - 4 + rnd_below(rng, 13) :
			    rnd_below(rng, 256),
			    rnd_pct(rng, 50) ? cmd_ksz[*built] :
					       rnd_below(rng, 1U << 14));
	}
	if (pct < 97)
		cmd = _IO(rnd_below(rng, 256),
			  SVMBATCH_CMD_BASE + rnd_below(rng, C_OTHER));
	else
		cmd = (__u32)rnd(rng);
	type = _IOC_TYPE(cmd);
	for (i = 0; i < ARRAY_SIZE(vfs_types); i++) {
		if (type == vfs_types[i]) {
			cmd ^= 0x40UL << _IOC_TYPESHIFT;
			break;
		}
	}
	return cmd;
}

/* Where the argument goes; REGISTER's ranges may point at it. */
static void choose_place(struct fuzz_thread *t, struct call *c, bool keep)
{
	struct fuzz *f = t->f;
	__u64 *rng = &t->rng;
	__u32 ksz = cmd_ksz[c->built], pct = rnd_below(rng, 100);
	size_t off = 0;

	if (pct < 72)
		c->place = PL_OWN;
	else if (pct < 80)
		c->place = PL_OWN_ODD;
	else if (pct < 84)
		c->place = PL_OWN_EDGE;
	else if (pct < 86)
		c->place = PL_GUARD;
	else if (pct < 89)
		c->place = PL_RO;
	else if (pct < 93)
		c->place = PL_BAD;
	else if (pct < 97)
		c->place = keep ? PL_OWN : PL_WINDOW;
	else
		c->place = keep ? PL_OWN : PL_POOL;

	switch (c->place) {
	case PL_OWN:
		off = 8 * rnd_below(rng, 32);
		break;
	case PL_OWN_ODD:
		if (rnd_pct(rng, 50))
			off = 1 + rnd_below(rng, 255);
		else
			off = PAGE_SZ - 1 - rnd_below(rng, ksz);
		break;
	case PL_OWN_EDGE:
		off = CMD_LEN - 1 - rnd_below(rng, ksz + 8);
		break;
	case PL_GUARD:
		c->arg = t->cmd + CMD_LEN + rnd_below(rng, PAGE_SZ - 8);
		return;
	case PL_RO:
		c->arg = f->ro + RO_SLOT * c->built;
		if (rnd_pct(rng, 20))
			c->arg += rnd_below(rng, 64);
		return;
	case PL_BAD:
		c->arg = u64_ptr(bad_addr(f, rng));
		return;
	case PL_WINDOW:
		c->arg = f->window + rnd_below(rng, WINDOW_LEN - ARG_MAX);
		return;
	default:
		c->arg = f->pool + rnd_below(rng, POOL_LEN);
		return;
	}
	c->arg = t->cmd + off;
	c->avail = CMD_LEN - off;
	c->copied = min_sz(ARG_MAX, c->avail);
}

/* Put c->in where the call will find it, if we can write there. */
static void put_arg(struct fuzz_thread *t, struct call *c)
{
	size_t off = c->arg - t->cmd;

	switch (c->place) {
	case PL_OWN:
	case PL_OWN_ODD:
	case PL_OWN_EDGE:
		memcpy(c->arg, &c->in, c->copied);
		t->cmd_lo = min_sz(t->cmd_lo, off);
		t->cmd_hi = max_sz(t->cmd_hi, off + c->copied);
		break;
	case PL_RO:
		memcpy(&c->in, c->arg, sizeof(c->in));
		c->size = c->in.info.size;
		break;
	case PL_WINDOW:
		memcpy(c->arg, &c->in, ARG_MAX);
		break;
	default:
		break;
	}
}

static bool own_place(const struct call *c)
{
	return c->place <= PL_OWN_EDGE;
}

/* ------------------------------------------------------------- checking */

/* Append @prefix and @n bytes at @p in hex, 8 to a group, to @buf. */
static void hexdump(const unsigned char *p, size_t n, const char *prefix,
		    char *buf, size_t len)
{
	size_t i, used = strlen(buf);

	used += snprintf(buf + used, len - used, "%s", prefix);
	for (i = 0; i < n && used + 4 < len; i++)
		used += snprintf(buf + used, len - used, "%s%02x",
				 i % 8 ? "" : " ", p[i]);
}

static void describe(const struct call *c, char *buf, size_t len)
{
	const union fuzz_arg *a = &c->in;
	int n = 0;

	switch (c->built) {
	case C_REGISTER:
		n = snprintf(buf, len,
			     "flags 0x%x ranges 0x%llx (%s, %u built) nr_ranges %u range_size %u eventfd %d reserved 0x%x",
			     a->reg.flags, (unsigned long long)a->reg.ranges,
			     c->ranges, c->nbuilt, a->reg.nr_ranges,
			     a->reg.range_size, a->reg.eventfd,
			     a->reg.reserved);
		break;
	case C_UNREGISTER:
		n = snprintf(buf, len, "handle %u%s", a->unreg.handle,
			     c->planned ? " (live)" : "");
		break;
	case C_QUERY:
		n = snprintf(buf, len,
			     "handle %u flags 0x%x ranges 0x%llx (%s) ranges_cap %u range_size %u reserved 0x%x",
			     a->query.handle, a->query.flags,
			     (unsigned long long)a->query.ranges, c->ranges,
			     a->query.ranges_cap, a->query.range_size,
			     a->query.reserved);
		break;
	case C_EXPORT:
		n = snprintf(buf, len, "handle %u flags 0x%x", a->exp.handle,
			     a->exp.flags);
		break;
	default:
		n = snprintf(buf, len, "flags 0x%x", a->info.flags);
		break;
	}
	if (n < 0 || (size_t)n >= len || !own_place(c))
		return;
	/* The struct as placed and as the kernel left it. */
	hexdump(c->in.bytes, min_sz(c->copied, cmd_ksz[c->built]), "; in:",
		buf, len);
	hexdump(c->out.bytes, min_sz(c->copied, cmd_ksz[c->built]), "; out:",
		buf, len);
}

static void fail_call(struct fuzz_thread *t, const struct call *c, int ret,
		      int err, const char *why)
{
	struct fuzz *f = t->f;
	const char *name = errno_name(err);
	size_t len = sizeof(f->failure);
	char *buf = f->failure;
	int n;

	pthread_mutex_lock(&f->lock);
	if (f->failures++)
		goto out;
	n = snprintf(buf, len, "%s: thread %u call %lu (", why, t->idx,
		     t->calls);
	n += snprintf(buf + n, len - n, REPLAY_FMT "): ",
		      (unsigned long long)f->seed, f->calls, f->nthreads);
	n += snprintf(buf + n, len - n,
		      "ioctl(fd, 0x%08lx %s, 0x%llx [%s]) = %d, errno %d (%s); ",
		      c->cmd, cmd_name[c->ci],
		      (unsigned long long)ptr_u64(c->arg),
		      place_name[c->place], ret, ret ? err : 0,
		      ret ? (name ?: strerror(err)) : "none");
	n += snprintf(buf + n, len - n, "%s argument, size %u: ",
		      cmd_name[c->built], c->size);
	describe(c, buf + n, len - n);
out:
	pthread_mutex_unlock(&f->lock);
	stop_all(f);
}

/* May fault injection explain an EFAULT or ENOMEM? */
static bool injected(struct fuzz *f, int err)
{
	return __atomic_load_n(&f->fi_armed, __ATOMIC_RELAXED) &&
	       (err == EFAULT || err == ENOMEM);
}

/* Outputs of a call whose argument is in our own pages; false on failure. */
static bool check_own(struct fuzz_thread *t, struct call *c, int ret, int err)
{
	const struct svmbatch_register *reg = &c->out.reg;
	const struct svmbatch_query *q = &c->out.query;
	struct fuzz *f = t->f;
	size_t w;

	if (c->copied < sizeof(__u32) || c->ci == C_OTHER)
		return true;	/* "size" unreadable, or nothing to check */
	w = min_sz(c->size, cmd_ksz[c->ci]);
	if (w < c->copied && memcmp(c->in.bytes + w, c->out.bytes + w,
				    c->copied - w)) {
		fail_call(t, c, ret, err, "written past size");
		return false;
	}
	if (c->ci != c->built)
		return true;	/* outputs of a struct built for another */
	if (c->size < cmd_min[c->ci] &&
	    !(ret == -1 && (err == EINVAL || injected(f, err)))) {
		fail_call(t, c, ret, err, "size too small, expected EINVAL");
		return false;
	}
	if (!ret && c->size > c->avail) {
		fail_call(t, c, ret, err,
			  "success with a struct running into a guard page");
		return false;
	}
	if (ret) {
		if (c->ci == C_REGISTER && w >= 32 && c->avail >= 32 &&
		    ((reg->handle && reg->handle != CANARY32) ||
		     (reg->error_index != SVMBATCH_NO_INDEX &&
		      reg->error_index != CANARY32 &&
		      reg->error_index >= c->in.reg.nr_ranges))) {
			fail_call(t, c, ret, err,
				  "failed REGISTER wrote a handle or a bad error_index");
			return false;
		}
		if (c->ci == C_QUERY && err == EMSGSIZE &&
		    (!c->in.query.ranges ||
		     q->nr_ranges <= c->in.query.ranges_cap)) {
			fail_call(t, c, ret, err, "EMSGSIZE with room enough");
			return false;
		}
		return true;
	}
	switch (c->ci) {
	case C_GET_INFO:
		if (c->out.info.abi_version != SVMBATCH_ABI_VERSION ||
		    c->out.info.page_size != PAGE_SZ) {
			fail_call(t, c, ret, err, "bad GET_INFO result");
			return false;
		}
		break;
	case C_REGISTER:
		if (!reg->handle || reg->handle == CANARY32 ||
		    !reg->nr_pages || reg->nr_pages == CANARY64 ||
		    reg->error_index != SVMBATCH_NO_INDEX) {
			fail_call(t, c, ret, err, "bad REGISTER result");
			return false;
		}
		break;
	case C_QUERY:
		if (!q->nr_ranges || q->nr_pages < q->nr_ranges ||
		    (q->out_flags & ~SVMBATCH_QUERY_STALE) || q->reserved ||
		    q->handle != c->in.query.handle ||
		    (q->ranges && q->ranges_cap < q->nr_ranges)) {
			fail_call(t, c, ret, err, "bad QUERY result");
			return false;
		}
		t->stale_seen += !!(q->out_flags & SVMBATCH_QUERY_STALE);
		break;
	case C_EXPORT:
		if (c->out.exp.fd < 0 || !is_dmabuf(c->out.exp.fd)) {
			fail_call(t, c, ret, err,
				  "EXPORT_DMABUF gave no dma-buf fd");
			return false;
		}
		break;
	}
	return true;
}

static void check_call(struct fuzz_thread *t, struct call *c, int ret,
		       int err)
{
	struct fuzz *f = t->f;
	bool ok = true;

	if (ret != 0 && ret != -1) {
		fail_call(t, c, ret, err, "returned neither 0 nor -1");
		ok = false;
	} else if (ret && !errno_name(err)) {
		fail_call(t, c, ret, err, "errno not allowed");
		ok = false;
	} else if (c->ci == C_OTHER && !(ret && err == ENOTTY)) {
		fail_call(t, c, ret, err, "unknown command, expected ENOTTY");
		ok = false;
	} else if (!ret && (c->place == PL_GUARD || c->place == PL_BAD ||
			    (c->place == PL_RO && c->ci != C_UNREGISTER))) {
		fail_call(t, c, ret, err,
			  "success with an argument it cannot read or write");
		ok = false;
	} else if (own_place(c)) {
		ok = check_own(t, c, ret, err);
	}

	t->per_cmd[c->ci]++;
	t->errnos[ret && err < ERRNO_MAX ? err : ret ? ERRNO_MAX - 1 : 0]++;
	/*
	 * A handle taken out of live[] goes back unless this call dropped
	 * it or found it gone (another thread's UNREGISTER of a random or
	 * stale handle can drop it).
	 */
	if (c->planned &&
	    !(c->ci == C_UNREGISTER && own_place(c) &&
	      c->in.unreg.handle == c->taken && (!ret || err == ENOENT)))
		live_add(t, c->taken);
	if (ret)
		return;
	t->ok[c->ci]++;

	/* Keep the books whatever the checks said. */
	switch (c->ci) {
	case C_REGISTER:
		__atomic_add_fetch(&f->reg_ok, 1, __ATOMIC_RELAXED);
		if (own_place(c) && c->avail >= 28)
			live_add(t, c->out.reg.handle);
		break;
	case C_UNREGISTER:
		__atomic_add_fetch(&f->unreg_ok, 1, __ATOMIC_RELAXED);
		if (own_place(c) && c->built == C_UNREGISTER) {
			if (c->in.unreg.handle != c->taken)
				live_forget(f, c->in.unreg.handle);
			stale_add(t, c->in.unreg.handle);
		}
		break;
	case C_EXPORT:
		t->exported++;
		if (!ok || !own_place(c) || c->out.exp.fd < 0)
			break;
		if (t->nr_dmabuf == DMABUF_KEEP) {
			close(t->dmabuf[0]);
			memmove(t->dmabuf, t->dmabuf + 1,
				sizeof(int) * (DMABUF_KEEP - 1));
			t->nr_dmabuf--;
		}
		if (t->exported & 1)
			t->dmabuf[t->nr_dmabuf++] = c->out.exp.fd;
		else
			close(c->out.exp.fd);
		break;
	}
}

/* --------------------------------------------------------------- threads */

static void fuzz_one(struct fuzz_thread *t)
{
	struct fuzz *f = t->f;
	struct call c;
	int ret, err;

	memset(&c, 0, sizeof(c));
	c.cmd = pick_cmd(t, &c);
	c.ci = cmd_index(c.cmd);
	/* Handles and fds come back in the argument: it must stay ours. */
	choose_place(t, &c, c.ci == C_REGISTER || c.ci == C_EXPORT);
	build_arg(t, &c);
	set_size(t, &c);
	put_arg(t, &c);

	ret = ioctl(f->fd, c.cmd, c.arg);
	err = errno;
	if (own_place(&c))
		memcpy(&c.out, c.arg, c.copied);
	check_call(t, &c, ret, err);

	/* Leave our pages all zero again. */
	if (t->cmd_hi > t->cmd_lo)
		memset(t->cmd + t->cmd_lo, 0, t->cmd_hi - t->cmd_lo);
	t->cmd_lo = CMD_LEN;
	t->cmd_hi = 0;
	if (t->ranges_hi)
		memset(t->ranges, 0, min_sz(t->ranges_hi, RANGES_LEN));
	t->ranges_hi = 0;
}

static bool past_deadline(struct fuzz *f)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > f->deadline.tv_sec ||
	       (now.tv_sec == f->deadline.tv_sec &&
		now.tv_nsec >= f->deadline.tv_nsec);
}

static void *fuzz_thread(void *arg)
{
	struct fuzz_thread *t = arg;
	struct fuzz *f = t->f;
	__u32 pct;

	t->cmd_lo = CMD_LEN;
	pthread_barrier_wait(&f->start);
	for (t->calls = 0; t->calls < t->ncalls && !stopped(f); t->calls++) {
		if (!(t->calls % 64) && past_deadline(f))
			break;
		/*
		 * Now and then make one of the next allocations or copies
		 * fail, or the next pin attempts look raced.
		 */
		pct = rnd_below(&t->rng, 1000);
		if (f->fault_injection && pct < 3) {
			__atomic_store_n(&f->fi_armed, 1, __ATOMIC_RELAXED);
			fail_nth_set(1 + rnd_below(&t->rng, 64));
		} else if (f->fake_inval && pct < 6) {
			fake_invalidations_set(1 + rnd_below(&t->rng, 4));
		}
		fuzz_one(t);
	}
	return NULL;
}

/* The volatile range array: gone, back with new ranges, read-only. */
static void vol_cycle(struct fuzz *f, __u64 *rng)
{
	struct svmbatch_range *r = (struct svmbatch_range *)f->vol;
	unsigned int i, n, cell, s;

	munmap(f->vol, VOL_LEN);
	if (rnd_pct(rng, 25))
		return;		/* a hole until the next cycle */
	if (mmap(f->vol, VOL_LEN, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
		return;
	n = 1 + rnd_below(rng, NR_CELLS / 4);
	for (i = 0; i < n; i++) {
		cell = 4 * i + rnd_below(rng, 4);
		s = rnd_below(rng, CELL_PAGES);
		r[i] = mkrange(f->pool + (cell * CELL_PAGES + s) * PAGE_SZ,
			       (1 + rnd_below(rng, CELL_PAGES - s)) * PAGE_SZ,
			       rnd_pct(rng, 30) ? SVMBATCH_RANGE_READ_ONLY : 0);
	}
	if (rnd_pct(rng, 15))
		mprotect(f->vol, VOL_LEN, PROT_READ);
}

static void fail_msg(struct fuzz *f, const char *msg, int val)
{
	pthread_mutex_lock(&f->lock);
	if (!f->failures++)
		snprintf(f->failure, sizeof(f->failure), "%s: %d", msg, val);
	pthread_mutex_unlock(&f->lock);
	stop_all(f);
}

/*
 * A child shares the fd and gets copies of the pinned pages; its commands
 * must give EPERM, also UNREGISTER of a live handle, and its exit must
 * leave the registrations alone.
 */
static void fork_child(struct fuzz *f, __u64 r)
{
	struct svmbatch_info info = { .size = sizeof(info) };
	struct svmbatch_unregister un = { .size = sizeof(un) };
	int status;
	pid_t pid;

	live_pick(f, r, false, &un.handle);
	pid = fork();
	if (!pid) {
		if (ioctl(f->fd, SVMBATCH_GET_INFO, &info) != -1 ||
		    errno != EPERM)
			_exit(1);
		if (ioctl(f->fd, SVMBATCH_UNREGISTER, &un) != -1 ||
		    errno != EPERM)
			_exit(2);
		_exit(0);
	}
	if (pid < 0)
		return;
	if (waitpid(pid, &status, 0) != pid)
		fail_msg(f, "fork: waitpid", errno);
	else if (!WIFEXITED(status) || WEXITSTATUS(status))
		fail_msg(f, "fork: a child's command did not give EPERM (1 GET_INFO, 2 UNREGISTER)",
			 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static void mutate(struct fuzz *f, __u64 *rng)
{
	unsigned int a = rnd_below(rng, NR_CELLS);
	unsigned int n = 1 + rnd_below(rng, 4);
	char *p = f->pool + a * CELL_LEN;
	char *q = f->pool + rnd_below(rng, NR_CELLS) * CELL_LEN;
	const int rw = PROT_READ | PROT_WRITE;
	const int anon = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
	size_t len;

	if (a + n > NR_CELLS)
		n = NR_CELLS - a;
	len = n * CELL_LEN;
	if (rnd_pct(rng, 20))
		vol_cycle(f, rng);

	switch (rnd_below(rng, 100)) {
	case 0 ... 34:		/* back to plain populated memory */
		mmap(p, len, rw, anon | MAP_POPULATE, -1, 0);
		break;
	case 35 ... 46:
		madvise(p, len, MADV_DONTNEED);
		break;
	case 47 ... 49:
		madvise(p, len, MADV_FREE);
		break;
	case 50 ... 58:
		munmap(p, len);
		break;
	case 59 ... 66:
		mprotect(p, len, PROT_READ);
		break;
	case 67 ... 70:
		mprotect(p, len, PROT_NONE);
		break;
	case 71 ... 74:
		mprotect(p, len, rw);
		break;
	case 75 ... 82:		/* move one cell onto another */
		mremap(p, CELL_LEN, CELL_LEN, MREMAP_MAYMOVE | MREMAP_FIXED, q);
		break;
	case 83 ... 86:		/* shrink in place */
		mremap(p, len, len / 2, 0);
		break;
	case 87 ... 93:		/* shared memfd pages over it */
		mmap(p, min_sz(len, MEMFD_PAGES * PAGE_SZ), rw,
		     MAP_SHARED | MAP_FIXED, f->memfd, 0);
		break;
	case 94 ... 96:		/* the whole pool anew, as huge pages */
		mmap(f->pool, POOL_LEN, rw, anon, -1, 0);
		madvise(f->pool, POOL_LEN, MADV_HUGEPAGE);
		break;
	case 97 ... 98:		/* fault pages back in */
		mmap(p, len, rw, anon, -1, 0);
		madvise(p, len, MADV_POPULATE_WRITE);
		break;
	default:
		fork_child(f, rnd(rng));
		break;
	}
}

static void *mutator_thread(void *arg)
{
	struct fuzz *f = arg;
	__u64 rng = rnd_seed(f->seed, f->nthreads);

	pthread_barrier_wait(&f->start);
	while (!stopped(f)) {
		mutate(f, &rng);
		__atomic_add_fetch(&f->mutations, 1, __ATOMIC_RELAXED);
	}
	mmap(f->pool, POOL_LEN, PROT_READ | PROT_WRITE,
	     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	mmap(f->vol, VOL_LEN, PROT_READ | PROT_WRITE,
	     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	return NULL;
}

/* ---------------------------------------------------------------- setup */

/* Map @len bytes at @addr inside the arena (MAP_FIXED), or fail. */
static int arena_map(char *addr, size_t len, int prot, int flags, int fd)
{
	void *p = mmap(addr, len, prot, flags | MAP_FIXED, fd, 0);

	return p == MAP_FAILED ? -1 : 0;
}

static int arena_setup(struct fuzz *f)
{
	const int anon = MAP_PRIVATE | MAP_ANONYMOUS;
	const int rw = PROT_READ | PROT_WRITE;
	struct svmbatch_range *r;
	const char *dir = getenv(WRITEBACK_DIR_ENV);
	size_t head;
	char *p;
	int i;

	head = PAGE_SZ + f->nthreads * BLOCK_LEN +
	       (RO_PAGES + MEMFD_PAGES + FILE_PAGES + 3) * PAGE_SZ;
	f->arena_len = head + SZ_2M + POOL_LEN + VOL_LEN + PAGE_SZ +
		       WINDOW_LEN + TAIL_BYTES;
	f->arena = mmap(NULL, f->arena_len, PROT_NONE,
			anon | MAP_NORESERVE, -1, 0);
	if (f->arena == MAP_FAILED) {
		f->arena = NULL;
		return -1;
	}
	p = f->arena + PAGE_SZ;
	f->blocks = p;
	for (i = 0; i < (int)f->nthreads; i++) {
		char *b = p + i * BLOCK_LEN;

		if (arena_map(b, CMD_LEN, rw, anon, -1) ||
		    arena_map(b + CMD_LEN + PAGE_SZ, RANGES_LEN, rw, anon, -1))
			return -1;
	}
	p += f->nthreads * BLOCK_LEN;

	/* Valid structs and ranges, read-only: RO_SLOT bytes per command. */
	f->ro = p;
	if (arena_map(p, RO_PAGES * PAGE_SZ, rw, anon, -1))
		return -1;
	p += (RO_PAGES + 1) * PAGE_SZ;
	f->memfd_map = p;
	p += MEMFD_PAGES * PAGE_SZ;
	f->file_map = p;
	p += (FILE_PAGES + 1) * PAGE_SZ;
	f->pool = (char *)(((uintptr_t)p + SZ_2M - 1) & ~(SZ_2M - 1));
	f->vol = f->pool + POOL_LEN;
	f->window = f->vol + VOL_LEN + PAGE_SZ;

	r = (struct svmbatch_range *)(f->ro + PAGE_SZ);
	for (i = 0; i < 8; i++)
		r[i] = mkrange(f->pool + 8 * i * CELL_LEN, 2 * PAGE_SZ,
			       i & 1 ? SVMBATCH_RANGE_READ_ONLY : 0);
	*(struct svmbatch_info *)(f->ro + RO_SLOT * C_GET_INFO) =
		(struct svmbatch_info){ .size = sizeof(struct svmbatch_info) };
	*(struct svmbatch_register *)(f->ro + RO_SLOT * C_REGISTER) =
		(struct svmbatch_register){
			.size = sizeof(struct svmbatch_register),
			.ranges = ptr_u64(r), .nr_ranges = 8,
			.range_size = RANGE_SZ,
		};
	*(struct svmbatch_unregister *)(f->ro + RO_SLOT * C_UNREGISTER) =
		(struct svmbatch_unregister){
			.size = sizeof(struct svmbatch_unregister),
			.handle = 1,
		};
	*(struct svmbatch_query *)(f->ro + RO_SLOT * C_QUERY) =
		(struct svmbatch_query){
			.size = sizeof(struct svmbatch_query), .handle = 1,
			.range_size = RANGE_SZ,
		};
	*(struct svmbatch_export_dmabuf *)(f->ro + RO_SLOT * C_EXPORT) =
		(struct svmbatch_export_dmabuf){
			.size = sizeof(struct svmbatch_export_dmabuf),
			.flags = O_RDWR, .handle = 1,
		};
	if (mprotect(f->ro, RO_PAGES * PAGE_SZ, PROT_READ))
		return -1;

	f->memfd = memfd_create("svmbatch_fuzz", MFD_CLOEXEC);
	if (f->memfd < 0 || ftruncate(f->memfd, MEMFD_PAGES * PAGE_SZ) ||
	    arena_map(f->memfd_map, MEMFD_PAGES * PAGE_SZ, rw,
		      MAP_SHARED | MAP_POPULATE, f->memfd))
		return -1;

	/* Writable ext4 file pages, if the guest has them: EOPNOTSUPP. */
	f->filefd = -1;
	if (dir) {
		char path[256];

		snprintf(path, sizeof(path), "%s/svmbatch_fuzz.XXXXXX", dir);
		f->filefd = mkostemp(path, O_CLOEXEC);
		if (f->filefd >= 0) {
			unlink(path);
			if (ftruncate(f->filefd, FILE_PAGES * PAGE_SZ) ||
			    arena_map(f->file_map, FILE_PAGES * PAGE_SZ, rw,
				      MAP_SHARED | MAP_POPULATE, f->filefd))
				return -1;
		}
	}

	if (arena_map(f->pool, POOL_LEN, rw, anon | MAP_POPULATE, -1) ||
	    arena_map(f->vol, VOL_LEN, rw, anon, -1) ||
	    arena_map(f->window, WINDOW_LEN, rw, anon, -1))
		return -1;
	return 0;
}

FIXTURE(fuzz) {
	struct fuzz *f;
	struct fuzz_thread *t;
	struct svmbatch_snapshot before;
};

FIXTURE_SETUP(fuzz)
{
	bool debug = !access("/sys/kernel/debug/kmemleak", F_OK);
	struct fuzz *f;
	unsigned int i;

	if (access(SVMBATCH_DEV, F_OK))
		SKIP(return, SVMBATCH_SKIP_MSG);
	/* Before the fd exists: the end compares after it is closed. */
	snapshot_take(_metadata, -1, &self->before);

	f = calloc(1, sizeof(*f));
	ASSERT_NE(NULL, f);
	self->f = f;
	f->fd = -1;
	f->evfd = -1;
	f->memfd = -1;
	f->filefd = -1;
	f->seed = env_u64("SVMBATCH_FUZZ_SEED", FUZZ_SEED);
	f->calls = env_u64("SVMBATCH_FUZZ_CALLS", FUZZ_CALLS);
	f->nthreads = env_u64("SVMBATCH_FUZZ_THREADS", FUZZ_THREADS);
	f->seconds = env_u64("SVMBATCH_FUZZ_SECONDS",
			     debug ? FUZZ_SECONDS_DEBUG : FUZZ_SECONDS);
	ksft_print_msg("seed %llu\n", (unsigned long long)f->seed);
	if (!f->nthreads || f->nthreads > FUZZ_THREADS_MAX)
		f->nthreads = FUZZ_THREADS;
	if (!f->seconds || f->seconds > FUZZ_SECONDS_MAX)
		f->seconds = FUZZ_SECONDS_MAX;
	f->task_size = task_size();
	pthread_mutex_init(&f->lock, NULL);

	svmbatch_open_or_skip(f->fd);
	ASSERT_EQ(0, _test_cmd_get_info(f->fd, &f->info));
	f->fault_injection = have_fault_injection(f->fd);
	f->fake_inval = f->fault_injection &&
			!access(SVMBATCH_FAKE_INVAL, W_OK);
	f->evfd = eventfd(0, EFD_CLOEXEC);
	ASSERT_LE(0, f->evfd);
	ASSERT_EQ(0, arena_setup(f)) {
		TH_LOG("cannot set the memory up: %s", strerror(errno));
	}

	self->t = calloc(f->nthreads, sizeof(*self->t));
	ASSERT_NE(NULL, self->t);
	for (i = 0; i < f->nthreads; i++) {
		struct fuzz_thread *t = &self->t[i];

		t->f = f;
		t->idx = i;
		t->rng = rnd_seed(f->seed, i);
		t->ncalls = f->calls / f->nthreads +
			    (i < f->calls % f->nthreads);
		t->cmd = f->blocks + i * BLOCK_LEN;
		t->ranges = t->cmd + CMD_LEN + PAGE_SZ;
	}
}

FIXTURE_TEARDOWN(fuzz)
{
	struct fuzz *f = self->f;

	if (!f)
		return;
	if (f->fault_injection)
		fail_nth_set(0);
	if (f->fake_inval)
		fake_invalidations_set(0);
	if (f->fd >= 0)
		close(f->fd);
	if (f->evfd >= 0)
		close(f->evfd);
	if (f->memfd >= 0)
		close(f->memfd);
	if (f->filefd >= 0)
		close(f->filefd);
	if (f->arena)
		munmap(f->arena, f->arena_len);
	free(self->t);
	free(f);
}

static void print_summary(struct fuzz *f, struct fuzz_thread *threads,
			  double secs)
{
	unsigned long errnos[ERRNO_MAX] = { 0 }, per_cmd[NR_C] = { 0 };
	unsigned long ok[NR_C] = { 0 }, calls = 0, exported = 0, stale = 0;
	char line[1024];
	unsigned int i, j;
	int n;

	for (i = 0; i < f->nthreads; i++) {
		calls += threads[i].calls;
		exported += threads[i].exported;
		stale += threads[i].stale_seen;
		for (j = 0; j < ERRNO_MAX; j++)
			errnos[j] += threads[i].errnos[j];
		for (j = 0; j < NR_C; j++) {
			per_cmd[j] += threads[i].per_cmd[j];
			ok[j] += threads[i].ok[j];
		}
	}
	ksft_print_msg("%lu calls in %.1f s (%.0f/s), %u threads, seed %llu, %lu memory changes\n",
		       calls, secs, secs > 0 ? calls / secs : 0.0, f->nthreads,
		       (unsigned long long)f->seed, f->mutations);
	n = snprintf(line, sizeof(line), "results: ok %lu", errnos[0]);
	for (j = 1; j < ERRNO_MAX && n > 0 && (size_t)n < sizeof(line); j++) {
		const char *name = errno_name(j);

		if (!errnos[j])
			continue;
		if (name)
			n += snprintf(line + n, sizeof(line) - n, ", %s %lu",
				      name, errnos[j]);
		else
			n += snprintf(line + n, sizeof(line) - n,
				      ", errno %u %lu", j, errnos[j]);
	}
	ksft_print_msg("%s\n", line);
	n = snprintf(line, sizeof(line), "successes/calls:");
	for (j = 0; j < NR_C && n > 0 && (size_t)n < sizeof(line); j++)
		n += snprintf(line + n, sizeof(line) - n, " %s %lu/%lu",
			      cmd_name[j], ok[j], per_cmd[j]);
	ksft_print_msg("%s; %lu dma-bufs exported, %lu QUERYs saw STALE\n",
		       line, exported, stale);
	fflush(stdout);
}

TEST_F_TIMEOUT(fuzz, ioctls, FUZZ_TIMEOUT)
{
	struct fuzz *f = self->f;
	struct svmbatch_snapshot s, after;
	struct timespec t0, t1;
	unsigned long at_end = 0, swept = 0;
	unsigned int i;
	pthread_t mut;
	double secs;
	__u32 h;

	ksft_print_msg("%lu calls, %u threads, budget %u s%s\n", f->calls,
		       f->nthreads, f->seconds,
		       f->fake_inval ? ", fault injection, fake invalidations" :
		       f->fault_injection ? ", fault injection" : "");
	ksft_print_msg("replay with " REPLAY_FMT "\n",
		       (unsigned long long)f->seed, f->calls, f->nthreads);
	fflush(stdout);
	ASSERT_EQ(0, pthread_barrier_init(&f->start, NULL, f->nthreads + 2));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	f->deadline = t0;
	f->deadline.tv_sec += f->seconds;
	for (i = 0; i < f->nthreads; i++)
		ASSERT_EQ(0, pthread_create(&self->t[i].tid, NULL, fuzz_thread,
					    &self->t[i]));
	ASSERT_EQ(0, pthread_create(&mut, NULL, mutator_thread, f));
	pthread_barrier_wait(&f->start);
	for (i = 0; i < f->nthreads; i++)
		pthread_join(self->t[i].tid, NULL);
	stop_all(f);
	pthread_join(mut, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	if (f->fault_injection)
		fail_nth_set(0);
	if (f->fake_inval)
		fake_invalidations_set(0);
	print_summary(f, self->t, secs);

	EXPECT_EQ(0, f->failures) {
		TH_LOG("%d failed calls; the first: %s", f->failures,
		       f->failure);
	}
	for (i = 0; i < f->nthreads; i++)
		while (self->t[i].nr_dmabuf)
			close(self->t[i].dmabuf[--self->t[i].nr_dmabuf]);
	/* No fd a failed EXPORT_DMABUF installed, none we lost. */
	EXPECT_EQ(0U, close_all_dmabufs());

	/* Each successful REGISTER made one handle, each UNREGISTER dropped one. */
	ASSERT_EQ(0, read_fdinfo(f->fd, &s));
	EXPECT_EQ(f->reg_ok - f->unreg_ok, s.fd_registrations) {
		TH_LOG("%lu REGISTERs and %lu UNREGISTERs succeeded",
		       f->reg_ok, f->unreg_ok);
	}
	while (live_pick(f, 0, true, &h)) {
		if (!_test_unregister(f->fd, h))
			at_end++;
		else
			EXPECT_EQ(ENOENT, errno);
	}
	/* Handles whose UNREGISTER raced with another one's: find them. */
	ASSERT_EQ(0, read_fdinfo(f->fd, &s));
	for (h = 1; s.fd_registrations && h <= f->max_handle + 64; h++)
		swept += !_test_unregister(f->fd, h);
	ksft_print_msg("handles: %lu made, %lu dropped in the run, %lu at the end, %lu swept\n",
		       f->reg_ok, f->unreg_ok, at_end, swept);
	ASSERT_EQ(0, read_fdinfo(f->fd, &s));
	EXPECT_EQ(0ULL, s.fd_registrations);
	EXPECT_EQ(0ULL, s.fd_pinned_pages);

	close(f->fd);
	f->fd = -1;
	/* Releases may finish just after close(): give them a moment. */
	for (i = 0; i < 50; i++) {
		snapshot_take(_metadata, -1, &after);
		if (snapshot_same(NULL, &self->before, &after))
			break;
		usleep(100 * 1000);
	}
	ASSERT_SNAPSHOT_EQ(&self->before, &after);
}

TEST_HARNESS_MAIN
