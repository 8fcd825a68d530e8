// SPDX-License-Identifier: MIT
// GPU-driven I/O against a host-driven pipeline, on the GPU machine
// (tools/device/run.sh): JSON on stdout, progress on stderr.
//
// Reads, for requests of 4 KiB, 64 KiB and 1 MiB of a file in the page
// cache (tmpfs):
//  - loop: a persistent kernel (one block per SM) asks for every piece with
//    svmbatch_read(), an IoLoop's I/O threads read it with READ_FIXED into
//    the warp's registered, GPU-mapped buffer, svmbatch_wait() returns, and
//    the warp copies the piece into device memory (so the bytes cross PCIe,
//    as the pipeline's copies do).  Double-buffered: the warp asks for its
//    next pieces into the other half of its buffer before it waits for and
//    copies these.  Requests/s, GB/s, and each request's latency from
//    publish to completion (GPU globaltimer).  Without the copy
//    (loop_no_copy), one buffer, one batch at a time.
//  - loop_device: the kernel asks with svmbatch_read_device() for each
//    piece into device memory; the loop reads it into a chunk of its
//    staging and a CudaCopyEngine copies the chunk there (the copy engines,
//    as the pipeline's copies); double-buffered as the loop.  For requests
//    of 64 KiB and more (a copy a request), unless --device-reads 0.
//  - copy engine: cudaMemcpyAsync's rate idle and beside a resident
//    kernel (one warp; a warp a block on one shared line of host memory
//    and on lines of their own; the loop's grid) polling host memory.
//  - CudaCopyEngine alone: the device reads' 1 MiB copies out of a
//    registered staging buffer with no reads, from one thread and from as
//    many as the loop has I/O threads, on 1, --copy-streams and twice as
//    many streams, idle and beside the loop's grid (cuda_copy_engine_1MiB).
//  - loop_cpu_producers: the loop's host side alone, CPU threads asking
//    with IoLoopClient, no kernel.
//  - host pipeline: a Reader reads the same pieces into registered host
//    buffers, a batch at a time, and one cudaMemcpyAsync per batch copies
//    the batch's pieces (contiguous in the staging buffers and in device
//    memory) on four streams while the next batch is read.  It has no
//    per-request latency: its rows carry none (no p50/p99 members).
// One request in flight (one warp, one lane, 4 KiB) of the tmpfs file and,
// with --latency-dir, of a file of that directory's file system in its page
// cache (written, synced: io_uring copies a cached read of ext4 or xfs
// inline, where it hands each read of tmpfs to an io-wq worker), with where
// its time goes: the GPU's globaltimer stamps (before svmbatch_read, after it
// returned, after svmbatch_wait returned) and the pump's host stamps
// (IoLoopOptions::trace: taken from the ring, submitted, transfer reaped,
// completion published), on one clock through a ping-pong calibration.
// The pump's CPU use while idle.
// Writes of 1 MiB pieces to a file in tmpfs: the loop (the warp copies the
// piece from device memory into its mapped buffer, svmbatch_write(), wait)
// against the host pipeline (cudaMemcpyAsync into registered staging
// buffers, then a Writer's WRITE_FIXED of the batch, overlapped).
//
//   gpu_io_bench [--dir DIR] [--gib N] [--small-gib N] [--reps N] [--warps N]
//                [--sizes BYTES] [--io-threads N] [--max-batch N] [--spin-us N]
//                [--poll-ns N] [--fast-poll-ns N] [--device-reads 0|1] [--copy-streams N]
//                [--staging-mib N] [--staged-mib N] [--blocking-sync 0|1] [--queue-depth N]
//                [--parallelism auto|async|rings] [--thread-mib N]
//                [--latency-dir DIR] [--machine TEXT] [--commit TEXT]
//                [--beside-pollers 0|1] [--trace-device 0|1] [--variant-poll-ns N]
//                [--variant-streams N] [--variant-staged-mib N]
//
// --small-gib is the file for 4 KiB requests (a million requests a GiB).
// The last line is diagnostics of the device reads: the pipeline beside
// polling warps, the pump's trace on stderr, and a variant of the device
// reads run beside the rest in the same repetitions.
#include <cuda_runtime_api.h>

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <liburing.h>

#include <svmbatch/all.hpp>

#include "anon_memory.hpp"
#include "bench_meta.hpp"
#include "cuda_memory.hpp"
#include "gpu_io_kernels.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using svmbatch::bench::AnonMemory;
using svmbatch::bench::check;
using svmbatch::bench::DeviceBuffer;

/// The pump's options (--io-threads, --max-batch, --spin-us; the host
/// pipelines' Reader and Writer take the same I/O options), the GPU's
/// polling (--poll-ns, --fast-poll-ns), the device reads' copy streams and
/// staging (--copy-streams, --staging-mib, --staged-mib), and the machine
/// (--machine).
struct Tuning {
	svmbatch::IoLoopOptions loop;
	bool device_reads = true;
	unsigned copy_streams = 4;
	/// The host threads that wait for the GPU sleep
	/// (cudaDeviceScheduleBlockingSync), as a program waiting seconds for
	/// a persistent kernel would, leaving their cores to the copies;
	/// --blocking-sync 0: they spin, each on a core.
	bool blocking_sync = true;
	std::size_t staging_bytes = std::size_t{256} << 20;
	/// Of it, the most in use at once (--staged-mib; 0: all).
	std::size_t staged_bytes = svmbatch::IoLoopDeviceReads{}.staged_bytes;
	/// One request in flight also on a file here (none: tmpfs only).
	std::string latency_dir;
	std::uint32_t max_poll_ns = SVMBATCH_GPU_MAX_POLL_NS;
	std::uint32_t fast_poll_ns = SVMBATCH_GPU_FAST_POLL_NS;
	std::string machine = "unnamed";
	std::string commit = "unknown";
	/// Diagnostics of the device reads (--beside-pollers 1): the host
	/// pipeline again beside a resident grid polling host memory as the
	/// loop's waiting warps do (every max_poll_ns), and the device reads
	/// again with another max_poll_ns (--variant-poll-ns) or number of
	/// copy streams (--variant-streams).
	bool beside_pollers = false;
	std::uint32_t variant_poll_ns = 0;
	unsigned variant_streams = 0;
	std::optional<std::size_t> variant_staged_bytes;
	/// --trace-device 1: the device reads' pump trace (IoLoopOptions::trace)
	/// summed up on stderr, each rep: where the requests waited.
	bool trace_device = false;
};
using svmbatch::device::io_pattern;

