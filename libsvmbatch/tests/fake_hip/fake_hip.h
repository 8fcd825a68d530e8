/* SPDX-License-Identifier: MIT */
/*
 * A FAKE HIP runtime (libamdhip64) for the host tests: no AMD GPU exists
 * there, so HipBackend's loader, classification and rollback are tested
 * against this stand-in, which keeps the runtime's bookkeeping rules
 * (overlapping registrations fail with 712, unregistering needs the exact
 * start) and both of its pointer-attribute dialects (ROCm 5 fails for
 * unknown memory and numbers host memory 0; ROCm 6 says Unregistered 0,
 * host 1).  Device pointers are the host address + FAKE_HIP_DEVICE_OFFSET,
 * so that an identity mapping would show.  Debian's real runtime is tested
 * on its no-device path (hip_runtime_test.cpp).  Control functions below
 * are the fake's own.
 */
#ifndef SVMBATCH_FAKE_HIP_H
#define SVMBATCH_FAKE_HIP_H

#include <stddef.h> // NOLINT(modernize-deprecated-headers): a C header

#ifdef __cplusplus
extern "C" {
#endif

#define FAKE_HIP_DEVICE_OFFSET 0x100000000000ULL

/* Forget everything; n devices (hipGetDeviceCount says 100 when n == 0),
 * the version hipRuntimeGetVersion reports (e.g. 50221153, 60443483). */
void fake_hip_reset(int devices, int runtime_version);
/* hipHostRegister fails with `result` after `ok_calls` more successes. */
void fake_hip_fail_register_after(int ok_calls, int result);
/* hipHostGetDevicePointer fails with `result` after `ok_calls` more successes. */
void fake_hip_fail_device_pointer_after(int ok_calls, int result);
/* hipDeviceGetAttribute(CanMapHostMemory) says this. */
void fake_hip_set_can_map_host_memory(int can);
/* Host memory HIP allocated (hipHostMalloc), managed memory
 * (hipMallocManaged), device memory (hipMalloc). */
void fake_hip_add_host_alloc(void *p, size_t len);
void fake_hip_add_managed(void *p, size_t len);
void fake_hip_add_device(void *p, size_t len);
/* Blocks currently registered with hipHostRegister. */
int fake_hip_registered(void);
/* hipHostRegister calls since the reset, failed ones included, and the most
 * bytes one of them asked for. */
int fake_hip_register_calls(void);
size_t fake_hip_largest_register(void);
/* hipPointerGetAttributes calls since the reset: the addresses classified. */
int fake_hip_pointer_attribute_calls(void);
/* Flags and current device of the last successful hipHostRegister. */
unsigned fake_hip_last_register_flags(void);
int fake_hip_last_register_device(void);
/* The calling thread's current device (hipSetDevice's). */
int fake_hip_current_device(void);
/* Calls other than hipGetDeviceCount and hipGetErrorName made before the
 * first hipGetDeviceCount (a runtime without a device fails them all). */
int fake_hip_calls_before_device_count(void);

#ifdef __cplusplus
}
#endif

#endif
