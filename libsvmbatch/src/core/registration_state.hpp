// SPDX-License-Identifier: MIT
// What a Registration owns; shared by registration.cpp and fixed_buffers.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <svmbatch/buffer.hpp>
#include <svmbatch/context.hpp>
#include <svmbatch/detail/unique_fd.hpp>

#include "core/range_plan.hpp"

namespace svmbatch::detail {

class Device;

struct RegistrationState {
	Mode mode = Mode::Userspace;
	std::shared_ptr<Device> device; ///< null in userspace mode
	std::uint32_t handle = 0; ///< 0: nothing to unregister
	std::size_t page_size = 0;
	std::vector<Buffer> buffers; ///< the caller's, in the caller's order
	RangePlan plan;
	std::uint64_t pages = 0;
	std::uint64_t pinned_pages = 0;
	UniqueFd stale_eventfd; ///< RegisterOptions::notify_stale

	RegistrationState() = default;
	RegistrationState(const RegistrationState &) = delete;
	RegistrationState &operator=(const RegistrationState &) = delete;
	RegistrationState(RegistrationState &&) = delete;
	RegistrationState &operator=(RegistrationState &&) = delete;
	~RegistrationState();
};

} // namespace svmbatch::detail