double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v.empty()    ? 0 :
	       v.size() % 2 ? v[v.size() / 2] :
			      (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

/// The p-th percentile of ns in microseconds; none of no samples.
std::optional<double> percentile_us(std::vector<std::uint64_t> ns, double p)
{
	if (ns.empty())
		return std::nullopt;
	std::sort(ns.begin(), ns.end());
	auto i = static_cast<std::size_t>(p * static_cast<double>(ns.size() - 1));
	return static_cast<double>(ns[i]) / 1e3;
}

std::string json_list(const std::vector<double> &v)
{
	std::string s = "[";
	for (std::size_t i = 0; i < v.size(); i++)
		s += (i ? ", " : "") + std::to_string(v[i]);
	return s + "]";
}

/// A file of pattern bytes in dir, written by every core, unlinked; in
/// the page cache (and, synced, clean there).
int make_file(const std::string &dir, std::uint64_t len, bool sync = false)
{
	std::string path = dir + "/svmbatch-gpu-io-bench-XXXXXX";
	int fd = ::mkstemp(path.data());
	if (fd < 0)
		throw std::system_error(errno, std::generic_category(), path);
	::unlink(path.c_str());
	constexpr std::uint64_t chunk = 1 << 20;
	const unsigned k = std::max(1u, std::thread::hardware_concurrency());
	std::vector<std::thread> threads;
	for (unsigned t = 0; t < k; t++)
		threads.emplace_back([&, t] {
			std::vector<std::uint8_t> buf(chunk);
			for (std::uint64_t off = t * chunk; off < len; off += k * chunk) {
				std::uint64_t n = std::min(chunk, len - off);
				for (std::uint64_t i = 0; i < n; i++)
					buf[i] = io_pattern(off + i);
				if (::pwrite(fd, buf.data(), n, static_cast<off_t>(off)) !=
				    static_cast<ssize_t>(n))
					std::abort();
			}
		});
	for (auto &t : threads)
		t.join();
	if (sync && ::fdatasync(fd) != 0)
		throw std::system_error(errno, std::generic_category(), "fdatasync " + path);
	return fd;
}

/// The file system dir is on, by name where we know it.
std::string file_system(const std::string &dir)
{
	struct statfs st {};
	if (::statfs(dir.c_str(), &st) != 0)
		throw std::system_error(errno, std::generic_category(), dir);
	switch (static_cast<unsigned long>(st.f_type)) {
	case TMPFS_MAGIC:
		return "tmpfs";
	case EXT4_SUPER_MAGIC:
		return "ext4";
	case XFS_SUPER_MAGIC:
		return "xfs";
	case BTRFS_SUPER_MAGIC:
		return "btrfs";
	default:
		char hex[32];
		std::snprintf(hex, sizeof(hex), "0x%lx", static_cast<unsigned long>(st.f_type));
		return hex;
	}
}

struct Measured {
	std::vector<double> gbps, rps;
	/// The loop's; the host pipeline has none.
	std::optional<double> p50_us, p99_us;
	std::uint64_t requests = 0, errors = 0;

	/// One rep of a kernel: its rates and errors, and its latency
	/// percentiles (none where it kept no latencies), so that the last
	/// rep's are the figure's.
	void add(const svmbatch::device::IoRun &run)
	{
		gbps.push_back(static_cast<double>(run.bytes) / run.seconds / 1e9);
		rps.push_back(static_cast<double>(run.requests) / run.seconds);
		requests = run.requests;
		errors += run.errors;
		p50_us = percentile_us(run.latency_ns, 0.50);
		p99_us = percentile_us(run.latency_ns, 0.99);
	}
	/// A later rep's (or reps'): its latencies become the figure's.
	void merge(const Measured &o)
	{
		gbps.insert(gbps.end(), o.gbps.begin(), o.gbps.end());
		rps.insert(rps.end(), o.rps.begin(), o.rps.end());
		requests = o.requests;
		errors += o.errors;
		p50_us = o.p50_us;
		p99_us = o.p99_us;
	}
};

/// The GPU-mapped buffers of the loop: one registration of one buffer per
/// warp, 2 MiB (buf_len) or, double-buffered, two sets of 2 MiB in one.
struct WarpBuffers {
	static constexpr std::size_t buf_len = 2 << 20;
	WarpBuffers(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda, unsigned nwarps,
		    unsigned sets = 1)
		: mem(std::size_t{nwarps} * sets * buf_len)
	{
		const std::size_t len = std::size_t{sets} * buf_len;
		for (unsigned w = 0; w < nwarps; w++)
			bufs.push_back({mem.get() + std::size_t{w} * len, len});
		reg.emplace(ctx.register_buffers(bufs));
		gpu = cuda.map(*reg);
		dptr.assign(gpu.addresses().begin(), gpu.addresses().end());
	}
	AnonMemory mem;
	std::vector<svmbatch::Buffer> bufs;
	std::optional<svmbatch::Registration> reg;
	svmbatch::GpuMapping gpu;
	std::vector<std::uint64_t> dptr;
};

svmbatch::IoLoopOptions loop_options(const Tuning &tune, svmbatch::CudaBackend &cuda)
{
	svmbatch::IoLoopOptions lo = tune.loop;
	lo.slots = 32768;
	lo.gpu = &cuda;
	return lo;
}

/// The loop's reads; with copy, double-buffered: each warp asks for its
/// next batch into one 2 MiB half of its buffer while it copies the batch
/// in the other half.
Measured run_loop(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda, int fd,
		  std::uint64_t file_len, std::uint64_t size, unsigned blocks, unsigned warps,
		  unsigned max_lanes, bool copy, int reps, const Tuning &tune)
{
	const unsigned nwarps = blocks * warps;
	const auto lanes = static_cast<unsigned>(
		std::min<std::uint64_t>(max_lanes,
					std::min<std::uint64_t>(32, WarpBuffers::buf_len / size)));
	WarpBuffers wb(ctx, cuda, nwarps, copy ? 2 : 1);

	Measured m;
	for (int r = 0; r < reps; r++) {
		svmbatch::IoLoop loop(ctx, *wb.reg, loop_options(tune, cuda));
		std::uint32_t file = loop.add_file(fd);
		svmbatch::device::GpuQueue q(loop.device_queue(), tune.max_poll_ns,
					     tune.fast_poll_ns);
		svmbatch::device::IoRun run =
			svmbatch::device::read_pieces(q, file, file_len, size, wb.dptr, size,
						      blocks, warps, lanes, copy, false,
						      copy ? WarpBuffers::buf_len : 0);
		loop.stop();
		m.add(run);
		std::fprintf(stderr,
			     "  loop %7llu B, %u x %u warps x %u lanes%s: %.2f GB/s, %.0f "
			     "requests/s, p50 %.1f us, p99 %.1f us\n",
			     static_cast<unsigned long long>(size), blocks, warps, lanes,
			     copy ? ", copied to device memory" : "", m.gbps.back(), m.rps.back(),
			     m.p50_us.value_or(-1), m.p99_us.value_or(-1));
	}
	return m;
}

/// The loop's host side alone: `producers` CPU threads (IoLoopClient)
/// ask for every piece in file order from a shared counter, each with
/// `depth` requests in flight into its own part of one registered,
/// GPU-mapped buffer, waiting for its tickets in order.  No kernel: what
/// the pump and the I/O threads deliver when nothing on the GPU side
/// holds them back.
Measured run_loop_cpu(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda, int fd,
		      std::uint64_t file_len, std::uint64_t size, unsigned producers,
		      unsigned depth, int reps, const Tuning &tune)
{
	const std::uint64_t part = std::uint64_t{depth} * size;
	AnonMemory mem(producers * part);
	svmbatch::Buffer b{mem.get(), producers * part};
	svmbatch::Registration reg = ctx.register_buffers({&b, 1});
	svmbatch::GpuMapping mapped = cuda.map(reg);
	const std::uint64_t npieces = file_len / size;
	Measured m;
	for (int r = 0; r < reps; r++) {
		svmbatch::IoLoop loop(ctx, reg, loop_options(tune, cuda));
		const std::uint32_t file = loop.add_file(fd);
		const svmbatch::IoLoopClient client(loop.host_queue());
		std::atomic<std::uint64_t> next{0}, errors{0};
		const auto t0 = Clock::now();
		{
			std::vector<std::jthread> threads;
			for (unsigned p = 0; p < producers; p++)
				threads.emplace_back([&, p] {
					std::deque<std::int64_t> tickets;
					auto wait_oldest = [&] {
						const svmbatch::IoCompletion c =
							client.wait(tickets.front());
						tickets.pop_front();
						if (c.status || c.bytes != size)
							errors.fetch_add(1);
					};
					for (unsigned slot = 0;; slot = (slot + 1) % depth) {
						const std::uint64_t i = next.fetch_add(1);
						if (i >= npieces)
							break;
						if (tickets.size() == depth)
							wait_oldest();
						const std::int64_t t =
							client.read(file, i * size, size, 0,
								    p * part + slot * size);
						if (t < 0) {
							errors.fetch_add(1);
							break;
						}
						tickets.push_back(t);
					}
					while (!tickets.empty())
						wait_oldest();
				});
		}
		const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
		loop.stop();
		m.gbps.push_back(static_cast<double>(npieces * size) / secs / 1e9);
		m.rps.push_back(static_cast<double>(npieces) / secs);
		m.requests = npieces;
		m.errors += errors.load();
		std::fprintf(stderr,
			     "  loop_cpu %7llu B, %u producers x %u in flight: %.2f GB/s, %.0f "
			     "requests/s\n",
			     static_cast<unsigned long long>(size), producers, depth, m.gbps.back(),
			     m.rps.back());
	}
	return m;
}

/// Where a rep's device reads waited, from the pump's trace: each step's
/// p50, p99 and max, and the slowest requests' steps, on stderr.
void print_trace(const std::vector<svmbatch::IoLoopTimes> &times)
{
	struct Step {
		const char *name;
		std::uint64_t svmbatch::IoLoopTimes::*from, svmbatch::IoLoopTimes::*to;
	};
	const Step steps[] = {{"seen_to_submitted", &svmbatch::IoLoopTimes::seen_ns,
			       &svmbatch::IoLoopTimes::submitted_ns},
			      {"submitted_to_copied", &svmbatch::IoLoopTimes::submitted_ns,
			       &svmbatch::IoLoopTimes::done_ns},
			      {"copied_to_completed", &svmbatch::IoLoopTimes::done_ns,
			       &svmbatch::IoLoopTimes::completed_ns},
			      {"seen_to_completed", &svmbatch::IoLoopTimes::seen_ns,
			       &svmbatch::IoLoopTimes::completed_ns}};
	std::vector<std::size_t> done;
	std::uint64_t first = ~std::uint64_t{0};
	for (std::size_t t = 0; t < times.size(); t++)
		if (times[t].completed_ns && times[t].seen_ns) {
			done.push_back(t);
			first = std::min(first, times[t].seen_ns);
		}
	if (done.empty())
		return;
	std::fprintf(stderr, "    trace of %zu requests:", done.size());
	for (const Step &st : steps) {
		std::vector<double> v;
		v.reserve(done.size());
		for (std::size_t t : done)
			v.push_back(static_cast<double>(times[t].*st.to - times[t].*st.from) / 1e6);
		std::sort(v.begin(), v.end());
		std::fprintf(stderr, " %s p50 %.3f p99 %.3f max %.3f ms;", st.name, v[v.size() / 2],
			     v[v.size() * 99 / 100], v.back());
	}
	std::sort(done.begin(), done.end(), [&](std::size_t a, std::size_t b) {
		return times[a].completed_ns - times[a].seen_ns >
		       times[b].completed_ns - times[b].seen_ns;
	});
	std::fprintf(stderr, "\n    slowest (ticket: seen at, then the steps, ms):");
	for (std::size_t i = 0; i < std::min<std::size_t>(8, done.size()); i++) {
		const svmbatch::IoLoopTimes &x = times[done[i]];
		std::fprintf(stderr, " %zu: %.2f %.2f %.2f %.2f;", done[i],
			     static_cast<double>(x.seen_ns - first) / 1e6,
			     static_cast<double>(x.submitted_ns - x.seen_ns) / 1e6,
			     static_cast<double>(x.done_ns - x.submitted_ns) / 1e6,
			     static_cast<double>(x.completed_ns - x.done_ns) / 1e6);
	}
	std::fprintf(stderr, "\n");
}

/// The loop's reads into device memory: the staging (one registered,
/// GPU-mapped buffer cut in request-sized chunks), a CudaCopyEngine, and
/// the kernel asking svmbatch_read_device() into a device sink,
/// double-buffered like the loop with copy.
Measured run_loop_device(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda, int fd,
			 std::uint64_t file_len, std::uint64_t size, unsigned blocks,
			 unsigned warps, unsigned max_lanes, int reps, const Tuning &tune)
{
	const unsigned nwarps = blocks * warps;
	const auto lanes = static_cast<unsigned>(
		std::min<std::uint64_t>(max_lanes,
					std::min<std::uint64_t>(32, WarpBuffers::buf_len / size)));
	const std::uint64_t set = std::uint64_t{lanes} * size;
	AnonMemory staging(tune.staging_bytes);
	svmbatch::Buffer sb{staging.get(), tune.staging_bytes};
	svmbatch::Registration reg = ctx.register_buffers({&sb, 1});
	svmbatch::GpuMapping mapped = cuda.map(reg); // the copies are DMA
	const std::uint64_t sink_bytes = std::uint64_t{nwarps} * 2 * set;
	DeviceBuffer sink(sink_bytes);
	svmbatch::CudaCopyEngine engine(cuda, tune.copy_streams);
	const svmbatch::IoLoopDeviceBuffer dev{reinterpret_cast<std::uintptr_t>(sink.get()),
					       sink_bytes};
	svmbatch::IoLoopOptions lo = loop_options(tune, cuda);
	lo.device.engine = &engine;
	lo.device.buffers = {&dev, 1};
	lo.device.staging = 0;
	lo.device.chunk_bytes = std::min<std::uint64_t>(size, 1 << 20);
	lo.device.staged_bytes = tune.staged_bytes;
	const std::vector<std::uint64_t> unused(nwarps, 0);

	std::vector<svmbatch::IoLoopTimes> times;
	Measured m;
	for (int r = 0; r < reps; r++) {
		if (tune.trace_device) {
			times.assign(file_len / size + 1, {});
			lo.trace = times;
		}
		svmbatch::IoLoop loop(ctx, reg, lo);
		std::uint32_t file = loop.add_file(fd);
		svmbatch::device::GpuQueue q(loop.device_queue(), tune.max_poll_ns,
					     tune.fast_poll_ns);
		svmbatch::device::IoRun run =
			svmbatch::device::read_pieces(q, file, file_len, size, unused, size, blocks,
						      warps, lanes, false, false, set, 2 * set);
		loop.stop();
		m.add(run);
		std::fprintf(
			stderr,
			"  loop_device %7llu B, %u x %u warps x %u lanes, %u streams, staged %zu MiB: "
			"%.2f GB/s, %.0f requests/s, p50 %.1f us, p99 %.1f us\n",
			static_cast<unsigned long long>(size), blocks, warps, lanes,
			tune.copy_streams, tune.staged_bytes >> 20, m.gbps.back(), m.rps.back(),
			m.p50_us.value_or(-1), m.p99_us.value_or(-1));
		if (tune.trace_device)
			print_trace(times);
	}
	return m;
}

/// The device reads' copies with no reads: `threads` threads (as the
/// loop's I/O threads hand on their chunks) copy `total` bytes in
/// chunk-sized copies from a registered, GPU-mapped staging buffer of
/// tune.staging_bytes through a CudaCopyEngine of `streams` streams into
/// device memory, a chunk taken again once its copy's done reported,
/// beside a resident kernel of blocks x warps warps polling lines of
/// their own.  GB/s from the first copy to the last done.
struct EngineRate {
	unsigned streams, threads, blocks;
	double gbps;
};

EngineRate engine_rate(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda, const Tuning &tune,
		       unsigned streams, unsigned threads, unsigned blocks, unsigned warps,
		       std::uint64_t chunk, std::uint64_t total)
{
	struct Pool {
		std::mutex mu;
		std::condition_variable cv;
		std::vector<unsigned> free;
		std::atomic<std::uint64_t> done{0}, failed{0};
	} pool;
	struct Arg {
		Pool *pool;
		unsigned chunk;
	};
	const auto nchunks = static_cast<unsigned>(tune.staging_bytes / chunk);
	AnonMemory staging(tune.staging_bytes);
	svmbatch::Buffer sb{staging.get(), tune.staging_bytes};
	svmbatch::Registration reg = ctx.register_buffers({&sb, 1});
	svmbatch::GpuMapping mapped = cuda.map(reg);
	DeviceBuffer sink(tune.staging_bytes);
	std::vector<Arg> args(nchunks);
	for (unsigned i = 0; i < nchunks; i++) {
		args[i] = {&pool, i};
		pool.free.push_back(i);
	}
	const svmbatch::GpuCopyEngine::Done done = [](void *a, int status) noexcept {
		auto *arg = static_cast<Arg *>(a);
		if (status)
			arg->pool->failed.fetch_add(1);
		{
			std::lock_guard lock(arg->pool->mu);
			arg->pool->free.push_back(arg->chunk);
		}
		arg->pool->cv.notify_one();
		arg->pool->done.fetch_add(1);
	};
	const std::uint64_t copies = total / chunk;
	std::atomic<std::uint64_t> next{0};
	svmbatch::CudaCopyEngine engine(cuda, streams);
	svmbatch::device::ResidentKernel resident(blocks, warps, false);
	const auto t0 = Clock::now();
	std::vector<std::jthread> submitters;
	for (unsigned t = 0; t < threads; t++)
		submitters.emplace_back([&] {
			while (next.fetch_add(1) < copies) {
				unsigned c = 0;
				{
					std::unique_lock lock(pool.mu);
					pool.cv.wait(lock, [&] { return !pool.free.empty(); });
					c = pool.free.back();
					pool.free.pop_back();
				}
				const std::uint64_t off = std::uint64_t{c} * chunk;
				if (engine.copy_to_device(reinterpret_cast<std::uintptr_t>(
								  sink.get() + off),
							  staging.get() + off, chunk, c, done,
							  &args[c]))
					done(&args[c], -EIO);
			}
		});
	submitters.clear();
	while (pool.done.load() < copies)
		std::this_thread::yield();
	const double t = std::chrono::duration<double>(Clock::now() - t0).count();
	if (pool.failed.load())
		throw std::runtime_error("engine_rate: a copy failed");
	return {streams, threads, blocks, static_cast<double>(copies * chunk) / t / 1e9};
}

/// One request in flight: one_requests of 4 KiB, one after another.
constexpr std::uint64_t one_requests = 20000, one_request_bytes = one_requests * 4096;

/// One request in flight: latency, and where it goes.
struct OneRequest {
	Measured m;
	std::string breakdown_json;
	std::string file_system;
};

/// p50 and p99 of the differences b[i] - a[i] (ns, on one clock), in us.
std::string step_json(const char *name, const std::vector<std::int64_t> &d)
{
	std::vector<std::int64_t> v = d;
	std::sort(v.begin(), v.end());
	auto at = [&](double p) {
		return static_cast<double>(
			       v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))]) /
		       1e3;
	};
	char buf[160];
	std::snprintf(buf, sizeof(buf), R"("%s": {"p50_us": %.3f, "p99_us": %.3f})", name, at(0.5),
		      at(0.99));
	return buf;
}

