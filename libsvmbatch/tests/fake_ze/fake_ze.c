// SPDX-License-Identifier: MIT
/* The fake Level Zero loader: see fake_ze.h. Not thread-safe; tests are serial. */
#include "fake_ze.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

enum {
	ZE_OK = 0,
	ZE_UNINITIALIZED = 0x78000001,
	ZE_UNSUPPORTED_FEATURE = 0x78000003,
	ZE_INVALID_ARGUMENT = 0x78000004,
	ZE_INVALID_NULL_HANDLE = 0x78000005,
	ZE_HANDLE_OBJECT_IN_USE = 0x78000006,
	ZE_INVALID_NULL_POINTER = 0x78000007,
	ZE_INVALID_SIZE = 0x78000008,
	ZE_INVALID_ENUMERATION = 0x7800000c,
	ZE_OVERLAPPING_REGIONS = 0x7800001a,
};
enum {
	STYPE_DEVICE_PROPERTIES = 0x3,
	STYPE_CONTEXT_DESC = 0xd,
	STYPE_DEVICE_MEM_ALLOC_DESC = 0x15,
	STYPE_MEMORY_ALLOCATION_PROPERTIES = 0x17,
	STYPE_EXTERNAL_MEMORY_IMPORT_FD = 0x19
};
enum { DMA_BUF = 0x2 };
enum { TYPE_UNKNOWN, TYPE_HOST, TYPE_DEVICE, TYPE_SHARED };
enum { KIND_IMPORTED, KIND_HOST_ALLOC, KIND_SHARED, KIND_DEVICE, KIND_DMABUF };
enum { MAX_BLOCKS = 65536, MAX_DEVICES = 4, MAX_CONTEXTS = 16 };

struct block {
	uintptr_t start, end;
	int kind;
};

/* The structures' leading fields (ze_api.h): stype and pNext. */
struct base_desc {
	unsigned stype;
	const void *next;
};
struct import_fd {
	unsigned stype;
	const void *next;
	uint32_t flags;
	int fd;
};
struct device_mem_alloc_desc {
	unsigned stype;
	const void *next;
	uint32_t flags;
	uint32_t ordinal;
};
struct alloc_properties {
	unsigned stype;
	void *next;
	unsigned type;
	uint64_t id;
	uint64_t page_size;
};
/* ze_device_properties_t: after stype and pNext, 80 bytes of numbers
 * (tests/ze_abi_check.cpp holds the library's copy to the header), the
 * uuid, then the name. */
struct device_properties {
	unsigned stype;
	void *next;
	unsigned words[20];
	uint8_t uuid[16];
	char name[256];
};

static struct block blocks[MAX_BLOCKS];
static int nr_blocks;
static int nr_drivers = 1, nr_devices = 1, initialized, early_calls, zex_present = 1;
static int import_calls, import_queries;
static size_t largest_import;
static int fail_import_after = -1, fail_import_result;
static int fail_base_after = -1, fail_base_result;
static int fail_dmabuf_result;
static int live_contexts[MAX_CONTEXTS];
static char driver_handle, device_handles[MAX_DEVICES];
static size_t last_alloc_size, last_dmabuf_size;
static char last_exporter[64];
static unsigned long last_inode;
static int last_device = -1;

static void add_block(uintptr_t start, uintptr_t end, int kind)
{
	if (nr_blocks < MAX_BLOCKS)
		blocks[nr_blocks++] = (struct block){start, end, kind};
}

static int count(int kind)
{
	int n = 0;

	for (int i = 0; i < nr_blocks; i++)
		n += blocks[i].kind == kind;
	return n;
}

EXPORT void fake_ze_reset(int drivers, int devices)
{
	nr_blocks = 0;
	nr_drivers = drivers;
	nr_devices = devices < MAX_DEVICES ? devices : MAX_DEVICES;
	initialized = 0;
	early_calls = 0;
	zex_present = 1;
	import_calls = 0;
	import_queries = 0;
	largest_import = 0;
	fail_import_after = -1;
	fail_base_after = -1;
	fail_dmabuf_result = 0;
	memset(live_contexts, 0, sizeof(live_contexts));
	last_alloc_size = last_dmabuf_size = 0;
	last_exporter[0] = '\0';
	last_inode = 0;
	last_device = -1;
}

