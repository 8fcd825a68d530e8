// SPDX-License-Identifier: MIT
// Kernels that read and write a file through an IoLoop: see gpu_io_kernels.hpp.
#include "gpu_io_kernels.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <svmbatch/gpu_io/device.cuh>

namespace svmbatch::device {

namespace {

void check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess)
		throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " " +
					 cudaGetErrorString(e));
}

/// A device array, freed on destruction.
template <typename T> struct DeviceArray {
	explicit DeviceArray(std::size_t count) : n(count ? count : 1)
	{
		check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
		check(cudaMemset(p, 0, n * sizeof(T)), "cudaMemset");
	}
	DeviceArray(const DeviceArray &) = delete;
	DeviceArray &operator=(const DeviceArray &) = delete;
	~DeviceArray() { cudaFree(p); }
	void upload(const T *v, std::size_t count) const
	{
		check(cudaMemcpy(p, v, count * sizeof(T), cudaMemcpyHostToDevice), "upload");
	}
	std::vector<T> download(std::size_t count) const
	{
		std::vector<T> v(count);
		check(cudaMemcpy(v.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost),
		      "download");
		return v;
	}
	T *p = nullptr;
	std::size_t n;
};

__device__ inline std::uint64_t weigh_byte(std::uint8_t byte, std::uint64_t off)
{
	return static_cast<std::uint64_t>(byte) * ((off & 255) + 1);
}

__device__ std::uint64_t warp_checksum(const std::uint8_t *p, std::uint64_t len, std::uint64_t off,
				       unsigned lane)
{
	std::uint64_t s = 0;

	for (std::uint64_t k = lane; k < len; k += 32)
		s += weigh_byte(p[k], off + k);
	for (int d = 16; d; d /= 2)
		s += __shfl_down_sync(0xffffffffu, s, d);
	return s;
}

struct ChecksumArgs {
	svmbatch_gpu_queue q;
	std::uint32_t file;
	const IoPiece *pieces;
	unsigned long long npieces;
	unsigned long long *next;
	const unsigned long long *warp_buffers;
	unsigned long long slice;
	unsigned long long *sums;
	unsigned long long *errors;
};

__global__ void read_and_checksum_kernel(ChecksumArgs a)
{
	const unsigned lane = threadIdx.x % 32;
	const unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
	const auto *buf = reinterpret_cast<const std::uint8_t *>(a.warp_buffers[warp]);

	for (;;) {
		unsigned long long first = 0;
		if (lane == 0)
			first = atomicAdd(a.next, 32ull);
		first = __shfl_sync(0xffffffffu, first, 0);
		if (first >= a.npieces)
			return;
		const unsigned long long i = first + lane;
		if (i < a.npieces) {
			long long t = svmbatch_read(a.q, a.file, a.pieces[i].offset,
						    a.pieces[i].length, warp, lane * a.slice, i);
			svmbatch_io_result r = svmbatch_wait(a.q, t);
			if (r.status != 0 || r.bytes != a.pieces[i].length)
				atomicAdd(a.errors, 1ull);
		}
		// Every lane's acquire of its completion, then the warp's
		// barrier: the others' reads of that piece come after both.
		__syncwarp();
		for (unsigned j = 0; j < 32 && first + j < a.npieces; j++) {
			const IoPiece pc = a.pieces[first + j];
			std::uint64_t s =
				warp_checksum(buf + j * a.slice, pc.length, pc.offset, lane);
			if (lane == 0)
				a.sums[first + j] = s;
		}
		__syncwarp();
	}
}

