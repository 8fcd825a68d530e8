// SPDX-License-Identifier: MIT
// svmbatch._svmbatch.storage_buffers: the library's walk over tensor
// storages (<svmbatch/storage_spans.hpp>), which <svmbatch/torch.hpp>
// uses too, so that svmbatch.torch does not walk them a second way.
#include <cstdint>
#include <utility>
#include <vector>

#include <pybind11/stl.h>

#include <svmbatch/error.hpp>
#include <svmbatch/storage_spans.hpp>

#include "bindings.hpp"

namespace svmbatch::python {

namespace {

/// (buffers as (address, length, read_only), owner per buffer, buffer per
/// storage or None) of storages given as (address, nbytes) pairs.
py::tuple walk_storages(const std::vector<std::pair<std::uintptr_t, std::size_t>> &storages,
			bool read_only)
{
	std::vector<StorageSpan> spans;
	spans.reserve(storages.size());
	for (const auto &[addr, nbytes] : storages)
		// NOLINTNEXTLINE(performance-no-int-to-ptr): a storage's data_ptr()
		spans.push_back({reinterpret_cast<void *>(addr), nbytes});
	const StorageBuffers b =
		storage_buffers(spans, read_only ? Access::ReadOnly : Access::ReadWrite);
	py::list buffers;
	for (const Buffer &x : b.buffers)
		buffers.append(
			py::make_tuple(reinterpret_cast<std::uintptr_t>(x.ptr), x.len, read_only));
	py::list buffer_of;
	for (std::size_t k : b.buffer_of)
		buffer_of.append(k == Error::no_index ? py::object(py::none()) : py::int_(k));
	return py::make_tuple(buffers, py::cast(b.owner), buffer_of);
}

} // namespace

void bind_storage(py::module_ &m)
{
	m.def("storage_buffers", &walk_storages, py::arg("storages"), py::arg("read_only") = false,
	      "(buffers, owner, buffer_of) of tensor storages given as (address, nbytes): each "
	      "storage once, as long as the longest span naming it; empty ones are None");
}

} // namespace svmbatch::python
