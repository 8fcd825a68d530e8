// SPDX-License-Identifier: MIT
// HsaBackend: dma-buf interop or per-range host locking, all or nothing.
// Follows hsa_ext_amd.h (ROCm 5.2, Debian's libhsa-runtime-dev):
// hsa_amd_memory_lock_to_pool takes "a buffer allocated by C/C++ or OS
// allocator", the agents to gain access, a "global memory pool owned by a
// CPU agent" and flags 0 ("reserved, must be 0"); hsa_amd_interop_map_buffer
// takes the dma-buf fd as interop_handle and flags 0.
#include <svmbatch/context.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/gpu/hsa_backend.hpp>
#include <svmbatch/registration.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <vector>

#include "core/range_plan.hpp"
#include "shim/libhsa.hpp"

namespace svmbatch {

namespace detail {

/// The runtime, the GPU agents given access and the CPU pool to lock into.
struct HsaState {
	explicit HsaState(const std::string &library) : rt(library) {}

	LibHsa rt;
	std::vector<hsa_agent_t> gpus;
	std::vector<std::string> gpu_names;
	hsa_amd_memory_pool_t cpu_pool{};
	bool have_pool = false;
};

} // namespace detail

namespace {

using detail::HsaState;
using detail::LibHsa;

struct Agents {
	const LibHsa *rt = nullptr;
	std::vector<hsa_agent_t> cpus, gpus;
};

hsa_status_t collect_agent(hsa_agent_t agent, void *data)
{
	auto *a = static_cast<Agents *>(data);
	hsa_device_type_t type{};

	if (a->rt->agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type) != HSA_STATUS_SUCCESS)
		return HSA_STATUS_SUCCESS;
	if (type == HSA_DEVICE_TYPE_GPU)
		a->gpus.push_back(agent);
	else if (type == HSA_DEVICE_TYPE_CPU)
		a->cpus.push_back(agent);
	return HSA_STATUS_SUCCESS;
}

/// A CPU agent's global pools, ranked for locking: fine-grained (coherent
/// with the host, the pool HIP's hipHostRegister locks into), then the
/// fine-grained kernarg pool (ROCR's may be uncached), then
/// coarse-grained.  The flags are read only for HSA_AMD_SEGMENT_GLOBAL
/// pools: the header leaves them undefined for other segments.
struct PoolSearch {
	static constexpr int none = 3;

	const LibHsa *rt = nullptr;
	hsa_amd_memory_pool_t best{};
	int rank = none;
};

int pool_rank(std::uint32_t flags)
{
	if (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED)
		return (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT) ? 1 : 0;
	if (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED)
		return 2;
	return PoolSearch::none; // e.g. newer runtimes' extended-scope pool
}

hsa_status_t collect_pool(hsa_amd_memory_pool_t pool, void *data)
{
	auto *s = static_cast<PoolSearch *>(data);
	hsa_amd_segment_t segment{};
	std::uint32_t flags = 0;

	if (s->rt->memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment) !=
		    HSA_STATUS_SUCCESS ||
	    segment != HSA_AMD_SEGMENT_GLOBAL)
		return HSA_STATUS_SUCCESS;
	if (s->rt->memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags) !=
	    HSA_STATUS_SUCCESS)
		return HSA_STATUS_SUCCESS;
	if (int rank = pool_rank(flags); rank < s->rank) {
		s->best = pool;
		s->rank = rank;
	}
	return HSA_STATUS_SUCCESS;
}

std::string hex(std::uint64_t v)
{
	char buf[24];

	std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
	return buf;
}

/// Undoes map(): the interop mapping, or every locked range, newest first.
/// Holds the state, so the runtime stays initialized and loaded.
class HsaAccess final : public GpuMappingOwner {
public:
	explicit HsaAccess(std::shared_ptr<const HsaState> s) : s_(std::move(s)) {}
	HsaAccess(const HsaAccess &) = delete;
	HsaAccess &operator=(const HsaAccess &) = delete;
	HsaAccess(HsaAccess &&) = delete;
	HsaAccess &operator=(HsaAccess &&) = delete;
	~HsaAccess() override { release(); }

	void release() noexcept
	{
		if (interop_ptr) {
			s_->rt.interop_unmap_buffer(interop_ptr);
			interop_ptr = nullptr;
		}
		while (!locked.empty()) {
			s_->rt.memory_unlock(locked.back());
			locked.pop_back();
		}
		dmabuf = DmaBuf();
	}

	void *interop_ptr = nullptr;
	DmaBuf dmabuf; ///< kept open while the runtime maps it
	std::vector<void *> locked;

private:
	std::shared_ptr<const HsaState> s_;
};

} // namespace