struct PieceArgs {
	svmbatch_gpu_queue q;
	std::uint32_t file;
	unsigned long long npieces, size;
	unsigned long long *next;
	const unsigned long long *warp_buffers;
	unsigned long long slice;
	unsigned long long second; ///< the second set of slices' offset, or 0
	unsigned lanes;
	bool copy;
	unsigned char *sink; ///< per warp, slice * lanes bytes of device memory
	/// Nonzero: the lanes ask for their pieces into device buffer 0 of the
	/// loop (svmbatch_read_device()), each warp's slices at warp *
	/// device_stride.
	unsigned long long device_stride;
	unsigned long long *latency_ns;
	unsigned long long *errors;
	unsigned long long *start_ns, *published_ns, *end_ns; ///< or nullptr
};

__device__ inline unsigned long long now_ns()
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/// A warp's batch of pieces: the first one's index, and this lane's
/// ticket and stamps (before svmbatch_read(), after it returned).
struct Batch {
	unsigned long long first;
	long long ticket;
	unsigned long long t0, t1;
};

/// The warp takes a.lanes pieces from the counter, and each lane asks for
/// its piece into its slice of the warp's buffer at base.
__device__ __forceinline__ Batch ask_batch(const PieceArgs &a, unsigned warp, unsigned lane,
					   unsigned long long base)
{
	Batch b{0, -1, 0, 0};
	if (lane == 0)
		b.first = atomicAdd(a.next, static_cast<unsigned long long>(a.lanes));
	b.first = __shfl_sync(0xffffffffu, b.first, 0);
	const unsigned long long i = b.first + lane;
	if (lane < a.lanes && i < a.npieces) {
		b.t0 = now_ns();
		if (a.device_stride)
			b.ticket =
				svmbatch_read_device(a.q, a.file, i * a.size, a.size, 0,
						     warp * a.device_stride + base + lane * a.slice,
						     i);
		else
			b.ticket = svmbatch_read(a.q, a.file, i * a.size, a.size, warp,
						 base + lane * a.slice, i);
		b.t1 = now_ns();
	}
	return b;
}

/// Each lane waits for its piece of the batch; then the warp's barrier:
/// every lane's acquire of its completion comes before the others' reads
/// of that piece.
__device__ __forceinline__ void wait_batch(const PieceArgs &a, const Batch &b, unsigned lane)
{
	const unsigned long long i = b.first + lane;
	if (lane < a.lanes && i < a.npieces) {
		svmbatch_io_result r = svmbatch_wait(a.q, b.ticket);
		const unsigned long long t2 = now_ns();
		a.latency_ns[i] = t2 - b.t0;
		if (a.start_ns) {
			a.start_ns[i] = b.t0;
			a.published_ns[i] = b.t1;
			a.end_ns[i] = t2;
		}
		if (r.status != 0 || r.bytes != a.size)
			atomicAdd(a.errors, 1ull);
	}
	__syncwarp();
}

/// The batch's pieces, from the warp's buffer at src, into the warp's
/// device memory, 16 bytes at a time, four loads in flight per lane:
/// reads of host memory cross PCIe.
__device__ __forceinline__ void copy_batch(const PieceArgs &a, const Batch &b, const uint4 *src,
					   uint4 *sink, unsigned lane)
{
	const unsigned long long n =
		min(static_cast<unsigned long long>(a.lanes), a.npieces - b.first);
	const unsigned long long words = a.slice / 16, used = a.size / 16;
	for (unsigned long long j = 0; j < n; j++) {
		const uint4 *s = src + j * words;
		uint4 *dst = sink + j * words;
		unsigned long long k = lane;
		for (; k + 96 < used; k += 128) {
			const uint4 x0 = s[k], x1 = s[k + 32], x2 = s[k + 64], x3 = s[k + 96];
			dst[k] = x0;
			dst[k + 32] = x1;
			dst[k + 64] = x2;
			dst[k + 96] = x3;
		}
		for (; k < used; k += 32)
			dst[k] = s[k];
	}
	__syncwarp();
}

