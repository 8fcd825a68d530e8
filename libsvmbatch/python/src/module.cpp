// SPDX-License-Identifier: MIT
#include "bindings.hpp"

PYBIND11_MODULE(_svmbatch, m)
{
	m.doc() = "svmbatch: register scattered buffers for GPUs and io_uring in one step";
	svmbatch::python::bind_errors(m);
	svmbatch::python::bind_core(m);
	svmbatch::python::bind_gpu(m);
	svmbatch::python::bind_io(m);
	svmbatch::python::bind_arena(m);
	svmbatch::python::bind_storage(m);
	svmbatch::python::bind_transfer(m);
}
