// SPDX-License-Identifier: MIT
// svmbatch.Arena: the library's svmbatch::Arena, with its blocks handed to
// frameworks as DLPack capsules.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include <svmbatch/arena.hpp>
#include <svmbatch/context.hpp>
#include <svmbatch/gpu/backend.hpp>
#include <svmbatch/registration.hpp>

#include "bindings.hpp"
#include "dlpack_export.hpp"
#include "registration_holder.hpp"

namespace svmbatch::python {

namespace {

/// A carved block: back to the arena when the consumer lets go (any
/// thread).  It keeps the arena alive, so closing the Python object does
/// not free memory a tensor still uses.
class BlockOwner final : public ExportOwner {
public:
	BlockOwner(std::shared_ptr<Arena> arena, void *block)
		: arena_(std::move(arena)), block_(block)
	{}
	BlockOwner(const BlockOwner &) = delete;
	BlockOwner &operator=(const BlockOwner &) = delete;
	BlockOwner(BlockOwner &&) = delete;
	BlockOwner &operator=(BlockOwner &&) = delete;
	~BlockOwner() override
	{
		try {
			arena_->deallocate(block_);
		} catch (...) { // NOLINT(bugprone-empty-catch): a deleter cannot report
		}
	}

private:
	std::shared_ptr<Arena> arena_;
	void *block_;
};

/// An Arena with the Context it was made in: an asynchronous arena uses
/// the Context until it is ready, so the two live and die together (the
/// arena first).
struct ArenaWithContext {
	std::shared_ptr<Context> context;
	Arena arena;
};

/// svmbatch.Arena.  close() drops this object's reference: the arena
/// lives on until the last carved block is gone.
class PyArena {
public:
	PyArena(std::size_t bytes, const ArenaOptions &options, std::shared_ptr<Context> context)
	{
		py::gil_scoped_release nogil;
		if (!context)
			context = std::make_shared<Context>();
		Context &c = *context;
		auto both = std::make_shared<ArenaWithContext>(
			ArenaWithContext{std::move(context), Arena(c, bytes, options)});
		arena_ = std::shared_ptr<Arena>(both, &both->arena);
	}

	const Arena &get() const
	{
		if (!arena_)
			throw py::value_error("the arena is closed");
		return *arena_;
	}

	py::capsule carve(const std::vector<std::int64_t> &shape, std::uint8_t code,
			  std::uint8_t bits, std::uint16_t lanes)
	{
		get();
		DLDataType dtype{code, bits, lanes};
		std::size_t bytes = dlpack_item_bytes(dtype);
		for (std::int64_t d : shape) {
			if (d < 0)
				throw py::value_error("negative dimension " + std::to_string(d));
			if (d != 0 && bytes > SIZE_MAX / static_cast<std::size_t>(d))
				throw ArenaFull("arena: shape too large", SIZE_MAX, 0, 0);
			bytes *= static_cast<std::size_t>(d);
		}
		void *block = nullptr;
		{
			// An asynchronous arena may wait here for the block's chunks.
			py::gil_scoped_release nogil;
			block = arena_->allocate(bytes);
		}
		auto owner = std::make_unique<BlockOwner>(arena_, block);
		return make_dlpack_capsule(block, shape, dtype, DLDevice{kDLCPU, 0},
					   std::move(owner));
	}

	/// The arena's registration as a svmbatch.Registration that keeps the
	/// arena alive and cannot be closed.
	std::shared_ptr<PyRegistration> registration() const
	{
		const Registration &r = get().registration();
		// NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): not closable, never changed
		std::shared_ptr<Registration> shared(arena_, const_cast<Registration *>(&r));
		return std::make_shared<PyRegistration>(std::move(shared),
							std::vector<HeldBuffer>{}, false);
	}

	void wait() const
	{
		const Arena &a = get();
		py::gil_scoped_release nogil;
		a.wait();
	}

	std::uint64_t gpu_address(std::uintptr_t p) const
	{
		const Arena &a = get();
		py::gil_scoped_release nogil;
		return a.gpu_address(
			reinterpret_cast<const void *>(p)); // NOLINT(performance-no-int-to-ptr)
	}

