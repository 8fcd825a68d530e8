// SPDX-License-Identifier: MIT
#include <svmbatch/error.hpp>

namespace svmbatch {

const char *step_name(Step step) noexcept
{
	switch (step) {
	case Step::Open:
		return "open";
	case Step::Info:
		return "info";
	case Step::Validate:
		return "validate";
	case Step::Register:
		return "register";
	case Step::Query:
		return "query";
	case Step::IoUringRegister:
		return "io_uring-register";
	case Step::Export:
		return "export";
	case Step::GpuOpen:
		return "gpu-open";
	case Step::GpuMap:
		return "gpu-map";
	case Step::Diagnostics:
		return "diagnostics";
	case Step::IoUringSubmit:
		return "io_uring-submit";
	case Step::RdmaOpen:
		return "rdma-open";
	case Step::RdmaRegister:
		return "rdma-register";
	case Step::Arena:
		return "arena";
	case Step::GpuCopy:
		return "gpu-copy";
	}
	return "unknown";
}

namespace {

std::string describe(Step step, const std::string &what, std::size_t index)
{
	std::string msg = std::string("svmbatch ") + step_name(step);

	if (index != Error::no_index)
		msg += " (buffer " + std::to_string(index) + ")";
	return msg + ": " + what;
}

} // namespace

Error::Error(int err, Step step, const std::string &what, std::size_t buffer_index,
	     long driver_status)
	: std::system_error(err, std::generic_category(), describe(step, what, buffer_index)),
	  step_(step), buffer_index_(buffer_index), driver_status_(driver_status)
{}

} // namespace svmbatch
