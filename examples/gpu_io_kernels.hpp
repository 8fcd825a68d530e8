// SPDX-License-Identifier: MIT
// The GPU side of gpu_io_loop, the GPU I/O benchmark and the device tests:
// kernels that read and write a file through an IoLoop with
// <svmbatch/gpu_io/device.cuh> (gpu_io_kernels.cu).
// Plain C++ here, so that the C++20 host programs need no nvcc.
#pragma once

#include <cstddef>
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
	/// Polling: see svmbatch_gpu_queue (gpu_io/ring.h).
	explicit GpuQueue(const svmbatch_io_queue &ring, std::uint32_t max_poll_ns = 8192,
			  std::uint32_t fast_poll_ns = 20000);
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
	/// With stamps: per request, the GPU's globaltimer before
	/// svmbatch_read(), after it returned (published), and after
	/// svmbatch_wait() returned.
	std::vector<std::uint64_t> start_ns, published_ns, end_ns;
};

/// The benchmark's kernel: like read_and_checksum, every piece of `size`
/// bytes, `lanes` lanes per warp asking at once; with copy, the warp copies
/// each piece into device memory (the data crosses PCIe, as a host
/// pipeline's cudaMemcpy does).  Latency from globaltimer before
/// svmbatch_read() to after svmbatch_wait().  second, nonzero (a multiple
/// of 16): double-buffered, each warp's buffer holds a second set of
/// slices at that offset, and the warp asks for its next pieces into one
/// set before it waits for (and copies) the pieces in the other; a
/// piece's latency then includes the end of the copy before its wait.
/// device_stride, nonzero: the lanes ask with svmbatch_read_device() into
/// device buffer 0 of the loop (IoLoopOptions::device), warp w's slices
/// at w * device_stride (the second set, if any, at second past them);
/// warp_buffers is then not read, and copy must be false.
IoRun read_pieces(const GpuQueue &q, std::uint32_t file, std::uint64_t file_bytes,
		  std::uint64_t size, const std::vector<std::uint64_t> &warp_buffers,
		  std::uint64_t slice, unsigned blocks, unsigned warps, unsigned lanes, bool copy,
		  bool stamps = false, std::uint64_t second = 0, std::uint64_t device_stride = 0);

/// The file's bytes in device memory: io_pattern(0 .. bytes), freed on
/// destruction.
class DeviceImage {
public:
	explicit DeviceImage(std::uint64_t bytes);
	DeviceImage(const DeviceImage &) = delete;
	DeviceImage &operator=(const DeviceImage &) = delete;
	DeviceImage(DeviceImage &&) = delete;
	DeviceImage &operator=(DeviceImage &&) = delete;
	~DeviceImage();
	const std::uint8_t *get() const noexcept { return p_; }

private:
	std::uint8_t *p_ = nullptr;
};

/// A persistent kernel of `blocks` x `warps` warps writes the file: the
/// warps take `lanes` pieces at a time from a shared counter, copy each
/// piece's bytes from image (device memory, at the piece's offset) into
/// its slice (slice bytes, at lane * slice) of the warp's buffer (buffer
/// w of the loop's registration, at device address warp_buffers[w]), and
/// each lane asks for its piece with svmbatch_write() and waits.  *errors
/// counts the writes that did not complete with all their bytes.  The
/// kernel's time in IoRun::seconds.
IoRun write_pieces(const GpuQueue &q, std::uint32_t file, const std::vector<IoPiece> &pieces,
		   const DeviceImage &image, const std::vector<std::uint64_t> &warp_buffers,
		   std::uint64_t slice, unsigned blocks, unsigned warps, unsigned lanes);

/// A resident kernel of blocks x warps warps (0 blocks: none) that does
/// nothing but wait, one lane a warp polling mapped host memory with
/// __nanosleep(sleep_ns) as the loop's warps poll their completions: one
/// 64-byte line for all (shared_line) or a line a warp.  Launched on construction;
/// released and waited for on destruction.  Throws std::runtime_error with
/// CUDA's text.
class ResidentKernel {
public:
	ResidentKernel(unsigned blocks, unsigned warps, bool shared_line, unsigned sleep_ns = 1024);
	ResidentKernel(const ResidentKernel &) = delete;
	ResidentKernel &operator=(const ResidentKernel &) = delete;
	ResidentKernel(ResidentKernel &&) = delete;
	ResidentKernel &operator=(ResidentKernel &&) = delete;
	~ResidentKernel();

private:
	int *flags_ = nullptr;
	std::size_t count_ = 0;
	bool running_ = false;
};

/// Host-to-device copies beside a resident kernel: `copies` cudaMemcpyAsync
/// of `bytes` each from pinned host memory on four non-blocking streams,
/// while a kernel of blocks x warps warps (0: none) waits, one lane a warp
/// polling mapped host memory with __nanosleep: one 64-byte line for all
/// (shared_line) or a line a warp; the rate from the first copy to the
/// streams' end.  copies: as many as take about 0.2 s at the rate of
/// a first probe.
struct H2dRate {
	double gbps = 0;
	unsigned copies = 0;
};
H2dRate h2d_beside_kernel(unsigned blocks, unsigned warps, std::uint64_t bytes, bool shared_line);

/// The GPU's globaltimer against the host's steady_clock: offset_ns is
/// globaltimer - steady_clock at the same moment, found by ping-pong
/// through mapped host memory (host stamps h0, writes; the GPU stamps g
/// and answers; host stamps h1): of `samples` round trips, the shortest
/// gives offset = g - (h0 + h1) / 2, within +- its round trip / 2
/// (uncertainty_ns).
struct ClockSync {
	std::int64_t offset_ns = 0;
	std::uint64_t uncertainty_ns = 0;
	std::uint64_t samples = 0;
};
ClockSync clock_sync(unsigned samples);

} // namespace svmbatch::device
