/* SPDX-License-Identifier: MIT */
/*
 * A FAKE ROCm HSA runtime for the tests: no AMD GPU exists on any machine
 * here, so HsaBackend's loader, agent and pool discovery, the dma-buf
 * interop path and the range-by-range rollback of locking are tested
 * against this stand-in, built on the real headers (libhsa-runtime-dev).
 * It checks the arguments the way hsa_ext_amd.h documents (and ROCR's
 * hsa_ext_amd.cpp does).  Its agent pointers are the host pointers; an
 * accepted interop mapping is a CPU mmap of the dma-buf, so tests can read
 * through it.
 */
#ifndef SVMBATCH_FAKE_HSA_H
#define SVMBATCH_FAKE_HSA_H

#include <stddef.h> // NOLINT(modernize-deprecated-headers): a C header

#ifdef __cplusplus
extern "C" {
#endif

/* Forget everything: `gpus` GPU agents (named "gfx-fake0", ...) after one
 * CPU agent whose memory pools are ROCR's: fine-grained, kernarg
 * (fine-grained | KERNARG_INIT), coarse-grained; hsa_init returns
 * init_status (0: success). */
void fake_hsa_reset(int gpus, int init_status);
/* Replace the CPU agent's pools: n of them, pool i in segment segments[i]
 * (an hsa_amd_segment_t) with HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS
 * flags[i] (reported only for the global segment). */
void fake_hsa_set_pools(const int *segments, const unsigned *flags, int n);
/* hsa_amd_memory_lock_to_pool fails with `status` after `ok_calls` successes. */
void fake_hsa_fail_lock_after(int ok_calls, int status);
/* hsa_amd_interop_map_buffer: 0 refuses (HSA_STATUS_ERROR, as ROCR does
 * when KFD refuses the dma-buf), 1 maps. */
void fake_hsa_accept_interop(int accept);
int fake_hsa_locked(void); /* ranges locked now */
int fake_hsa_interop_mapped(void); /* interop mappings now */
int fake_hsa_init_balance(void); /* hsa_init calls minus hsa_shut_down calls */
int fake_hsa_lock_agents(void); /* num_agent of the last lock */
/* The GPU agents (bit i: "gfx-fake<i>") of the last lock or interop map. */
unsigned fake_hsa_last_agent_mask(void);
/* The global flags of the pool the last lock used; -1 before any lock. */
long fake_hsa_last_pool_flags(void);

#ifdef __cplusplus
}
#endif

#endif
