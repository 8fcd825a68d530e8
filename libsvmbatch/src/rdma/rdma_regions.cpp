// SPDX-License-Identifier: MIT
// RdmaMemoryRegions: the keys of a registration's memory regions, and
// deregistering them.
#include <svmbatch/rdma.hpp>

#include <stdexcept>
#include <string>

#include "rdma/rdma_regions.hpp"

namespace svmbatch {

namespace detail {

void RdmaRegions::deregister_all() noexcept
{
	// Nothing to report to: a region that does not deregister stays
	// the driver's to free when the protection domain's context closes.
	while (!regions.empty()) {
		(void)verbs->dereg_mr(regions.back().mr);
		regions.pop_back();
	}
}

} // namespace detail

const char *rdma_path_name(RdmaPath path) noexcept
{
	switch (path) {
	case RdmaPath::Auto:
		return "auto";
	case RdmaPath::DmaBuf:
		return "dmabuf";
	case RdmaPath::PerRange:
		return "per-range";
	}
	return "unknown";
}

RdmaMemoryRegions::RdmaMemoryRegions() = default;
RdmaMemoryRegions::RdmaMemoryRegions(std::unique_ptr<detail::RdmaRegions> regions)
	: regions_(std::move(regions))
{}
RdmaMemoryRegions::RdmaMemoryRegions(RdmaMemoryRegions &&) noexcept = default;
RdmaMemoryRegions &RdmaMemoryRegions::operator=(RdmaMemoryRegions &&) noexcept = default;
RdmaMemoryRegions::~RdmaMemoryRegions() = default;

RdmaPath RdmaMemoryRegions::path() const noexcept
{
	return regions_ ? regions_->path : RdmaPath::Auto;
}

const std::string &RdmaMemoryRegions::fallback_reason() const noexcept
{
	static const std::string none;

	return regions_ ? regions_->fallback_reason : none;
}

std::size_t RdmaMemoryRegions::size() const noexcept
{
	return regions_ ? regions_->region_of.size() : 0;
}

std::size_t RdmaMemoryRegions::region_of(std::size_t buffer) const
{
	if (buffer >= size())
		throw std::out_of_range("svmbatch: buffer " + std::to_string(buffer) + " of " +
					std::to_string(size()) + " memory-region buffers");
	return regions_->region_of[buffer];
}

RdmaKey RdmaMemoryRegions::key(std::size_t buffer) const
{
	const RdmaRegion &r = regions_->regions[region_of(buffer)];

	return {regions_->addr[buffer], r.mr->lkey, r.mr->rkey};
}

std::span<const RdmaRegion> RdmaMemoryRegions::regions() const noexcept
{
	if (!regions_)
		return {};
	return regions_->regions;
}

void RdmaMemoryRegions::reset() noexcept
{
	regions_.reset();
}

} // namespace svmbatch
