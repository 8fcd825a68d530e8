// SPDX-License-Identifier: MIT
// What an RdmaMemoryRegions owns: the memory regions and the library that
// deregisters them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <svmbatch/rdma.hpp>

#include "shim/libibverbs.hpp"

namespace svmbatch::detail {

struct RdmaRegions {
	explicit RdmaRegions(std::shared_ptr<const LibIbverbs> lib) : verbs(std::move(lib)) {}
	RdmaRegions(const RdmaRegions &) = delete;
	RdmaRegions &operator=(const RdmaRegions &) = delete;
	RdmaRegions(RdmaRegions &&) = delete;
	RdmaRegions &operator=(RdmaRegions &&) = delete;
	/// Deregisters every region, the last first.
	~RdmaRegions() { deregister_all(); }
	void deregister_all() noexcept;

	std::shared_ptr<const LibIbverbs> verbs;
	RdmaPath path = RdmaPath::PerRange;
	std::string fallback_reason;
	std::vector<RdmaRegion> regions;
	std::vector<std::size_t> region_of; ///< per caller buffer
	std::vector<std::uint64_t> addr; ///< per caller buffer, in its region's terms
};

} // namespace svmbatch::detail