HsaBackend::HsaBackend(const HsaOptions &options) : prefer_dmabuf_(options.prefer_dmabuf)
{
	auto s = std::make_shared<HsaState>(options.library);
	Agents agents{&s->rt, {}, {}};

	if (hsa_status_t st = s->rt.iterate_agents(collect_agent, &agents);
	    st != HSA_STATUS_SUCCESS)
		throw Error(ENODEV, Step::GpuOpen, "hsa_iterate_agents: " + s->rt.describe(st),
			    Error::no_index, st);
	if (agents.gpus.empty())
		throw Error(ENODEV, Step::GpuOpen, "the HSA runtime has no GPU agent");
	if (options.gpus.empty()) {
		s->gpus = agents.gpus;
	} else {
		for (std::size_t i : options.gpus) {
			if (i >= agents.gpus.size())
				throw Error(ENODEV, Step::GpuOpen,
					    "no GPU agent " + std::to_string(i) +
						    " (the HSA runtime has " +
						    std::to_string(agents.gpus.size()) + ")");
			auto same = [&](hsa_agent_t a) {
				return a.handle == agents.gpus[i].handle;
			};
			if (std::any_of(s->gpus.begin(), s->gpus.end(), same))
				throw Error(EINVAL, Step::GpuOpen,
					    "GPU agent " + std::to_string(i) + " is chosen twice");
			s->gpus.push_back(agents.gpus[i]);
		}
	}
	// The first CPU agent with a usable pool (ROCclr picks the one nearest
	// the GPU; any CPU agent's system memory pool can lock any host page).
	for (hsa_agent_t cpu : agents.cpus) {
		PoolSearch search{&s->rt};
		s->rt.iterate_memory_pools(cpu, collect_pool, &search);
		if (search.rank != PoolSearch::none) {
			s->cpu_pool = search.best;
			s->have_pool = true;
			break;
		}
	}
	for (hsa_agent_t gpu : s->gpus) {
		char name[64] = {}; // HSA_AGENT_INFO_NAME: char[64]
		s->rt.agent_get_info(gpu, HSA_AGENT_INFO_NAME, name);
		name[sizeof(name) - 1] = '\0';
		s->gpu_names.emplace_back(name);
	}
	state_ = std::move(s);
}

HsaBackend::~HsaBackend() = default;

std::vector<std::string> HsaBackend::gpu_agents() const
{
	return state_->gpu_names;
}

GpuMapping HsaBackend::map(const Registration &registration)
{
	const LibHsa &rt = state_->rt;
	auto buffers = registration.buffers();
	auto ranges = registration.ranges();
	auto access = std::make_unique<HsaAccess>(state_);
	std::vector<hsa_agent_t> gpus = state_->gpus; // the API takes a non-const array
	std::vector<std::uint64_t> addresses(buffers.size());
	std::string refused;

	if (prefer_dmabuf_ && registration.mode() == Mode::Kernel) {
		access->dmabuf = registration.export_dmabuf(detail::all_writable(buffers));
		std::size_t size = 0;
		void *ptr = nullptr;
		hsa_status_t st = rt.interop_map_buffer(static_cast<std::uint32_t>(gpus.size()),
							gpus.data(), access->dmabuf.fd(), 0, &size,
							&ptr, nullptr, nullptr);
		if (st == HSA_STATUS_SUCCESS) {
			access->interop_ptr = ptr;
			std::size_t needed = 0;
			for (std::size_t i = 0; i < buffers.size(); i++) {
				needed = std::max(needed,
						  registration.dmabuf_offset(i) + buffers[i].len);
				addresses[i] = reinterpret_cast<std::uintptr_t>(ptr) +
					       registration.dmabuf_offset(i);
			}
			if (size < needed) // the owner unmaps it
				throw Error(EIO, Step::GpuMap,
					    "hsa_amd_interop_map_buffer mapped " +
						    std::to_string(size) + " bytes of a " +
						    std::to_string(needed) + "-byte dma-buf");
			last_path_ = "dmabuf";
			return {name(), GpuAddressKind::DevicePointer, std::move(addresses),
				std::move(access)};
		}
		// KFD imports only dma-bufs that amdgpu exported (its
		// GET_DMABUF_INFO asks the exporter's GPU): lock instead.
		refused = "; the dma-buf interop was refused first: " + rt.describe(st);
		access->dmabuf = DmaBuf();
	}
	if (!state_->have_pool)
		throw Error(ENODEV, Step::GpuMap,
			    "no CPU agent has a global memory pool to lock into" + refused);

	std::vector<std::uintptr_t> agent_base(ranges.size());
	for (std::size_t r = 0; r < ranges.size(); r++) {
		// NOLINTNEXTLINE(performance-no-int-to-ptr)
		void *host = reinterpret_cast<void *>(ranges[r].addr);
		void *agent_ptr = nullptr;
		hsa_status_t st = rt.memory_lock_to_pool(host, ranges[r].len, gpus.data(),
							 static_cast<int>(gpus.size()),
							 state_->cpu_pool, 0, &agent_ptr);
		if (st != HSA_STATUS_SUCCESS) {
			access->release(); // ranges 0..r-1
			std::size_t blame = registration.first_buffer(r);
			throw Error(detail::hsa_errno(st), Step::GpuMap,
				    "hsa_amd_memory_lock_to_pool of range " + std::to_string(r) +
					    " (" + std::to_string(ranges[r].len) + " bytes at " +
					    hex(ranges[r].addr) + ", from caller buffer " +
					    std::to_string(blame) + "): " + rt.describe(st) +
					    refused,
				    blame, st);
		}
		access->locked.push_back(host);
		agent_base[r] = reinterpret_cast<std::uintptr_t>(agent_ptr);
	}
	for (std::size_t i = 0; i < buffers.size(); i++) {
		BufferLocation loc = registration.location(i);
		addresses[i] = agent_base[loc.range] + loc.offset;
	}
	last_path_ = "lock";
	return {name(), GpuAddressKind::DevicePointer, std::move(addresses), std::move(access)};
}

} // namespace svmbatch
