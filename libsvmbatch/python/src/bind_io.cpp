// SPDX-License-Identifier: MIT
// Reader and Writer over a registration, each with a ring of its own
// holding the registration's buffers as io_uring fixed buffers.
#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <liburing.h>
#include <pybind11/stl.h>

#include <svmbatch/error.hpp>
#include <svmbatch/reader.hpp>
#include <svmbatch/writer.hpp>

#include "bindings.hpp"
#include "registration_holder.hpp"

namespace svmbatch::python {

namespace {

/// The caller's ring of a Reader/Writer, exited on destruction.
class Ring {
public:
	explicit Ring(unsigned entries)
	{
		int rc = io_uring_queue_init(entries, &ring_, 0);
		if (rc < 0)
			throw Error(-rc, Step::IoUringSubmit,
				    "io_uring_queue_init(" + std::to_string(entries) + ")");
	}
	Ring(const Ring &) = delete;
	Ring &operator=(const Ring &) = delete;
	Ring(Ring &&) = delete;
	Ring &operator=(Ring &&) = delete;
	~Ring() { io_uring_queue_exit(&ring_); }
	::io_uring &get() { return ring_; }

private:
	::io_uring ring_{};
};

/// A Reader or a Writer (T) with its ring and fixed buffers, destroyed in
/// the order io_uring needs: T, the fixed buffers, the ring; then the
/// registration object (the memory) it references.
template <typename T, typename Options> class Engine {
public:
	Engine(py::object registration, const Options &options, unsigned ring_entries)
		: registration_(std::move(registration))
	{
		const Registration &r = registration_.cast<const PyRegistration &>().get();
		unsigned entries = ring_entries != 0 ? ring_entries :
						       std::max(options.queue_depth, 8u);
		py::gil_scoped_release nogil;
		ring_ = std::make_unique<Ring>(entries);
		fixed_.emplace(register_fixed(r, ring_->get()));
		engine_.emplace(ring_->get(), *fixed_, options);
	}
	Engine(const Engine &) = delete;
	Engine &operator=(const Engine &) = delete;
	Engine(Engine &&) = delete;
	Engine &operator=(Engine &&) = delete;
	~Engine()
	{
		engine_.reset();
		fixed_.reset();
		ring_.reset();
	}

	T &get()
	{
		if (!engine_)
			throw py::value_error("closed");
		return *engine_;
	}
	void close()
	{
		py::gil_scoped_release nogil;
		engine_.reset();
		fixed_.reset();
		ring_.reset();
	}
	bool closed() const noexcept { return !engine_; }

private:
	py::object registration_;
	std::unique_ptr<Ring> ring_;
	std::optional<FixedBuffers> fixed_;
	std::optional<T> engine_;
};

using PyReader = Engine<Reader, ReaderOptions>;
using PyWriter = Engine<Writer, WriterOptions>;

/// A batch in flight, with the engine it runs on (kept alive by it).
struct PyBatch {
	std::optional<IoBatch> batch;
	py::object engine;
};

// (fd, file_offset, length, buffer[, buffer_offset]) or IoRequest
std::vector<IoRequest> to_requests(const py::iterable &items)
{
	std::vector<IoRequest> out;
	for (py::handle item : items) {
		if (py::isinstance<IoRequest>(item)) {
			out.push_back(item.cast<IoRequest>());
			continue;
		}
		auto t = item.cast<py::sequence>();
		if (t.size() != 4 && t.size() != 5)
			throw py::value_error(
				"request " + std::to_string(out.size()) +
				": expected (fd, file_offset, length, buffer[, buffer_offset])");
		IoRequest r;
		r.fd = t[0].cast<int>();
		r.file_offset = t[1].cast<std::uint64_t>();
		r.length = t[2].cast<std::size_t>();
		r.buffer = t[3].cast<std::size_t>();
		r.buffer_offset = t.size() == 5 ? t[4].cast<std::size_t>() : 0;
		out.push_back(r);
	}
	return out;
}

template <typename E> std::vector<IoResult> run_now(E &engine, const py::iterable &items)
{
	std::vector<IoRequest> requests = to_requests(items);
	auto &e = engine.get();
	py::gil_scoped_release nogil;
	if constexpr (std::is_same_v<E, PyReader>)
		return e.read(requests);
	else
		return e.write(requests);
}

template <typename E> PyBatch start(py::object self, const py::iterable &items)
{
	std::vector<IoRequest> requests = to_requests(items);
	auto &e = self.cast<E &>().get();
	PyBatch out;
	out.engine = self;
	py::gil_scoped_release nogil;
	out.batch.emplace(e.start(requests));
	return out;
}

template <typename E> void bind_engine_common(py::class_<E, std::shared_ptr<E>> &cls)
{
	cls.def_property_readonly("threads", [](E &e) { return e.get().threads(); })
		.def_property_readonly("parallelism", [](E &e) { return e.get().parallelism(); })
		.def_property_readonly("buffer_sharing",
				       [](E &e) { return e.get().buffer_sharing(); })
		.def_property_readonly("submitted", [](E &e) { return e.get().submitted(); })
		.def("start", &start<E>, py::arg("requests"),
		     "start the requests; returns an IoBatch (wait(), cancel(), done())")
		.def("close", &E::close)
		.def_property_readonly("closed", &E::closed)
		.def("__enter__", [](py::object self) { return self; })
		.def("__exit__", [](E &e, const py::args &) { e.close(); });
}

void set_io_options(IoOptions &o, const py::kwargs &kw)
{
	for (auto [key, value] : kw) {
		auto k = key.cast<std::string>();
		if (k == "queue_depth")
			o.queue_depth = value.cast<unsigned>();
		else if (k == "max_io_bytes")
			o.max_io_bytes = value.cast<std::size_t>();
		else if (k == "direct_alignment")
			o.direct_alignment = value.cast<std::size_t>();
		else if (k == "threads")
			o.threads = value.cast<unsigned>();
		else if (k == "parallelism")
			o.parallelism = value.cast<Parallelism>();
		else if (k == "clone_buffers")
			o.clone_buffers = value.cast<bool>();
		else if (k != "ring_entries" && k != "sync")
			throw py::type_error("unexpected option '" + k + "'");
	}
}

unsigned ring_entries(const py::kwargs &kw)
{
	return kw.contains("ring_entries") ? kw["ring_entries"].cast<unsigned>() : 0;
}

} // namespace

namespace {

void bind_io_options(py::module_ &m)
{
	py::enum_<Parallelism>(m, "Parallelism")
		.value("Auto", Parallelism::Auto)
		.value("AsyncWorkers", Parallelism::AsyncWorkers)
		.value("RingPerThread", Parallelism::RingPerThread);
	py::enum_<BufferSharing>(m, "BufferSharing")
		.value("None_", BufferSharing::None)
		.value("Cloned", BufferSharing::Cloned)
		.value("Registered", BufferSharing::Registered);
	py::enum_<SyncMode>(m, "SyncMode")
		.value("None_", SyncMode::None)
		.value("Fdatasync", SyncMode::Fdatasync)
		.value("Fsync", SyncMode::Fsync);
}

// A request, its result, and a batch of them in flight.
void bind_io_requests(py::module_ &m)
{
	py::class_<IoRequest>(m, "IoRequest")
		.def(py::init([](int fd, std::uint64_t file_offset, std::size_t length,
				 std::size_t buffer, std::size_t buffer_offset) {
			     return IoRequest{fd, file_offset, length, buffer, buffer_offset};
		     }),
		     py::arg("fd"), py::arg("file_offset"), py::arg("length"), py::arg("buffer"),
		     py::arg("buffer_offset") = 0)
		.def_readwrite("fd", &IoRequest::fd)
		.def_readwrite("file_offset", &IoRequest::file_offset)
		.def_readwrite("length", &IoRequest::length)
		.def_readwrite("buffer", &IoRequest::buffer)
		.def_readwrite("buffer_offset", &IoRequest::buffer_offset);

	py::class_<IoResult>(m, "IoResult")
		.def_readonly("err", &IoResult::err)
		.def_readonly("bytes", &IoResult::bytes)
		.def_property_readonly("ok", [](const IoResult &r) { return r.err == 0; })
		.def("__repr__", [](const IoResult &r) {
			return "IoResult(err=" + std::to_string(r.err) +
			       ", bytes=" + std::to_string(r.bytes) + ")";
		});

	py::class_<PyBatch>(m, "IoBatch")
		.def(
			"wait",
			[](PyBatch &b) {
				if (!b.batch)
					throw py::value_error("wait() was called already");
				std::vector<IoResult> out;
				{
					py::gil_scoped_release nogil;
					out = b.batch->wait();
					b.batch.reset();
				}
				return out;
			},
			"block until every request completed; results in request order")
		.def("cancel",
		     [](PyBatch &b) {
			     if (b.batch)
				     b.batch->cancel();
		     })
		.def("done", [](const PyBatch &b) { return !b.batch || b.batch->done(); });
}

void bind_reader(py::module_ &m)
{
	py::class_<PyReader, std::shared_ptr<PyReader>> reader(m, "Reader");
	reader.def(py::init([](py::object registration, const py::kwargs &kw) {
			   ReaderOptions o;
			   set_io_options(o, kw);
			   return std::make_shared<PyReader>(std::move(registration), o,
							     ring_entries(kw));
		   }),
		   py::arg("registration"),
		   "READ_FIXED into the registration's buffers on several cores; options: "
		   "queue_depth, max_io_bytes, direct_alignment, threads, parallelism, "
		   "clone_buffers, ring_entries")
		.def("read", &run_now<PyReader>, py::arg("requests"),
		     "(fd, file_offset, length, buffer[, buffer_offset]) each; one IoResult each");
	bind_engine_common(reader);
}

void bind_writer(py::module_ &m)
{
	py::class_<PyWriter, std::shared_ptr<PyWriter>> writer(m, "Writer");
	writer.def(py::init([](py::object registration, const py::kwargs &kw) {
			   WriterOptions o;
			   set_io_options(o, kw);
			   if (kw.contains("sync"))
				   o.sync = kw["sync"].cast<SyncMode>();
			   return std::make_shared<PyWriter>(std::move(registration), o,
							     ring_entries(kw));
		   }),
		   py::arg("registration"),
		   "WRITE_FIXED from the registration's buffers; the "
		   "Reader's options plus sync (SyncMode)")
		.def("write", &run_now<PyWriter>, py::arg("requests"),
		     "(fd, file_offset, length, buffer[, buffer_offset]) each; one IoResult each");
	bind_engine_common(writer);
}

} // namespace

void bind_io(py::module_ &m)
{
	bind_io_options(m);
	bind_io_requests(m);
	bind_reader(m);
	bind_writer(m);
}

} // namespace svmbatch::python
