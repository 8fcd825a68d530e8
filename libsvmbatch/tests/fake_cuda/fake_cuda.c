// SPDX-License-Identifier: MIT
/*
 * The fake CUDA driver: see fake_cuda.h.  Registration is not thread-safe
 * (tests register from one thread); contexts are per thread, and streams,
 * events and copies may be used from any thread, as CudaCopyEngine does.
 */
#include "fake_cuda.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

enum {
	CU_OK = 0,
	CU_INVALID_VALUE = 1,
	CU_NOT_INITIALIZED = 3,
	CU_NO_DEVICE = 100,
	CU_INVALID_DEVICE = 101,
	CU_INVALID_CONTEXT = 201,
	CU_NOT_READY = 600,
	CU_ALREADY_REGISTERED = 712,
	CU_NOT_REGISTERED = 713
};
enum { MEM_HOST = 1, MEM_DEVICE = 2, MEM_UNIFIED = 4 };
enum { KIND_REGISTERED, KIND_HOST_ALLOC, KIND_MANAGED, KIND_DEVICE };
enum { MAX_BLOCKS = 65536 };

struct block {
	uintptr_t start, end;
	int kind;
};

static struct block blocks[MAX_BLOCKS];
static int register_calls;
static int memory_type_calls;
static size_t largest_register;
static int nr_blocks;
static int nr_devices = 1;
static int initialized;
static _Thread_local int ctx_depth;
static int retained;
static int no_ctx_calls;
static int fail_after = -1;
static int fail_result;
static unsigned last_flags;
static char the_context;
/* Streams and events: counted; a copy's bytes move when it is queued, and
 * its event reports ready after event_polls queries. */
static int live_streams, live_events, copies, fail_copies, fail_events, event_polls;

struct fake_event {
	int polls_left;
	size_t seq; /* copies queued before it was recorded */
};

/* Deferred copies (fake_cuda_defer_copies): queued, done when an event
 * recorded after them completes or the stream is synchronized, reading
 * their source then, as a DMA engine does. */
struct fake_copy {
	unsigned long long dst;
	const void *src;
	size_t n;
};
static int defer;
static struct fake_copy *deferred;
static size_t deferred_queued, deferred_done, deferred_cap;
static pthread_mutex_t deferred_mu = PTHREAD_MUTEX_INITIALIZER;

static void run_deferred(size_t upto)
{
	pthread_mutex_lock(&deferred_mu);
	while (deferred_done < upto && deferred_done < deferred_queued) {
		struct fake_copy *c = &deferred[deferred_done++];

		memcpy((void *)(uintptr_t)c->dst, c->src, c->n);
	}
	pthread_mutex_unlock(&deferred_mu);
}

EXPORT void fake_cuda_reset(int devices)
{
	nr_blocks = 0;
	register_calls = 0;
	memory_type_calls = 0;
	largest_register = 0;
	nr_devices = devices;
	initialized = 0;
	ctx_depth = 0;
	retained = 0;
	no_ctx_calls = 0;
	fail_after = -1;
	last_flags = 0;
	__atomic_store_n(&copies, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&deferred_mu);
	defer = 0;
	deferred_queued = deferred_done = 0;
	pthread_mutex_unlock(&deferred_mu);
	__atomic_store_n(&fail_copies, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&fail_events, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&event_polls, 0, __ATOMIC_SEQ_CST);
}

EXPORT void fake_cuda_fail_register_after(int ok_calls, int result)
{
	fail_after = ok_calls;
	fail_result = result;
}

static void add_block(void *p, size_t len, int kind)
{
	if (nr_blocks < MAX_BLOCKS)
		blocks[nr_blocks++] = (struct block){(uintptr_t)p, (uintptr_t)p + len, kind};
}

EXPORT void fake_cuda_add_host_alloc(void *p, size_t len)
{
	add_block(p, len, KIND_HOST_ALLOC);
}
EXPORT void fake_cuda_add_managed(void *p, size_t len)
{
	add_block(p, len, KIND_MANAGED);
}
EXPORT void fake_cuda_add_device(void *p, size_t len)
{
	add_block(p, len, KIND_DEVICE);
}