	void close() { arena_.reset(); }
	bool closed() const noexcept { return !arena_; }

private:
	std::shared_ptr<Arena> arena_;
};

PageKind page_kind(const py::object &huge_pages)
{
	if (py::isinstance<py::bool_>(huge_pages))
		return huge_pages.cast<bool>() ? PageKind::Thp : PageKind::Small;
	auto s = huge_pages.cast<std::string>();
	if (s == "thp")
		return PageKind::Thp;
	if (s == "hugetlb")
		return PageKind::Hugetlb;
	if (s == "none")
		return PageKind::Small;
	throw py::value_error(R"(huge_pages: True, False, "thp", "hugetlb" or "none", not ")" + s +
			      "\"");
}

std::shared_ptr<PyArena> make_arena(std::size_t nbytes, const py::object &huge_pages,
				    const py::object &numa_node, std::shared_ptr<Context> context,
				    const std::shared_ptr<GpuBackend> &backend,
				    std::size_t alignment, unsigned threads, bool wait,
				    std::size_t chunk_bytes)
{
	ArenaOptions o;
	o.pages = page_kind(huge_pages);
	o.numa_node = numa_node.is_none() ? -1 : numa_node.cast<int>();
	if (!numa_node.is_none() && o.numa_node < 0)
		throw py::value_error("numa_node must be >= 0");
	o.alignment = alignment;
	o.prefault_threads = threads;
	o.backend = backend.get();
	o.async = !wait;
	o.chunk_bytes = chunk_bytes;
	return std::make_shared<PyArena>(nbytes, o, std::move(context));
}

using PyArenaClass = py::class_<PyArena, std::shared_ptr<PyArena>>;

// Sizes and counters, each read from the library's Arena.
void bind_arena_counters(PyArenaClass &c)
{
	c.def_property_readonly("capacity", [](const PyArena &a) { return a.get().capacity(); })
		.def_property_readonly("mapped_bytes",
				       [](const PyArena &a) { return a.get().mapped_bytes(); })
		.def_property_readonly("base_address",
				       [](const PyArena &a) {
					       return reinterpret_cast<std::uintptr_t>(
						       a.get().base());
				       })
		.def_property_readonly("used", [](const PyArena &a) { return a.get().used(); })
		.def_property_readonly("free",
				       [](const PyArena &a) { return a.get().free_bytes(); })
		.def_property_readonly("largest_free",
				       [](const PyArena &a) { return a.get().largest_free(); })
		.def_property_readonly("live_blocks",
				       [](const PyArena &a) { return a.get().live_blocks(); })
		.def(
			"rounded",
			[](const PyArena &a, std::size_t n) { return a.get().rounded(n); },
			"what a block of n bytes takes from the arena");
}

// What the arena is made of and what it is registered and mapped as.
void bind_arena_memory(PyArenaClass &c)
{
	c.def_property_readonly("huge_pages",
				[](const PyArena &a) {
					return std::string(page_kind_name(a.get().page_kind()));
				})
		.def_property_readonly("numa_node",
				       [](const PyArena &a) -> py::object {
					       int n = a.get().numa_node();
					       if (n < 0)
						       return py::none();
					       return py::int_(n);
				       })
		.def_property_readonly("registration", &PyArena::registration)
		.def_property_readonly("gpu_mapped",
				       [](const PyArena &a) { return a.get().gpu_mapped(); })
		.def_property_readonly("gpu_base_address",
				       [](const PyArena &a) -> py::object {
					       if (!a.get().gpu_mapped())
						       return py::none();
					       return py::int_(a.gpu_address(
						       reinterpret_cast<std::uintptr_t>(
							       a.get().base())));
				       })
		.def("gpu_address", &PyArena::gpu_address, py::arg("address"),
		     "the device address of a byte of the arena, once its chunk is mapped");
}

} // namespace

void bind_arena(py::module_ &m)
{
	PyArenaClass c(m, "Arena");
	c.def(py::init(&make_arena), py::arg("nbytes"), py::arg("huge_pages") = true,
	      py::arg("numa_node") = py::none(), py::arg("context") = nullptr,
	      py::arg("backend") = nullptr, py::arg("alignment") = 256, py::arg("threads") = 0,
	      py::arg("wait") = true, py::arg("chunk_bytes") = 0)
		.def("carve", &PyArena::carve, py::arg("shape"), py::arg("code"), py::arg("bits"),
		     py::arg("lanes") = 1,
		     "a DLPack capsule of a new block (no driver call); the block returns to the "
		     "arena when the consumer's tensor dies")
		.def(
			"ready", [](const PyArena &a) { return a.get().ready(); },
			"every chunk prepared (False while preparing and after a failure)")
		.def("wait", &PyArena::wait,
		     "block until every chunk is prepared; raises the failed chunk's error")
		.def_property_readonly("chunks", [](const PyArena &a) { return a.get().chunks(); })
		.def_property_readonly("chunk_bytes",
				       [](const PyArena &a) { return a.get().chunk_bytes(); })
		.def("close", &PyArena::close)
		.def_property_readonly("closed", &PyArena::closed)
		.def("__enter__", [](py::object self) { return self; })
		.def("__exit__", [](PyArena &a, const py::args &) { a.close(); });
	bind_arena_counters(c);
	bind_arena_memory(c);
}

} // namespace svmbatch::python