OneRequest run_one(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda, int fd, const Tuning &tune)
{
	constexpr std::uint64_t n = one_requests, size = one_request_bytes / one_requests;
	WarpBuffers wb(ctx, cuda, 1);
	std::vector<svmbatch::IoLoopTimes> trace(n);
	svmbatch::IoLoopOptions lo = loop_options(tune, cuda);
	lo.trace = trace;
	const svmbatch::device::ClockSync before = svmbatch::device::clock_sync(2000);
	svmbatch::device::IoRun run;
	{
		svmbatch::IoLoop loop(ctx, *wb.reg, lo);
		std::uint32_t file = loop.add_file(fd);
		svmbatch::device::GpuQueue q(loop.device_queue(), tune.max_poll_ns,
					     tune.fast_poll_ns);
		run = svmbatch::device::read_pieces(q, file, n * size, size, wb.dptr, size, 1, 1, 1,
						    false, true);
		loop.stop();
	}
	const svmbatch::device::ClockSync after = svmbatch::device::clock_sync(2000);
	OneRequest o;
	o.m.add(run);
	// One warp, one lane: request i is ticket i.  Host stamps onto the
	// GPU's clock with the calibration's offset (the mean of the two).
	const std::int64_t off = (before.offset_ns + after.offset_ns) / 2;
	std::vector<std::int64_t> claim, to_pump, to_submit, transfer, to_publish, to_gpu, total;
	for (std::uint64_t i = 0; i < n; i++) {
		const svmbatch::IoLoopTimes &t = trace[i];
		auto g = [&](std::uint64_t host_ns) {
			return static_cast<std::int64_t>(host_ns) + off;
		};
		const auto start = static_cast<std::int64_t>(run.start_ns[i]);
		const auto pub = static_cast<std::int64_t>(run.published_ns[i]);
		const auto end = static_cast<std::int64_t>(run.end_ns[i]);
		claim.push_back(pub - start);
		to_pump.push_back(g(t.seen_ns) - pub);
		to_submit.push_back(static_cast<std::int64_t>(t.submitted_ns - t.seen_ns));
		transfer.push_back(static_cast<std::int64_t>(t.done_ns - t.submitted_ns));
		to_publish.push_back(static_cast<std::int64_t>(t.completed_ns - t.done_ns));
		to_gpu.push_back(end - g(t.completed_ns));
		total.push_back(end - start);
	}
	char cal[256];
	std::snprintf(cal, sizeof(cal),
		      "\"clock\": {\"offset_ns_before\": %lld, \"offset_ns_after\": %lld, "
		      "\"uncertainty_us\": %.2f}",
		      static_cast<long long>(before.offset_ns),
		      static_cast<long long>(after.offset_ns),
		      static_cast<double>(std::max(before.uncertainty_ns, after.uncertainty_ns)) /
			      1e3);
	o.breakdown_json = "{" + step_json("gpu_claim_and_publish", claim) + ", " +
			   step_json("publish_to_pump_sees_it", to_pump) + ", " +
			   step_json("pump_sees_to_read_submitted", to_submit) + ", " +
			   step_json("read_submitted_to_read_done", transfer) + ", " +
			   step_json("read_done_to_completion_published", to_publish) + ", " +
			   step_json("completion_published_to_gpu_sees_it", to_gpu) + ", " +
			   step_json("total", total) + ", " + cal + "}";
	std::fprintf(stderr, "  one request in flight: p50 %.2f us, p99 %.2f us\n  breakdown %s\n",
		     o.m.p50_us.value_or(-1), o.m.p99_us.value_or(-1), o.breakdown_json.c_str());
	return o;
}

