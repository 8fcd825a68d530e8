/* SPDX-License-Identifier: MIT */
/*
 * A FAKE CUDA driver for the host tests: no GPU exists there, so
 * CudaBackend's loader, classification and rollback are tested against
 * this stand-in, which keeps the driver's bookkeeping rules (overlapping
 * registrations fail with 712, unregistering needs the exact start, calls
 * need a current context).  The real driver is tested on the H100
 * (tools/device/).  Control functions below are the fake's own.
 */
#ifndef SVMBATCH_FAKE_CUDA_H
#define SVMBATCH_FAKE_CUDA_H

#include <stddef.h> // NOLINT(modernize-deprecated-headers): a C header

#ifdef __cplusplus
extern "C" {
#endif

/* Forget everything; n devices (cuInit fails with 100 when n == 0). */
void fake_cuda_reset(int devices);
/* cuMemHostRegister fails with `result` after `ok_calls` more successes. */
void fake_cuda_fail_register_after(int ok_calls, int result);
/* Host memory CUDA allocated itself (as cuMemHostAlloc would). */
void fake_cuda_add_host_alloc(void *p, size_t len);
/* Managed memory (as cuMemAllocManaged would). */
void fake_cuda_add_managed(void *p, size_t len);
/* Device memory (as cuMemAlloc would), here at a host address. */
void fake_cuda_add_device(void *p, size_t len);
/* Blocks currently registered with cuMemHostRegister. */
int fake_cuda_registered(void);
/* cuMemHostRegister calls since the reset, failed ones included, and the most
 * bytes one of them asked for. */
int fake_cuda_register_calls(void);
size_t fake_cuda_largest_register(void);
/* cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE) calls since the
 * reset: the addresses classified. */
int fake_cuda_memory_type_calls(void);
/* Flags of the last successful cuMemHostRegister. */
unsigned fake_cuda_last_register_flags(void);
/* Current-context stack depth of the calling thread; retained primary contexts. */
int fake_cuda_context_depth(void);
int fake_cuda_primary_retained(void);
/* Calls made without a current context (the real driver fails them). */
int fake_cuda_calls_without_context(void);
/* Streams and events created and not destroyed; copies queued since the reset. */
int fake_cuda_live_streams(void);
int fake_cuda_live_events(void);
int fake_cuda_copies(void);
/* From now on cuMemcpyHtoDAsync fails with result (0: works again). */
void fake_cuda_fail_copies(int result);
/* From now on cuEventQuery fails with result (0: works again). */
void fake_cuda_fail_events(int result);
/* An event recorded from now on answers CUDA_ERROR_NOT_READY to its first
 * polls queries (the copy itself is done at once). */
void fake_cuda_event_polls(int polls);
/* From now on (on != 0) a copy's bytes move only when an event recorded
 * after it completes (cuEventQuery ready, cuEventSynchronize) or its
 * stream is synchronized, and are read from the source then, as a copy
 * engine does: host memory reused before that shows up in the result.
 * 0: copies move at once again (those deferred move now). */
void fake_cuda_defer_copies(int on);
/* Deferred copies not yet done. */
size_t fake_cuda_deferred_pending(void);

#ifdef __cplusplus
}
#endif

#endif
