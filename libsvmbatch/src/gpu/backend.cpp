// SPDX-License-Identifier: MIT
// GpuMapping, the backend-independent handle of a GPU mapping.
#include <svmbatch/gpu/backend.hpp>

#include <stdexcept>
#include <string>

namespace svmbatch {

GpuMappingOwner::~GpuMappingOwner() = default;
GpuBackend::~GpuBackend() = default;

GpuMapping::GpuMapping(std::string backend, GpuAddressKind kind,
		       std::vector<std::uint64_t> addresses,
		       std::unique_ptr<GpuMappingOwner> owner,
		       std::uint32_t object_handle)
	: backend_(std::move(backend)), kind_(kind),
	  addresses_(std::move(addresses)), owner_(std::move(owner)),
	  object_handle_(object_handle)
{
}

GpuMapping::GpuMapping(GpuMapping &&) noexcept = default;
GpuMapping &GpuMapping::operator=(GpuMapping &&) noexcept = default;
GpuMapping::~GpuMapping() = default;

std::uint64_t GpuMapping::address(std::size_t buffer) const
{
	if (buffer >= addresses_.size())
		throw std::out_of_range("svmbatch: GPU mapping has " +
					std::to_string(addresses_.size()) +
					" buffers, asked for " + std::to_string(buffer));
	return addresses_[buffer];
}

void GpuMapping::reset() noexcept
{
	owner_.reset();
	addresses_.clear();
	object_handle_ = 0;
}

} // namespace svmbatch
