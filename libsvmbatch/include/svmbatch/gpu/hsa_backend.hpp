// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <svmbatch/api.h>
#include <svmbatch/gpu/backend.hpp>

namespace svmbatch {

namespace detail {
struct HsaState;
}

struct HsaOptions {
	/// The ROCm HSA runtime, loaded with dlopen.
	std::string library = "libhsa-runtime64.so.1";
	/// Kernel mode: map the registration's dma-buf with
	/// hsa_amd_interop_map_buffer first, and lock the ranges only if the
	/// runtime refuses it.  Userspace mode always locks.
	bool prefer_dmabuf = true;
	/// The GPU agents that get access, as indices into the runtime's GPU
	/// agents in hsa_iterate_agents order; empty: all of them.
	std::vector<std::size_t> gpus;
};

/// AMD GPUs through ROCm's HSA runtime, loaded at run time.  map() gives
/// the chosen GPU agents access to the buffers, either through the
/// dma-buf (kernel mode, hsa_amd_interop_map_buffer: one mapping of all
/// pages) or by hsa_amd_memory_lock_to_pool of each merged range into the
/// CPU agent's fine-grained global pool; locking is transactional: if
/// range k fails, ranges 0..k-1 are unlocked before the Error (with the
/// hsa_status_t) is thrown.  address(i) is the agent pointer of caller
/// buffer i.  The runtime stays initialized and loaded while the backend
/// or any of its mappings lives.  Never run on AMD hardware here: see
/// Documentation/amd.rst.
class SVMBATCH_API HsaBackend final : public GpuBackend {
public:
	/// Error(ENODEV, Step::GpuOpen) without the runtime, when hsa_init
	/// fails (no /dev/kfd), with no GPU agent, or with an index in
	/// options.gpus past the last GPU agent; EINVAL for a repeated index.
	explicit HsaBackend(const HsaOptions &options = {});
	HsaBackend(const HsaBackend &) = delete;
	HsaBackend &operator=(const HsaBackend &) = delete;
	HsaBackend(HsaBackend &&) = delete;
	HsaBackend &operator=(HsaBackend &&) = delete;
	~HsaBackend() override;

	const char *name() const noexcept override { return "hsa"; }
	GpuMapping map(const Registration &registration) override;

	/// Names of the GPU agents that get access (HSA_AGENT_INFO_NAME).
	std::vector<std::string> gpu_agents() const;
	/// How the last successful map() did it: "dmabuf" or "lock".
	const std::string &last_path() const noexcept { return last_path_; }

private:
	std::shared_ptr<const detail::HsaState> state_;
	bool prefer_dmabuf_ = true;
	std::string last_path_;
};

} // namespace svmbatch
