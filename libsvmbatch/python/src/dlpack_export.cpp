// SPDX-License-Identifier: MIT
#include "dlpack_export.hpp"

#include <utility>

namespace svmbatch::python {

namespace {

constexpr const char *capsule_name = "dltensor";

struct ManagerContext {
	std::vector<std::int64_t> shape;
	std::unique_ptr<ExportOwner> owner;
};

void delete_managed(DLManagedTensor *self)
{
	// Deleting the context releases the owner (memory back to an arena,
	// a registration's reference dropped).
	std::unique_ptr<ManagerContext> ctx(static_cast<ManagerContext *>(self->manager_ctx));
	std::unique_ptr<DLManagedTensor> managed(self);
}

// The capsule died: if no consumer took the tensor (the name is still
// "dltensor"), nobody else will call the deleter.
void capsule_destructor(PyObject *capsule)
{
	if (!PyCapsule_IsValid(capsule, capsule_name))
		return;
	auto *managed = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(capsule, capsule_name));
	if (managed != nullptr && managed->deleter != nullptr)
		managed->deleter(managed);
}

} // namespace

PyObjectOwner::~PyObjectOwner()
{
	if (Py_IsInitialized() == 0)
		return; // the interpreter is gone, and the object with it
	PyGILState_STATE gil = PyGILState_Ensure();
	Py_DECREF(obj_);
	PyGILState_Release(gil);
}

std::size_t dlpack_item_bytes(DLDataType dtype)
{
	return (std::size_t{dtype.bits} * dtype.lanes + 7) / 8;
}

py::capsule make_dlpack_capsule(void *data, std::vector<std::int64_t> shape, DLDataType dtype,
				DLDevice device, std::unique_ptr<ExportOwner> owner)
{
	auto ctx = std::make_unique<ManagerContext>();
	ctx->shape = std::move(shape);
	ctx->owner = std::move(owner);
	auto managed = std::make_unique<DLManagedTensor>();
	managed->dl_tensor.data = data;
	managed->dl_tensor.device = device;
	managed->dl_tensor.ndim = static_cast<std::int32_t>(ctx->shape.size());
	managed->dl_tensor.dtype = dtype;
	managed->dl_tensor.shape = ctx->shape.data();
	managed->dl_tensor.strides = nullptr;
	managed->dl_tensor.byte_offset = 0;
	managed->manager_ctx = ctx.get();
	managed->deleter = delete_managed;
	PyObject *capsule = PyCapsule_New(managed.get(), capsule_name, capsule_destructor);
	if (capsule == nullptr)
		throw py::error_already_set();
	// From here the capsule (or its consumer) owns both.
	(void)ctx.release();
	(void)managed.release();
	return py::reinterpret_steal<py::capsule>(capsule);
}

} // namespace svmbatch::python
