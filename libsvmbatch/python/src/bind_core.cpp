// SPDX-License-Identifier: MIT
// Context, Mode, Registration, DmaBuf, the views of registered buffers and
// the diagnostics.
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/stl.h>

#include <svmbatch/diagnostics.hpp>
#include <svmbatch/dmabuf.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/page_cache.hpp>

#include "bindings.hpp"
#include "dlpack_export.hpp"
#include "registration_holder.hpp"

namespace svmbatch::python {

HeldBuffer::HeldBuffer(HeldBuffer &&other) noexcept
	: owner_(std::move(other.owner_)), view_(std::exchange(other.view_, std::nullopt)),
	  managed_(std::exchange(other.managed_, nullptr))
{}

HeldBuffer &HeldBuffer::operator=(HeldBuffer &&other) noexcept
{
	if (this != &other) {
		release();
		owner_ = std::move(other.owner_);
		view_ = std::exchange(other.view_, std::nullopt);
		managed_ = std::exchange(other.managed_, nullptr);
	}
	return *this;
}

HeldBuffer::~HeldBuffer()
{
	release();
}

void HeldBuffer::hold_view(const Py_buffer &view)
{
	view_ = view;
}

void HeldBuffer::release() noexcept
{
	if (view_) {
		PyBuffer_Release(&*view_);
		view_.reset();
	}
	if (managed_ != nullptr && managed_->deleter != nullptr)
		managed_->deleter(managed_);
	managed_ = nullptr;
}

const Registration &PyRegistration::get() const
{
	if (closed())
		throw py::value_error("the registration is closed");
	return *registration_;
}

void PyRegistration::close()
{
	if (!closable_)
		throw py::value_error("this registration belongs to an Arena: close the Arena");
	if (registration_)
		registration_->reset();
}

namespace {

std::string buffer_label(std::size_t index)
{
	return "buffer " + std::to_string(index) + ": ";
}

// (addr, len) or (addr, len, read_only)
bool from_tuple(py::handle item, Buffer &out)
{
	if (!py::isinstance<py::tuple>(item))
		return false;
	auto t = py::reinterpret_borrow<py::tuple>(item);
	if (t.size() != 2 && t.size() != 3)
		throw py::value_error("expected (address, length[, read_only])");
	// NOLINTNEXTLINE(performance-no-int-to-ptr): the caller's address
	out.ptr = reinterpret_cast<void *>(t[0].cast<std::uintptr_t>());
	out.len = t[1].cast<std::size_t>();
	out.access = (t.size() == 3 && t[2].cast<bool>()) ? Access::ReadOnly : Access::ReadWrite;
	return true;
}

// bytearray, mmap, numpy arrays...: writable if the exporter allows it.
bool from_buffer_protocol(py::handle item, Buffer &out, HeldBuffer &held)
{
	if (PyObject_CheckBuffer(item.ptr()) == 0)
		return false;
	Py_buffer view{};
	Access access = Access::ReadWrite;
	if (PyObject_GetBuffer(item.ptr(), &view, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS) != 0) {
		PyErr_Clear();
		if (PyObject_GetBuffer(item.ptr(), &view, PyBUF_ANY_CONTIGUOUS) != 0)
			throw py::error_already_set();
		access = Access::ReadOnly;
	}
	held.hold_view(view);
	out = Buffer{view.buf, static_cast<std::size_t>(view.len), access};
	return true;
}

// torch tensors and other DLPack producers of host memory.
bool from_dlpack(py::handle item, Buffer &out, HeldBuffer &held)
{
	if (!py::hasattr(item, "__dlpack__"))
		return false;
	auto capsule = item.attr("__dlpack__")().cast<py::capsule>();
	if (std::strcmp(capsule.name(), "dltensor") != 0)
		throw py::value_error("__dlpack__ returned a capsule that is not a \"dltensor\"");
	auto *managed = capsule.get_pointer<DLManagedTensor>();
	// Ours now: the deleter is called when the registration object dies.
	if (PyCapsule_SetName(capsule.ptr(), "used_dltensor") != 0)
		throw py::error_already_set();
	held.hold_dlpack(managed);
	const DLTensor &t = managed->dl_tensor;
	if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost)
		throw py::value_error("not host memory (DLPack device type " +
				      std::to_string(t.device.device_type) + ")");
	std::size_t elements = 1;
	std::int64_t expected_stride = 1;
	for (std::int32_t d = t.ndim - 1; d >= 0; --d) {
		if (t.strides != nullptr && t.shape[d] > 1 && t.strides[d] != expected_stride)
			throw py::value_error("not contiguous: register its storage instead");
		expected_stride *= t.shape[d];
		elements *= static_cast<std::size_t>(t.shape[d]);
	}
	out.ptr = static_cast<char *>(t.data) + t.byte_offset;
	out.len = elements * dlpack_item_bytes(t.dtype);
	out.access = Access::ReadWrite;
	return true;
}

std::pair<Buffer, HeldBuffer> parse_buffer(py::handle item, std::size_t index)
{
	Buffer buffer;
	HeldBuffer held{py::reinterpret_borrow<py::object>(item)};
	try {
		if (from_tuple(item, buffer) || from_buffer_protocol(item, buffer, held) ||
		    from_dlpack(item, buffer, held))
			return {buffer, std::move(held)};
	} catch (const py::cast_error &e) {
		throw py::type_error(buffer_label(index) + e.what());
	} catch (py::error_already_set &e) {
		throw py::value_error(buffer_label(index) + e.what());
	} catch (const py::builtin_exception &e) {
		throw py::value_error(buffer_label(index) + e.what());
	}
	throw py::type_error(buffer_label(index) + "expected (address, length[, read_only]), " +
			     "an object with the buffer protocol or a DLPack producer, got " +
			     std::string(Py_TYPE(item.ptr())->tp_name));
}

std::shared_ptr<PyRegistration> register_buffers(Context &ctx, const py::iterable &items,
						 bool prefault)
{
	std::vector<Buffer> buffers;
	std::vector<HeldBuffer> held;
	std::size_t index = 0;
	for (py::handle item : items) {
		auto [buffer, h] = parse_buffer(item, index++);
		buffers.push_back(buffer);
		held.push_back(std::move(h));
	}
	std::shared_ptr<Registration> registration;
	{
		py::gil_scoped_release nogil;
		RegisterOptions options;
		options.prefault = prefault;
		registration =
			std::make_shared<Registration>(ctx.register_buffers(buffers, options));
	}
	return std::make_shared<PyRegistration>(std::move(registration), std::move(held), true);
}

/// reg.buffer(i): a caller buffer as a buffer-protocol and DLPack object.
struct RegisteredBuffer {
	py::object registration; ///< keeps the memory's owner alive
	std::size_t index;
	Buffer buffer;
};

py::tuple range_tuple(std::uintptr_t addr, std::size_t len, Access access)
{
	return py::make_tuple(addr, len, access == Access::ReadOnly);
}

} // namespace

