// SPDX-License-Identifier: MIT
/* The fake HSA runtime: see fake_hsa.h.  Not thread-safe; tests are serial. */
#include "fake_hsa.h"

#include <hsa.h>
#include <hsa_ext_amd.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
enum { MAX = 65536, CPU_HANDLE = 1, GPU_BASE = 100, POOL_BASE = 1000, MAX_POOLS = 8 };

static int nr_gpus = 1, init_result, init_balance, accept_interop;
static int fail_after = -1, fail_status, last_agents;
static unsigned last_mask;
static long last_pool_flags = -1;
static void *locked[MAX];
static int nr_locked;
static struct {
	void *p;
	size_t len;
} maps[64];
static int nr_maps;
static struct {
	int segment;
	unsigned flags;
} pools[MAX_POOLS];
static int nr_pools;

EXPORT void fake_hsa_set_pools(const int *segments, const unsigned *flags, int n)
{
	nr_pools = n < MAX_POOLS ? n : MAX_POOLS;
	for (int i = 0; i < nr_pools; i++) {
		pools[i].segment = segments[i];
		pools[i].flags = flags[i];
	}
}

EXPORT void fake_hsa_reset(int gpus, int init_status)
{
	static const int seg[] = {HSA_AMD_SEGMENT_GLOBAL, HSA_AMD_SEGMENT_GLOBAL,
				  HSA_AMD_SEGMENT_GLOBAL};
	static const unsigned flags[] = {
		HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
		HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED |
			HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT,
		HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED,
	};

	nr_gpus = gpus;
	init_result = init_status;
	init_balance = 0;
	accept_interop = 0;
	fail_after = -1;
	nr_locked = 0;
	nr_maps = 0;
	last_agents = 0;
	last_mask = 0;
	last_pool_flags = -1;
	fake_hsa_set_pools(seg, flags, 3);
}

EXPORT void fake_hsa_fail_lock_after(int ok_calls, int status)
{
	fail_after = ok_calls;
	fail_status = status;
}

EXPORT void fake_hsa_accept_interop(int accept)
{
	accept_interop = accept;
}
EXPORT int fake_hsa_locked(void)
{
	return nr_locked;
}
EXPORT int fake_hsa_interop_mapped(void)
{
	return nr_maps;
}
EXPORT int fake_hsa_init_balance(void)
{
	return init_balance;
}
EXPORT int fake_hsa_lock_agents(void)
{
	return last_agents;
}
EXPORT unsigned fake_hsa_last_agent_mask(void)
{
	return last_mask;
}
EXPORT long fake_hsa_last_pool_flags(void)
{
	return last_pool_flags;
}

static int is_gpu(hsa_agent_t a)
{
	return a.handle >= GPU_BASE && a.handle < GPU_BASE + (uint64_t)nr_gpus;
}

/* Bit i per GPU agent i; -1 for an agent that is not one. */
static long agent_mask(const hsa_agent_t *agents, int n)
{
	unsigned mask = 0;

	for (int i = 0; i < n; i++) {
		if (!is_gpu(agents[i]))
			return -1;
		mask |= 1u << (agents[i].handle - GPU_BASE);
	}
	return mask;
}

EXPORT hsa_status_t hsa_init(void)
{
	if (init_result)
		return (hsa_status_t)init_result;
	init_balance++;
	return HSA_STATUS_SUCCESS;
}

EXPORT hsa_status_t hsa_shut_down(void)
{
	if (init_balance <= 0)
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	init_balance--;
	return HSA_STATUS_SUCCESS;
}

EXPORT hsa_status_t hsa_status_string(hsa_status_t status, const char **s)
{
	switch ((int)status) {
	case HSA_STATUS_SUCCESS:
		*s = "HSA_STATUS_SUCCESS";
		break;
	case HSA_STATUS_ERROR:
		*s = "HSA_STATUS_ERROR: fake";
		break;
	case HSA_STATUS_ERROR_OUT_OF_RESOURCES:
		*s = "HSA_STATUS_ERROR_OUT_OF_RESOURCES: fake";
		break;
	case HSA_STATUS_ERROR_INVALID_ARGUMENT:
		*s = "HSA_STATUS_ERROR_INVALID_ARGUMENT: fake";
		break;
	case HSA_STATUS_ERROR_INVALID_ALLOCATION:
		*s = "HSA_STATUS_ERROR_INVALID_ALLOCATION: fake";
		break;
	case HSA_STATUS_ERROR_INVALID_AGENT:
		*s = "HSA_STATUS_ERROR_INVALID_AGENT: fake";
		break;
	default:
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	}
	return HSA_STATUS_SUCCESS;
}

EXPORT hsa_status_t hsa_iterate_agents(hsa_status_t (*cb)(hsa_agent_t, void *), void *data)
{
	if (init_balance <= 0)
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	hsa_agent_t cpu = {CPU_HANDLE};
	hsa_status_t s = cb(cpu, data);
	for (int i = 0; i < nr_gpus && s == HSA_STATUS_SUCCESS; i++) {
		hsa_agent_t gpu = {GPU_BASE + (uint64_t)i};
		s = cb(gpu, data);
	}
	return s;
}

