// SPDX-License-Identifier: MIT
#include "arena.hpp"

#include <algorithm>
#include <cerrno>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <pybind11/stl.h>

#include <svmbatch/error.hpp>

#include "bindings.hpp"
#include "dlpack_export.hpp"
#include "errors.hpp"
#include "registration_holder.hpp"

namespace svmbatch::python {

namespace {

constexpr std::size_t huge_page = std::size_t{2} << 20;
constexpr int mpol_bind = 2; // MPOL_BIND, <linux/mempolicy.h>
constexpr int madv_populate_write = 23; // MADV_POPULATE_WRITE, Linux 5.14

std::size_t round_up(std::size_t n, std::size_t to)
{
	return (n + to - 1) / to * to;
}

[[noreturn]] void fail(int err, const std::string &what)
{
	throw Error(err, Step::Validate, "arena: " + what);
}

// A 2 MiB-aligned mapping of bytes: map one huge page more and trim.
char *map_aligned(std::size_t bytes)
{
	std::size_t over = bytes + huge_page;
	void *p = mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		fail(errno, "mmap of " + std::to_string(bytes) + " bytes");
	auto start = reinterpret_cast<std::uintptr_t>(p);
	std::uintptr_t aligned = round_up(start, huge_page);
	if (aligned > start)
		munmap(p, aligned - start);
	std::size_t tail = (start + over) - (aligned + bytes);
	if (tail != 0) {
		// NOLINTNEXTLINE(performance-no-int-to-ptr): an address mmap gave
		munmap(reinterpret_cast<void *>(aligned + bytes), tail);
	}
	return reinterpret_cast<char *>(aligned); // NOLINT(performance-no-int-to-ptr)
}

// Touch every page of [p, p + n) for writing, so that registering and the
// first use fault nothing in.
void prefault(char *p, std::size_t n, std::size_t page)
{
	if (madvise(p, n, madv_populate_write) == 0)
		return;
	for (std::size_t off = 0; off < n; off += page)
		*static_cast<volatile char *>(p + off) = 0;
}

} // namespace

ArenaMemory::ArenaMemory(std::size_t bytes, PageKind kind, int numa_node, unsigned threads)
{
	if (bytes == 0)
		fail(EINVAL, "size 0");
	const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
	switch (kind) {
	case PageKind::Small:
		mapped_ = round_up(bytes, page);
		base_ = static_cast<char *>(mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
						 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
		if (base_ == MAP_FAILED) {
			base_ = nullptr;
			fail(errno, "mmap of " + std::to_string(mapped_) + " bytes");
		}
		break;
	case PageKind::Thp:
		mapped_ = round_up(bytes, huge_page);
		base_ = map_aligned(mapped_);
		// Best effort: THP may be disabled ("never"); small pages then.
		(void)madvise(base_, mapped_, MADV_HUGEPAGE);
		break;
	case PageKind::Hugetlb:
		mapped_ = round_up(bytes, huge_page);
		base_ = static_cast<char *>(mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
						 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0));
		if (base_ == MAP_FAILED) {
			int err = errno;
			base_ = nullptr;
			fail(err, "no " + std::to_string(mapped_ >> 20) +
					  " MiB of hugetlb pages (vm.nr_hugepages)");
		}
		break;
	}
	if (numa_node >= 0) {
		std::vector<unsigned long> mask(static_cast<std::size_t>(numa_node) / 64 + 1, 0);
		mask[static_cast<std::size_t>(numa_node) / 64] = 1UL << (numa_node % 64);
		if (syscall(SYS_mbind, base_, mapped_, mpol_bind, mask.data(), mask.size() * 64 + 1,
			    0) != 0) {
			int err = errno;
			munmap(base_, mapped_);
			base_ = nullptr;
			fail(err, "mbind to NUMA node " + std::to_string(numa_node));
		}
	}
	// Several threads fault the pages in: one core zeroes ~10 GB/s at best.
	const std::size_t unit = kind == PageKind::Small ? page : huge_page;
	const std::size_t pages = mapped_ / unit;
	unsigned n = threads != 0 ?
			     threads :
			     std::min(16u, std::max(1u, std::thread::hardware_concurrency()));
	n = static_cast<unsigned>(
		std::min<std::size_t>(n, std::max<std::size_t>(1, mapped_ / (64 << 20))));
	std::vector<std::thread> workers;
	for (unsigned t = 0; t < n; ++t) {
		std::size_t first = pages * t / n * unit;
		std::size_t last = pages * (t + 1) / n * unit;
		workers.emplace_back([=, this] { prefault(base_ + first, last - first, page); });
	}
	for (auto &w : workers)
		w.join();
}

ArenaMemory::~ArenaMemory()
{
	if (base_ != nullptr)
		munmap(base_, mapped_);
}

BlockAllocator::BlockAllocator(std::size_t capacity, std::size_t alignment)
	: capacity_(capacity), alignment_(alignment)
{
	if (alignment == 0 || (alignment & (alignment - 1)) != 0)
		fail(EINVAL, "alignment " + std::to_string(alignment) + " is not a power of two");
	insert_free(0, capacity);
}

std::size_t BlockAllocator::rounded(std::size_t bytes) const noexcept
{
	return round_up(std::max<std::size_t>(bytes, 1), alignment_);
}

void BlockAllocator::insert_free(std::size_t offset, std::size_t bytes)
{
	by_offset_.emplace(offset, bytes);
	by_size_.emplace(bytes, offset);
}

void BlockAllocator::erase_free(std::map<std::size_t, std::size_t>::iterator it)
{
	auto [lo, hi] = by_size_.equal_range(it->second);
	for (auto s = lo; s != hi; ++s) {
		if (s->second == it->first) {
			by_size_.erase(s);
			break;
		}
	}
	by_offset_.erase(it);
}

std::size_t BlockAllocator::allocate(std::size_t bytes)
{
	const std::size_t need = rounded(bytes);
	std::lock_guard lock(mutex_);
	auto fit = by_size_.lower_bound(need);
	if (fit == by_size_.end()) {
		std::size_t free_bytes = capacity_ - used_;
		std::size_t largest = by_size_.empty() ? 0 : by_size_.rbegin()->first;
		std::string what = free_bytes >= need ?
					   "arena fragmented: " + std::to_string(need) +
						   " bytes asked, " + std::to_string(free_bytes) +
						   " free in " + std::to_string(by_size_.size()) +
						   " pieces, the largest " +
						   std::to_string(largest) :
					   "arena full: " + std::to_string(need) +
						   " bytes asked, " + std::to_string(free_bytes) +
						   " of " + std::to_string(capacity_) + " free";
		throw ArenaFull(what, need, free_bytes, largest);
	}
	const std::size_t offset = fit->second;
	const std::size_t have = fit->first;
	erase_free(by_offset_.find(offset));
	if (have > need)
		insert_free(offset + need, have - need);
	used_ += need;
	++live_;
	return offset;
}

void BlockAllocator::release(std::size_t offset, std::size_t bytes) noexcept
{
	std::size_t size = rounded(bytes);
	std::lock_guard lock(mutex_);
	used_ -= size;
	--live_;
	// Coalesce with the free neighbours on both sides.
	auto next = by_offset_.lower_bound(offset);
	if (next != by_offset_.end() && next->first == offset + size) {
		size += next->second;
		erase_free(next);
	}
	auto prev = by_offset_.lower_bound(offset);
	if (prev != by_offset_.begin()) {
		--prev;
		if (prev->first + prev->second == offset) {
			offset = prev->first;
			size += prev->second;
			erase_free(prev);
		}
	}
	insert_free(offset, size);
}

std::size_t BlockAllocator::used() const
{
	std::lock_guard lock(mutex_);
	return used_;
}

std::size_t BlockAllocator::largest_free() const
{
	std::lock_guard lock(mutex_);
	return by_size_.empty() ? 0 : by_size_.rbegin()->first;
}

std::size_t BlockAllocator::live_blocks() const
{
	std::lock_guard lock(mutex_);
	return live_;
}

namespace {

/// A carved block: back to the allocator when the consumer lets go.
class BlockOwner final : public ExportOwner {
public:
	BlockOwner(std::shared_ptr<ArenaState> state, std::size_t offset, std::size_t bytes)
		: state_(std::move(state)), offset_(offset), bytes_(bytes)
	{}
	BlockOwner(const BlockOwner &) = delete;
	BlockOwner &operator=(const BlockOwner &) = delete;
	BlockOwner(BlockOwner &&) = delete;
	BlockOwner &operator=(BlockOwner &&) = delete;
	~BlockOwner() override { state_->allocator.release(offset_, bytes_); }

private:
	std::shared_ptr<ArenaState> state_;
	std::size_t offset_;
	std::size_t bytes_;
};

/// svmbatch.Arena.  close() drops the arena's reference: the memory, its
/// registration and mapping live on until the last carved block is gone.
class PyArena {
public:
	PyArena(std::size_t bytes, PageKind kind, int numa_node, std::shared_ptr<Context> context,
		const std::shared_ptr<GpuBackend> &backend, std::size_t alignment, unsigned threads)
	{
		py::gil_scoped_release nogil;
		state_ = std::make_shared<ArenaState>(bytes, kind, numa_node, threads, alignment);
		if (!context)
			context = std::make_shared<Context>();
		Buffer whole{state_->memory.base(), state_->memory.mapped_bytes(),
			     Access::ReadWrite};
		state_->registration =
			std::make_shared<Registration>(context->register_buffers({&whole, 1}));
		if (backend)
			state_->mapping.emplace(backend->map(*state_->registration));
	}

