// SPDX-License-Identifier: MIT
// The GPU backends the library was built with (CUDA and Level Zero here:
// libcuda and libze_loader are loaded at run time) and the mappings they
// make.
#include <memory>
#include <string>

#include <pybind11/stl.h>

#include <svmbatch/config.h>
#include <svmbatch/gpu/backend.hpp>
#if SVMBATCH_HAS_CUDA
#include <svmbatch/gpu/cuda_backend.hpp>
#endif
#if SVMBATCH_HAS_ZE
#include <svmbatch/gpu/ze_backend.hpp>
#endif

#include "bindings.hpp"
#include "registration_holder.hpp"

namespace svmbatch::python {

namespace {

/// svmbatch.GpuMapping: the mapping plus the registration object, whose
/// memory the GPU reaches through it.
struct PyGpuMapping {
	GpuMapping mapping;
	py::object registration;
};

std::shared_ptr<PyGpuMapping> map_registration(py::object registration, GpuBackend &backend)
{
	const Registration &r = registration.cast<const PyRegistration &>().get();
	auto out = std::make_shared<PyGpuMapping>();
	{
		py::gil_scoped_release nogil;
		out->mapping = backend.map(r);
	}
	out->registration = std::move(registration);
	return out;
}

} // namespace

namespace {

#if SVMBATCH_HAS_CUDA
void bind_cuda(py::module_ &m)
{
	py::enum_<CudaMemory>(m, "CudaMemory")
		.value("Unknown", CudaMemory::Unknown)
		.value("Host", CudaMemory::Host)
		.value("Managed", CudaMemory::Managed)
		.value("Device", CudaMemory::Device);

	py::class_<CudaBackend, GpuBackend, std::shared_ptr<CudaBackend>>(m, "CudaBackend")
		.def(py::init([](int device, const std::string &library) {
			     CudaOptions options;
			     options.device = device;
			     options.library = library;
			     py::gil_scoped_release nogil;
			     return std::make_shared<CudaBackend>(options);
		     }),
		     py::arg("device") = 0, py::arg("library") = "libcuda.so.1",
		     "NVIDIA GPUs through the CUDA driver, loaded at run time; "
		     "svmbatch.Error(ENODEV) without a driver or a device")
		.def_property_readonly("device", &CudaBackend::device)
		.def_property_readonly("device_name", &CudaBackend::device_name)
		.def_property_readonly("unified_addressing", &CudaBackend::unified_addressing)
		.def_property_readonly("read_only_register_supported",
				       &CudaBackend::read_only_register_supported)
		.def("classify", [](const CudaBackend &b, std::uintptr_t address) {
			// NOLINTNEXTLINE(performance-no-int-to-ptr): the caller's address
			return b.classify(reinterpret_cast<const void *>(address));
		});
}
#endif

#if SVMBATCH_HAS_ZE
void bind_ze(py::module_ &m)
{
	py::enum_<ZeMemory>(m, "ZeMemory")
		.value("Unknown", ZeMemory::Unknown)
		.value("Host", ZeMemory::Host)
		.value("Managed", ZeMemory::Managed)
		.value("Device", ZeMemory::Device);

	py::class_<ZeBackend, GpuBackend, std::shared_ptr<ZeBackend>>(m, "ZeBackend")
		.def(py::init([](int driver, int device, const std::string &library) {
			     ZeOptions options;
			     options.driver = driver;
			     options.device = device;
			     options.library = library;
			     py::gil_scoped_release nogil;
			     return std::make_shared<ZeBackend>(options);
		     }),
		     py::arg("driver") = 0, py::arg("device") = 0, py::arg("library") = "",
		     "Intel GPUs through oneAPI Level Zero, loaded at run time; "
		     "svmbatch.Error(ENODEV) without a driver or a device")
		.def_property_readonly("driver", &ZeBackend::driver)
		.def_property_readonly("device", &ZeBackend::device)
		.def_property_readonly("device_name", &ZeBackend::device_name)
		.def_property_readonly("library", &ZeBackend::library)
		.def_property_readonly("imports_host_pointers", &ZeBackend::imports_host_pointers)
		.def("classify", [](const ZeBackend &b, std::uintptr_t address) {
			// NOLINTNEXTLINE(performance-no-int-to-ptr): the caller's address
			return b.classify(reinterpret_cast<const void *>(address));
		});
}
#endif

} // namespace

void bind_gpu(py::module_ &m)
{
	m.def("built_backends", &built_backends, "the GPU backends this build has");

	py::enum_<GpuAddressKind>(m, "GpuAddressKind")
		.value("DevicePointer", GpuAddressKind::DevicePointer)
		.value("ObjectOffset", GpuAddressKind::ObjectOffset);

	py::class_<GpuBackend, std::shared_ptr<GpuBackend>>(m, "GpuBackend")
		.def_property_readonly("name",
				       [](const GpuBackend &b) { return std::string(b.name()); });

	py::class_<PyGpuMapping, std::shared_ptr<PyGpuMapping>>(m, "GpuMapping")
		.def_property_readonly("backend",
				       [](const PyGpuMapping &g) { return g.mapping.backend(); })
		.def_property_readonly("kind",
				       [](const PyGpuMapping &g) { return g.mapping.kind(); })
		.def("__len__", [](const PyGpuMapping &g) { return g.mapping.size(); })
		.def("address",
		     [](const PyGpuMapping &g, std::size_t i) { return g.mapping.address(i); })
		.def_property_readonly("addresses",
				       [](const PyGpuMapping &g) {
					       auto a = g.mapping.addresses();
					       return std::vector<std::uint64_t>(a.begin(),
										 a.end());
				       })
		.def("close", [](PyGpuMapping &g) { g.mapping.reset(); })
		.def_property_readonly("closed", [](const PyGpuMapping &g) { return !g.mapping; })
		.def("__enter__", [](py::object self) { return self; })
		.def("__exit__", [](PyGpuMapping &g, const py::args &) { g.mapping.reset(); });

	m.def("map", &map_registration, py::arg("registration"), py::arg("backend"),
	      "make the registration's buffers GPU-accessible through backend (all or none)");
#if SVMBATCH_HAS_CUDA
	bind_cuda(m);
#endif
#if SVMBATCH_HAS_ZE
	bind_ze(m);
#endif
}

} // namespace svmbatch::python