/// The pump's CPU use while nothing is asked: the process's CPU time over
/// two seconds of an idle loop (its I/O threads asleep, the pump parked),
/// in percent of one core.
double idle_cpu_percent(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda, const Tuning &tune,
			std::uint64_t *parks_per_s)
{
	auto cpu_s = [] {
		rusage ru{};
		::getrusage(RUSAGE_SELF, &ru);
		return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
		       static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	};
	WarpBuffers wb(ctx, cuda, 1);
	svmbatch::IoLoop loop(ctx, *wb.reg, loop_options(tune, cuda));
	std::this_thread::sleep_for(std::chrono::milliseconds(200));
	const double c0 = cpu_s();
	const std::uint64_t p0 = loop.stats().parks;
	const auto t0 = Clock::now();
	std::this_thread::sleep_for(std::chrono::seconds(2));
	const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
	const double pct = (cpu_s() - c0) / secs * 100;
	*parks_per_s =
		static_cast<std::uint64_t>(static_cast<double>(loop.stats().parks - p0) / secs);
	std::fprintf(stderr, "  idle loop: %.2f%% of a core, %llu parks/s\n", pct,
		     static_cast<unsigned long long>(*parks_per_s));
	return pct;
}

/// A file in dir, unlinked, empty.
int empty_file(const std::string &dir)
{
	std::string path = dir + "/svmbatch-gpu-io-write-XXXXXX";
	int fd = ::mkstemp(path.data());
	if (fd < 0)
		throw std::system_error(errno, std::generic_category(), path);
	::unlink(path.c_str());
	return fd;
}

/// The loop's writes: the kernel writes file_len bytes in pieces of size,
/// each rep into a file truncated to 0 first.
Measured run_loop_write(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda, int fd,
			const svmbatch::device::DeviceImage &image, std::uint64_t file_len,
			std::uint64_t size, unsigned blocks, unsigned warps, int reps,
			const Tuning &tune)
{
	const auto lanes =
		static_cast<unsigned>(std::min<std::uint64_t>(32, WarpBuffers::buf_len / size));
	WarpBuffers wb(ctx, cuda, blocks * warps);
	std::vector<svmbatch::device::IoPiece> pieces;
	for (std::uint64_t off = 0; off + size <= file_len; off += size)
		pieces.push_back({off, size});
	Measured m;
	for (int r = 0; r < reps; r++) {
		if (::ftruncate(fd, 0) != 0)
			throw std::system_error(errno, std::generic_category(), "ftruncate");
		svmbatch::IoLoop loop(ctx, *wb.reg, loop_options(tune, cuda));
		std::uint32_t file = loop.add_file(fd);
		svmbatch::device::GpuQueue q(loop.device_queue(), tune.max_poll_ns,
					     tune.fast_poll_ns);
		svmbatch::device::IoRun run = svmbatch::device::write_pieces(q, file, pieces, image,
									     wb.dptr, size, blocks,
									     warps, lanes);
		loop.stop();
		m.add(run);
		std::fprintf(stderr, "  loop write %7llu B, %u x %u warps x %u lanes: %.2f GB/s\n",
			     static_cast<unsigned long long>(size), blocks, warps, lanes,
			     m.gbps.back());
	}
	// The last rep's file, byte for byte at 64 places: the image's bytes.
	for (std::uint64_t k = 0; k < 64; k++) {
		const std::uint64_t off = (file_len / 64) * k + k * 4099 % (file_len / 64);
		std::uint8_t b = 0;
		if (::pread(fd, &b, 1, static_cast<off_t>(off)) != 1 || b != io_pattern(off))
			m.errors++;
	}
	return m;
}

/// What the host pipelines stage through: nbuf registered buffers of a
/// piece each in four groups, a ring, four streams and an event per group.
/// Batch j (a group's worth of pieces) is consecutive in the file, in its
/// group's staging buffers (one mapping, one merged registration) and in
/// device memory: one cudaMemcpyAsync copies them all.
struct HostStaging {
	static constexpr std::size_t groups = 4, streams = 4;