namespace {

using PyRegistrationClass = py::class_<PyRegistration, std::shared_ptr<PyRegistration>>;

void bind_context(py::module_ &m)
{
	py::enum_<Mode>(m, "Mode", "Kernel: svmbatch.ko pins; Userspace: no module; Auto: either")
		.value("Auto", Mode::Auto)
		.value("Kernel", Mode::Kernel)
		.value("Userspace", Mode::Userspace);

	py::class_<Info>(m, "Info", "What GET_INFO reports (userspace mode: the defaults)")
		.def_readonly("mode", &Info::mode)
		.def_readonly("reason", &Info::reason)
		.def_readonly("abi_version", &Info::abi_version)
		.def_readonly("page_size", &Info::page_size)
		.def_readonly("features", &Info::features)
		.def_readonly("max_ranges", &Info::max_ranges)
		.def_readonly("max_registrations", &Info::max_registrations)
		.def_readonly("max_range_bytes", &Info::max_range_bytes);

	py::class_<Context, std::shared_ptr<Context>>(m, "Context")
		.def(py::init<Mode, const std::string &>(), py::arg("mode") = Mode::Auto,
		     py::arg("device") = Context::default_device)
		.def_property_readonly("mode", &Context::mode)
		.def_property_readonly("info", &Context::info)
		.def("register", &register_buffers, py::arg("buffers"), py::kw_only(),
		     py::arg("prefault") = true,
		     "Register every buffer in one step (all or none): (address, length"
		     "[, read_only]) tuples, buffer-protocol objects, DLPack producers.  "
		     "prefault=False (userspace mode): check the mappings but leave the "
		     "pages to the GPU runtime that maps the registration next");
}

void bind_dmabuf(py::module_ &m)
{
	py::class_<DmaBuf, std::shared_ptr<DmaBuf>>(m, "DmaBuf")
		.def("fileno", &DmaBuf::fd)
		.def_property_readonly("fd", &DmaBuf::fd)
		.def_property_readonly("size", &DmaBuf::size)
		.def("release", &DmaBuf::release, "give up the fd: the caller closes it")
		.def("close", [](DmaBuf &d) { d = DmaBuf(); })
		.def_property_readonly("closed", [](const DmaBuf &d) { return !d; })
		.def("__enter__", [](py::object self) { return self; })
		.def("__exit__", [](DmaBuf &d, const py::args &) { d = DmaBuf(); });
}

void bind_registered_buffer(py::module_ &m)
{
	py::class_<RegisteredBuffer>(m, "RegisteredBuffer", py::buffer_protocol())
		.def_property_readonly("index", [](const RegisteredBuffer &b) { return b.index; })
		.def_property_readonly("address",
				       [](const RegisteredBuffer &b) {
					       return reinterpret_cast<std::uintptr_t>(
						       b.buffer.ptr);
				       })
		.def_property_readonly("nbytes",
				       [](const RegisteredBuffer &b) { return b.buffer.len; })
		.def_property_readonly("read_only",
				       [](const RegisteredBuffer &b) {
					       return b.buffer.access == Access::ReadOnly;
				       })
		.def_buffer([](RegisteredBuffer &b) {
			return py::buffer_info(b.buffer.ptr, 1, "B",
					       static_cast<py::ssize_t>(b.buffer.len),
					       b.buffer.access == Access::ReadOnly);
		})
		.def("__dlpack_device__",
		     [](const RegisteredBuffer &) {
			     return py::make_tuple(static_cast<int>(kDLCPU), 0);
		     })
		.def(
			"__dlpack__",
			[](const RegisteredBuffer &b, const py::kwargs &) {
				return make_dlpack_capsule(
					b.buffer.ptr, {static_cast<std::int64_t>(b.buffer.len)},
					DLDataType{kDLUInt, 8, 1}, DLDevice{kDLCPU, 0},
					std::make_unique<PyObjectOwner>(b.registration));
			},
			"a 1-D uint8 DLPack tensor of the buffer (host memory)");
}

// What the registration is: its buffers, ranges and pages.
void bind_registration_layout(PyRegistrationClass &c)
{
	c.def_property_readonly("mode", [](const PyRegistration &r) { return r.get().mode(); })
		.def_property_readonly("handle",
				       [](const PyRegistration &r) { return r.get().handle(); })
		.def("__len__", [](const PyRegistration &r) { return r.get().buffers().size(); })
		.def_property_readonly(
			"buffers",
			[](const PyRegistration &r) {
				py::list out;
				for (const Buffer &b : r.get().buffers())
					out.append(
						range_tuple(reinterpret_cast<std::uintptr_t>(b.ptr),
							    b.len, b.access));
				return out;
			})
		.def_property_readonly("ranges",
				       [](const PyRegistration &r) {
					       py::list out;
					       for (const KernelRange &k : r.get().ranges())
						       out.append(range_tuple(k.addr, k.len,
									      k.access));
					       return out;
				       })
		.def("location",
		     [](const PyRegistration &r, std::size_t i) {
			     BufferLocation l = r.get().location(i);
			     return py::make_tuple(l.range, l.offset);
		     })
		.def_property_readonly("pages",
				       [](const PyRegistration &r) { return r.get().pages(); })
		.def_property_readonly("pinned_pages", [](const PyRegistration &r) {
			return r.get().pinned_pages();
		});
}

// What it does: QUERY, dma-buf export, views of its buffers, closing.
void bind_registration_use(PyRegistrationClass &c)
{
	c.def("query",
	      [](const PyRegistration &r) {
		      RegistrationStats s = r.get().query();
		      py::dict d;
		      d["pages"] = s.pages;
		      d["segments"] = s.segments;
		      d["folios"] = s.folios;
		      d["meta_bytes"] = s.meta_bytes;
		      d["stale"] = s.stale;
		      return d;
	      })
		.def_property_readonly("stale",
				       [](const PyRegistration &r) { return r.get().stale(); })
		.def(
			"export_dmabuf",
			[](const PyRegistration &r, bool writable) {
				return std::make_shared<DmaBuf>(r.get().export_dmabuf(writable));
			},
			py::arg("writable") = true)
		.def("dmabuf_offset", [](const PyRegistration &r,
					 std::size_t i) { return r.get().dmabuf_offset(i); })
		.def("buffer",
		     [](const py::object &self, std::size_t i) {
			     const Registration &r = self.cast<const PyRegistration &>().get();
			     if (i >= r.buffers().size())
				     throw py::index_error("no buffer " + std::to_string(i));
			     return RegisteredBuffer{self, i, r.buffers()[i]};
		     })
		.def("close", &PyRegistration::close)
		.def_property_readonly("closed", &PyRegistration::closed)
		.def("__enter__", [](py::object self) { return self; })
		.def("__exit__", [](PyRegistration &r, const py::args &) { r.close(); });
}

void bind_diagnostics(py::module_ &m)
{
	m.def("mode_name", [](Mode mode) { return std::string(mode_name(mode)); });
	m.def("process_pinned_bytes", &process_pinned_bytes, "this process's VmPin in bytes");
	m.def("read_module_stats", &read_module_stats,
	      py::arg("debugfs_dir") = "/sys/kernel/debug/svmbatch",
	      "the module's counters (debugfs; root)");
	py::class_<PageCacheResidency>(m, "PageCacheResidency",
				       "what page_cache_residency() counted: resident_pages "
				       "of total_pages (of page_size bytes), by method")
		.def_readonly("resident_pages", &PageCacheResidency::resident_pages)
		.def_readonly("total_pages", &PageCacheResidency::total_pages)
		.def_readonly("page_size", &PageCacheResidency::page_size)
		.def_property_readonly("method",
				       [](const PageCacheResidency &r) {
					       return std::string(residency_method_name(r.method));
				       })
		.def("__repr__", [](const PageCacheResidency &r) {
			return "PageCacheResidency(resident_pages=" +
			       std::to_string(r.resident_pages) +
			       ", total_pages=" + std::to_string(r.total_pages) +
			       ", page_size=" + std::to_string(r.page_size) + ", method='" +
			       residency_method_name(r.method) + "')";
		});
	m.def(
		"page_cache_residency",
		[](int fd, std::uint64_t offset, std::uint64_t length) {
			py::gil_scoped_release nogil;
			return page_cache_residency(fd, offset, length);
		},
		py::arg("fd"), py::arg("offset") = 0, py::arg("length") = 0,
		"the pages of [offset, offset + length) of the regular file open at fd (length 0: "
		"to its end) and how many of them the page cache holds: by cachestat() where the "
		"kernel has it (method 'cachestat'), else mmap + mincore() ('mincore'); "
		"svmbatch.Error (step 'diagnostics') on failure");
}

} // namespace

void bind_core(py::module_ &m)
{
	bind_context(m);
	bind_dmabuf(m);
	bind_registered_buffer(m);
	PyRegistrationClass registration(m, "Registration");
	bind_registration_layout(registration);
	bind_registration_use(registration);
	bind_diagnostics(m);
}

} // namespace svmbatch::python