__global__ void read_pieces_kernel(PieceArgs a)
{
	const unsigned lane = threadIdx.x % 32;
	const unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
	const auto *buf = reinterpret_cast<const uint4 *>(a.warp_buffers[warp]);
	auto *sink = reinterpret_cast<uint4 *>(a.sink + warp * a.slice * a.lanes);

	if (!a.second) {
		// One batch at a time: ask, wait, copy.
		for (;;) {
			const Batch b = ask_batch(a, warp, lane, 0);
			if (b.first >= a.npieces)
				return;
			wait_batch(a, b, lane);
			if (a.copy)
				copy_batch(a, b, buf, sink, lane);
		}
	}
	// Double-buffered: the next batch is asked for into the other set of
	// slices before this one is waited for and copied, so its reads run
	// while the warp copies.  Each lane waits for its tickets in the
	// order it took them; a set is asked for again only after the warp's
	// copy of it ended (copy_batch's barrier).
	unsigned long long base = 0;
	Batch cur = ask_batch(a, warp, lane, base);
	while (cur.first < a.npieces) {
		const unsigned long long other = base ? 0 : a.second;
		const Batch nxt = ask_batch(a, warp, lane, other);
		wait_batch(a, cur, lane);
		if (a.copy)
			copy_batch(a, cur, buf + base / 16, sink, lane);
		cur = nxt;
		base = other;
	}
}

struct WriteArgs {
	svmbatch_gpu_queue q;
	std::uint32_t file;
	const IoPiece *pieces;
	unsigned long long npieces;
	unsigned long long *next;
	const unsigned long long *warp_buffers;
	unsigned long long slice;
	unsigned lanes;
	const std::uint8_t *image;
	unsigned long long *errors;
};

/// dst[0, n) = src[0, n), by the warp's lanes; 16 bytes at a time where
/// both are 16-byte aligned.
__device__ void warp_copy(std::uint8_t *dst, const std::uint8_t *src, unsigned long long n,
			  unsigned lane)
{
	if (((reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src)) &
	     15) == 0) {
		const unsigned long long words = n / 16;
		auto *d = reinterpret_cast<uint4 *>(dst);
		const auto *s = reinterpret_cast<const uint4 *>(src);
		for (unsigned long long k = lane; k < words; k += 32)
			d[k] = s[k];
		for (unsigned long long k = words * 16 + lane; k < n; k += 32)
			dst[k] = src[k];
		return;
	}
	for (unsigned long long k = lane; k < n; k += 32)
		dst[k] = src[k];
}

__global__ void write_pieces_kernel(WriteArgs a)
{
	const unsigned lane = threadIdx.x % 32;
	const unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
	auto *buf = reinterpret_cast<std::uint8_t *>(a.warp_buffers[warp]);

	for (;;) {
		unsigned long long first = 0;
		if (lane == 0)
			first = atomicAdd(a.next, static_cast<unsigned long long>(a.lanes));
		first = __shfl_sync(0xffffffffu, first, 0);
		if (first >= a.npieces)
			return;
		const unsigned long long n =
			min(static_cast<unsigned long long>(a.lanes), a.npieces - first);
		// The warp copies its pieces into the mapped buffer (across
		// PCIe); each lane's stores reach host memory before the
		// barrier, and the publish comes after it.
		for (unsigned long long j = 0; j < n; j++) {
			const IoPiece pc = a.pieces[first + j];
			warp_copy(buf + j * a.slice, a.image + pc.offset, pc.length, lane);
		}
		__threadfence_system();
		__syncwarp();
		if (lane < n) {
			const IoPiece pc = a.pieces[first + lane];
			long long t = svmbatch_write(a.q, a.file, pc.offset, pc.length, warp,
						     lane * a.slice, first + lane);
			svmbatch_io_result r = svmbatch_wait(a.q, t);
			if (r.status != 0 || r.bytes != pc.length)
				atomicAdd(a.errors, 1ull);
		}
		// Every write ended before the buffer is filled again.
		__syncwarp();
	}
}

