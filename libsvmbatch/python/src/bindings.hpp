// SPDX-License-Identifier: MIT
// The _svmbatch extension: one bind_* function per area, called in this
// order by module.cpp (later areas use the classes of earlier ones).
#pragma once

#include <pybind11/pybind11.h>

namespace svmbatch::python {

namespace py = pybind11;

void bind_errors(py::module_ &m);
void bind_core(py::module_ &m);
void bind_gpu(py::module_ &m);
void bind_io(py::module_ &m);
void bind_arena(py::module_ &m);
void bind_storage(py::module_ &m);
void bind_transfer(py::module_ &m);

} // namespace svmbatch::python