EXPORT void fake_ze_set_host_pointer_import(int present)
{
	zex_present = present;
}

EXPORT void fake_ze_fail_import_after(int ok_calls, int result)
{
	fail_import_after = ok_calls;
	fail_import_result = result;
}

EXPORT void fake_ze_fail_base_address_after(int ok_calls, int result)
{
	fail_base_after = ok_calls;
	fail_base_result = result;
}

EXPORT void fake_ze_fail_dmabuf_import(int result)
{
	fail_dmabuf_result = result;
}

EXPORT void fake_ze_add_host_alloc(void *p, size_t len)
{
	add_block((uintptr_t)p, (uintptr_t)p + len, KIND_HOST_ALLOC);
}
EXPORT void fake_ze_add_shared(void *p, size_t len)
{
	add_block((uintptr_t)p, (uintptr_t)p + len, KIND_SHARED);
}
EXPORT void fake_ze_add_device(void *p, size_t len)
{
	add_block((uintptr_t)p, (uintptr_t)p + len, KIND_DEVICE);
}

EXPORT int fake_ze_imported(void)
{
	return count(KIND_IMPORTED);
}
EXPORT int fake_ze_import_calls(void)
{
	return import_calls;
}
EXPORT size_t fake_ze_largest_import(void)
{
	return largest_import;
}
EXPORT int fake_ze_import_queries(void)
{
	return import_queries;
}
EXPORT int fake_ze_dmabufs_imported(void)
{
	return count(KIND_DMABUF);
}
EXPORT int fake_ze_contexts(void)
{
	int n = 0;

	for (int i = 0; i < MAX_CONTEXTS; i++)
		n += live_contexts[i];
	return n;
}
EXPORT size_t fake_ze_last_dmabuf_alloc_size(void)
{
	return last_alloc_size;
}
EXPORT size_t fake_ze_last_dmabuf_size(void)
{
	return last_dmabuf_size;
}
EXPORT const char *fake_ze_last_dmabuf_exporter(void)
{
	return last_exporter;
}
EXPORT unsigned long fake_ze_last_dmabuf_inode(void)
{
	return last_inode;
}
EXPORT int fake_ze_last_dmabuf_device(void)
{
	return last_device;
}
EXPORT void *fake_ze_driver(void)
{
	return &driver_handle;
}
EXPORT void *fake_ze_device(int index)
{
	return index >= 0 && index < MAX_DEVICES ? &device_handles[index] : NULL;
}
EXPORT int fake_ze_calls_before_init(void)
{
	return early_calls;
}

/* Every entry point but zeInit. */
static int gate(void)
{
	if (initialized)
		return ZE_OK;
	early_calls++;
	return ZE_UNINITIALIZED;
}

static int context_index(void *ctx)
{
	long i = (int *)ctx - live_contexts;

	return ctx && i >= 0 && i < MAX_CONTEXTS && live_contexts[i] ? (int)i : -1;
}

EXPORT int fake_ze_is_context(void *ctx)
{
	return context_index(ctx) >= 0;
}

static int device_index(void *dev)
{
	long i = (char *)dev - device_handles;

	return dev && i >= 0 && i < nr_devices ? (int)i : -1;
}

/* The block of one of the kinds in mask that holds a. */
static struct block *find(uintptr_t a, unsigned mask)
{
	for (int i = 0; i < nr_blocks; i++)
		if ((mask & (1u << blocks[i].kind)) && a >= blocks[i].start && a < blocks[i].end)
			return &blocks[i];
	return NULL;
}

static void remove_block(struct block *b)
{
	*b = blocks[--nr_blocks];
}

EXPORT int zeInit(unsigned flags)
{
	if (flags & ~3u)
		return ZE_INVALID_ENUMERATION;
	if (!nr_drivers)
		return ZE_UNINITIALIZED;
	initialized = 1;
	return ZE_OK;
}

EXPORT int zeDriverGet(uint32_t *n, void **drivers)
{
	int ret = gate();

	if (ret)
		return ret;
	if (!n)
		return ZE_INVALID_NULL_POINTER;
	if (drivers && *n >= 1)
		drivers[0] = &driver_handle;
	*n = 1;
	return ZE_OK;
}