__global__ void pattern_kernel(std::uint8_t *p, unsigned long long n)
{
	for (unsigned long long k = blockIdx.x * 1ull * blockDim.x + threadIdx.x; k < n;
	     k += 1ull * gridDim.x * blockDim.x)
		p[k] = static_cast<std::uint8_t>((k * 2654435761u) >> 13);
}

/// The GPU's side of clock_sync: answer each ping with a globaltimer.
__global__ void clock_kernel(volatile unsigned long long *ping, volatile unsigned long long *pong,
			     unsigned long long *stamps, unsigned samples)
{
	for (unsigned i = 1; i <= samples; i++) {
		while (*ping != i) {
		}
		stamps[i - 1] = now_ns();
		__threadfence_system();
		*pong = i;
	}
}

} // namespace

GpuQueue::GpuQueue(const svmbatch_io_queue &ring, std::uint32_t max_poll_ns,
		   std::uint32_t fast_poll_ns)
{
	check(svmbatch_gpu_queue_create(ring, &q_, max_poll_ns, fast_poll_ns),
	      "svmbatch_gpu_queue_create");
}

GpuQueue::~GpuQueue()
{
	svmbatch_gpu_queue_destroy(&q_);
}

std::vector<std::uint64_t> read_and_checksum(const GpuQueue &q, std::uint32_t file,
					     const std::vector<IoPiece> &pieces,
					     const std::vector<std::uint64_t> &warp_buffers,
					     std::uint64_t slice, unsigned blocks, unsigned warps,
					     std::uint64_t *errors, double *seconds)
{
	DeviceArray<IoPiece> d_pieces(pieces.size());
	d_pieces.upload(pieces.data(), pieces.size());
	DeviceArray<unsigned long long> d_bufs(warp_buffers.size()), next(1), sums(pieces.size()),
		d_errors(1);
	d_bufs.upload(reinterpret_cast<const unsigned long long *>(warp_buffers.data()),
		      warp_buffers.size());
	ChecksumArgs a{q.get(),	 file,	d_pieces.p, pieces.size(), next.p,
		       d_bufs.p, slice, sums.p,	    d_errors.p};
	auto t0 = std::chrono::steady_clock::now();
	read_and_checksum_kernel<<<blocks, warps * 32>>>(a);
	check(cudaGetLastError(), "launch");
	check(cudaDeviceSynchronize(), "read_and_checksum_kernel");
	*seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	*errors = d_errors.download(1)[0];
	std::vector<unsigned long long> got = sums.download(pieces.size());
	return {got.begin(), got.end()};
}

IoRun read_pieces(const GpuQueue &q, std::uint32_t file, std::uint64_t file_bytes,
		  std::uint64_t size, const std::vector<std::uint64_t> &warp_buffers,
		  std::uint64_t slice, unsigned blocks, unsigned warps, unsigned lanes, bool copy,
		  bool stamps, std::uint64_t second, std::uint64_t device_stride)
{
	const std::uint64_t npieces = file_bytes / size;
	const std::size_t nwarps = std::size_t{blocks} * warps;
	DeviceArray<unsigned long long> d_bufs(warp_buffers.size()), next(1), lat(npieces),
		d_errors(1);
	d_bufs.upload(reinterpret_cast<const unsigned long long *>(warp_buffers.data()),
		      warp_buffers.size());
	DeviceArray<unsigned char> sink(copy ? nwarps * slice * lanes : 16);
	const std::size_t nstamps = stamps ? npieces : 1;
	DeviceArray<unsigned long long> t_start(nstamps), t_pub(nstamps), t_end(nstamps);
	PieceArgs a{q.get(),
		    file,
		    npieces,
		    size,
		    next.p,
		    d_bufs.p,
		    slice,
		    second,
		    lanes,
		    copy,
		    sink.p,
		    device_stride,
		    lat.p,
		    d_errors.p,
		    stamps ? t_start.p : nullptr,
		    stamps ? t_pub.p : nullptr,
		    stamps ? t_end.p : nullptr};
	auto t0 = std::chrono::steady_clock::now();
	read_pieces_kernel<<<blocks, warps * 32>>>(a);
	check(cudaGetLastError(), "launch");
	check(cudaDeviceSynchronize(), "read_pieces_kernel");
	IoRun run;
	run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	run.requests = npieces;
	run.bytes = npieces * size;
	run.errors = d_errors.download(1)[0];
	std::vector<unsigned long long> l = lat.download(npieces);
	run.latency_ns.assign(l.begin(), l.end());
	if (stamps) {
		l = t_start.download(npieces);
		run.start_ns.assign(l.begin(), l.end());
		l = t_pub.download(npieces);
		run.published_ns.assign(l.begin(), l.end());
		l = t_end.download(npieces);
		run.end_ns.assign(l.begin(), l.end());
	}
	return run;
}

