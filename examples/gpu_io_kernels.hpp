// SPDX-License-Identifier: MIT
// The GPU side of gpu_io_loop and the GPU I/O benchmark: kernels that read
// a file through an IoLoop with <svmbatch/gpu_io/device.cuh> (gpu_io_kernels.cu).
// Plain C++ here, so that the C++20 host programs need no nvcc.
#pragma once

#include <cstdint>
#include <vector>

#include <svmbatch/gpu_io/ring.h>

namespace svmbatch::device {

/// The byte a test file holds at offset off, and its weight in a checksum.
inline std::uint8_t io_pattern(std::uint64_t off)
{
	return static_cast<std::uint8_t>((off * 2654435761u) >> 13);
}
inline std::uint64_t io_weigh(std::uint8_t byte, std::uint64_t off)
{
	return static_cast<std::uint64_t>(byte) * ((off & 255) + 1);
}

/// A part of the file.
struct IoPiece {
	std::uint64_t offset, length;
};

/// A queue for an IoLoop's device_queue(), its ticket counter in device
/// memory; freed on destruction.
class GpuQueue {
public:
	explicit GpuQueue(const svmbatch_io_queue &ring, std::uint32_t max_poll_ns = 8192);
	GpuQueue(const GpuQueue &) = delete;
	GpuQueue &operator=(const GpuQueue &) = delete;
	GpuQueue(GpuQueue &&) = delete;
	GpuQueue &operator=(GpuQueue &&) = delete;
	~GpuQueue();
	const svmbatch_gpu_queue &get() const noexcept { return q_; }

private:
	svmbatch_gpu_queue q_{};
};

/// A persistent kernel of `blocks` x `warps` warps: the warps take 32
/// pieces at a time from a shared counter, each lane reads one with
/// svmbatch_read() into its slice (slice bytes, at lane * slice) of its
/// warp's buffer (buffer w of the loop's registration, at device address
/// warp_buffers[w]), waits, and the warp checksums each piece through the
/// mapping.  Returns the sums per piece; *errors counts the reads that did
/// not complete with all their bytes.  Throws std::runtime_error with
/// CUDA's text.  *seconds: the kernel's time.
std::vector<std::uint64_t> read_and_checksum(const GpuQueue &q, std::uint32_t file,
					     const std::vector<IoPiece> &pieces,
					     const std::vector<std::uint64_t> &warp_buffers,
					     std::uint64_t slice, unsigned blocks, unsigned warps,
					     std::uint64_t *errors, double *seconds);

/// What the benchmark's kernel measured.
struct IoRun {
	double seconds = 0;
	std::uint64_t requests = 0, bytes = 0, errors = 0;
	std::vector<std::uint64_t> latency_ns; ///< per request, publish to completion
};

/// The benchmark's kernel: like read_and_checksum, every piece of `size`
/// bytes, `lanes` lanes per warp asking at once; with copy, the warp copies
/// each piece into device memory (the data crosses PCIe, as a host
/// pipeline's cudaMemcpy does).  Latency from globaltimer before
/// svmbatch_read() to after svmbatch_wait().
IoRun read_pieces(const GpuQueue &q, std::uint32_t file, std::uint64_t file_bytes,
		  std::uint64_t size, const std::vector<std::uint64_t> &warp_buffers,
		  std::uint64_t slice, unsigned blocks, unsigned warps, unsigned lanes, bool copy);

} // namespace svmbatch::device