	HostStaging(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda, int fd,
		    std::uint64_t file_len, std::uint64_t size)
		: fd(fd), size(size), nbuf(std::min<std::size_t>(8192, (256u << 20) / size)),
		  per_group(nbuf / groups), pieces(file_len / size),
		  nbatch((pieces + per_group - 1) / per_group), mem(nbuf * size)
	{
		for (std::size_t i = 0; i < nbuf; i++)
			bufs.push_back({mem.get() + i * size, size});
		reg.emplace(ctx.register_buffers(bufs));
		pinned = cuda.map(*reg); // cudaMemcpyAsync from pinned memory
		if (io_uring_queue_init(256, &ring, 0) < 0)
			throw std::runtime_error("io_uring_queue_init");
		for (auto &x : s)
			check(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking),
			      "cudaStreamCreate");
		for (auto &e : ev)
			check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
			      "cudaEventCreate");
	}
	~HostStaging()
	{
		for (auto &e : ev)
			cudaEventDestroy(e);
		for (auto &x : s)
			cudaStreamDestroy(x);
		io_uring_queue_exit(&ring);
	}
	HostStaging(const HostStaging &) = delete;
	HostStaging &operator=(const HostStaging &) = delete;
	HostStaging(HostStaging &&) = delete;
	HostStaging &operator=(HostStaging &&) = delete;

	/// Batch j's requests, into its group's buffers.
	std::vector<svmbatch::IoRequest> batch(std::size_t j) const
	{
		std::vector<svmbatch::IoRequest> rq;
		for (std::uint64_t c = j * per_group; c < std::min(pieces, (j + 1) * per_group);
		     c++)
			rq.push_back(
				{fd, c * size, size, (j % groups) * per_group + c % per_group, 0});
		return rq;
	}
	/// A rep that moved every piece in the time since t0.
	void add_rep(Measured &m, Clock::time_point t0) const
	{
		double secs = std::chrono::duration<double>(Clock::now() - t0).count();
		m.gbps.push_back(static_cast<double>(pieces * size) / secs / 1e9);
		m.rps.push_back(static_cast<double>(pieces) / secs);
		m.requests = pieces;
	}

	int fd;
	std::uint64_t size;
	std::size_t nbuf, per_group;
	std::uint64_t pieces;
	std::size_t nbatch;
	AnonMemory mem;
	std::vector<svmbatch::Buffer> bufs;
	std::optional<svmbatch::Registration> reg;
	svmbatch::GpuMapping pinned;
	io_uring ring{};
	cudaStream_t s[streams]{};
	cudaEvent_t ev[groups]{};
};

/// The host pipeline of writes: batch j is copied from device memory into
/// its group's staging buffers by one cudaMemcpyAsync, then written with
/// WRITE_FIXED by a Writer while the next batches are copied; a group is
/// copied into again once its write ended.
Measured run_host_write(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda, int fd,
			const svmbatch::device::DeviceImage &image, std::uint64_t file_len,
			std::uint64_t size, int reps, const svmbatch::IoOptions &io)
{
	HostStaging st(ctx, cuda, fd, file_len, size);
	constexpr std::size_t groups = HostStaging::groups, streams = HostStaging::streams;
	svmbatch::FixedBuffers fixed = register_fixed(*st.reg, st.ring);
	svmbatch::WriterOptions wo;
	static_cast<svmbatch::IoOptions &>(wo) = io;
	svmbatch::Writer writer(st.ring, fixed, wo);
	Measured m;
	for (int r = 0; r < reps; r++) {
		if (::ftruncate(fd, 0) != 0)
			throw std::system_error(errno, std::generic_category(), "ftruncate");
		auto t0 = Clock::now();
		std::deque<svmbatch::IoBatch> writing; // batches j - writing.size() .. j - 1
		auto finish_one = [&] {
			for (const svmbatch::IoResult &res : writing.front().wait())
				m.errors += res.err != 0;
			writing.pop_front();
		};
		auto start_write = [&](std::size_t j) {
			check(cudaEventSynchronize(st.ev[j % groups]), "cudaEventSynchronize");
			writing.push_back(writer.start(st.batch(j)));
		};
		for (std::size_t j = 0; j < st.nbatch; j++) {
			// Group j % groups was batch j - groups's: written first.
			while (writing.size() >= groups - 1)
				finish_one();
			const std::vector<svmbatch::IoRequest> rq = st.batch(j);
			check(cudaMemcpyAsync(st.bufs[rq.front().buffer].ptr,
					      image.get() + rq.front().file_offset,
					      rq.size() * size, cudaMemcpyDeviceToHost,
					      st.s[j % streams]),
			      "cudaMemcpyAsync");
			check(cudaEventRecord(st.ev[j % groups], st.s[j % streams]),
			      "cudaEventRecord");
			if (j >= 1)
				start_write(j - 1);
		}
		start_write(st.nbatch - 1);
		while (!writing.empty())
			finish_one();
		st.add_rep(m, t0);
		std::fprintf(stderr, "  host write %7llu B: %.2f GB/s\n",
			     static_cast<unsigned long long>(size), m.gbps.back());
	}
	return m;
}

/// A resident grid polling host memory (ResidentKernel), or none.
struct Pollers {
	unsigned blocks = 0, warps = 0, poll_ns = 0;
};

/// The host pipeline of reads: batch j is read while the copies of the
/// batches before it run.
/// With pollers (blocks x warps x poll_ns, blocks > 0), each rep runs
/// beside a resident grid polling lines of host memory of its own.
Measured run_host(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda, int fd,
		  std::uint64_t file_len, std::uint64_t size, int reps,
		  const svmbatch::IoOptions &io, const Pollers &pollers = {})
{
	HostStaging st(ctx, cuda, fd, file_len, size);
	constexpr std::size_t groups = HostStaging::groups, streams = HostStaging::streams;
	DeviceBuffer dev(file_len);
	svmbatch::FixedBuffers fixed = register_fixed(*st.reg, st.ring);
	svmbatch::Reader reader(st.ring, fixed, io);
	Measured m;
	for (int r = 0; r < reps; r++) {
		// Started after, and ended before, what a cudaFree or an
		// unregistration would wait for it in.
		std::optional<svmbatch::device::ResidentKernel> resident;
		if (pollers.blocks)
			resident.emplace(pollers.blocks, pollers.warps, false, pollers.poll_ns);
		auto t0 = Clock::now();
		std::deque<svmbatch::IoBatch> reading;
		auto start = [&](std::size_t j) {
			if (j >= groups)
				check(cudaEventSynchronize(st.ev[j % groups]),
				      "cudaEventSynchronize");
			reading.push_back(reader.start(st.batch(j)));
		};
		for (std::size_t j = 0; j < std::min<std::size_t>(st.nbatch, 2); j++)
			start(j);
		for (std::size_t j = 0; j < st.nbatch; j++) {
			for (const svmbatch::IoResult &res : reading.front().wait())
				m.errors += res.err != 0;
			reading.pop_front();
			if (j + 2 < st.nbatch)
				start(j + 2);
			const std::vector<svmbatch::IoRequest> rq = st.batch(j);
			check(cudaMemcpyAsync(dev.get() + rq.front().file_offset,
					      st.bufs[rq.front().buffer].ptr, rq.size() * size,
					      cudaMemcpyHostToDevice, st.s[j % streams]),
			      "cudaMemcpyAsync");
			check(cudaEventRecord(st.ev[j % groups], st.s[j % streams]),
			      "cudaEventRecord");
		}
		for (auto &x : st.s)
			check(cudaStreamSynchronize(x), "cudaStreamSynchronize");
		st.add_rep(m, t0);
		resident.reset();
		std::fprintf(stderr, "  host %7llu B%s: %.2f GB/s, %.0f requests/s\n",
			     static_cast<unsigned long long>(size),
			     pollers.blocks ? ", beside pollers" : "", m.gbps.back(), m.rps.back());
	}
	return m;
}

/// ", \"name\": v" with two decimals, or nothing where v was not measured.
std::string optional_member(const char *name, const std::optional<double> &v)
{
	if (!v)
		return "";
	char buf[64];
	std::snprintf(buf, sizeof(buf), ", \"%s\": %.2f", name, *v);
	return buf;
}

std::string measured_json(const Measured &m)
{
	// The lists grow with --reps: no fixed buffer around them.
	char median_gbps[32], median_rps[32];
	std::snprintf(median_gbps, sizeof(median_gbps), "%.3f", median(m.gbps));
	std::snprintf(median_rps, sizeof(median_rps), "%.0f", median(m.rps));
	return "{\"requests\": " + std::to_string(m.requests) +
	       ", \"errors\": " + std::to_string(m.errors) + ", \"GBps\": " + json_list(m.gbps) +
	       ", \"median_GBps\": " + median_gbps + ", \"requests_per_s\": " + json_list(m.rps) +
	       ", \"median_requests_per_s\": " + median_rps + optional_member("p50_us", m.p50_us) +
	       optional_member("p99_us", m.p99_us) + "}";
}

/// v with two decimals, or null where it was not measured.
std::string number_or_null(const std::optional<double> &v)
{
	if (!v)
		return "null";
	char buf[32];
	std::snprintf(buf, sizeof(buf), "%.2f", *v);
	return buf;
}

/// num / den with three decimals, or null where either was not measured
/// (--sizes left that request size out; loop_device with --device-reads 0).
std::string ratio_or_null(double num, double den)
{
	if (!(num > 0) || !(den > 0))
		return "null";
	char buf[32];
	std::snprintf(buf, sizeof(buf), "%.3f", num / den);
	return buf;
}

