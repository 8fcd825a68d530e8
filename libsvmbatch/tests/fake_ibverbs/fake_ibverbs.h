/* SPDX-License-Identifier: MIT */
/*
 * A FAKE libibverbs for RdmaBackend's tests (no RDMA device on the build
 * host): the entry points the backend loads, plus control functions to
 * make them fail and to see what they were asked.  One device, "fake0".
 */
#ifndef SVMBATCH_FAKE_IBVERBS_H
#define SVMBATCH_FAKE_IBVERBS_H

#include <stddef.h> // NOLINT(modernize-deprecated-headers): a C header
#include <stdint.h> // NOLINT(modernize-deprecated-headers): a C header

#ifdef __cplusplus
extern "C" {
#endif

struct ibv_pd;

/* One call to ibv_reg_mr (dmabuf 0) or ibv_reg_dmabuf_mr (dmabuf 1). */
struct fake_ibv_call {
	int dmabuf;
	uint64_t addr; /* the address, or the dma-buf offset */
	uint64_t len;
	uint64_t iova; /* ibv_reg_dmabuf_mr's; 0 for ibv_reg_mr */
	int fd; /* ibv_reg_dmabuf_mr's; -1 for ibv_reg_mr */
	int access;
};

/* Forget every call, free every region, defaults back. */
void fake_ibv_reset(void);
/* The protection domain of the one device's context. */
struct ibv_pd *fake_ibv_pd(void);
void fake_ibv_set_max_mr_size(uint64_t bytes);
/* ibv_query_device returns err (0: succeeds). */
void fake_ibv_fail_query(int err);
/* The nth (0-based) registration call from now fails with err. */
void fake_ibv_fail_registration(int nth, int err);
/* 0: ibv_reg_dmabuf_mr fails with EOPNOTSUPP (rxe); 1: it registers. */
void fake_ibv_set_dmabuf_supported(int supported);
/* Regions registered and not yet deregistered. */
int fake_ibv_live_regions(void);
/* Registration calls made, failed ones included, and the ith of them. */
size_t fake_ibv_calls(void);
struct fake_ibv_call fake_ibv_call_at(size_t i);

#ifdef __cplusplus
}
#endif

#endif /* SVMBATCH_FAKE_IBVERBS_H */