EXPORT hsa_status_t hsa_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attr, void *value)
{
	int gpu = is_gpu(agent);

	if (!gpu && agent.handle != CPU_HANDLE)
		return HSA_STATUS_ERROR_INVALID_AGENT;
	switch ((int)attr) {
	case HSA_AGENT_INFO_DEVICE:
		*(hsa_device_type_t *)value = gpu ? HSA_DEVICE_TYPE_GPU : HSA_DEVICE_TYPE_CPU;
		return HSA_STATUS_SUCCESS;
	case HSA_AGENT_INFO_NAME: /* char[64] */
		memset(value, 0, 64);
		if (gpu)
			snprintf((char *)value, 64, "gfx-fake%d", (int)(agent.handle - GPU_BASE));
		else
			strcpy((char *)value, "cpu-fake");
		return HSA_STATUS_SUCCESS;
	default:
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	}
}

EXPORT hsa_status_t hsa_amd_agent_iterate_memory_pools(
	hsa_agent_t agent, hsa_status_t (*cb)(hsa_amd_memory_pool_t, void *), void *data)
{
	hsa_status_t s = HSA_STATUS_SUCCESS;

	if (agent.handle != CPU_HANDLE)
		return HSA_STATUS_SUCCESS; /* the GPUs' pools are not used */
	for (int i = 0; i < nr_pools && s == HSA_STATUS_SUCCESS; i++) {
		hsa_amd_memory_pool_t pool = {POOL_BASE + (uint64_t)i};
		s = cb(pool, data);
	}
	return s;
}

static int pool_index(hsa_amd_memory_pool_t pool)
{
	if (pool.handle < POOL_BASE || pool.handle >= POOL_BASE + (uint64_t)nr_pools)
		return -1;
	return (int)(pool.handle - POOL_BASE);
}

EXPORT hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t pool,
						 hsa_amd_memory_pool_info_t attr, void *value)
{
	int i = pool_index(pool);

	if (i < 0)
		return (hsa_status_t)HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
	switch ((int)attr) {
	case HSA_AMD_MEMORY_POOL_INFO_SEGMENT:
		*(hsa_amd_segment_t *)value = (hsa_amd_segment_t)pools[i].segment;
		return HSA_STATUS_SUCCESS;
	case HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS:
		/* "undefined" for other segments: make it look usable */
		*(uint32_t *)value = pools[i].segment == HSA_AMD_SEGMENT_GLOBAL ?
					     pools[i].flags :
					     HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
		return HSA_STATUS_SUCCESS;
	default:
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	}
}

/* The checks the header documents: size 0, NULLs, agents vs num_agent,
 * flags, a pool that is not a CPU agent's global pool, a bad agent. */
EXPORT hsa_status_t hsa_amd_memory_lock_to_pool(void *host, size_t size, hsa_agent_t *agents,
						int num_agent, hsa_amd_memory_pool_t pool,
						uint32_t flags, void **agent_ptr)
{
	int p = pool_index(pool);
	long mask;

	if (init_balance <= 0)
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	if (!size || !host || !agent_ptr || flags || (agents && !num_agent) ||
	    (!agents && num_agent))
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	if (p < 0 || pools[p].segment != HSA_AMD_SEGMENT_GLOBAL)
		return (hsa_status_t)HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
	mask = agent_mask(agents, num_agent);
	if (mask < 0)
		return HSA_STATUS_ERROR_INVALID_AGENT;
	if (fail_after == 0) {
		fail_after = -1;
		return (hsa_status_t)fail_status;
	}
	if (fail_after > 0)
		fail_after--;
	if (nr_locked == MAX)
		return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
	locked[nr_locked++] = host;
	last_agents = num_agent;
	last_mask = (unsigned)mask;
	last_pool_flags = pools[p].flags;
	*agent_ptr = host;
	return HSA_STATUS_SUCCESS;
}

EXPORT hsa_status_t hsa_amd_memory_unlock(void *host)
{
	for (int i = 0; i < nr_locked; i++) {
		if (locked[i] == host) {
			locked[i] = locked[--nr_locked];
			return HSA_STATUS_SUCCESS;
		}
	}
	return HSA_STATUS_ERROR_INVALID_ALLOCATION;
}

EXPORT hsa_status_t hsa_amd_interop_map_buffer(uint32_t num_agents, hsa_agent_t *agents, int fd,
					       uint32_t flags, size_t *size, void **ptr,
					       size_t *metadata_size, const void **metadata)
{
	off_t len = lseek(fd, 0, SEEK_END);
	long mask;

	(void)metadata_size;
	(void)metadata;
	if (init_balance <= 0)
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	if (!num_agents || !agents || !size || !ptr || flags)
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	mask = agent_mask(agents, (int)num_agents);
	if (mask < 0)
		return HSA_STATUS_ERROR_INVALID_AGENT;
	if (!accept_interop || len <= 0 || nr_maps == 64)
		return HSA_STATUS_ERROR;
	void *p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return HSA_STATUS_ERROR;
	maps[nr_maps].p = p;
	maps[nr_maps++].len = (size_t)len;
	last_mask = (unsigned)mask;
	*size = (size_t)len;
	*ptr = p;
	return HSA_STATUS_SUCCESS;
}

EXPORT hsa_status_t hsa_amd_interop_unmap_buffer(void *ptr)
{
	for (int i = 0; i < nr_maps; i++) {
		if (maps[i].p == ptr) {
			munmap(ptr, maps[i].len);
			maps[i] = maps[--nr_maps];
			return HSA_STATUS_SUCCESS;
		}
	}
	return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}