const char *const method =
	"{\"loop\": \"a persistent kernel (one block per SM, --warps warps each, up to 32 "
	"lanes a warp) asks for every piece of the file with svmbatch_read(), an IoLoop "
	"reads it with READ_FIXED on one of its I/O threads' rings into the warp's "
	"registered GPU-mapped 2 MiB buffer, the warp copies it to device memory; "
	"double-buffered: the warp's buffer is two such 2 MiB halves, and the warp asks for "
	"its next pieces into one half before it waits for and copies the pieces in the "
	"other, so a piece's latency includes the end of the copy before its wait "
	"(loop_no_copy: one 2 MiB buffer, one batch at a time); rate over "
	"the whole kernel run; latency from publish to completion on the GPU's globaltimer, "
	"percentiles of the last rep\", "
	"\"loop_no_copy\": \"the same, the warp not reading the delivered bytes\", "
	"\"loop_cpu_producers\": \"the loop's host side with no kernel: 4 CPU threads "
	"(IoLoopClient) ask for every piece in file order, each with 64 MiB (at most 2048 "
	"requests) in flight into its part of one registered, GPU-mapped buffer, waiting for "
	"its tickets in order; rate from the first request to the last wait\", "
	"\"loop_device\": \"the kernel as the loop's, double-buffered, asking with "
	"svmbatch_read_device() into device memory: the IoLoop reads each piece with "
	"READ_FIXED into a request-sized chunk of its staging (one registered, GPU-mapped "
	"buffer, --staging-mib, of which --staged-mib in use at most), a CudaCopyEngine copies the chunk to the device "
	"(cuMemcpyHtoDAsync on --copy-streams streams, an event each, one polling thread), "
	"and the completion is published when the copy ended; the warp copies nothing; "
	"for requests of 64 KiB and more, unless --device-reads 0\", "
	"\"host_pipeline\": \"a Reader (READ_FIXED) reads a batch of pieces (a quarter of "
	"up to 8192 staging buffers, 256 MiB at most) while one cudaMemcpyAsync per earlier "
	"batch (its pieces are contiguous in staging and device memory) runs on one of four "
	"streams; rate from the first read to the last copy's end; no per-request latency; "
	"its Reader, and the writes' Writer, with the loop's I/O options (io_threads)\", "
	"\"one_request_in_flight\": \"one warp, one lane: 20000 4 KiB requests one after "
	"another, no copy; latency from before svmbatch_read() to after svmbatch_wait() "
	"returned (globaltimer); of the tmpfs file, and with --latency-dir of an 80 MB file "
	"there (written, fdatasync'd: clean in the page cache), each row naming its "
	"file_system\", "
	"\"latency_breakdown\": \"per request of one_request_in_flight, p50 and p99 of each "
	"step: the GPU stamps (globaltimer) before svmbatch_read(), after it returned (the "
	"request published: its seq store issued) and after svmbatch_wait() returned; the "
	"pump stamps (steady_clock, IoLoopOptions::trace) when it took the request from its "
	"slot, when its read went to io_uring, when the read's completion was reaped, and "
	"when the completion's seq was stored; host stamps are moved onto the GPU's clock by "
	"the mean of two calibrations (before and after the run), each the offset "
	"globaltimer - (h0 + h1) / 2 of the shortest of 2000 round trips (the host stamps "
	"h0 and writes a ping into mapped host memory, a one-thread kernel stamps "
	"globaltimer when it sees it and answers, the host stamps h1); the steps that cross "
	"the clocks (publish to pump, completion to GPU) are within the calibration's "
	"uncertainty (clock.uncertainty_us), the others are on one clock; the steps' "
	"medians need not add up to the total's\", "
	"\"pump_idle\": \"an IoLoop with nothing asked: the process's CPU time (getrusage) "
	"over 2 s after 200 ms idle, in percent of one core, and the pump's parks per "
	"second\", "
	"\"writes\": \"1 MiB pieces of a --gib file in --dir, truncated to 0 before each "
	"rep; loop: the kernel's warps copy each piece from device memory into the warp's "
	"mapped buffer and ask svmbatch_write() (WRITE_FIXED), 2 lanes a warp, rate over "
	"the kernel run, 64 bytes of the last rep's file checked against the image; host "
	"pipeline: one cudaMemcpyAsync per batch (a quarter of up to 256 staging buffers) "
	"from device memory into registered staging buffers, then a Writer's WRITE_FIXED of "
	"the batch while the next batches are copied, rate from the first copy to the last "
	"write's end\", "
	"\"host_pipeline_beside_pollers\": \"with --beside-pollers 1: the host pipeline "
	"again, each rep beside a resident kernel of the loop's grid (SMs x --warps warps), "
	"one lane a warp polling a line of mapped host memory of its own every --poll-ns, "
	"as the loop's waiting warps poll their completions at most\", "
	"\"loop_device_variant\": \"with --variant-poll-ns, --variant-streams or "
	"--variant-staged-mib: the device reads again, with that longest sleep between "
	"polls (variant_max_poll_ns), that many copy streams (variant_copy_streams) and that "
	"much staging in use at most (variant_staged_bytes, IoLoopDeviceReads::staged_bytes)\", "
	"\"files\": \"tmpfs (--dir), pattern bytes, in the page cache\", "
	"\"copy_engine\": \"cudaMemcpyAsync of 1 MiB from pinned host memory on four "
	"non-blocking streams while a kernel of blocks x warps warps (none: idle) sits "
	"resident, one lane a warp polling mapped host memory every microsecond, every warp "
	"the same 64-byte line (polled_line shared) or each its own; rate from the first "
	"copy to the streams' end\", "
	"\"cuda_copy_engine_1MiB\": \"a CudaCopyEngine of `streams` streams copies the "
	"--gib file's size in 1 MiB copies from a registered, GPU-mapped staging buffer "
	"(--staging-mib) into device memory, submitted by `threads` threads, a chunk used "
	"again once its copy's done reported; no reads; beside a resident kernel of "
	"resident_blocks x --warps warps polling lines of their own (0: none); rate from the "
	"first copy to the last done\", "
	"\"figures\": \"medians of --reps runs, taken one rep of each in turn (loop, "
	"loop_no_copy, loop_cpu_producers, loop_device, host_pipeline, the diagnostics, then "
	"again); "
	"loop_device_over_host_1MiB null with --device-reads 0\", "
	"\"summary\": \"one_request_*: the last one_request_in_flight row (--latency-dir's "
	"where given, one_request_file_system), one_request_tmpfs_*: the tmpfs file's; "
	"loop_over_host_1MiB and loop_1MiB_GBps: the loop's path into device memory "
	"(loop_1MiB_path: device reads, the warps' copy with --device-reads 0), "
	"loop_warp_copy_over_host_1MiB and loop_no_copy_over_host_1MiB the other two\"}";

