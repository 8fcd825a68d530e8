// SPDX-License-Identifier: MIT
// svmbatch::Error becomes svmbatch.Error (an OSError subclass chosen by
// errno, svmbatch/_errors.py) carrying errno, step, buffer index and the
// driver's status; ArenaFull becomes svmbatch.ArenaFullError.
#include <exception>

#include <svmbatch/arena.hpp>
#include <svmbatch/error.hpp>

#include "bindings.hpp"

namespace svmbatch::python {

namespace {

// The Python classes live in svmbatch._errors, looked up per error (a
// sys.modules lookup), so the extension keeps no Python object in a static.
void raise_from(const char *factory, const py::tuple &args)
{
	py::object exc = py::module_::import("svmbatch._errors").attr(factory)(*args);
	PyErr_SetObject(reinterpret_cast<PyObject *>(Py_TYPE(exc.ptr())), exc.ptr());
}

} // namespace

void bind_errors(py::module_ &m)
{
	(void)m;
	py::register_exception_translator(
		[](std::exception_ptr
			   p) { // NOLINT(performance-unnecessary-value-param): pybind11's signature
			try {
				if (p)
					std::rethrow_exception(p);
			} catch (const ArenaFull &e) {
				raise_from("arena_full",
					   py::make_tuple(e.what(), e.requested(), e.free_bytes(),
							  e.largest_free()));
			} catch (const Error &e) {
				py::object index = py::none();
				if (e.buffer_index() != Error::no_index)
					index = py::int_(e.buffer_index());
				raise_from("from_library",
					   py::make_tuple(e.err(), step_name(e.step()), e.what(),
							  index, e.driver_status()));
			}
		});
}

} // namespace svmbatch::python