EXPORT int fake_cuda_memory_type_calls(void)
{
	return memory_type_calls;
}

EXPORT int fake_cuda_register_calls(void)
{
	return register_calls;
}

EXPORT size_t fake_cuda_largest_register(void)
{
	return largest_register;
}

EXPORT int fake_cuda_registered(void)
{
	int n = 0;

	for (int i = 0; i < nr_blocks; i++)
		n += blocks[i].kind == KIND_REGISTERED;
	return n;
}

EXPORT unsigned fake_cuda_last_register_flags(void)
{
	return last_flags;
}
EXPORT int fake_cuda_context_depth(void)
{
	return ctx_depth;
}
EXPORT int fake_cuda_primary_retained(void)
{
	return retained;
}
EXPORT int fake_cuda_calls_without_context(void)
{
	return __atomic_load_n(&no_ctx_calls, __ATOMIC_SEQ_CST);
}
EXPORT int fake_cuda_live_streams(void)
{
	return __atomic_load_n(&live_streams, __ATOMIC_SEQ_CST);
}
EXPORT int fake_cuda_live_events(void)
{
	return __atomic_load_n(&live_events, __ATOMIC_SEQ_CST);
}
EXPORT int fake_cuda_copies(void)
{
	return __atomic_load_n(&copies, __ATOMIC_SEQ_CST);
}
EXPORT void fake_cuda_fail_copies(int result)
{
	__atomic_store_n(&fail_copies, result, __ATOMIC_SEQ_CST);
}
EXPORT void fake_cuda_fail_events(int result)
{
	__atomic_store_n(&fail_events, result, __ATOMIC_SEQ_CST);
}
EXPORT void fake_cuda_event_polls(int polls)
{
	__atomic_store_n(&event_polls, polls, __ATOMIC_SEQ_CST);
}

static struct block *find(uintptr_t a)
{
	for (int i = 0; i < nr_blocks; i++)
		if (a >= blocks[i].start && a < blocks[i].end)
			return &blocks[i];
	return NULL;
}

static int need_context(void)
{
	if (!initialized)
		return CU_NOT_INITIALIZED;
	if (ctx_depth == 0) {
		__atomic_fetch_add(&no_ctx_calls, 1, __ATOMIC_SEQ_CST);
		return CU_INVALID_CONTEXT;
	}
	return CU_OK;
}

EXPORT int cuInit(unsigned flags)
{
	if (flags)
		return CU_INVALID_VALUE;
	if (nr_devices == 0)
		return CU_NO_DEVICE;
	initialized = 1;
	return CU_OK;
}

EXPORT int cuDeviceGetCount(int *count)
{
	if (!initialized)
		return CU_NOT_INITIALIZED;
	*count = nr_devices;
	return CU_OK;
}

EXPORT int cuDeviceGet(int *dev, int ordinal)
{
	if (!initialized)
		return CU_NOT_INITIALIZED;
	if (ordinal < 0 || ordinal >= nr_devices)
		return CU_INVALID_DEVICE;
	*dev = ordinal;
	return CU_OK;
}

EXPORT int cuDeviceGetName(char *name, int len, int dev)
{
	(void)dev;
	strncpy(name, "svmbatch fake CUDA device", (size_t)len);
	return CU_OK;
}

EXPORT int cuDeviceGetAttribute(int *value, int attribute, int dev)
{
	(void)dev;
	/* CAN_MAP_HOST_MEMORY, UNIFIED_ADDRESSING, READ_ONLY_HOST_REGISTER_SUPPORTED */
	*value = attribute == 19 || attribute == 41 || attribute == 113;
	return CU_OK;
}

EXPORT int cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
	if (!initialized)
		return CU_NOT_INITIALIZED;
	(void)dev;
	retained++;
	*ctx = &the_context;
	return CU_OK;
}

EXPORT int cuDevicePrimaryCtxRelease_v2(int dev)
{
	(void)dev;
	retained--;
	return CU_OK;
}

EXPORT int cuCtxPushCurrent_v2(void *ctx)
{
	if (ctx != &the_context)
		return CU_INVALID_CONTEXT;
	ctx_depth++;
	return CU_OK;
}