int run(const std::string &dir, double gib, double small_gib, int reps, unsigned warps,
	const Tuning &tune, const std::vector<std::uint64_t> &sizes)
{
	if (tune.blocking_sync)
		check(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync), "cudaSetDeviceFlags");
	cudaDeviceProp prop{};
	check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
	const auto blocks = static_cast<unsigned>(prop.multiProcessorCount);
	const auto big = static_cast<std::uint64_t>(gib * (1 << 30));
	const auto small = static_cast<std::uint64_t>(small_gib * (1 << 30));
	std::fprintf(stderr, "gpu_io_bench: %s, %u SMs, %.1f GiB file (%.1f GiB for 4 KiB), %s\n",
		     prop.name, blocks, gib, small_gib, dir.c_str());
	int fd_big = make_file(dir, big);
	int fd_small = make_file(dir, small);
	svmbatch::Context ctx;
	svmbatch::CudaBackend cuda;

	std::string rows;
	// The copy engines beside a resident kernel: idle, a warp, a warp a
	// block polling one shared line of host memory or lines of their
	// own, and the loop's whole grid on lines of its own (as the loop's
	// warps poll their completions; the last row is the summary's).
	struct Resident {
		unsigned blocks, warps;
		bool shared;
	};
	const std::vector<Resident> residents{{0, 0, false},
					      {1, 1, false},
					      {blocks, 1, true},
					      {blocks, 1, false},
					      {blocks, warps, false}};
	std::vector<svmbatch::device::H2dRate> h2d;
	std::string copy_rows;
	for (const Resident &rk : residents) {
		h2d.push_back(svmbatch::device::h2d_beside_kernel(rk.blocks, rk.warps, 1 << 20,
								  rk.shared));
		char row[192];
		std::snprintf(
			row, sizeof(row),
			R"(%s{"blocks": %u, "warps": %u, "polled_line": "%s", "copies": %u, "GBps": %.3f})",
			copy_rows.empty() ? "" : ", ", rk.blocks, rk.warps,
			rk.shared ? "shared" : "own", h2d.back().copies, h2d.back().gbps);
		copy_rows += row;
		std::fprintf(stderr, "  copy engine beside %u x %u warps (%s lines): %.2f GB/s\n",
			     rk.blocks, rk.warps, rk.shared ? "one shared" : "their own",
			     h2d.back().gbps);
	}
	// The copy engine as the device reads drive it, without the reads:
	// one submitting thread and the loop's I/O threads, a few stream
	// counts, idle and beside the loop's grid.
	const unsigned io_threads =
		tune.loop.io.threads ? tune.loop.io.threads :
				       std::clamp(std::thread::hardware_concurrency(), 2u, 17u) - 1;
	std::string engine_rows;
	if (tune.device_reads)
		for (unsigned resident : {0u, blocks})
			for (unsigned streams : {1u, tune.copy_streams, 2 * tune.copy_streams})
				for (unsigned threads : {1u, io_threads}) {
					const EngineRate e = engine_rate(ctx, cuda, tune, streams,
									 threads, resident, warps,
									 1 << 20, big);
					char row[160];
					std::snprintf(
						row, sizeof(row),
						R"(%s{"streams": %u, "threads": %u, "resident_blocks": %u, "GBps": %.3f})",
						engine_rows.empty() ? "" : ", ", e.streams,
						e.threads, e.blocks, e.gbps);
					engine_rows += row;
					std::fprintf(stderr,
						     "  CudaCopyEngine, 1 MiB copies, %u streams, %u "
						     "threads, beside %u x %u warps: %.2f GB/s\n",
						     streams, threads, resident,
						     resident ? warps : 0, e.gbps);
				}
	Measured loop1m, nocopy1m, device1m, host1m, loop4k, host4k;
	std::uint64_t errors = 0;
	for (std::uint64_t size : sizes) {
		const bool is_small = size == (4u << 10);
		const int fd = is_small ? fd_small : fd_big;
		const std::uint64_t len = is_small ? small : big;
		// One rep of each in turn, --reps times: the machine's drift
		// (the host pipeline's rate moved by a tenth from one minute to
		// the next on the H100) falls on all alike, not on whichever
		// ran its reps last.
		Measured l, d, cpu, h;
		std::optional<Measured> dev, dev_poll, hp;
		for (int r = 0; r < reps; r++) {
			l.merge(run_loop(ctx, cuda, fd, len, size, blocks, warps, 32, true, 1,
					 tune));
			// The loop's own delivery into the GPU-mapped buffers, the
			// GPU not reading them.
			d.merge(run_loop(ctx, cuda, fd, len, size, blocks, warps, 32, false, 1,
					 tune));
			// The same reads asked for by CPU threads: 256 MiB in
			// flight, at most 8192 requests (the ring has 32768 slots).
			cpu.merge(run_loop_cpu(ctx, cuda, fd, len, size, 4,
					       static_cast<unsigned>(
						       std::min<std::uint64_t>((64u << 20) / size,
									       2048)),
					       1, tune));
			// Device reads: a copy a request, so not for the smallest.
			if (tune.device_reads && size >= (64u << 10)) {
				if (!dev)
					dev.emplace();
				dev->merge(run_loop_device(ctx, cuda, fd, len, size, blocks, warps,
							   32, 1, tune));
			}
			h.merge(run_host(ctx, cuda, fd, len, size, 1, tune.loop.io));
			if ((tune.variant_poll_ns || tune.variant_streams ||
			     tune.variant_staged_bytes) &&
			    dev) {
				Tuning t = tune;
				t.max_poll_ns = tune.variant_poll_ns ? tune.variant_poll_ns :
								       tune.max_poll_ns;
				t.copy_streams = tune.variant_streams ? tune.variant_streams :
									tune.copy_streams;
				t.staged_bytes =
					tune.variant_staged_bytes.value_or(tune.staged_bytes);
				if (!dev_poll)
					dev_poll.emplace();
				dev_poll->merge(run_loop_device(ctx, cuda, fd, len, size, blocks,
								warps, 32, 1, t));
			}
			if (tune.beside_pollers) {
				if (!hp)
					hp.emplace();
				hp->merge(run_host(ctx, cuda, fd, len, size, 1, tune.loop.io,
						   {blocks, warps, tune.max_poll_ns}));
			}
		}
		errors += l.errors + d.errors + cpu.errors + (dev ? dev->errors : 0) + h.errors;
		rows += std::string(rows.empty() ? "" : ",\n") +
			"    {\"request_bytes\": " + std::to_string(size) +
			", \"file_bytes\": " + std::to_string(len) +
			", \"loop\": " + measured_json(l) +
			",\n     \"loop_no_copy\": " + measured_json(d) +
			",\n     \"loop_cpu_producers\": " + measured_json(cpu) +
			(dev ? ",\n     \"loop_device\": " + measured_json(*dev) +
					 ", \"loop_device_over_host\": " +
					 ratio_or_null(median(dev->gbps), median(h.gbps)) :
			       std::string()) +
			(dev_poll ? ",\n     \"loop_device_variant\": " + measured_json(*dev_poll) +
					    ", \"variant_max_poll_ns\": " +
					    std::to_string(tune.variant_poll_ns ?
								   tune.variant_poll_ns :
								   tune.max_poll_ns) +
					    ", \"variant_copy_streams\": " +
					    std::to_string(tune.variant_streams ?
								   tune.variant_streams :
								   tune.copy_streams) +
					    ", \"variant_staged_bytes\": " +
					    std::to_string(tune.variant_staged_bytes.value_or(
						    tune.staged_bytes)) +
					    ", \"variant_over_host\": " +
					    ratio_or_null(median(dev_poll->gbps), median(h.gbps)) :
				    std::string()) +
			(hp ? ",\n     \"host_pipeline_beside_pollers\": " + measured_json(*hp) +
					 ", \"beside_pollers_over_host\": " +
					 ratio_or_null(median(hp->gbps), median(h.gbps)) :
			      std::string()) +
			",\n     \"host_pipeline\": " + measured_json(h) +
			", \"loop_over_host\": " + std::to_string(median(l.gbps) / median(h.gbps)) +
			"}";
		if (size == (1u << 20)) {
			loop1m = l;
			nocopy1m = d;
			host1m = h;
			if (dev)
				device1m = *dev;
		}
		if (is_small) {
			loop4k = l;
			host4k = h;
		}
	}
	// Latency without queueing: one warp, one request at a time, of the
	// tmpfs file and of one in the page cache of --latency-dir's file
	// system (the summary's where given).
	std::vector<OneRequest> ones;
	ones.push_back(run_one(ctx, cuda, fd_small, tune));
	ones.back().file_system = file_system(dir);
	if (!tune.latency_dir.empty()) {
		const int fd = make_file(tune.latency_dir, one_request_bytes, true);
		ones.push_back(run_one(ctx, cuda, fd, tune));
		ones.back().file_system = file_system(tune.latency_dir);
		::close(fd);
	}
	for (const OneRequest &o : ones) {
		errors += o.m.errors;
		rows += ",\n    {\"request_bytes\": 4096, \"file_system\": \"" + o.file_system +
			R"(", "one_request_in_flight": )" + measured_json(o.m) +
			",\n     \"latency_breakdown\": " + o.breakdown_json + "}";
	}
	const OneRequest &one = ones.back();
	::close(fd_big);
	::close(fd_small);
	std::uint64_t parks_per_s = 0;
	const double idle_pct = idle_cpu_percent(ctx, cuda, tune, &parks_per_s);
	// Writes of 1 MiB pieces.
	constexpr std::uint64_t wsize = 1 << 20;
	Measured lw, hw;
	{
		svmbatch::device::DeviceImage image(big);
		int fd_w = empty_file(dir);
		lw = run_loop_write(ctx, cuda, fd_w, image, big, wsize, blocks, warps, reps, tune);
		hw = run_host_write(ctx, cuda, fd_w, image, big, wsize, reps, tune.loop.io);
		::close(fd_w);
	}
	errors += lw.errors + hw.errors;
	rows += ",\n    {\"request_bytes\": " + std::to_string(wsize) +
		", \"file_bytes\": " + std::to_string(big) +
		", \"write_loop\": " + measured_json(lw) +
		",\n     \"write_host_pipeline\": " + measured_json(hw) +
		", \"loop_over_host\": " + std::to_string(median(lw.gbps) / median(hw.gbps)) + "}";
	char idle[160];
	std::snprintf(idle, sizeof(idle),
		      "{\"cpu_percent_of_a_core\": %.3f, \"parks_per_s\": %llu, \"spin_us\": %lld, "
		      "\"park_us\": %lld}",
		      idle_pct, static_cast<unsigned long long>(parks_per_s),
		      static_cast<long long>(tune.loop.spin.count()),
		      static_cast<long long>(tune.loop.park.count()));
	// 1 MiB into device memory: the loop's path for it is device reads
	// (the copy engines, as the pipeline's), the warps' own copy where
	// they were not measured.
	const Measured &path1m = device1m.gbps.empty() ? loop1m : device1m;
	// Latencies: one_request_* are one request's path (one in flight);
	// at full load they are queueing: blocks x warps x 32 lanes ask, each
	// with two requests out while its warp waits (double-buffered).
	const std::string header = svmbatch::bench_meta::header("gpu_io", tune.commit, prop.name,
								svmbatch::mode_name(ctx.mode()),
								method);
	std::printf(
		"{\n  %s,\n  \"machine_text\": %s,\n  \"sms\": %u,\n"
		"  \"warps_per_block\": %u,\n  \"dir\": %s,\n"
		"  \"reps\": %d,\n  \"max_poll_ns\": %u,\n  \"fast_poll_ns\": %u,\n"
		"  \"io_threads\": %u,\n  \"queue_depth\": %u,\n  \"thread_bytes\": %llu,\n  \"staging_bytes\": %zu,\n  \"staged_bytes\": %zu,\n  \"parallelism\": \"%s\",\n  \"blocking_sync\": %s,\n  \"pump_idle\": %s,\n  \"copy_engine\": [%s],\n"
		"  \"cuda_copy_engine_1MiB\": [%s],\n"
		"  \"results\": [\n%s\n  ],\n"
		"  \"summary\": {\"one_request_p50_us\": %s, \"one_request_p99_us\": %s, "
		"\"one_request_file_system\": \"%s\", \"one_request_tmpfs_p50_us\": %s, "
		"\"one_request_tmpfs_p99_us\": %s, "
		"\"loop_over_host_1MiB\": %s, \"loop_1MiB_path\": \"%s\", \"loop_4KiB_rps\": %.0f, "
		"\"write_1MiB_GBps\": %.3f, \"host_write_1MiB_GBps\": %.3f, "
		"\"loop_1MiB_GBps\": %.3f, \"host_pipeline_1MiB_GBps\": %.3f, "
		"\"loop_device_over_host_1MiB\": %s, \"loop_warp_copy_over_host_1MiB\": %s, "
		"\"loop_no_copy_over_host_1MiB\": %s, \"copy_streams\": %u, "
		"\"h2d_GBps_idle\": %.3f, \"h2d_GBps_beside_the_kernel\": %.3f, "
		"\"host_pipeline_4KiB_rps\": %.0f, \"loop_over_host_4KiB\": %s, "
		"\"p50_us_4KiB_full_load\": %s, \"p99_us_4KiB_full_load\": %s, "
		"\"in_flight_at_full_load\": %u, \"pump_idle_cpu_percent\": %.3f, "
		"\"errors\": %llu}\n}\n",
		header.c_str(), svmbatch::json::quote(tune.machine).c_str(), blocks, warps,
		svmbatch::json::quote(dir).c_str(), reps, tune.max_poll_ns, tune.fast_poll_ns,
		tune.loop.io.threads, tune.loop.io.queue_depth,
		static_cast<unsigned long long>(tune.loop.thread_bytes), tune.staging_bytes,
		tune.staged_bytes,
		tune.loop.io.parallelism == svmbatch::Parallelism::AsyncWorkers	 ? "async" :
		tune.loop.io.parallelism == svmbatch::Parallelism::RingPerThread ? "rings" :
										   "auto",
		tune.blocking_sync ? "true" : "false", idle, copy_rows.c_str(), engine_rows.c_str(),
		rows.c_str(), number_or_null(one.m.p50_us).c_str(),
		number_or_null(one.m.p99_us).c_str(), one.file_system.c_str(),
		number_or_null(ones.front().m.p50_us).c_str(),
		number_or_null(ones.front().m.p99_us).c_str(),
		ratio_or_null(median(path1m.gbps), median(host1m.gbps)).c_str(),
		device1m.gbps.empty() ? "warp copy" : "device reads", median(loop4k.rps),
		median(lw.gbps), median(hw.gbps), median(path1m.gbps), median(host1m.gbps),
		ratio_or_null(median(device1m.gbps), median(host1m.gbps)).c_str(),
		ratio_or_null(median(loop1m.gbps), median(host1m.gbps)).c_str(),
		ratio_or_null(median(nocopy1m.gbps), median(host1m.gbps)).c_str(),
		tune.copy_streams, h2d.front().gbps, h2d.back().gbps, median(host4k.rps),
		ratio_or_null(median(loop4k.gbps), median(host4k.gbps)).c_str(),
		number_or_null(loop4k.p50_us).c_str(), number_or_null(loop4k.p99_us).c_str(),
		blocks * warps * 32 * 2, idle_pct, static_cast<unsigned long long>(errors));
	return errors ? 1 : 0;
}

} // namespace