	ArenaState &state() const
	{
		if (!state_)
			throw py::value_error("the arena is closed");
		return *state_;
	}

	py::capsule carve(const std::vector<std::int64_t> &shape, std::uint8_t code,
			  std::uint8_t bits, std::uint16_t lanes)
	{
		ArenaState &s = state();
		DLDataType dtype{code, bits, lanes};
		std::size_t bytes = dlpack_item_bytes(dtype);
		for (std::int64_t d : shape) {
			if (d < 0)
				throw py::value_error("negative dimension " + std::to_string(d));
			if (d != 0 && bytes > SIZE_MAX / static_cast<std::size_t>(d))
				throw ArenaFull("arena: shape too large", SIZE_MAX, 0, 0);
			bytes *= static_cast<std::size_t>(d);
		}
		std::size_t offset = s.allocator.allocate(bytes);
		auto owner = std::make_unique<BlockOwner>(state_, offset, bytes);
		return make_dlpack_capsule(s.memory.base() + offset, shape, dtype,
					   DLDevice{kDLCPU, 0}, std::move(owner));
	}

	void close() { state_.reset(); }
	bool closed() const noexcept { return !state_; }
	const std::shared_ptr<ArenaState> &shared() const { return state_; }

private:
	std::shared_ptr<ArenaState> state_;
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

const char *page_kind_name(PageKind k)
{
	switch (k) {
	case PageKind::Thp:
		return "thp";
	case PageKind::Hugetlb:
		return "hugetlb";
	case PageKind::Small:
		break;
	}
	return "none";
}

} // namespace

void bind_arena(py::module_ &m)
{
	py::class_<PyArena, std::shared_ptr<PyArena>>(m, "Arena")
		.def(py::init([](std::size_t nbytes, const py::object &huge_pages,
				 const py::object &numa_node, std::shared_ptr<Context> context,
				 const std::shared_ptr<GpuBackend> &backend, std::size_t alignment,
				 unsigned threads) {
			     int node = numa_node.is_none() ? -1 : numa_node.cast<int>();
			     if (!numa_node.is_none() && node < 0)
				     throw py::value_error("numa_node must be >= 0");
			     return std::make_shared<PyArena>(nbytes, page_kind(huge_pages), node,
							      std::move(context), backend,
							      alignment, threads);
		     }),
		     py::arg("nbytes"), py::arg("huge_pages") = true,
		     py::arg("numa_node") = py::none(), py::arg("context") = nullptr,
		     py::arg("backend") = nullptr, py::arg("alignment") = 256,
		     py::arg("threads") = 0)
		.def("carve", &PyArena::carve, py::arg("shape"), py::arg("code"), py::arg("bits"),
		     py::arg("lanes") = 1,
		     "a DLPack capsule of a new block (no driver call); the block returns to the "
		     "arena when the consumer's tensor dies")
		.def_property_readonly("capacity",
				       [](const PyArena &a) {
					       return a.state().allocator.capacity();
				       })
		.def_property_readonly("mapped_bytes",
				       [](const PyArena &a) {
					       return a.state().memory.mapped_bytes();
				       })
		.def_property_readonly("base_address",
				       [](const PyArena &a) {
					       return reinterpret_cast<std::uintptr_t>(
						       a.state().memory.base());
				       })
		.def_property_readonly("used",
				       [](const PyArena &a) { return a.state().allocator.used(); })
		.def_property_readonly("free",
				       [](const PyArena &a) {
					       const auto &al = a.state().allocator;
					       return al.capacity() - al.used();
				       })
		.def_property_readonly("largest_free",
				       [](const PyArena &a) {
					       return a.state().allocator.largest_free();
				       })
		.def_property_readonly("live_blocks",
				       [](const PyArena &a) {
					       return a.state().allocator.live_blocks();
				       })
		.def(
			"rounded",
			[](const PyArena &a, std::size_t n) {
				return a.state().allocator.rounded(n);
			},
			"what a block of n bytes takes from the arena")
		.def_property_readonly("huge_pages",
				       [](const PyArena &a) {
					       return std::string(page_kind_name(a.state().kind));
				       })
		.def_property_readonly("numa_node",
				       [](const PyArena &a) -> py::object {
					       int n = a.state().numa_node;
					       if (n < 0)
						       return py::none();
					       return py::int_(n);
				       })
		.def_property_readonly(
			"registration",
			[](const PyArena &a) {
				a.state();
				// Shares the arena's state: the registration and
				// the memory stay while this object lives.
				std::shared_ptr<Registration> r(a.shared(),
								a.state().registration.get());
				return std::make_shared<PyRegistration>(std::move(r),
									std::vector<HeldBuffer>{},
									false);
			})
		.def_property_readonly("gpu_mapped",
				       [](const PyArena &a) {
					       return a.state().mapping.has_value();
				       })
		.def_property_readonly("gpu_base_address",
				       [](const PyArena &a) -> py::object {
					       if (!a.state().mapping)
						       return py::none();
					       return py::int_(a.state().mapping->address(0));
				       })
		.def("close", &PyArena::close)
		.def_property_readonly("closed", &PyArena::closed)
		.def("__enter__", [](py::object self) { return self; })
		.def("__exit__", [](PyArena &a, const py::args &) { a.close(); });
}

} // namespace svmbatch::python