EXPORT int zeDeviceGet(void *driver, uint32_t *n, void **devices)
{
	int ret = gate();

	if (ret)
		return ret;
	if (driver != &driver_handle)
		return ZE_INVALID_NULL_HANDLE;
	if (devices)
		for (uint32_t i = 0; i < *n && i < (uint32_t)nr_devices; i++)
			devices[i] = &device_handles[i];
	*n = (uint32_t)nr_devices;
	return ZE_OK;
}

EXPORT int zeDeviceGetProperties(void *device, struct device_properties *props)
{
	int ret = gate();

	if (ret)
		return ret;
	if (device_index(device) < 0 || props->stype != STYPE_DEVICE_PROPERTIES)
		return ZE_INVALID_ARGUMENT;
	snprintf(props->name, sizeof(props->name), "svmbatch fake Level Zero device %d",
		 device_index(device));
	return ZE_OK;
}

EXPORT int zeContextCreate(void *driver, const struct base_desc *desc, void **ctx)
{
	int ret = gate();

	if (ret)
		return ret;
	if (driver != &driver_handle || !desc || desc->stype != STYPE_CONTEXT_DESC)
		return ZE_INVALID_ARGUMENT;
	for (int i = 0; i < MAX_CONTEXTS; i++) {
		if (!live_contexts[i]) {
			live_contexts[i] = 1;
			*ctx = &live_contexts[i];
			return ZE_OK;
		}
	}
	return ZE_UNSUPPORTED_FEATURE;
}

EXPORT int zeContextDestroy(void *ctx)
{
	int ret = gate(), i = context_index(ctx);

	if (ret)
		return ret;
	if (i < 0)
		return ZE_INVALID_NULL_HANDLE;
	live_contexts[i] = 0;
	return ZE_OK;
}

/* The exporter fdinfo names (exp_name), and the fd's inode. */
static void note_dmabuf(int fd)
{
	char path[64], line[128];
	struct stat st;
	FILE *f;

	last_exporter[0] = '\0';
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "r");
	if (f) {
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "exp_name: %63s", last_exporter) == 1)
				break;
		fclose(f);
	}
	last_inode = fstat(fd, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

/* Only imports: the fake allocates no device memory of its own. */
EXPORT int zeMemAllocDevice(void *ctx, const struct device_mem_alloc_desc *desc, size_t size,
			    size_t alignment, void *device, void **ptr)
{
	int ret = gate();
	const struct import_fd *import = NULL;
	off_t len;
	void *p;

	if (ret)
		return ret;
	if (context_index(ctx) < 0 || device_index(device) < 0)
		return ZE_INVALID_NULL_HANDLE;
	if (!desc || !ptr || desc->stype != STYPE_DEVICE_MEM_ALLOC_DESC || desc->flags ||
	    (alignment & (alignment - 1)))
		return ZE_INVALID_ARGUMENT;
	for (const struct base_desc *d = desc->next; d; d = d->next)
		if (d->stype == STYPE_EXTERNAL_MEMORY_IMPORT_FD)
			import = (const struct import_fd *)d;
	if (!import || import->flags != DMA_BUF)
		return ZE_UNSUPPORTED_FEATURE;
	len = lseek(import->fd, 0, SEEK_END);
	if (len <= 0)
		return ZE_INVALID_ARGUMENT;
	last_alloc_size = size;
	last_dmabuf_size = (size_t)len;
	last_device = device_index(device);
	note_dmabuf(import->fd);
	if (fail_dmabuf_result)
		return fail_dmabuf_result;
	if (size != (size_t)len)
		return ZE_INVALID_SIZE;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, import->fd, 0);
	if (p == MAP_FAILED)
		return ZE_INVALID_ARGUMENT;
	add_block((uintptr_t)p, (uintptr_t)p + size, KIND_DMABUF);
	*ptr = p;
	return ZE_OK;
}

EXPORT int zeMemFree(void *ctx, void *ptr)
{
	int ret = gate();
	struct block *b = find((uintptr_t)ptr, 1u << KIND_DMABUF);

	if (ret)
		return ret;
	if (context_index(ctx) < 0)
		return ZE_INVALID_NULL_HANDLE;
	if (!b || b->start != (uintptr_t)ptr)
		return ZE_INVALID_ARGUMENT;
	munmap(ptr, b->end - b->start);
	remove_block(b);
	return ZE_OK;
}

