// SPDX-License-Identifier: MIT
#include "arena/arena_memory.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <svmbatch/error.hpp>

#include "core/cpus.hpp"

namespace svmbatch::detail {

namespace {

constexpr std::size_t huge_page = std::size_t{2} << 20;
constexpr int mpol_bind = 2; // MPOL_BIND, <linux/mempolicy.h>
constexpr int madv_populate_write = 23; // MADV_POPULATE_WRITE, Linux 5.14
constexpr int map_huge_2mb = 21 << 26; // MAP_HUGE_2MB: log2(2 MiB) << MAP_HUGE_SHIFT
constexpr std::size_t prefault_unit = std::size_t{64} << 20; // the least one thread faults in

// The caller's arguments are checked (Step::Validate) before anything is
// mapped; what fails after that is the Arena's own step.
[[noreturn]] void fail(int err, const std::string &what, Step step = Step::Arena)
{
	throw Error(err, step, "arena: " + what);
}

std::size_t round_up(std::size_t n, std::size_t to)
{
	if (n > SIZE_MAX - (to - 1))
		fail(EOVERFLOW, std::to_string(n) + " bytes cannot be rounded to whole pages",
		     Step::Validate);
	return (n + to - 1) / to * to;
}

// A 2 MiB-aligned private mapping of bytes: map one huge page more and trim.
char *map_aligned(std::size_t bytes)
{
	if (bytes > SIZE_MAX - huge_page)
		fail(ENOMEM, "mmap of " + std::to_string(bytes) + " bytes");
	const std::size_t over = bytes + huge_page;
	void *p = mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		fail(errno, "mmap of " + std::to_string(bytes) + " bytes");
	const auto start = reinterpret_cast<std::uintptr_t>(p);
	const std::uintptr_t aligned = (start + huge_page - 1) & ~(huge_page - 1);
	if (aligned > start)
		munmap(p, aligned - start);
	const std::size_t tail = (start + over) - (aligned + bytes);
	if (tail != 0) {
		// NOLINTNEXTLINE(performance-no-int-to-ptr): an address mmap gave
		munmap(reinterpret_cast<void *>(aligned + bytes), tail);
	}
	return reinterpret_cast<char *>(aligned); // NOLINT(performance-no-int-to-ptr)
}

// Fault in every page of [p, p + n) for writing, so that registering and
// the first use fault nothing in.  0 or an errno.
int prefault_range(char *p, std::size_t n, std::size_t page)
{
	if (madvise(p, n, madv_populate_write) == 0)
		return 0;
	if (errno != EINVAL) // EINVAL: a kernel before 5.14; ENOMEM, EFAULT...: real
		return errno;
	for (std::size_t off = 0; off < n; off += page)
		*static_cast<volatile char *>(p + off) = 0;
	return 0;
}

} // namespace

std::size_t ArenaMemory::mapped_size(std::size_t bytes, PageKind kind)
{
	if (bytes == 0)
		fail(EINVAL, "size 0", Step::Validate);
	switch (kind) {
	case PageKind::Small:
		return round_up(bytes, static_cast<std::size_t>(sysconf(_SC_PAGESIZE)));
	case PageKind::Thp:
	case PageKind::Hugetlb:
		return round_up(bytes, huge_page);
	}
	fail(EINVAL, "unknown page kind", Step::Validate);
}

ArenaMemory::ArenaMemory(std::size_t bytes, PageKind kind, int numa_node, unsigned threads,
			 bool prefault_now)
	: kind_(kind)
{
	mapped_ = mapped_size(bytes, kind);
	switch (kind) {
	case PageKind::Small:
		base_ = static_cast<char *>(mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
						 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
		if (base_ == MAP_FAILED) {
			base_ = nullptr;
			fail(errno, "mmap of " + std::to_string(mapped_) + " bytes");
		}
		break;
	case PageKind::Thp:
		base_ = map_aligned(mapped_);
		// Best effort: THP may be disabled ("never"); small pages then.
		(void)madvise(base_, mapped_, MADV_HUGEPAGE);
		break;
	case PageKind::Hugetlb:
		base_ = static_cast<char *>(
			mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | map_huge_2mb, -1, 0));
		if (base_ == MAP_FAILED) {
			const int err = errno;
			base_ = nullptr;
			fail(err, "no " + std::to_string(mapped_ >> 20) +
					  " MiB of 2 MiB hugetlb pages (vm.nr_hugepages)");
		}
		break;
	default:
		fail(EINVAL, "unknown page kind", Step::Validate);
	}
	try {
		if (numa_node >= 0) {
			const auto node = static_cast<std::size_t>(numa_node);
			std::vector<unsigned long> mask(node / 64 + 1, 0);
			mask[node / 64] = 1UL << (node % 64);
			if (syscall(SYS_mbind, base_, mapped_, mpol_bind, mask.data(),
				    mask.size() * 64 + 1, 0) != 0)
				fail(errno, "mbind to NUMA node " + std::to_string(numa_node));
		}
		if (prefault_now)
			prefault(0, mapped_, threads);
	} catch (...) {
		munmap(base_, mapped_);
		base_ = nullptr;
		throw;
	}
}

std::size_t ArenaMemory::fault_unit(PageKind kind) noexcept
{
	return kind == PageKind::Small ? static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) :
					 huge_page;
}

// Several threads fault the pages in: one core zeroes ~10 GB/s at best.
void ArenaMemory::prefault(std::size_t offset, std::size_t bytes, unsigned threads) const
{
	const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
	const std::size_t unit = fault_unit();
	const std::size_t pages = bytes / unit;
	unsigned n = threads != 0 ? threads : default_threads();
	n = static_cast<unsigned>(
		std::min<std::size_t>(n, std::max<std::size_t>(1, bytes / prefault_unit)));
	std::atomic<int> first_error{0};
	char *const start = base_ + offset;
	auto run = [&](unsigned t) {
		const std::size_t first = pages * t / n * unit;
		const std::size_t last = pages * (t + 1) / n * unit;
		int err = prefault_range(start + first, last - first, page);
		int none = 0;
		if (err != 0)
			first_error.compare_exchange_strong(none, err);
	};
	std::vector<std::thread> workers;
	workers.reserve(n - 1);
	try {
		for (unsigned t = 1; t < n; ++t)
			workers.emplace_back(run, t);
	} catch (...) {
		// No thread for the rest: this one does it.
		for (unsigned t = static_cast<unsigned>(workers.size()) + 1; t < n; ++t)
			run(t);
	}
	run(0);
	for (auto &w : workers)
		w.join();
	if (first_error != 0)
		fail(first_error, "faulting in " + std::to_string(bytes) + " bytes at offset " +
					  std::to_string(offset));
}

ArenaMemory::~ArenaMemory()
{
	if (base_ != nullptr)
		munmap(base_, mapped_);
}

} // namespace svmbatch::detail
