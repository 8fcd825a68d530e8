// SPDX-License-Identifier: MIT
// ExtentReader: file extents read into host or device memory through a
// ring of registered staging chunks, on every core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <svmbatch/api.h>
#include <svmbatch/io.hpp>

namespace svmbatch {

class Context;
class GpuBackend;
class StreamCopier;

/// length bytes of fd at file_offset, to land at dst: a host address, or a
/// device address when read with a StreamCopier.  fd may be opened with
/// O_DIRECT: the reader then reads whole aligned blocks around the extent.
struct Extent {
	int fd = -1;
	std::uint64_t file_offset = 0;
	std::size_t length = 0;
	std::uint64_t dst = 0;
};

/// How one extent ended.  err is 0 when all its bytes arrived, else the
/// errno of its first piece that failed: the read's own (ENODATA when the
/// file ended first), or, with copy set, that of queueing its copy to the
/// device.  bytes counts the bytes copied out to dst either way: a piece
/// (the part of an extent in one chunk read) that arrived only in part is
/// not copied.
struct ExtentResult {
	int err = 0;
	std::size_t bytes = 0;
	bool copy = false;
};

struct ExtentReaderOptions {
	/// The staging ring, cut in chunks of chunk_bytes (a multiple of 4096,
	/// at least 4096): at least two.
	std::size_t staging_bytes = std::size_t{64} << 20;
	std::size_t chunk_bytes = std::size_t{4} << 20;
	/// The Reader's: threads (0: the CPUs, at most 16), queue depth, the
	/// largest single read, O_DIRECT alignment (reads of O_DIRECT fds are
	/// aligned to max(direct_alignment, 4096)).
	IoOptions io;
};

/// What one set-up step of the reader took, for a first load's breakdown.
struct ExtentReaderStep {
	std::string name;
	std::uint64_t ns = 0;
};

/// Counters of the last read().
struct ExtentReadStats {
	std::size_t reads = 0; ///< staging chunks read
	std::size_t copies = 0; ///< copies out of the staging
	std::uint64_t bytes_read = 0; ///< bytes the reads asked for
	std::uint64_t ns = 0; ///< the call, from entry to return
	std::uint64_t wait_read_ns = 0; ///< waiting for reads to complete
	std::uint64_t wait_copy_ns = 0; ///< waiting for copies out of a chunk before reusing it
};

namespace detail {
class ExtentStaging;
}

/// Reads extents of files into memory through a ring of staging chunks
/// registered as io_uring fixed buffers (and, given a GpuBackend, mapped
/// for that GPU): READ_FIXED on as many cores as the options say, each
/// chunk copied out (memcpy to host memory; StreamCopier::copy to device
/// memory) as soon as its read completed, and read into again once its
/// copies ended; the reads of a few chunk groups stay in flight while the
/// copies of another run.  Extents next to each other in the list and in
/// the file are read together, so a checkpoint's tensors cost no request
/// of their own.  Construction sets up the staging, the ring and the
/// threads once; each read() reuses them.  One thread at a time.
class SVMBATCH_API ExtentReader {
public:
	/// Error(EINVAL, Step::Validate) for sizes the ring cannot hold; the
	/// staging's registration, mapping and ring set-up errors as those
	/// steps raise them.  gpu, when given, maps the staging for itself (so
	/// that its copies from the staging are asynchronous).
	explicit ExtentReader(Context &context, const ExtentReaderOptions &options = {},
			      GpuBackend *gpu = nullptr);
	ExtentReader(ExtentReader &&) noexcept;
	ExtentReader &operator=(ExtentReader &&) noexcept;
	ExtentReader(const ExtentReader &) = delete;
	ExtentReader &operator=(const ExtentReader &) = delete;
	~ExtentReader();

	/// Read every extent to its dst and return one result per extent, in
	/// order, once every byte arrived: for device memory (copier given),
	/// once every copy ended.  Invalid extents (fd < 0, dst 0 with a
	/// length, an offset or a length past 2^62) are refused before
	/// anything is read with Error(EINVAL, Step::Validate, index of the
	/// extent).  A ring that
	/// fails throws Step::IoUringSubmit, after every read and copy in
	/// flight ended.
	std::vector<ExtentResult> read(std::span<const Extent> extents,
				       StreamCopier *copier = nullptr);

	/// The set-up steps and what each took: "staging" (mapping the
	/// chunks' memory), "register", "ring", "fixed", "reader" one after
	/// the other, and "gpu-map" beside the last three (then
	/// "gpu-map-wait": what was left of it after them).
	const std::vector<ExtentReaderStep> &setup() const noexcept;
	const ExtentReadStats &last_read() const noexcept;
	std::size_t chunk_bytes() const noexcept;
	std::size_t chunks() const noexcept;
	/// The Reader's threads and parallelism.
	unsigned threads() const noexcept;
	Parallelism parallelism() const noexcept;

private:
	std::unique_ptr<detail::ExtentStaging> staging_;
};

} // namespace svmbatch