int main(int argc, char **argv)
{
	std::string dir = "/dev/shm";
	double gib = 4, small_gib = 1;
	int reps = 3;
	Tuning tune;
	unsigned warps = 4;
	std::vector<std::uint64_t> sizes{std::uint64_t{4} << 10, std::uint64_t{64} << 10,
					 std::uint64_t{1} << 20};
	for (int i = 1; i + 1 < argc; i += 2) {
		std::string_view opt = argv[i];
		if (opt == "--dir")
			dir = argv[i + 1];
		else if (opt == "--gib")
			gib = std::strtod(argv[i + 1], nullptr);
		else if (opt == "--small-gib")
			small_gib = std::strtod(argv[i + 1], nullptr);
		else if (opt == "--reps")
			reps = std::atoi(argv[i + 1]);
		else if (opt == "--warps")
			warps = static_cast<unsigned>(std::strtoul(argv[i + 1], nullptr, 10));
		else if (opt == "--sizes")
			sizes = {std::strtoull(argv[i + 1], nullptr, 10)};
		else if (opt == "--io-threads")
			tune.loop.io.threads =
				static_cast<unsigned>(std::strtoul(argv[i + 1], nullptr, 10));
		else if (opt == "--max-batch")
			tune.loop.max_batch = std::strtoull(argv[i + 1], nullptr, 10);
		else if (opt == "--machine")
			tune.machine = argv[i + 1];
		else if (opt == "--commit")
			tune.commit = argv[i + 1];
		else if (opt == "--poll-ns")
			tune.max_poll_ns =
				static_cast<std::uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
		else if (opt == "--fast-poll-ns")
			tune.fast_poll_ns =
				static_cast<std::uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
		else if (opt == "--device-reads")
			tune.device_reads = std::atoi(argv[i + 1]) != 0;
		else if (opt == "--copy-streams")
			tune.copy_streams =
				static_cast<unsigned>(std::strtoul(argv[i + 1], nullptr, 10));
		else if (opt == "--staging-mib")
			tune.staging_bytes = std::strtoull(argv[i + 1], nullptr, 10) << 20;
		else if (opt == "--queue-depth")
			tune.loop.io.queue_depth =
				static_cast<unsigned>(std::strtoul(argv[i + 1], nullptr, 10));
		else if (opt == "--parallelism")
			tune.loop.io.parallelism = std::string_view(argv[i + 1]) == "async" ?
							   svmbatch::Parallelism::AsyncWorkers :
						   std::string_view(argv[i + 1]) == "rings" ?
							   svmbatch::Parallelism::RingPerThread :
							   svmbatch::Parallelism::Auto;
		else if (opt == "--blocking-sync")
			tune.blocking_sync = std::atoi(argv[i + 1]) != 0;
		else if (opt == "--thread-mib")
			tune.loop.thread_bytes = std::strtoull(argv[i + 1], nullptr, 10) << 20;
		else if (opt == "--latency-dir")
			tune.latency_dir = argv[i + 1];
		else if (opt == "--beside-pollers")
			tune.beside_pollers = std::atoi(argv[i + 1]) != 0;
		else if (opt == "--staged-mib")
			tune.staged_bytes = std::strtoull(argv[i + 1], nullptr, 10) << 20;
		else if (opt == "--variant-staged-mib")
			tune.variant_staged_bytes = std::strtoull(argv[i + 1], nullptr, 10) << 20;
		else if (opt == "--variant-streams")
			tune.variant_streams =
				static_cast<unsigned>(std::strtoul(argv[i + 1], nullptr, 10));
		else if (opt == "--variant-poll-ns")
			tune.variant_poll_ns =
				static_cast<std::uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
		else if (opt == "--trace-device")
			tune.trace_device = std::atoi(argv[i + 1]) != 0;
		else if (opt == "--spin-us")
			tune.loop.spin = std::chrono::microseconds(std::atoll(argv[i + 1]));
	}
	try {
		return run(dir, gib, small_gib, reps, warps, tune, sizes);
	} catch (const std::exception &e) {
		std::fprintf(stderr, "gpu_io_bench: %s\n", e.what());
		return 2;
	}
}
