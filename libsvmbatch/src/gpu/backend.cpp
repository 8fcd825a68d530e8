// SPDX-License-Identifier: MIT
// GpuMapping, the backend-independent handle of a GPU mapping, and the list
// of the backends built in; the interfaces' destructors.
#include <svmbatch/config.h>
#include <svmbatch/gpu/backend.hpp>
#include <svmbatch/gpu/copy_engine.hpp>
#include <svmbatch/gpu/stream_copier.hpp>

#include <stdexcept>
#include <string>

namespace svmbatch {

std::vector<std::string> built_backends()
{
	std::vector<std::string> names;

	if (SVMBATCH_HAS_CUDA)
		names.emplace_back("cuda");
	if (SVMBATCH_HAS_HIP)
		names.emplace_back("hip");
	if (SVMBATCH_HAS_HSA)
		names.emplace_back("hsa");
	if (SVMBATCH_HAS_AMDGPU)
		names.emplace_back("amdgpu");
	if (SVMBATCH_HAS_DRM)
		names.emplace_back("drm");
	if (SVMBATCH_HAS_ZE)
		names.emplace_back("ze");
	return names;
}

GpuMappingOwner::~GpuMappingOwner() = default;
GpuBackend::~GpuBackend() = default;
GpuCopyEngine::~GpuCopyEngine() = default;

StreamCopier::~StreamCopier() = default;

GpuMapping::GpuMapping(std::string backend, GpuAddressKind kind,
		       std::vector<std::uint64_t> addresses, std::unique_ptr<GpuMappingOwner> owner,
		       std::uint32_t object_handle)
	: backend_(std::move(backend)), kind_(kind), addresses_(std::move(addresses)),
	  owner_(std::move(owner)), object_handle_(object_handle)
{}

GpuMapping::GpuMapping(GpuMapping &&) noexcept = default;
GpuMapping &GpuMapping::operator=(GpuMapping &&) noexcept = default;
GpuMapping::~GpuMapping() = default;

std::uint64_t GpuMapping::address(std::size_t buffer) const
{
	if (buffer >= addresses_.size())
		throw std::out_of_range("svmbatch: GPU mapping has " +
					std::to_string(addresses_.size()) + " buffers, asked for " +
					std::to_string(buffer));
	return addresses_[buffer];
}

void GpuMapping::reset() noexcept
{
	owner_.reset();
	addresses_.clear();
	object_handle_ = 0;
}

} // namespace svmbatch