EXPORT int cuCtxPopCurrent_v2(void **ctx)
{
	if (ctx_depth == 0)
		return CU_INVALID_CONTEXT;
	ctx_depth--;
	if (ctx)
		*ctx = &the_context;
	return CU_OK;
}

EXPORT int cuMemHostRegister_v2(void *p, size_t len, unsigned flags)
{
	int ret = need_context();
	uintptr_t a = (uintptr_t)p;

	if (ret)
		return ret;
	register_calls++;
	if (len > largest_register)
		largest_register = len;
	if (!p || !len)
		return CU_INVALID_VALUE;
	for (int i = 0; i < nr_blocks; i++)
		if (a < blocks[i].end && a + len > blocks[i].start)
			return CU_ALREADY_REGISTERED;
	if (fail_after == 0) {
		fail_after = -1;
		return fail_result;
	}
	if (fail_after > 0)
		fail_after--;
	add_block(p, len, KIND_REGISTERED);
	last_flags = flags;
	return CU_OK;
}

EXPORT int cuMemHostUnregister(void *p)
{
	int ret = need_context();

	if (ret)
		return ret;
	for (int i = 0; i < nr_blocks; i++) {
		if (blocks[i].kind == KIND_REGISTERED && blocks[i].start == (uintptr_t)p) {
			blocks[i] = blocks[--nr_blocks];
			return CU_OK;
		}
	}
	return CU_NOT_REGISTERED;
}

/* Unified addressing: a host block's device pointer is its host pointer. */
EXPORT int cuMemHostGetDevicePointer_v2(unsigned long long *dptr, void *p, unsigned flags)
{
	int ret = need_context();
	struct block *b = find((uintptr_t)p);

	if (ret)
		return ret;
	if (flags || !b || b->kind == KIND_MANAGED)
		return CU_INVALID_VALUE;
	*dptr = (uintptr_t)p;
	return CU_OK;
}

EXPORT int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr)
{
	int ret = need_context();
	struct block *b = find((uintptr_t)ptr);

	if (ret)
		return ret;
	if (attribute == 2)
		memory_type_calls++;
	if (!b)
		return CU_INVALID_VALUE;
	switch (attribute) {
	case 2: /* MEMORY_TYPE */
		*(unsigned *)data = b->kind == KIND_MANAGED ? MEM_UNIFIED :
				    b->kind == KIND_DEVICE  ? MEM_DEVICE :
							      MEM_HOST;
		return CU_OK;
	case 8: /* IS_MANAGED */
		*(int *)data = b->kind == KIND_MANAGED;
		return CU_OK;
	default:
		return CU_INVALID_VALUE;
	}
}

static char the_stream;

/* The stream cuStreamCreate hands out, or the legacy default stream. */
static int valid_stream(const void *stream)
{
	return stream == &the_stream || stream == NULL;
}

EXPORT void fake_cuda_defer_copies(int on)
{
	pthread_mutex_lock(&deferred_mu);
	defer = on;
	pthread_mutex_unlock(&deferred_mu);
	run_deferred((size_t)-1);
}

EXPORT size_t fake_cuda_deferred_pending(void)
{
	size_t n;

	pthread_mutex_lock(&deferred_mu);
	n = deferred_queued - deferred_done;
	pthread_mutex_unlock(&deferred_mu);
	return n;
}

EXPORT int cuStreamCreate(void **stream, unsigned flags)
{
	int ret = need_context();

	(void)flags;
	if (ret)
		return ret;
	__atomic_fetch_add(&live_streams, 1, __ATOMIC_SEQ_CST);
	*stream = &the_stream;
	return CU_OK;
}

EXPORT int cuStreamDestroy_v2(void *stream)
{
	int ret = need_context();

	if (ret)
		return ret;
	if (stream != &the_stream)
		return CU_INVALID_VALUE;
	run_deferred((size_t)-1);
	__atomic_fetch_sub(&live_streams, 1, __ATOMIC_SEQ_CST);
	return CU_OK;
}