DeviceImage::DeviceImage(std::uint64_t bytes)
{
	check(cudaMalloc(&p_, bytes ? bytes : 1), "cudaMalloc");
	pattern_kernel<<<1024, 256>>>(p_, bytes);
	check(cudaGetLastError(), "launch");
	check(cudaDeviceSynchronize(), "pattern_kernel");
}

DeviceImage::~DeviceImage()
{
	cudaFree(p_);
}

IoRun write_pieces(const GpuQueue &q, std::uint32_t file, const std::vector<IoPiece> &pieces,
		   const DeviceImage &image, const std::vector<std::uint64_t> &warp_buffers,
		   std::uint64_t slice, unsigned blocks, unsigned warps, unsigned lanes)
{
	DeviceArray<IoPiece> d_pieces(pieces.size());
	d_pieces.upload(pieces.data(), pieces.size());
	DeviceArray<unsigned long long> d_bufs(warp_buffers.size()), next(1), d_errors(1);
	d_bufs.upload(reinterpret_cast<const unsigned long long *>(warp_buffers.data()),
		      warp_buffers.size());
	WriteArgs a{q.get(),  file,  d_pieces.p, pieces.size(), next.p,
		    d_bufs.p, slice, lanes,	 image.get(),	d_errors.p};
	auto t0 = std::chrono::steady_clock::now();
	write_pieces_kernel<<<blocks, warps * 32>>>(a);
	check(cudaGetLastError(), "launch");
	check(cudaDeviceSynchronize(), "write_pieces_kernel");
	IoRun run;
	run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	run.requests = pieces.size();
	for (const IoPiece &p : pieces)
		run.bytes += p.length;
	run.errors = d_errors.download(1)[0];
	return run;
}

/// Waits, one lane a warp polling a flag of 64-byte lines until it is set:
/// line 0 for every warp (shared), or each warp its own line.
__global__ void resident_kernel(const volatile int *flags, bool shared, unsigned sleep_ns)
{
	if (threadIdx.x % 32)
		return;
	const unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
	const volatile int *flag = flags + (shared ? 0 : warp * 16);
	while (!*flag)
		__nanosleep(sleep_ns);
}

namespace {

double timed_copies(const std::vector<cudaStream_t> &streams, unsigned char *dst,
		    const unsigned char *src, std::uint64_t bytes, unsigned ring, unsigned n)
{
	const auto t0 = std::chrono::steady_clock::now();
	for (unsigned i = 0; i < n; i++)
		check(cudaMemcpyAsync(dst + (i % ring) * bytes, src + (i % ring) * bytes, bytes,
				      cudaMemcpyHostToDevice, streams[i % streams.size()]),
		      "cudaMemcpyAsync");
	for (cudaStream_t s : streams)
		check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	const double t =
		std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	return static_cast<double>(n) * static_cast<double>(bytes) / t / 1e9;
}

} // namespace

