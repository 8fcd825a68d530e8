/* SPDX-License-Identifier: MIT */
/*
 * svmbatch C API: a thin layer over the C++ library for HIP/C programs and
 * language bindings.  Every function returning int returns 0 or a negative
 * errno (as liburing does) and never throws.  Each of them first clears
 * this thread's message, so svmbatch_last_error() describes the latest
 * int-returning call on this thread: "" after a success.  Where a caller
 * buffer is to blame, its index is stored in *failed_index
 * (SVMBATCH_LIB_NO_INDEX otherwise, success included; failed_index may be
 * NULL).  NULL arguments and unknown enum values give -EINVAL; a failure
 * that is not the library's own error is -ENOMEM (out of memory) or -EIO
 * (the message says so).  The _close/_destroy functions accept NULL.
 */
#ifndef SVMBATCH_CAPI_H
#define SVMBATCH_CAPI_H

/* A C header: C++'s modernize advice does not apply. */
/* NOLINTBEGIN(modernize-deprecated-headers,modernize-use-using) */
#include <stddef.h>
#include <stdint.h>

#include <svmbatch/api.h>
#include <svmbatch/gpu_io/ring.h>

#ifdef __cplusplus
extern "C" {
#endif

struct io_uring;
struct ibv_pd;
struct ibv_mr;

typedef struct svmbatch_ctx svmbatch_ctx;
typedef struct svmbatch_reg svmbatch_reg;
typedef struct svmbatch_fixed svmbatch_fixed;
typedef struct svmbatch_rdma svmbatch_rdma;
typedef struct svmbatch_io_loop svmbatch_io_loop;

#define SVMBATCH_LIB_NO_INDEX ((size_t)-1)

enum svmbatch_mode {
	SVMBATCH_MODE_AUTO = 0,
	SVMBATCH_MODE_KERNEL = 1,
	SVMBATCH_MODE_USERSPACE = 2,
};

enum svmbatch_access {
	SVMBATCH_ACCESS_READ_WRITE = 0,
	SVMBATCH_ACCESS_READ_ONLY = 1,
};

struct svmbatch_buffer {
	void *ptr;
	size_t len;
	enum svmbatch_access access;
};

struct svmbatch_ctx_info {
	enum svmbatch_mode mode; /* KERNEL or USERSPACE, never AUTO */
	uint32_t abi_version; /* 0 in userspace mode */
	uint32_t max_ranges;
	uint32_t max_registrations;
	uint64_t page_size;
	uint64_t features; /* SVMBATCH_FEATURE_* of <linux/svmbatch.h> */
	uint64_t max_range_bytes;
};

struct svmbatch_reg_info {
	uint32_t handle; /* 0 in userspace mode */
	size_t nr_buffers;
	size_t nr_ranges; /* after merging */
	uint64_t pages;
	uint64_t pinned_pages; /* 0 in userspace mode */
};

struct svmbatch_fixed_options {
	int use_window; /* 0: register the ring's whole table */
	unsigned int window_first;
	unsigned int window_size; /* 0: up to the end of the table */
};

struct svmbatch_fixed_slice {
	unsigned int index;
	void *addr;
	size_t len;
};

/* svmbatch_reg_options.flags */
#define SVMBATCH_REG_NOTIFY_STALE (1U << 0) /* a stale eventfd: svmbatch_reg_get_stale_fd */
/* Userspace mode: check the mappings, leave faulting in to the GPU runtime. */
#define SVMBATCH_REG_NO_PREFAULT  (1U << 1)

struct svmbatch_reg_options {
	unsigned int flags; /* SVMBATCH_REG_* */
};

enum svmbatch_rdma_path {
	SVMBATCH_RDMA_AUTO = 0, /* dma-buf where it works, else per range */
	SVMBATCH_RDMA_DMABUF = 1, /* ibv_reg_dmabuf_mr: keys by dma-buf offset */
	SVMBATCH_RDMA_PER_RANGE = 2, /* ibv_reg_mr per range: keys by address */
};

struct svmbatch_rdma_options {
	enum svmbatch_rdma_path path;
	uint64_t max_mr_bytes; /* 0: the device's max_mr_size */
	const char *library; /* NULL: libibverbs.so.1 */
};

/* What a work request names for a caller buffer. */
struct svmbatch_rdma_key {
	uint64_t addr;
	uint32_t lkey;
	uint32_t rkey;
};

struct svmbatch_rdma_info {
	enum svmbatch_rdma_path path; /* DMABUF or PER_RANGE, never AUTO */
	size_t nr_buffers;
	size_t nr_regions;
	const char *fallback_reason; /* "" if none; valid while the handle lives */
};

/* An IoLoop's options (svmbatch::IoLoopOptions); 0 takes the default. */
struct svmbatch_io_loop_options {
	uint32_t slots; /* power of two >= 32; 1024 */
	uint32_t io_threads; /* the I/O threads; the CPUs less one, at most 16 */
	uint32_t max_batch; /* 256 */
	uint32_t max_in_flight; /* 8192 */
	uint32_t spin_us; /* 200 */
	uint32_t park_us; /* 50 */
};

struct svmbatch_io_loop_stats {
	uint64_t requests, completed, failed, bytes, batches, deferred, parks, undelivered;
};

/* A CPU producer's completion (svmbatch_io_wait). */
struct svmbatch_io_done {
	int32_t status; /* 0 or -errno (io_ring.h) */
	uint32_t reserved;
	uint64_t bytes;
	uint64_t tag;
};

/* Contexts: device is NULL for /dev/svmbatch. */
SVMBATCH_API int svmbatch_ctx_open(enum svmbatch_mode mode, const char *device, svmbatch_ctx **ctx);
SVMBATCH_API void svmbatch_ctx_close(svmbatch_ctx *ctx);
SVMBATCH_API int svmbatch_ctx_get_info(const svmbatch_ctx *ctx, struct svmbatch_ctx_info *info);

/* Registrations: all buffers or none. */
SVMBATCH_API int svmbatch_reg_create(svmbatch_ctx *ctx, const struct svmbatch_buffer *buffers,
				     size_t nr_buffers, svmbatch_reg **reg, size_t *failed_index);
/* The same with options (NULL: none). */
SVMBATCH_API int svmbatch_reg_create_with(svmbatch_ctx *ctx, const struct svmbatch_buffer *buffers,
					  size_t nr_buffers,
					  const struct svmbatch_reg_options *options,
					  svmbatch_reg **reg, size_t *failed_index);
SVMBATCH_API void svmbatch_reg_destroy(svmbatch_reg *reg);
SVMBATCH_API int svmbatch_reg_get_info(const svmbatch_reg *reg, struct svmbatch_reg_info *info);
/*
 * *fd: the eventfd (non-blocking, owned by reg) that the module signals
 * once when reg goes stale; -1 without SVMBATCH_REG_NOTIFY_STALE.
 */
SVMBATCH_API int svmbatch_reg_get_stale_fd(const svmbatch_reg *reg, int *fd);

/*
 * RDMA memory regions of a registration in the caller's protection
 * domain (Documentation/rdma.rst): all or nothing, none longer than the
 * device's max_mr_size; options may be NULL; access is IBV_ACCESS_*.
 * -EOPNOTSUPP from a library built without RDMA.  Independent of reg's
 * lifetime; destroy before the protection domain.
 */
SVMBATCH_API int svmbatch_rdma_create(const svmbatch_reg *reg, struct ibv_pd *pd, int access,
				      const struct svmbatch_rdma_options *options,
				      svmbatch_rdma **rdma, size_t *failed_index);
/* Caller buffer @buffer's key; -ERANGE past the end. */
SVMBATCH_API int svmbatch_rdma_get_key(const svmbatch_rdma *rdma, size_t buffer,
				       struct svmbatch_rdma_key *key);
SVMBATCH_API int svmbatch_rdma_get_info(const svmbatch_rdma *rdma, struct svmbatch_rdma_info *info);
SVMBATCH_API void svmbatch_rdma_destroy(svmbatch_rdma *rdma);

/*
 * GPU-driven I/O (Documentation/gpu_io.rst): a pump thread that services
 * the request ring with READ_FIXED into, and WRITE_FIXED from, reg's
 * buffers.  options may be NULL.  ctx and reg must outlive the loop.  The
 * ring is host memory (svmbatch_io_loop_get_ring); a program maps it for
 * its GPU itself (cudaHostRegister, hipHostRegister) and asks
 * svmbatch_io_loop_get_queue for the queue at the device address it got
 * (0: host pointers).
 */
SVMBATCH_API int svmbatch_io_loop_create(svmbatch_ctx *ctx, const svmbatch_reg *reg,
					 const struct svmbatch_io_loop_options *options,
					 svmbatch_io_loop **loop);
/* *index: what requests name the file by.  The loop does not own fd. */
SVMBATCH_API int svmbatch_io_loop_add_file(svmbatch_io_loop *loop, int fd, uint32_t *index);
SVMBATCH_API int svmbatch_io_loop_get_ring(const svmbatch_io_loop *loop, void **addr,
					   size_t *bytes);
SVMBATCH_API int svmbatch_io_loop_get_queue(const svmbatch_io_loop *loop, uint64_t device_address,
					    struct svmbatch_io_queue *queue);
/* Stop taking requests, complete what was published, end the pump. */
SVMBATCH_API int svmbatch_io_loop_stop(svmbatch_io_loop *loop, uint32_t drain_ms);
SVMBATCH_API int svmbatch_io_loop_get_stats(const svmbatch_io_loop *loop,
					    struct svmbatch_io_loop_stats *stats);
SVMBATCH_API void svmbatch_io_loop_destroy(svmbatch_io_loop *loop);
/*
 * CPU producers of a queue (host pointers): svmbatch_io_read (file ->
 * buffer) and svmbatch_io_write (buffer -> file; the bytes in place
 * before the call, until the wait returned) return the ticket, or
 * -ESHUTDOWN once the loop is closed; svmbatch_io_wait blocks for the
 * ticket's completion (wait for tickets in the order taken).
 */
SVMBATCH_API int64_t svmbatch_io_read(const struct svmbatch_io_queue *queue, uint32_t file,
				      uint64_t file_offset, uint64_t length, uint32_t buffer,
				      uint64_t buffer_offset, uint64_t tag);
SVMBATCH_API int64_t svmbatch_io_write(const struct svmbatch_io_queue *queue, uint32_t file,
				       uint64_t file_offset, uint64_t length, uint32_t buffer,
				       uint64_t buffer_offset, uint64_t tag);
SVMBATCH_API int svmbatch_io_wait(const struct svmbatch_io_queue *queue, int64_t ticket,
				  struct svmbatch_io_done *done);

/* io_uring fixed buffers; options may be NULL.  Destroy before the ring. */
SVMBATCH_API int svmbatch_fixed_create(const svmbatch_reg *reg, struct io_uring *ring,
				       const struct svmbatch_fixed_options *options,
				       svmbatch_fixed **fixed);
/* The first slice of caller buffer @buffer; -ERANGE past the end. */
SVMBATCH_API int svmbatch_fixed_get(const svmbatch_fixed *fixed, size_t buffer,
				    struct svmbatch_fixed_slice *slice);
SVMBATCH_API void svmbatch_fixed_destroy(svmbatch_fixed *fixed);

/*
 * Arenas (Documentation/library.rst, "Arenas"): one mapping of pinned
 * memory registered once, from which blocks are carved with no driver
 * call.  A zeroed svmbatch_arena_options (or NULL) asks for THP pages, no
 * NUMA binding, 256-byte alignment and one prefault thread per CPU (at
 * most 16).
 */
typedef struct svmbatch_arena svmbatch_arena;

enum svmbatch_arena_pages {
	SVMBATCH_ARENA_PAGES_THP = 0, /* transparent huge pages, best effort */
	SVMBATCH_ARENA_PAGES_SMALL = 1, /* the base page size */
	SVMBATCH_ARENA_PAGES_HUGETLB = 2, /* 2 MiB pages of vm.nr_hugepages */
};

/*
 * svmbatch_arena_options.flags.  SVMBATCH_ARENA_ASYNC returns once the
 * memory is mapped and prepares it in chunks on a background thread
 * (svmbatch_arena_wait): the first of chunk_bytes, each next twice the one
 * before (at most 64 GiB); no block crosses a chunk's end.  chunk_bytes is
 * read only with it, so a caller built before the member existed passes a
 * shorter struct safely.
 */
#define SVMBATCH_ARENA_BIND_NODE (1U << 0) /* mbind to numa_node */
#define SVMBATCH_ARENA_ASYNC	 (1U << 1) /* prepare in chunks, in the background */

struct svmbatch_arena_options {
	enum svmbatch_arena_pages pages;
	unsigned int flags; /* SVMBATCH_ARENA_* */
	int numa_node; /* with SVMBATCH_ARENA_BIND_NODE */
	unsigned int prefault_threads; /* 0: the CPUs, at most 16 */
	size_t alignment; /* a power of two; 0: 256 */
	size_t chunk_bytes; /* the first chunk, with SVMBATCH_ARENA_ASYNC; 0: 256 MiB */
};

struct svmbatch_arena_info {
	void *base; /* the mapping's first byte */
	size_t capacity; /* the bytes asked: what blocks are carved from */
	size_t mapped_bytes; /* mapped and registered */
	size_t used; /* taken by live blocks, each rounded to the alignment */
	size_t free_bytes; /* capacity - used */
	size_t largest_free; /* the largest block that can be allocated now */
	size_t live_blocks;
	size_t alignment;
	enum svmbatch_arena_pages pages;
	int numa_node; /* -1: unbound */
	uint64_t pages_registered; /* of its registration (its chunks prepared so far) */
	uint64_t pinned_pages; /* by the module: 0 in userspace mode */
};

/*
 * bytes > 0.  All or nothing: a failure leaves no mapping or pin behind.
 * With SVMBATCH_ARENA_ASYNC ctx must outlive the preparation (until
 * svmbatch_arena_wait returns or the arena is destroyed).
 */
SVMBATCH_API int svmbatch_arena_create(svmbatch_ctx *ctx, size_t bytes,
				       const struct svmbatch_arena_options *options,
				       svmbatch_arena **arena);
/*
 * Block until every chunk is prepared: 0, or the negative errno of the
 * chunk that failed (svmbatch_last_error names it), on every call.
 */
SVMBATCH_API int svmbatch_arena_wait(svmbatch_arena *arena);
/* 1 when every chunk is prepared, 0 while preparing or after a failure. */
SVMBATCH_API int svmbatch_arena_ready(const svmbatch_arena *arena);
/* Unregisters and unmaps: every block becomes invalid. */
SVMBATCH_API void svmbatch_arena_destroy(svmbatch_arena *arena);
/*
 * *block: bytes (0 counts as 1) aligned to the arena's alignment.  -ENOMEM
 * when no free block is large enough (the message says whether the arena
 * is full or fragmented; svmbatch_arena_get_info has the numbers).  Safe
 * from several threads at once, as is svmbatch_arena_free.  Waits for the
 * chunks the block covers; the error of a failed one if it needs it.
 */
SVMBATCH_API int svmbatch_arena_alloc(svmbatch_arena *arena, size_t bytes, void **block);
/* -EINVAL if block is not a live block of arena (NULL included). */
SVMBATCH_API int svmbatch_arena_free(svmbatch_arena *arena, void *block);
SVMBATCH_API int svmbatch_arena_get_info(const svmbatch_arena *arena,
					 struct svmbatch_arena_info *info);

/*
 * Extent readers (Documentation/library.rst, "ExtentReader"): extents of
 * files read into host memory, or into a CUDA device's, through a ring of
 * staging chunks registered (and mapped for the device) once, on every
 * core.  A zeroed svmbatch_extent_reader_options (or NULL) takes the
 * defaults.
 */
typedef struct svmbatch_extent_reader svmbatch_extent_reader;

struct svmbatch_extent_reader_options {
	size_t staging_bytes; /* the ring, at least two chunks; 0: 64 MiB */
	size_t chunk_bytes; /* a multiple of 4096; 0: 4 MiB */
	unsigned int threads; /* 0: the CPUs, at most 16 */
	unsigned int queue_depth; /* reads in flight per ring; 0: 32 */
	size_t max_io_bytes; /* the largest single read; 0: 1 MiB */
	size_t direct_alignment; /* O_DIRECT fds: reads on max(this, 4096); 0: 512 */
	const char *cuda_library; /* with a CUDA device; NULL: libcuda.so.1 */
};

/*
 * length bytes of fd at file_offset, to dst: a host address, or a device
 * address of a reader created for a CUDA device.  fd may be O_DIRECT.
 */
struct svmbatch_extent {
	int32_t fd;
	uint32_t reserved; /* 0 */
	uint64_t file_offset;
	uint64_t length;
	uint64_t dst;
};

/* svmbatch_extent_result.flags: status is that of queueing the device copy. */
#define SVMBATCH_EXTENT_COPY_FAILED (1U << 0)

struct svmbatch_extent_result {
	int32_t status; /* 0, or -errno: -ENODATA when the file ended first */
	uint32_t flags; /* SVMBATCH_EXTENT_* */
	uint64_t bytes; /* the bytes that arrived at dst */
};

/*
 * cuda_device -1: host destinations; else the staging is mapped for that
 * CUDA device (-EOPNOTSUPP from a library built without CUDA).
 */
SVMBATCH_API int svmbatch_extent_reader_create(svmbatch_ctx *ctx,
					       const struct svmbatch_extent_reader_options *options,
					       int cuda_device, svmbatch_extent_reader **reader);
/*
 * Read every extent to its dst; results[i] says how extent i ended.  With
 * a CUDA device the copies go on cuda_stream (a CUstream; 0: the legacy
 * default stream), and the call returns once they ended.  Invalid extents
 * are refused before anything is read, with *failed_index.  One thread at
 * a time per reader.
 */
SVMBATCH_API int svmbatch_extent_read(svmbatch_extent_reader *reader,
				      const struct svmbatch_extent *extents, size_t nr_extents,
				      uint64_t cuda_stream, struct svmbatch_extent_result *results,
				      size_t *failed_index);
SVMBATCH_API void svmbatch_extent_reader_destroy(svmbatch_extent_reader *reader);

/*
 * Page-cache residency of [offset, offset + length) of the regular file
 * open at fd (length 0: to the end of the file), in pages of page_size
 * bytes: by cachestat() where the kernel has it, else mmap() + mincore().
 */
enum svmbatch_residency_method {
	SVMBATCH_RESIDENCY_CACHESTAT = 1,
	SVMBATCH_RESIDENCY_MINCORE = 2,
};

struct svmbatch_file_residency {
	uint64_t resident_pages;
	uint64_t total_pages; /* of the range, clipped at the end of the file */
	uint64_t page_size;
	enum svmbatch_residency_method method;
};

SVMBATCH_API int svmbatch_file_get_residency(int fd, uint64_t offset, uint64_t length,
					     struct svmbatch_file_residency *residency);

/*
 * The names of libsvmbatch 0.1, before every function was named
 * svmbatch_<object>_<verb>: the same functions, still exported (the soname
 * stays libsvmbatch.so.1).  New code uses the names above.
 */
/* clang-format 14 does not settle on one layout for these. */
/* clang-format off */
SVMBATCH_API SVMBATCH_DEPRECATED("use svmbatch_reg_create")
int svmbatch_register(svmbatch_ctx *ctx, const struct svmbatch_buffer *buffers,
		      size_t nr_buffers, svmbatch_reg **reg, size_t *failed_index);
SVMBATCH_API SVMBATCH_DEPRECATED("use svmbatch_reg_destroy")
void svmbatch_unregister(svmbatch_reg *reg);
SVMBATCH_API SVMBATCH_DEPRECATED("use svmbatch_fixed_create")
int svmbatch_register_fixed(const svmbatch_reg *reg, struct io_uring *ring,
			    const struct svmbatch_fixed_options *options,
			    svmbatch_fixed **fixed);
SVMBATCH_API SVMBATCH_DEPRECATED("use svmbatch_fixed_destroy")
void svmbatch_unregister_fixed(svmbatch_fixed *fixed);
/* clang-format on */

/* The message of this thread's latest int-returning call; "" on success. */
SVMBATCH_API const char *svmbatch_last_error(void);

#ifdef __cplusplus
}
#endif

/* NOLINTEND(modernize-deprecated-headers,modernize-use-using) */
#endif /* SVMBATCH_CAPI_H */
