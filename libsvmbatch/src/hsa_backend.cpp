// SPDX-License-Identifier: MIT
// HsaBackend: dma-buf interop or per-range host locking, all or nothing.
// Follows hsa_ext_amd.h (ROCm 5.2, Debian's libhsa-runtime-dev):
// hsa_amd_memory_lock_to_pool takes "a buffer allocated by C/C++ or OS
// allocator", the agents to gain access, a "global memory pool owned by a
// CPU agent" and flags 0; hsa_amd_interop_map_buffer takes the dma-buf fd
// as interop_handle and flags 0.
#include <svmbatch/context.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/hsa_backend.hpp>
#include <svmbatch/registration.hpp>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "hsa_runtime.hpp"

namespace svmbatch {

namespace detail {

/// The runtime, the GPU agents and the CPU pool that locking uses.
struct HsaState {
	explicit HsaState(const std::string &library) : rt(library) {}

	HsaRuntime rt;
	std::vector<hsa_agent_t> gpus;
	std::vector<std::string> gpu_names;
	hsa_amd_memory_pool_t cpu_pool{};
	bool have_pool = false;
};

} // namespace detail

namespace {

using detail::HsaRuntime;
using detail::HsaState;

struct Agents {
	const HsaRuntime *rt = nullptr;
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

struct PoolSearch {
	const HsaRuntime *rt = nullptr;
	hsa_amd_memory_pool_t fine{}, any{};
	bool have_fine = false, have_any = false;
};

/// Global pools of a CPU agent; fine-grained preferred (coherent with the
/// host, what HIP's hipHostRegister uses).
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
	if ((flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED) && !s->have_fine) {
		s->fine = pool;
		s->have_fine = true;
	}
	if (!s->have_any) {
		s->any = pool;
		s->have_any = true;
	}
	return HSA_STATUS_SUCCESS;
}

/// Undoes map(): the interop mapping, or every locked range.
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
	DmaBuf dmabuf;	///< kept open while the runtime maps it
	std::vector<void *> locked;

private:
	std::shared_ptr<const HsaState> s_;
};

} // namespace

HsaBackend::HsaBackend(const HsaOptions &options) : prefer_dmabuf_(options.prefer_dmabuf)
{
	auto s = std::make_shared<HsaState>(options.library);
	Agents agents{&s->rt, {}, {}};

	if (hsa_status_t st = s->rt.iterate_agents(collect_agent, &agents); st != HSA_STATUS_SUCCESS)
		throw Error(ENODEV, Step::GpuOpen, "hsa_iterate_agents: " + s->rt.describe(st),
			    Error::no_index, st);
	if (agents.gpus.empty())
		throw Error(ENODEV, Step::GpuOpen, "the HSA runtime has no GPU agent");
	for (hsa_agent_t cpu : agents.cpus) {
		PoolSearch search{&s->rt};
		s->rt.iterate_memory_pools(cpu, collect_pool, &search);
		if (search.have_fine || search.have_any) {
			s->cpu_pool = search.have_fine ? search.fine : search.any;
			s->have_pool = true;
			break;
		}
	}
	for (hsa_agent_t gpu : agents.gpus) {
		char name[64] = {};
		s->rt.agent_get_info(gpu, HSA_AGENT_INFO_NAME, name);
		s->gpu_names.emplace_back(name);
	}
	s->gpus = std::move(agents.gpus);
	state_ = std::move(s);
}

HsaBackend::~HsaBackend() = default;

std::vector<std::string> HsaBackend::gpu_agents() const
{
	return state_->gpu_names;
}

GpuMapping HsaBackend::map(const Registration &registration)
{
	const HsaRuntime &rt = state_->rt;
	auto buffers = registration.buffers();
	auto ranges = registration.ranges();
	auto access = std::make_unique<HsaAccess>(state_);
	std::vector<hsa_agent_t> gpus = state_->gpus;	// the API takes a non-const array
	std::vector<std::uint64_t> addresses(buffers.size());

	if (prefer_dmabuf_ && registration.mode() == Mode::Kernel) {
		bool writable = std::all_of(buffers.begin(), buffers.end(), [](const Buffer &b) {
			return b.access == Access::ReadWrite;
		});
		access->dmabuf = registration.export_dmabuf(writable);
		std::size_t size = 0;
		void *ptr = nullptr;
		if (rt.interop_map_buffer(static_cast<std::uint32_t>(gpus.size()), gpus.data(),
					  access->dmabuf.fd(), 0, &size, &ptr, nullptr,
					  nullptr) == HSA_STATUS_SUCCESS) {
			access->interop_ptr = ptr;
			for (std::size_t i = 0; i < buffers.size(); i++)
				addresses[i] = reinterpret_cast<std::uintptr_t>(ptr) +
					       registration.dmabuf_offset(i);
			last_path_ = "dmabuf";
			return {name(), GpuAddressKind::DevicePointer, std::move(addresses),
				std::move(access)};
		}
		// Older runtimes and kernels import only amdgpu's own dma-bufs.
		access->dmabuf = DmaBuf();
	}
	if (!state_->have_pool)
		throw Error(ENODEV, Step::GpuMap, "no CPU agent with a global memory pool to lock into");

	std::vector<std::size_t> first_buffer(ranges.size(), Error::no_index);
	for (std::size_t i = buffers.size(); i-- > 0;)
		first_buffer[registration.location(i).range] = i;
	std::vector<std::uintptr_t> agent_base(ranges.size());
	for (std::size_t r = 0; r < ranges.size(); r++) {
		void *host = reinterpret_cast<void *>(ranges[r].addr); // NOLINT(performance-no-int-to-ptr)
		void *agent_ptr = nullptr;
		hsa_status_t st = rt.memory_lock_to_pool(host, ranges[r].len, gpus.data(),
							 static_cast<int>(gpus.size()),
							 state_->cpu_pool, 0, &agent_ptr);
		if (st != HSA_STATUS_SUCCESS) {
			access->release();	// ranges 0..r-1
			throw Error(detail::hsa_errno(st), Step::GpuMap,
				    "hsa_amd_memory_lock_to_pool of range " + std::to_string(r) +
					    " (" + std::to_string(ranges[r].len) + " bytes): " +
					    rt.describe(st),
				    first_buffer[r], st);
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
