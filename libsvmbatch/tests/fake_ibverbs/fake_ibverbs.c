// SPDX-License-Identifier: MIT
/*
 * A FAKE libibverbs (see fake_ibverbs.h), built on rdma-core's real header
 * so that the structures are the ones the backend reads.  Not thread-safe:
 * the tests call it from one thread.
 */
#include "fake_ibverbs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

/* verbs.h wraps these in macros; the fake defines the functions. */
#undef ibv_reg_mr
#undef ibv_get_device_list

#define FAKE_API  __attribute__((visibility("default")))
#define MAX_CALLS 4096

static struct ibv_device device = {.name = "fake0"};
static struct ibv_context context = {.device = &device};
static struct ibv_pd pd = {.context = &context, .handle = 1};

static uint64_t max_mr_size;
static int query_err;
static long fail_at;
static int fail_err;
static int dmabuf_supported;
static int live;
static uint32_t next_key;
static struct fake_ibv_call calls[MAX_CALLS];
static size_t ncalls;

FAKE_API void fake_ibv_reset(void)
{
	max_mr_size = 1ULL << 40;
	query_err = 0;
	fail_at = -1;
	fail_err = 0;
	dmabuf_supported = 0;
	ncalls = 0;
	next_key = 0x100;
}

__attribute__((constructor)) static void fake_ibv_init(void)
{
	fake_ibv_reset();
}

FAKE_API struct ibv_pd *fake_ibv_pd(void)
{
	return &pd;
}

FAKE_API void fake_ibv_set_max_mr_size(uint64_t bytes)
{
	max_mr_size = bytes;
}

FAKE_API void fake_ibv_fail_query(int err)
{
	query_err = err;
}

FAKE_API void fake_ibv_fail_registration(int nth, int err)
{
	fail_at = (long)ncalls + nth;
	fail_err = err;
}

FAKE_API void fake_ibv_set_dmabuf_supported(int supported)
{
	dmabuf_supported = supported;
}

FAKE_API int fake_ibv_live_regions(void)
{
	return live;
}

FAKE_API size_t fake_ibv_calls(void)
{
	return ncalls;
}

FAKE_API struct fake_ibv_call fake_ibv_call_at(size_t i)
{
	struct fake_ibv_call none = {0};

	return i < ncalls ? calls[i] : none;
}

/* Record a call; NULL with errno set where it is to fail. */
static struct ibv_mr *new_region(struct ibv_pd *p, struct fake_ibv_call call)
{
	struct ibv_mr *mr;
	long n = (long)ncalls;

	if (ncalls < MAX_CALLS)
		calls[ncalls++] = call;
	if (p != &pd || !call.len) {
		errno = EINVAL;
		return NULL;
	}
	if (n == fail_at) {
		errno = fail_err;
		return NULL;
	}
	if (call.len > max_mr_size) {
		errno = EINVAL;
		return NULL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	mr->context = &context;
	mr->pd = p;
	mr->addr = (void *)(uintptr_t)(call.dmabuf ? call.iova : call.addr);
	mr->length = call.len;
	mr->lkey = next_key++;
	mr->rkey = mr->lkey | 0x10000;
	live++;
	return mr;
}

FAKE_API int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	if (ctx != &context)
		return EINVAL;
	if (query_err)
		return query_err;
	memset(attr, 0, sizeof(*attr));
	attr->max_mr_size = max_mr_size;
	return 0;
}

FAKE_API struct ibv_mr *ibv_reg_mr(struct ibv_pd *p, void *addr, size_t length, int access)
{
	struct fake_ibv_call call = {0, (uintptr_t)addr, length, 0, -1, access};

	return new_region(p, call);
}

FAKE_API struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *p, uint64_t offset, size_t length,
					  uint64_t iova, int fd, int access)
{
	struct fake_ibv_call call = {1, offset, length, iova, fd, access};

	/* Like rdma-core for a provider without the verb: no syscall. */
	if (!dmabuf_supported) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (fcntl(fd, F_GETFD) < 0) {
		errno = EBADF;
		return NULL;
	}
	return new_region(p, call);
}

FAKE_API int ibv_dereg_mr(struct ibv_mr *mr)
{
	if (!mr)
		return EINVAL;
	live--;
	free(mr);
	return 0;
}

FAKE_API struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list = calloc(2, sizeof(*list));

	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = &device;
	if (num_devices)
		*num_devices = 1;
	return list;
}

FAKE_API void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

FAKE_API const char *ibv_get_device_name(struct ibv_device *dev)
{
	return dev->name;
}

FAKE_API struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	if (dev != &device) {
		errno = ENODEV;
		return NULL;
	}
	return &context;
}

FAKE_API int ibv_close_device(struct ibv_context *ctx)
{
	return ctx == &context ? 0 : EINVAL;
}

FAKE_API struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	if (ctx != &context) {
		errno = EINVAL;
		return NULL;
	}
	return &pd;
}

FAKE_API int ibv_dealloc_pd(struct ibv_pd *p)
{
	return p == &pd ? 0 : EINVAL;
}
