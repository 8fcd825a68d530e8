// SPDX-License-Identifier: MIT
// For libtorch users (header-only: include it where ATen is): pin a set of
// CPU tensors as one registration, mapped for a GPU in one call, as one
// RAII object.  The same as svmbatch.torch.pin() in Python.
#pragma once

#include <cerrno>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include <svmbatch/buffer.hpp>
#include <svmbatch/context.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/gpu/backend.hpp>
#include <svmbatch/registration.hpp>
#include <svmbatch/storage_spans.hpp>

namespace svmbatch::torch {

/// CPU tensors whose storages are registered as one set (each storage
/// once; storages whose pages touch share a range) and, with a backend,
/// GPU-mapped.  Keeps the tensors (so their storages) alive; the
/// destructor unmaps, then unregisters.  Move-only.
class PinnedTensors {
public:
	PinnedTensors(PinnedTensors &&) noexcept = default;
	PinnedTensors &operator=(PinnedTensors &&) noexcept = default;
	PinnedTensors(const PinnedTensors &) = delete;
	PinnedTensors &operator=(const PinnedTensors &) = delete;
	~PinnedTensors() = default;

	const Registration &registration() const { return *registration_; }
	/// The GPU mapping, or nullptr when pinned without a backend.
	const GpuMapping *mapping() const { return mapping_ ? &*mapping_ : nullptr; }
	const std::vector<at::Tensor> &tensors() const noexcept { return tensors_; }
	/// The registration's buffer holding tensor i's storage; Error::no_index
	/// for a tensor with an empty storage (nothing to register).
	std::size_t buffer_of(std::size_t tensor) const { return buffer_of_.at(tensor); }
	/// Page ranges the storages merged into.
	std::size_t ranges() const { return registration_->ranges().size(); }

private:
	friend PinnedTensors pin(Context &context, std::vector<at::Tensor> tensors,
				 GpuBackend *backend);
	PinnedTensors() = default;

	// Declared first, destroyed last: unmap, unregister, then the tensors.
	std::vector<at::Tensor> tensors_;
	std::vector<std::size_t> buffer_of_;
	std::optional<Registration> registration_;
	std::optional<GpuMapping> mapping_;
};

namespace detail {

/// e, about buffer k, as an error about the tensor that owns buffer k.
inline Error about_tensor(const Error &e, const std::vector<std::size_t> &owner)
{
	if (e.buffer_index() == Error::no_index)
		return e;
	std::size_t t = owner.at(e.buffer_index());
	return Error(e.err(), e.step(), "tensor " + std::to_string(t) + ": " + e.what(), t,
		     e.driver_status());
}

} // namespace detail

/// Register the storages of tensors (strided CPU tensors) in one step and,
/// with a backend (CudaBackend...), map them in one call: all or nothing.
/// Errors carry the tensor's index (buffer_index()).
inline PinnedTensors pin(Context &context, std::vector<at::Tensor> tensors,
			 GpuBackend *backend = nullptr)
{
	std::vector<StorageSpan> storages;
	storages.reserve(tensors.size());
	for (std::size_t i = 0; i < tensors.size(); i++) {
		const at::Tensor &t = tensors[i];
		if (!t.defined() || !t.device().is_cpu() || t.layout() != at::kStrided)
			throw Error(EINVAL, Step::Validate,
				    "tensor " + std::to_string(i) +
					    ": only defined, strided CPU tensors can be pinned",
				    i);
		const at::Storage &s = t.storage();
		storages.push_back({s.data_ptr().get(), s.nbytes()});
	}
	// Each storage once: the walk svmbatch.torch uses too.
	StorageBuffers walk = storage_buffers(storages);
	PinnedTensors out;
	out.buffer_of_ = std::move(walk.buffer_of);
	const std::vector<Buffer> &buffers = walk.buffers;
	const std::vector<std::size_t> &owner = walk.owner;
	// Mapped at once: the GPU runtime faults the pages in as it pins
	// them, so userspace mode only checks them rather than faulting first.
	RegisterOptions options;
	options.prefault = backend == nullptr;
	try {
		out.registration_.emplace(context.register_buffers(buffers, options));
		if (backend != nullptr)
			out.mapping_.emplace(backend->map(*out.registration_));
	} catch (const Error &e) {
		throw detail::about_tensor(e, owner);
	}
	out.tensors_ = std::move(tensors);
	return out;
}

} // namespace svmbatch::torch
