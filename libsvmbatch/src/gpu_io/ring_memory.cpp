// SPDX-License-Identifier: MIT
#include "gpu_io/ring_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <svmbatch/error.hpp>

namespace svmbatch::detail {

namespace {

static_assert(sizeof(svmbatch_io_ring_header) == 64);
static_assert(sizeof(svmbatch_io_request) == 64);
static_assert(sizeof(svmbatch_io_completion) == 32);

constexpr std::size_t requests_offset = sizeof(svmbatch_io_ring_header);

std::size_t ring_bytes(std::uint32_t slots)
{
	const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
	std::size_t n = requests_offset + std::size_t{slots} * sizeof(svmbatch_io_request) +
			std::size_t{slots} * sizeof(svmbatch_io_completion);
	return (n + page - 1) / page * page;
}

} // namespace

RingMemory::RingMemory(unsigned slots) : slots_(slots), bytes_(ring_bytes(slots))
{
	void *m = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (m == MAP_FAILED)
		throw Error(errno, Step::Validate,
			    "IoLoop ring of " + std::to_string(bytes_) + " bytes: mmap failed");
	base_ = m;
	svmbatch_io_ring_header *h = header();
	h->version = SVMBATCH_IO_RING_VERSION;
	h->slots = slots_;
	for (std::uint32_t i = 0; i < slots_; i++) {
		requests()[i].seq = svmbatch_io_seq_free(i);
		completions()[i].seq = svmbatch_io_seq_free(i);
	}
}

RingMemory::~RingMemory()
{
	::munmap(base_, bytes_);
}

svmbatch_io_ring_header *RingMemory::header() const noexcept
{
	return static_cast<svmbatch_io_ring_header *>(base_);
}

svmbatch_io_request *RingMemory::requests() const noexcept
{
	return reinterpret_cast<svmbatch_io_request *>(static_cast<char *>(base_) +
						       requests_offset);
}

svmbatch_io_completion *RingMemory::completions() const noexcept
{
	return reinterpret_cast<svmbatch_io_completion *>(requests() + slots_);
}

svmbatch_io_queue RingMemory::queue_at(std::uint64_t address) const noexcept
{
	const std::uint64_t completions_offset =
		requests_offset + std::uint64_t{slots_} * sizeof(svmbatch_io_request);
	svmbatch_io_queue q{};
	// NOLINTBEGIN(performance-no-int-to-ptr): addresses in another space
	q.header = reinterpret_cast<svmbatch_io_ring_header *>(address);
	q.requests = reinterpret_cast<svmbatch_io_request *>(address + requests_offset);
	q.completions = reinterpret_cast<svmbatch_io_completion *>(address + completions_offset);
	// NOLINTEND(performance-no-int-to-ptr)
	q.mask = mask();
	return q;
}

} // namespace svmbatch::detail
