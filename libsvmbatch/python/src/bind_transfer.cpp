// SPDX-License-Identifier: MIT
// ExtentReader: file extents to host or device memory through its staging
// ring, one call per load; with a CUDA backend, the copies go on the
// caller's stream (CudaStreamCopier).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <pybind11/stl.h>

#include <svmbatch/config.h>
#include <svmbatch/context.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/extent_reader.hpp>
#include <svmbatch/gpu/backend.hpp>
#if SVMBATCH_HAS_CUDA
#include <svmbatch/gpu/cuda_backend.hpp>
#include <svmbatch/gpu/cuda_stream_copier.hpp>
#endif

#include "bindings.hpp"

namespace svmbatch::python {

namespace {

/// The reader and the backend its staging is mapped for (kept alive by it).
class PyExtentReader {
public:
	PyExtentReader(Context &context, std::shared_ptr<GpuBackend> backend,
		       const ExtentReaderOptions &options)
		: backend_(std::move(backend))
	{
		py::gil_scoped_release nogil;
		reader_.emplace(context, options, backend_.get());
	}

	ExtentReader &get()
	{
		if (!reader_)
			throw py::value_error("closed");
		return *reader_;
	}

	/// One (err, bytes, copy) per (fd, file_offset, length, dst) extent.
	std::vector<std::tuple<int, std::size_t, bool>> read(const py::iterable &items,
							     std::optional<std::uintptr_t> stream)
	{
		std::vector<Extent> extents;
		for (py::handle item : items) {
			auto t = item.cast<py::tuple>();
			if (t.size() != 4)
				throw py::value_error("extent " + std::to_string(extents.size()) +
						      ": expected (fd, file_offset, length, dst)");
			extents.push_back({t[0].cast<int>(), t[1].cast<std::uint64_t>(),
					   t[2].cast<std::size_t>(), t[3].cast<std::uint64_t>()});
		}
		ExtentReader &reader = get();
		std::vector<ExtentResult> results;
		{
			py::gil_scoped_release nogil;
			if (stream) {
				StreamCopier &copier = copier_for(*stream);
				results = reader.read(extents, &copier);
			} else {
				results = reader.read(extents);
			}
		}
		std::vector<std::tuple<int, std::size_t, bool>> out;
		out.reserve(results.size());
		for (const ExtentResult &r : results)
			out.emplace_back(r.err, r.bytes, r.copy);
		return out;
	}

	void close()
	{
		py::gil_scoped_release nogil;
		copier_.reset();
		reader_.reset();
	}
	bool closed() const noexcept { return !reader_; }

private:
	/// The copier of a stream, kept while the same stream is used.
	StreamCopier &copier_for(std::uintptr_t stream)
	{
#if SVMBATCH_HAS_CUDA
		auto *cuda = dynamic_cast<CudaBackend *>(backend_.get());
		if (cuda == nullptr)
			throw Error(EINVAL, Step::Validate,
				    "ExtentReader: a stream needs a reader made for a CUDA backend");
		if (!copier_ || stream_ != stream) {
			copier_.reset();
			copier_ = std::make_unique<CudaStreamCopier>(*cuda, stream, 4);
			stream_ = stream;
		}
		return *copier_;
#else
		(void)stream;
		throw Error(ENOTSUP, Step::GpuOpen, "ExtentReader: this build has no CUDA");
#endif
	}

	std::shared_ptr<GpuBackend> backend_;
	std::optional<ExtentReader> reader_;
	std::unique_ptr<StreamCopier> copier_;
	std::uintptr_t stream_ = 0;
};

} // namespace

void bind_transfer(py::module_ &m)
{
	py::class_<PyExtentReader, std::shared_ptr<PyExtentReader>>(m, "ExtentReader")
		.def(py::init([](Context &context, std::shared_ptr<GpuBackend> backend,
				 std::size_t staging_bytes, std::size_t chunk_bytes,
				 unsigned threads) {
			     ExtentReaderOptions o;
			     o.staging_bytes = staging_bytes;
			     o.chunk_bytes = chunk_bytes;
			     o.io.threads = threads;
			     return std::make_shared<PyExtentReader>(context, std::move(backend),
								     o);
		     }),
		     py::arg("context"), py::arg("backend") = nullptr,
		     py::arg("staging_bytes") = std::size_t{64} << 20,
		     py::arg("chunk_bytes") = std::size_t{4} << 20, py::arg("threads") = 0,
		     "file extents into memory through a registered staging ring (mapped for "
		     "backend's GPU where given)")
		.def("read", &PyExtentReader::read, py::arg("extents"),
		     py::arg("stream") = py::none(),
		     "(fd, file_offset, length, dst) each: host addresses, or device addresses "
		     "copied on CUstream `stream`; one (err, bytes, copy) each")
		.def_property_readonly("setup",
				       [](PyExtentReader &r) {
					       std::vector<std::pair<std::string, std::uint64_t>>
						       out;
					       for (const ExtentReaderStep &s : r.get().setup())
						       out.emplace_back(s.name, s.ns);
					       return out;
				       })
		.def_property_readonly("last_read",
				       [](PyExtentReader &r) {
					       const ExtentReadStats &s = r.get().last_read();
					       py::dict d;
					       d["reads"] = s.reads;
					       d["copies"] = s.copies;
					       d["bytes_read"] = s.bytes_read;
					       d["ns"] = s.ns;
					       d["wait_read_ns"] = s.wait_read_ns;
					       d["wait_copy_ns"] = s.wait_copy_ns;
					       return d;
				       })
		.def_property_readonly("chunk_bytes",
				       [](PyExtentReader &r) { return r.get().chunk_bytes(); })
		.def_property_readonly("chunks", [](PyExtentReader &r) { return r.get().chunks(); })
		.def_property_readonly("threads",
				       [](PyExtentReader &r) { return r.get().threads(); })
		.def("close", &PyExtentReader::close)
		.def_property_readonly("closed", &PyExtentReader::closed)
		.def("__enter__", [](py::object self) { return self; })
		.def("__exit__", [](PyExtentReader &r, const py::args &) { r.close(); });
}

} // namespace svmbatch::python
