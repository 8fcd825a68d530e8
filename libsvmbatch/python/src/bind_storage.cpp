// SPDX-License-Identifier: MIT
// svmbatch._svmbatch.storage_buffers: the library's walk over tensor
// storages (<svmbatch/storage_spans.hpp>), which <svmbatch/torch.hpp>
// uses too, so that svmbatch.torch does not walk them a second way.
#include <cstdint>
#include <string>
#include <vector>

#include <svmbatch/error.hpp>
#include <svmbatch/storage_spans.hpp>

#include "bindings.hpp"

namespace svmbatch::python {

namespace {

/// A new reference as an object, or the Python error that made it fail.
py::object owned(PyObject *o)
{
	if (!o)
		throw py::error_already_set();
	return py::reinterpret_steal<py::object>(o);
}

/// What a storage that is not (address, nbytes) raises: TypeError.
std::string not_a_storage(Py_ssize_t i)
{
	return "storage " + std::to_string(i) + ": expected (address, nbytes), unsigned integers";
}

/// The unsigned integer item of storage i.
std::uint64_t unsigned_of(PyObject *item, Py_ssize_t i)
{
	unsigned long long v = PyLong_AsUnsignedLongLong(item);

	if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
		if (!PyErr_ExceptionMatches(PyExc_TypeError) &&
		    !PyErr_ExceptionMatches(PyExc_OverflowError))
			throw py::error_already_set();
		PyErr_Clear();
		throw py::type_error(not_a_storage(i));
	}
	return v;
}

/// (buffers as (address, length, read_only), owner per buffer, buffer per
/// storage or None) of storages given as (address, nbytes) pairs.  With
/// the C API, not pybind11's casts: pin() of thousands of tensors calls it
/// once, and the generic conversions of the pairs and of the results were
/// most of its time.
py::tuple walk_storages(const py::object &storages, bool read_only)
{
	py::object seq = owned(PySequence_Fast(storages.ptr(), "storages: not a sequence"));
	const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
	PyObject **items = PySequence_Fast_ITEMS(seq.ptr());
	std::vector<StorageSpan> spans;

	spans.reserve(static_cast<std::size_t>(n));
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *fast = PySequence_Fast(items[i], "");

		if (!fast) {
			if (!PyErr_ExceptionMatches(PyExc_TypeError))
				throw py::error_already_set();
			PyErr_Clear();
		}
		auto pair = py::reinterpret_steal<py::object>(fast); // owns fast
		if (!fast || PySequence_Fast_GET_SIZE(fast) != 2)
			throw py::type_error(not_a_storage(i));
		std::uint64_t addr = unsigned_of(PySequence_Fast_GET_ITEM(fast, 0), i);
		std::uint64_t nbytes = unsigned_of(PySequence_Fast_GET_ITEM(fast, 1), i);
		// NOLINTNEXTLINE(performance-no-int-to-ptr): a storage's data_ptr()
		spans.push_back({reinterpret_cast<void *>(static_cast<std::uintptr_t>(addr)),
				 static_cast<std::size_t>(nbytes)});
	}
	const StorageBuffers b =
		storage_buffers(spans, read_only ? Access::ReadOnly : Access::ReadWrite);
	const auto nb = static_cast<Py_ssize_t>(b.buffers.size());
	py::object buffers = owned(PyList_New(nb));
	py::object owner = owned(PyList_New(nb));
	for (Py_ssize_t k = 0; k < nb; k++) {
		const Buffer &x = b.buffers[static_cast<std::size_t>(k)];
		py::object t = owned(PyTuple_New(3));

		PyTuple_SET_ITEM(t.ptr(), 0,
				 owned(PyLong_FromSize_t(reinterpret_cast<std::uintptr_t>(x.ptr)))
					 .release()
					 .ptr());
		PyTuple_SET_ITEM(t.ptr(), 1, owned(PyLong_FromSize_t(x.len)).release().ptr());
		PyTuple_SET_ITEM(t.ptr(), 2, py::bool_(read_only).release().ptr());
		PyList_SET_ITEM(buffers.ptr(), k, t.release().ptr());
		PyList_SET_ITEM(owner.ptr(), k,
				owned(PyLong_FromSize_t(b.owner[static_cast<std::size_t>(k)]))
					.release()
					.ptr());
	}
	const auto ns = static_cast<Py_ssize_t>(b.buffer_of.size());
	py::object buffer_of = owned(PyList_New(ns));
	for (Py_ssize_t i = 0; i < ns; i++) {
		std::size_t k = b.buffer_of[static_cast<std::size_t>(i)];
		py::object v = k == Error::no_index ? py::object(py::none()) :
						      owned(PyLong_FromSize_t(k));

		PyList_SET_ITEM(buffer_of.ptr(), i, v.release().ptr());
	}
	return py::make_tuple(buffers, owner, buffer_of);
}

} // namespace

void bind_storage(py::module_ &m)
{
	m.def("storage_buffers", &walk_storages, py::arg("storages"), py::arg("read_only") = false,
	      "(buffers, owner, buffer_of) of tensor storages given as (address, nbytes): each "
	      "storage once, as long as the longest span naming it; empty ones are None");
}

} // namespace svmbatch::python
