// SPDX-License-Identifier: MIT
/* The fake HIP runtime: see fake_hip.h. Not thread-safe; tests are serial. */
#include "fake_hip.h"

#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

enum {
	HIP_OK = 0,
	HIP_INVALID_VALUE = 1,
	HIP_OUT_OF_MEMORY = 2,
	HIP_NO_DEVICE = 100,
	HIP_INVALID_DEVICE = 101,
	HIP_ALREADY_REGISTERED = 712,
	HIP_NOT_REGISTERED = 713
};
enum { KIND_REGISTERED, KIND_HOST_ALLOC, KIND_MANAGED, KIND_DEVICE };
enum { MAX_BLOCKS = 65536 };

struct block {
	uintptr_t start, end;
	int kind;
};

/* hipPointerAttribute_t (the same layout in ROCm 5 and 6). */
struct pointer_attributes {
	int type;
	int device;
	void *device_pointer;
	void *host_pointer;
	int is_managed;
	unsigned allocation_flags;
};

static struct block blocks[MAX_BLOCKS];
static int register_calls;
static int attribute_calls;
static size_t largest_register;
static int nr_blocks;
static int nr_devices = 1;
static int version = 50221153;
static int counted;
static int early_calls;
static int can_map = 1;
static int fail_register_after = -1, fail_register_result;
static int fail_dptr_after = -1, fail_dptr_result;
static unsigned last_flags;
static int last_device = -1;
static _Thread_local int current_device;

EXPORT void fake_hip_reset(int devices, int runtime_version)
{
	nr_blocks = 0;
	register_calls = 0;
	attribute_calls = 0;
	largest_register = 0;
	nr_devices = devices;
	version = runtime_version;
	counted = 0;
	early_calls = 0;
	can_map = 1;
	fail_register_after = -1;
	fail_dptr_after = -1;
	last_flags = 0;
	last_device = -1;
	current_device = 0;
}

EXPORT void fake_hip_fail_register_after(int ok_calls, int result)
{
	fail_register_after = ok_calls;
	fail_register_result = result;
}

EXPORT void fake_hip_fail_device_pointer_after(int ok_calls, int result)
{
	fail_dptr_after = ok_calls;
	fail_dptr_result = result;
}

EXPORT void fake_hip_set_can_map_host_memory(int can)
{
	can_map = can;
}

static void add_block(void *p, size_t len, int kind)
{
	if (nr_blocks < MAX_BLOCKS)
		blocks[nr_blocks++] = (struct block){(uintptr_t)p, (uintptr_t)p + len, kind};
}

EXPORT void fake_hip_add_host_alloc(void *p, size_t len)
{
	add_block(p, len, KIND_HOST_ALLOC);
}
EXPORT void fake_hip_add_managed(void *p, size_t len)
{
	add_block(p, len, KIND_MANAGED);
}
EXPORT void fake_hip_add_device(void *p, size_t len)
{
	add_block(p, len, KIND_DEVICE);
}

EXPORT int fake_hip_register_calls(void)
{
	return register_calls;
}

EXPORT int fake_hip_pointer_attribute_calls(void)
{
	return attribute_calls;
}

EXPORT size_t fake_hip_largest_register(void)
{
	return largest_register;
}

EXPORT int fake_hip_registered(void)
{
	int n = 0;

	for (int i = 0; i < nr_blocks; i++)
		n += blocks[i].kind == KIND_REGISTERED;
	return n;
}

EXPORT unsigned fake_hip_last_register_flags(void)
{
	return last_flags;
}
EXPORT int fake_hip_last_register_device(void)
{
	return last_device;
}
EXPORT int fake_hip_current_device(void)
{
	return current_device;
}
EXPORT int fake_hip_calls_before_device_count(void)
{
	return early_calls;
}

/* Every entry point but the two that are safe first. */
static int gate(void)
{
	if (!counted)
		early_calls++;
	return nr_devices == 0 ? HIP_INVALID_DEVICE : HIP_OK;
}

static struct block *find(uintptr_t a)
{
	for (int i = 0; i < nr_blocks; i++)
		if (a >= blocks[i].start && a < blocks[i].end)
			return &blocks[i];
	return NULL;
}

EXPORT int hipGetDeviceCount(int *count)
{
	counted = 1;
	*count = nr_devices;
	return nr_devices ? HIP_OK : HIP_NO_DEVICE;
}

EXPORT int hipRuntimeGetVersion(int *v)
{
	gate();
	*v = version;
	return HIP_OK;
}

EXPORT int hipGetDevice(int *device)
{
	int ret = gate();

	if (!ret)
		*device = current_device;
	return ret;
}