EXPORT int zeMemGetAllocProperties(void *ctx, const void *ptr, struct alloc_properties *props,
				   void **device)
{
	int ret = gate();
	unsigned known = 1u << KIND_HOST_ALLOC | 1u << KIND_SHARED | 1u << KIND_DEVICE |
			 1u << KIND_DMABUF;
	struct block *b = find((uintptr_t)ptr, known);

	if (ret)
		return ret;
	if (context_index(ctx) < 0)
		return ZE_INVALID_NULL_HANDLE;
	if (!props || props->stype != STYPE_MEMORY_ALLOCATION_PROPERTIES)
		return ZE_INVALID_ARGUMENT;
	props->type = !b			 ? TYPE_UNKNOWN :
		      b->kind == KIND_HOST_ALLOC ? TYPE_HOST :
		      b->kind == KIND_SHARED	 ? TYPE_SHARED :
						   TYPE_DEVICE;
	props->id = b ? (uint64_t)(b - blocks) + 1 : 0;
	props->page_size = b ? 4096 : 0;
	if (device)
		*device = b && b->kind != KIND_HOST_ALLOC ? &device_handles[0] : NULL;
	return ZE_OK;
}

/* The driver's host-pointer import, as compute-runtime's HostPointerManager. */
static int zex_import(void *driver, void *ptr, size_t size)
{
	int ret = gate();
	uintptr_t a = (uintptr_t)ptr;
	struct block *begin, *end;

	if (ret)
		return ret;
	if (driver != &driver_handle)
		return ZE_INVALID_NULL_HANDLE;
	import_calls++;
	if (size > largest_import)
		largest_import = size;
	if (!size || !ptr)
		return ZE_INVALID_ARGUMENT;
	begin = find(a, 1u << KIND_IMPORTED);
	end = find(a + size - 1, 1u << KIND_IMPORTED);
	if (begin && begin == end)
		return ZE_OK;
	if (begin)
		return end ? ZE_OVERLAPPING_REGIONS : ZE_HANDLE_OBJECT_IN_USE;
	if (end)
		return ZE_INVALID_SIZE;
	if (fail_import_after == 0) {
		fail_import_after = -1;
		return fail_import_result;
	}
	if (fail_import_after > 0)
		fail_import_after--;
	add_block(a, a + size, KIND_IMPORTED);
	return ZE_OK;
}

/* Stricter than the driver, which releases the import holding ptr: the
 * fake wants its exact start, as the backend gives it. */
static int zex_release(void *driver, void *ptr)
{
	int ret = gate();
	struct block *b = find((uintptr_t)ptr, 1u << KIND_IMPORTED);

	if (ret)
		return ret;
	if (driver != &driver_handle)
		return ZE_INVALID_NULL_HANDLE;
	if (!b || b->start != (uintptr_t)ptr)
		return ZE_INVALID_ARGUMENT;
	remove_block(b);
	return ZE_OK;
}

static int zex_base_address(void *driver, void *ptr, void **base)
{
	int ret = gate();
	struct block *b = find((uintptr_t)ptr, 1u << KIND_IMPORTED);

	if (ret)
		return ret;
	if (driver != &driver_handle)
		return ZE_INVALID_NULL_HANDLE;
	if (!base)
		import_queries++;
	if (!b)
		return ZE_INVALID_ARGUMENT;
	if (base) {
		if (fail_base_after == 0) {
			fail_base_after = -1;
			return fail_base_result;
		}
		if (fail_base_after > 0)
			fail_base_after--;
		*base = (void *)b->start;
	}
	return ZE_OK;
}

EXPORT int zeDriverGetExtensionFunctionAddress(void *driver, const char *name, void **fn)
{
	int ret = gate();

	if (ret)
		return ret;
	if (driver != &driver_handle)
		return ZE_INVALID_NULL_HANDLE;
	if (!name || !fn)
		return ZE_INVALID_NULL_POINTER;
	*fn = NULL;
	if (!zex_present)
		return ZE_INVALID_ARGUMENT;
	if (!strcmp(name, "zexDriverImportExternalPointer"))
		*fn = (void *)zex_import;
	else if (!strcmp(name, "zexDriverReleaseImportedPointer"))
		*fn = (void *)zex_release;
	else if (!strcmp(name, "zexDriverGetHostPointerBaseAddress"))
		*fn = (void *)zex_base_address;
	return *fn ? ZE_OK : ZE_INVALID_ARGUMENT;
}