ResidentKernel::ResidentKernel(unsigned blocks, unsigned warps, bool shared_line, unsigned sleep_ns)
	: count_(std::size_t{16} * std::max(1u, blocks * warps))
{
	check(cudaHostAlloc(reinterpret_cast<void **>(&flags_), count_ * sizeof(int),
			    cudaHostAllocMapped),
	      "cudaHostAlloc");
	std::memset(flags_, 0, count_ * sizeof(int));
	if (!blocks)
		return;
	resident_kernel<<<blocks, warps * 32>>>(flags_, shared_line, sleep_ns);
	if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
		cudaFreeHost(flags_);
		check(e, "launch");
	}
	running_ = true;
	// Until every warp polls.
	std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

ResidentKernel::~ResidentKernel()
{
	for (std::size_t i = 0; i < count_; i++)
		reinterpret_cast<volatile int *>(flags_)[i] = 1;
	if (running_)
		(void)cudaDeviceSynchronize();
	cudaFreeHost(flags_);
}

H2dRate h2d_beside_kernel(unsigned blocks, unsigned warps, std::uint64_t bytes, bool shared_line)
{
	constexpr unsigned ring = 64;
	unsigned char *src = nullptr;
	check(cudaHostAlloc(reinterpret_cast<void **>(&src), ring * bytes, cudaHostAllocDefault),
	      "cudaHostAlloc");
	std::memset(src, 1, ring * bytes);
	DeviceArray<unsigned char> dst(ring * bytes);
	std::vector<cudaStream_t> streams(4);
	for (cudaStream_t &s : streams)
		check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
	H2dRate r;
	{
		ResidentKernel resident(blocks, warps, shared_line);
		const double probe = timed_copies(streams, dst.p, src, bytes, ring, 4);
		r.copies = static_cast<unsigned>(
			std::clamp(0.2 * probe * 1e9 / static_cast<double>(bytes), 4.0, 4000.0));
		r.gbps = timed_copies(streams, dst.p, src, bytes, ring, r.copies);
	}
	for (cudaStream_t s : streams)
		check(cudaStreamDestroy(s), "cudaStreamDestroy");
	check(cudaFreeHost(src), "cudaFreeHost");
	return r;
}

ClockSync clock_sync(unsigned samples)
{
	unsigned long long *host = nullptr;
	check(cudaHostAlloc(reinterpret_cast<void **>(&host), 2 * sizeof(*host),
			    cudaHostAllocMapped),
	      "cudaHostAlloc");
	host[0] = host[1] = 0;
	unsigned long long *dev = nullptr;
	ClockSync out;
	try {
		check(cudaHostGetDevicePointer(reinterpret_cast<void **>(&dev), host, 0),
		      "cudaHostGetDevicePointer");
		DeviceArray<unsigned long long> stamps(samples);
		clock_kernel<<<1, 1>>>(dev, dev + 1, stamps.p, samples);
		check(cudaGetLastError(), "launch");
		std::vector<std::int64_t> h0(samples), h1(samples);
		auto now = [] {
			return static_cast<std::int64_t>(
				std::chrono::duration_cast<std::chrono::nanoseconds>(
					std::chrono::steady_clock::now().time_since_epoch())
					.count());
		};
		volatile unsigned long long *ping = host, *pong = host + 1;
		for (unsigned i = 1; i <= samples; i++) {
			h0[i - 1] = now();
			*ping = i;
			while (*pong != i) {
			}
			h1[i - 1] = now();
		}
		check(cudaDeviceSynchronize(), "clock_kernel");
		std::vector<unsigned long long> g = stamps.download(samples);
		std::uint64_t best = ~0ull;
		for (unsigned i = 0; i < samples; i++) {
			const auto rtt = static_cast<std::uint64_t>(h1[i] - h0[i]);
			if (rtt < best) {
				best = rtt;
				out.offset_ns =
					static_cast<std::int64_t>(g[i]) - (h0[i] + h1[i]) / 2;
			}
		}
		out.uncertainty_ns = best / 2;
		out.samples = samples;
	} catch (...) {
		cudaFreeHost(host);
		throw;
	}
	cudaFreeHost(host);
	return out;
}

} // namespace svmbatch::device