EXPORT int hipSetDevice(int device)
{
	int ret = gate();

	if (ret)
		return ret;
	if (device < 0 || device >= nr_devices)
		return HIP_INVALID_DEVICE;
	current_device = device;
	return HIP_OK;
}

EXPORT int hipDeviceGet(int *device, int ordinal)
{
	int ret = gate();

	if (ret)
		return ret;
	if (ordinal < 0 || ordinal >= nr_devices)
		return HIP_INVALID_DEVICE;
	*device = ordinal;
	return HIP_OK;
}

EXPORT int hipDeviceGetName(char *name, int len, int device)
{
	int ret = gate();

	(void)device;
	if (!ret)
		strncpy(name, "svmbatch fake HIP device", (size_t)len);
	return ret;
}

EXPORT int hipDeviceGetAttribute(int *value, int attribute, int device)
{
	int ret = gate();

	if (ret)
		return ret;
	if (device < 0 || device >= nr_devices)
		return HIP_INVALID_DEVICE;
	*value = attribute == 3 /* hipDeviceAttributeCanMapHostMemory */ ? can_map : 0;
	return HIP_OK;
}

EXPORT int hipHostRegister(void *p, size_t len, unsigned flags)
{
	int ret = gate();
	uintptr_t a = (uintptr_t)p;

	if (ret)
		return ret;
	register_calls++;
	if (len > largest_register)
		largest_register = len;
	if (!p || !len || (flags & ~7u))
		return HIP_INVALID_VALUE;
	for (int i = 0; i < nr_blocks; i++)
		if (a < blocks[i].end && a + len > blocks[i].start)
			return HIP_ALREADY_REGISTERED;
	if (fail_register_after == 0) {
		fail_register_after = -1;
		return fail_register_result;
	}
	if (fail_register_after > 0)
		fail_register_after--;
	add_block(p, len, KIND_REGISTERED);
	last_flags = flags;
	last_device = current_device;
	return HIP_OK;
}

EXPORT int hipHostUnregister(void *p)
{
	int ret = gate();

	if (ret)
		return ret;
	for (int i = 0; i < nr_blocks; i++) {
		if (blocks[i].kind == KIND_REGISTERED && blocks[i].start == (uintptr_t)p) {
			blocks[i] = blocks[--nr_blocks];
			return HIP_OK;
		}
	}
	return HIP_NOT_REGISTERED;
}

EXPORT int hipHostGetDevicePointer(void **dptr, void *p, unsigned flags)
{
	int ret = gate();
	struct block *b = find((uintptr_t)p);

	if (ret)
		return ret;
	if (flags || !b || b->kind == KIND_MANAGED || b->kind == KIND_DEVICE)
		return HIP_INVALID_VALUE;
	if (fail_dptr_after == 0) {
		fail_dptr_after = -1;
		return fail_dptr_result;
	}
	if (fail_dptr_after > 0)
		fail_dptr_after--;
	*dptr = (void *)((uintptr_t)p + FAKE_HIP_DEVICE_OFFSET);
	return HIP_OK;
}

EXPORT int hipPointerGetAttributes(struct pointer_attributes *attr, const void *p)
{
	int ret = gate();
	int rocm6 = version >= 60000000;
	struct block *b = find((uintptr_t)p);

	if (ret)
		return ret;
	attribute_calls++;
	memset(attr, 0, sizeof(*attr));
	if (!b) {
		if (!rocm6)
			return HIP_INVALID_VALUE;
		return HIP_OK; /* hipMemoryTypeUnregistered */
	}
	switch (b->kind) {
	case KIND_DEVICE:
		attr->type = rocm6 ? 2 : 1;
		break;
	case KIND_MANAGED:
		attr->type = rocm6 ? 3 : 0;
		attr->is_managed = 1;
		break;
	default:
		attr->type = rocm6 ? 1 : 0;
	}
	attr->host_pointer = (void *)b->start;
	return HIP_OK;
}

EXPORT const char *hipGetErrorName(int error)
{
	switch (error) {
	case HIP_OK:
		return "hipSuccess";
	case HIP_INVALID_VALUE:
		return "hipErrorInvalidValue";
	case HIP_OUT_OF_MEMORY:
		return "hipErrorOutOfMemory";
	case HIP_NO_DEVICE:
		return "hipErrorNoDevice";
	case HIP_INVALID_DEVICE:
		return "hipErrorInvalidDevice";
	case HIP_ALREADY_REGISTERED:
		return "hipErrorHostMemoryAlreadyRegistered";
	case HIP_NOT_REGISTERED:
		return "hipErrorHostMemoryNotRegistered";
	default:
		return "hipErrorUnknown";
	}
}
