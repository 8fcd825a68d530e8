// SPDX-License-Identifier: MIT
// Handing memory to a framework as a DLPack capsule.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <pybind11/pybind11.h>

#include "dlpack.hpp"

namespace svmbatch::python {

namespace py = pybind11;

/// What keeps exported memory alive until the consumer calls the deleter;
/// the deleter may run on any thread, with or without the GIL.
class ExportOwner {
public:
	ExportOwner() = default;
	ExportOwner(const ExportOwner &) = delete;
	ExportOwner &operator=(const ExportOwner &) = delete;
	ExportOwner(ExportOwner &&) = delete;
	ExportOwner &operator=(ExportOwner &&) = delete;
	virtual ~ExportOwner() = default;
};

/// A reference to a Python object, dropped under the GIL from any thread.
class PyObjectOwner final : public ExportOwner {
public:
	explicit PyObjectOwner(py::object obj) : obj_(obj.release().ptr()) {}
	~PyObjectOwner() override;

private:
	PyObject *obj_;
};

/// A "dltensor" capsule of compact row-major memory at data.  owner lives
/// until the consumer is done (or the capsule dies unconsumed).
py::capsule make_dlpack_capsule(void *data, std::vector<std::int64_t> shape, DLDataType dtype,
				DLDevice device, std::unique_ptr<ExportOwner> owner);

/// Bytes of one element of dtype (lanes included).
std::size_t dlpack_item_bytes(DLDataType dtype);

} // namespace svmbatch::python
