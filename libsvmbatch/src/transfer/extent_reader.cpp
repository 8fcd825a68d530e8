// SPDX-License-Identifier: MIT
// ExtentReader: the staging (memory, registration, GPU mapping, ring,
// fixed buffers, Reader) set up once, and the pipeline of one read():
// chunk groups read in turn, each copied out as its batch completes.
#include <svmbatch/extent_reader.hpp>

#include <sys/mman.h>

#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <future>
#include <optional>
#include <string>

#include <svmbatch/context.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/fixed_buffers.hpp>
#include <svmbatch/gpu/backend.hpp>
#include <svmbatch/gpu/stream_copier.hpp>
#include <svmbatch/reader.hpp>
#include <svmbatch/registration.hpp>

#include "transfer/extent_plan.hpp"
#include "uring/owned_ring.hpp"

namespace svmbatch {

namespace detail {

namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t ns_since(Clock::time_point t0)
{
	return static_cast<std::uint64_t>(
		std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

constexpr std::size_t page = 4096;

/// Anonymous memory for the chunks, unmapped on destruction.
class Mapping {
public:
	explicit Mapping(std::size_t bytes) : bytes_(bytes)
	{
		void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		if (p == MAP_FAILED)
			throw Error(errno, Step::Validate,
				    "ExtentReader: mapping " + std::to_string(bytes) +
					    " bytes of staging");
		addr_ = static_cast<char *>(p);
		// Fewer pages for io_uring and the GPU driver to pin.
		(void)madvise(addr_, bytes, MADV_HUGEPAGE);
	}
	Mapping(const Mapping &) = delete;
	Mapping &operator=(const Mapping &) = delete;
	Mapping(Mapping &&) = delete;
	Mapping &operator=(Mapping &&) = delete;
	~Mapping() { munmap(addr_, bytes_); }
	char *data() const noexcept { return addr_; }
	std::size_t size() const noexcept { return bytes_; }

private:
	char *addr_ = nullptr;
	std::size_t bytes_;
};

} // namespace

class ExtentStaging {
public:
	ExtentStaging(Context &context, const ExtentReaderOptions &options, GpuBackend *gpu);
	ExtentStaging(const ExtentStaging &) = delete;
	ExtentStaging &operator=(const ExtentStaging &) = delete;
	ExtentStaging(ExtentStaging &&) = delete;
	ExtentStaging &operator=(ExtentStaging &&) = delete;
	~ExtentStaging() = default;

	std::vector<ExtentResult> read(std::span<const Extent> extents, StreamCopier *copier);

	std::vector<ExtentReaderStep> steps;
	ExtentReadStats last;
	std::size_t chunk_bytes;
	std::size_t chunks;
	std::size_t groups;
	std::size_t per_group;
	std::size_t align;

	// Destroyed bottom up: the Reader, the fixed buffers, the ring, the
	// GPU mapping, the registration, the memory.
	std::optional<Mapping> memory;
	std::optional<Registration> registration;
	std::optional<GpuMapping> mapping;
	std::optional<OwnedRing> ring;
	std::optional<FixedBuffers> fixed;
	std::optional<Reader> reader;

private:
	struct Batch {
		std::size_t group;
		std::size_t first; ///< its first read in the plan
		std::size_t count;
		IoBatch io;
	};
	void copy_out(const ExtentPlan &plan, Batch &batch, StreamCopier *copier,
		      std::vector<ExtentResult> &out);
};

ExtentStaging::ExtentStaging(Context &context, const ExtentReaderOptions &options, GpuBackend *gpu)
	: chunk_bytes(options.chunk_bytes)
{
	align = std::max(options.io.direct_alignment, page);
	if (chunk_bytes < page || chunk_bytes % align != 0)
		throw Error(EINVAL, Step::Validate,
			    "ExtentReader: chunk_bytes " + std::to_string(chunk_bytes) +
				    " must be a multiple of " + std::to_string(align));
	chunks = options.staging_bytes / chunk_bytes;
	if (chunks < 2)
		throw Error(EINVAL, Step::Validate,
			    "ExtentReader: staging_bytes " + std::to_string(options.staging_bytes) +
				    " holds fewer than two chunks of " +
				    std::to_string(chunk_bytes));
	// A few groups of chunks: the reads of the others stay in flight
	// while one group's chunks are copied out.
	groups = chunks >= 8 ? 4 : 2;
	per_group = chunks / groups;
	chunks = per_group * groups;

	auto t0 = Clock::now();
	memory.emplace(chunks * chunk_bytes);
	steps.push_back({"staging", ns_since(t0)});

	t0 = Clock::now();
	Buffer b{memory->data(), memory->size(), Access::ReadWrite};
	RegisterOptions reg_options;
	// A GPU's mapping faults the pages in as it pins them.
	reg_options.prefault = gpu == nullptr;
	registration.emplace(context.register_buffers(std::span<const Buffer>(&b, 1), reg_options));
	steps.push_back({"register", ns_since(t0)});

	// The GPU's mapping (the driver pinning the chunks) is made while the
	// rings, their fixed buffers and the Reader's threads are set up.
	std::future<std::uint64_t> mapped;
	if (gpu != nullptr)
		mapped = std::async(std::launch::async, [this, gpu] {
			auto t = Clock::now();
			mapping.emplace(gpu->map(*registration));
			return ns_since(t);
		});
	try {
		t0 = Clock::now();
		ring.emplace(std::max(options.io.queue_depth, 8u), "the ExtentReader's ring");
		steps.push_back({"ring", ns_since(t0)});

		t0 = Clock::now();
		fixed.emplace(register_fixed(*registration, ring->get()));
		steps.push_back({"fixed", ns_since(t0)});

		t0 = Clock::now();
		IoOptions io = options.io;
		io.direct_alignment = align;
		reader.emplace(ring->get(), *fixed, io);
		steps.push_back({"reader", ns_since(t0)});
	} catch (...) {
		if (mapped.valid())
			mapped.wait();
		throw;
	}
	if (mapped.valid()) {
		t0 = Clock::now();
		std::uint64_t ns = mapped.get();
		steps.push_back({"gpu-map", ns});
		steps.push_back({"gpu-map-wait", ns_since(t0)});
	}
}

void ExtentStaging::copy_out(const ExtentPlan &plan, Batch &batch, StreamCopier *copier,
			     std::vector<ExtentResult> &out)
{
	auto t0 = Clock::now();
	std::vector<IoResult> results = batch.io.wait();
	last.wait_read_ns += ns_since(t0);
	for (std::size_t j = 0; j < batch.count; j++) {
		const ChunkRead &r = plan.reads[batch.first + j];
		const IoResult &res = results[j];
		const char *chunk = memory->data() + (batch.group * per_group + j) * chunk_bytes;
		for (std::size_t p = r.first; p < r.first + r.count; p++) {
			const ExtentPiece &piece = plan.pieces[p];
			ExtentResult &o = out[piece.extent];
			if (res.bytes < piece.at + piece.length) {
				// What arrived of the piece is of no use: not copied.
				if (o.err == 0)
					o.err = res.err != 0 ? res.err : EIO;
				continue;
			}
			if (copier == nullptr) {
				// NOLINTNEXTLINE(performance-no-int-to-ptr): the caller's host address
				std::memcpy(reinterpret_cast<void *>(
						    static_cast<std::uintptr_t>(piece.dst)),
					    chunk + piece.at, piece.length);
			} else if (int rc = copier->copy(piece.dst, chunk + piece.at, piece.length);
				   rc < 0) {
				if (o.err == 0) {
					o.err = -rc;
					o.copy = true;
				}
				continue;
			}
			last.copies++;
			o.bytes += piece.length;
		}
	}
	if (copier != nullptr) {
		if (int rc = copier->fence(static_cast<unsigned>(batch.group)); rc < 0)
			throw Error(-rc, Step::GpuCopy,
				    std::string("ExtentReader: fencing the copies on ") +
					    copier->name(),
				    Error::no_index, copier->driver_status());
	}
}

std::vector<ExtentResult> ExtentStaging::read(std::span<const Extent> extents, StreamCopier *copier)
{
	auto start = Clock::now();
	last = {};
	std::unique_ptr<bool[]> direct(new bool[extents.size()]);
	for (std::size_t i = 0; i < extents.size(); i++) {
		const Extent &e = extents[i];
		if (e.fd < 0)
			throw Error(EINVAL, Step::Validate,
				    "extent " + std::to_string(i) + ": fd " + std::to_string(e.fd),
				    i);
		if (e.length != 0 && e.dst == 0)
			throw Error(EINVAL, Step::Validate,
				    "extent " + std::to_string(i) + ": no destination", i);
		if (e.file_offset > (std::uint64_t{1} << 62) || e.length > (std::size_t{1} << 62))
			throw Error(EINVAL, Step::Validate,
				    "extent " + std::to_string(i) + ": offset " +
					    std::to_string(e.file_offset) + " length " +
					    std::to_string(e.length) + " out of range",
				    i);
		if (i > 0 && e.fd == extents[i - 1].fd) {
			direct[i] = direct[i - 1];
			continue;
		}
		int d = direct_fd(e.fd);
		if (d < 0)
			throw Error(-d, Step::Validate,
				    "extent " + std::to_string(i) + ": fd " + std::to_string(e.fd),
				    i);
		direct[i] = d == 1;
	}
	if (copier != nullptr && copier->slots() < groups)
		throw Error(EINVAL, Step::Validate,
			    "ExtentReader: the copier has " + std::to_string(copier->slots()) +
				    " fences, the staging " + std::to_string(groups) + " groups");
	ExtentPlan plan = plan_extents(extents, std::span<const bool>(direct.get(), extents.size()),
				       chunk_bytes, align);
	std::vector<ExtentResult> out(extents.size());
	std::deque<Batch> pending;
	std::vector<IoRequest> requests;
	requests.reserve(per_group);

	// Whatever ends the call, no read or copy still uses the staging.
	auto drain = [&]() noexcept {
		for (Batch &b : pending)
			b.io.cancel();
		for (Batch &b : pending) {
			try {
				(void)b.io.wait();
			} catch (
				...) { // NOLINT(bugprone-empty-catch): the first error is on its way
			}
		}
		pending.clear();
		// Every copy queued, fenced or not (a fence may have failed).
		if (copier != nullptr && copier->synchronize() < 0)
			for (unsigned g = 0; g < groups; g++)
				(void)copier->wait(g);
	};
	try {
		std::size_t n = 0;
		for (std::size_t first = 0; first < plan.reads.size(); first += per_group, n++) {
			std::size_t group = n % groups;
			if (pending.size() == groups) {
				copy_out(plan, pending.front(), copier, out);
				pending.pop_front();
			}
			if (copier != nullptr) {
				auto t0 = Clock::now();
				if (int rc = copier->wait(static_cast<unsigned>(group)); rc < 0)
					throw Error(-rc, Step::GpuCopy,
						    std::string(
							    "ExtentReader: waiting for copies on ") +
							    copier->name(),
						    Error::no_index, copier->driver_status());
				last.wait_copy_ns += ns_since(t0);
			}
			std::size_t count = std::min(per_group, plan.reads.size() - first);
			requests.clear();
			for (std::size_t j = 0; j < count; j++) {
				const ChunkRead &r = plan.reads[first + j];
				requests.push_back({r.fd, r.file_offset, r.length, 0,
						    (group * per_group + j) * chunk_bytes});
				last.bytes_read += r.length;
			}
			last.reads += count;
			pending.push_back({group, first, count, reader->start(requests)});
		}
		while (!pending.empty()) {
			copy_out(plan, pending.front(), copier, out);
			pending.pop_front();
		}
		if (copier != nullptr) {
			auto t0 = Clock::now();
			for (unsigned g = 0; g < groups; g++)
				if (int rc = copier->wait(g); rc < 0)
					throw Error(-rc, Step::GpuCopy,
						    std::string(
							    "ExtentReader: waiting for copies on ") +
							    copier->name(),
						    Error::no_index, copier->driver_status());
			last.wait_copy_ns += ns_since(t0);
		}
	} catch (...) {
		drain();
		throw;
	}
	last.ns = ns_since(start);
	return out;
}

} // namespace detail

ExtentReader::ExtentReader(Context &context, const ExtentReaderOptions &options, GpuBackend *gpu)
	: staging_(std::make_unique<detail::ExtentStaging>(context, options, gpu))
{}

ExtentReader::ExtentReader(ExtentReader &&) noexcept = default;
ExtentReader &ExtentReader::operator=(ExtentReader &&) noexcept = default;
ExtentReader::~ExtentReader() = default;

std::vector<ExtentResult> ExtentReader::read(std::span<const Extent> extents, StreamCopier *copier)
{
	return staging_->read(extents, copier);
}

const std::vector<ExtentReaderStep> &ExtentReader::setup() const noexcept
{
	return staging_->steps;
}

const ExtentReadStats &ExtentReader::last_read() const noexcept
{
	return staging_->last;
}

std::size_t ExtentReader::chunk_bytes() const noexcept
{
	return staging_->chunk_bytes;
}

std::size_t ExtentReader::chunks() const noexcept
{
	return staging_->chunks;
}

unsigned ExtentReader::threads() const noexcept
{
	return staging_->reader->threads();
}

Parallelism ExtentReader::parallelism() const noexcept
{
	return staging_->reader->parallelism();
}

} // namespace svmbatch
