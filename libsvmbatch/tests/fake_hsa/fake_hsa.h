/* SPDX-License-Identifier: MIT */
/*
 * A FAKE ROCm HSA runtime for the tests: no AMD GPU exists on any machine
 * here, so HsaBackend's loader, agent and pool discovery, the dma-buf
 * interop path and the range-by-range rollback of locking are tested
 * against this stand-in, built on the real headers (libhsa-runtime-dev).
 * Its agent pointers are the host pointers; an accepted interop mapping is
 * a CPU mmap of the dma-buf, so tests can read through it.
 */
#ifndef SVMBATCH_FAKE_HSA_H
#define SVMBATCH_FAKE_HSA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Forget everything: `gpus` GPU agents, one CPU agent with a fine-grained
 * global pool; hsa_init returns init_status (0: success). */
void fake_hsa_reset(int gpus, int init_status);
/* hsa_amd_memory_lock_to_pool fails with `status` after `ok_calls` successes. */
void fake_hsa_fail_lock_after(int ok_calls, int status);
/* hsa_amd_interop_map_buffer: 0 refuses (INVALID_ARGUMENT), 1 maps. */
void fake_hsa_accept_interop(int accept);
int fake_hsa_locked(void);		/* ranges locked now */
int fake_hsa_interop_mapped(void);	/* interop mappings now */
int fake_hsa_init_balance(void);	/* hsa_init calls minus hsa_shut_down calls */
int fake_hsa_lock_agents(void);		/* num_agent of the last lock */

#ifdef __cplusplus
}
#endif

#endif
