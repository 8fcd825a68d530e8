/* SPDX-License-Identifier: MIT */
/*
 * A FAKE oneAPI Level Zero loader with one Intel-like driver, for the host
 * and guest tests: no Intel GPU exists here, so ZeBackend's loader, gating,
 * classification, imports and rollback are tested against this stand-in.
 * It keeps the rules of Intel's driver (compute-runtime) where they
 * matter: zexDriverImportExternalPointer looks only at the two ends of the
 * new range (both inside one earlier import: success with nothing new;
 * ends in two: OVERLAPPING_REGIONS; the start only: HANDLE_OBJECT_IN_USE;
 * the end only: INVALID_SIZE) and imports the bytes asked for; a dma-buf
 * imported with zeMemAllocDevice is a device allocation.  An imported
 * dma-buf is a CPU mmap of the fd, so that tests read and write the
 * caller's bytes through the device pointer.  Debian's real loader is
 * tested on its no-driver path (ze_runtime_test.cpp).  Control functions
 * below are the fake's own.
 */
#ifndef SVMBATCH_FAKE_ZE_H
#define SVMBATCH_FAKE_ZE_H

#include <stddef.h> // NOLINT(modernize-deprecated-headers): a C header

#ifdef __cplusplus
extern "C" {
#endif

/* Forget everything (the live contexts and imports must be gone); one
 * driver with `devices` devices, or none at all when drivers is 0 (zeInit
 * then fails with ZE_RESULT_ERROR_UNINITIALIZED, as the real loader does). */
void fake_ze_reset(int drivers, int devices);
/* Whether the driver gives the zex host-pointer import (1 after a reset). */
void fake_ze_set_host_pointer_import(int present);
/* zexDriverImportExternalPointer fails with `result` after `ok_calls`
 * more successes. */
void fake_ze_fail_import_after(int ok_calls, int result);
/* zexDriverGetHostPointerBaseAddress, asked for the base address (not
 * just whether a pointer is imported), fails likewise. */
void fake_ze_fail_base_address_after(int ok_calls, int result);
/* zeMemAllocDevice importing a dma-buf fails with `result` (0: succeeds). */
void fake_ze_fail_dmabuf_import(int result);
/* Memory Level Zero allocated: zeMemAllocHost, zeMemAllocShared,
 * zeMemAllocDevice. */
void fake_ze_add_host_alloc(void *p, size_t len);
void fake_ze_add_shared(void *p, size_t len);
void fake_ze_add_device(void *p, size_t len);
/* Host pointers imported now; import calls since the reset (failed ones
 * included) and the most bytes one of them asked for. */
int fake_ze_imported(void);
int fake_ze_import_calls(void);
size_t fake_ze_largest_import(void);
/* zexDriverGetHostPointerBaseAddress calls that only ask whether a pointer
 * is imported (no base wanted): how ZeBackend classifies plain memory. */
int fake_ze_import_queries(void);
/* dma-bufs imported now, contexts alive now. */
int fake_ze_dmabufs_imported(void);
int fake_ze_contexts(void);
/* The last dma-buf import: the size zeMemAllocDevice was given and the
 * fd's size, the fd's exporter (fdinfo's exp_name, "" if none) and
 * inode, and the device it went to (index in zeDeviceGet's order). */
size_t fake_ze_last_dmabuf_alloc_size(void);
size_t fake_ze_last_dmabuf_size(void);
const char *fake_ze_last_dmabuf_exporter(void);
unsigned long fake_ze_last_dmabuf_inode(void);
int fake_ze_last_dmabuf_device(void);
/* The handles zeDriverGet and zeDeviceGet give; whether ctx is a live
 * context. */
void *fake_ze_driver(void);
void *fake_ze_device(int index);
int fake_ze_is_context(void *ctx);
/* Calls other than zeInit made before a zeInit succeeded. */
int fake_ze_calls_before_init(void);

#ifdef __cplusplus
}
#endif

#endif