EXPORT int cuStreamSynchronize(void *stream)
{
	int ret = need_context();

	if (ret)
		return ret;
	if (!valid_stream(stream))
		return CU_INVALID_VALUE;
	run_deferred((size_t)-1);
	return CU_OK;
}

EXPORT int cuEventCreate(struct fake_event **event, unsigned flags)
{
	int ret = need_context();

	(void)flags;
	if (ret)
		return ret;
	*event = calloc(1, sizeof(**event));
	if (!*event)
		return 2;
	__atomic_fetch_add(&live_events, 1, __ATOMIC_SEQ_CST);
	return CU_OK;
}

EXPORT int cuEventDestroy_v2(struct fake_event *event)
{
	int ret = need_context();

	if (ret)
		return ret;
	free(event);
	__atomic_fetch_sub(&live_events, 1, __ATOMIC_SEQ_CST);
	return CU_OK;
}

EXPORT int cuEventRecord(struct fake_event *event, void *stream)
{
	int ret = need_context();

	if (ret)
		return ret;
	if (!event || !valid_stream(stream))
		return CU_INVALID_VALUE;
	event->polls_left = __atomic_load_n(&event_polls, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&deferred_mu);
	event->seq = deferred_queued;
	pthread_mutex_unlock(&deferred_mu);
	return CU_OK;
}

EXPORT int cuEventQuery(struct fake_event *event)
{
	int ret = need_context();

	if (ret)
		return ret;
	ret = __atomic_load_n(&fail_events, __ATOMIC_SEQ_CST);
	if (ret)
		return ret;
	if (event->polls_left > 0) {
		event->polls_left--;
		return CU_NOT_READY;
	}
	run_deferred(event->seq);
	return CU_OK;
}

EXPORT int cuEventSynchronize(struct fake_event *event)
{
	/* What a query answers once the polls it would need are spent. */
	if (event)
		event->polls_left = 0;
	return cuEventQuery(event);
}

/* The destination must lie in one block of fake device memory. */
EXPORT int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t n, void *stream)
{
	int ret = need_context();
	struct block *b = find((uintptr_t)dst);

	if (ret)
		return ret;
	ret = __atomic_load_n(&fail_copies, __ATOMIC_SEQ_CST);
	if (ret)
		return ret;
	if (!valid_stream(stream) || !b || b->kind != KIND_DEVICE || !src ||
	    (uintptr_t)dst + n > b->end)
		return CU_INVALID_VALUE;
	pthread_mutex_lock(&deferred_mu);
	if (defer) {
		if (deferred_queued == deferred_cap) {
			size_t cap = deferred_cap ? 2 * deferred_cap : 256;
			struct fake_copy *grown = realloc(deferred, cap * sizeof(*grown));

			if (!grown) {
				pthread_mutex_unlock(&deferred_mu);
				return 2;
			}
			deferred = grown;
			deferred_cap = cap;
		}
		deferred[deferred_queued++] = (struct fake_copy){dst, src, n};
	} else {
		memcpy((void *)(uintptr_t)dst, src, n);
	}
	pthread_mutex_unlock(&deferred_mu);
	__atomic_fetch_add(&copies, 1, __ATOMIC_SEQ_CST);
	return CU_OK;
}

EXPORT int cuGetErrorName(int error, const char **str)
{
	switch (error) {
	case CU_OK:
		*str = "CUDA_SUCCESS";
		return CU_OK;
	case CU_INVALID_VALUE:
		*str = "CUDA_ERROR_INVALID_VALUE";
		return CU_OK;
	case 2:
		*str = "CUDA_ERROR_OUT_OF_MEMORY";
		return CU_OK;
	case 999:
		*str = "CUDA_ERROR_UNKNOWN";
		return CU_OK;
	case CU_NO_DEVICE:
		*str = "CUDA_ERROR_NO_DEVICE";
		return CU_OK;
	case CU_ALREADY_REGISTERED:
		*str = "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
		return CU_OK;
	case CU_NOT_REGISTERED:
		*str = "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED";
		return CU_OK;
	default:
		*str = NULL;
		return CU_INVALID_VALUE;
	}
}
