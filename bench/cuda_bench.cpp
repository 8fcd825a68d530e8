// SPDX-License-Identifier: MIT
// The CUDA benchmark, run on the GPU machine by tools/device/run.sh.
// Prints JSON on stdout.
//  (a) mapping N buffers of S bytes for the GPU: the library (one
//      register_buffers, one CudaBackend::map = one cuMemHostRegister per
//      merged range) vs a bare cudaHostRegister + cudaHostGetDevicePointer
//      per buffer; buffers scattered (a guard page between them) or
//      touching (carved back to back from one allocation; 4 KiB pages,
//      or transparent huge pages where the kernel gives them).
//  (b) file -> READ_FIXED -> GPU: Reader reads a file into 2000 registered
//      1 MiB buffers while cudaMemcpyAsync moves finished batches to device
//      memory, against the page-cache read alone and the pinned H2D copy
//      alone, in the same run.  The page-cache figure is the better of
//      Reader (READ_FIXED) and a plain pread loop on one thread;
//      pipeline_over_min divides by min(that, H2D).
//
//   cuda_bench [DIR] [--commit TEXT]
//
// The JSON names the benchmark, the commit (--commit), the date, the
// machine, the mode and the method itself (bench_meta.hpp).
#include <cuda_runtime.h>
#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <svmbatch/all.hpp>

#include "bench_meta.hpp"
#include "cuda_memory.hpp"
#include "bench_stats.hpp"

namespace {

using svmbatch::bench::check;
using svmbatch::bench_stats::median;
using svmbatch::bench_stats::time_us;

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

/// Anonymous memory, populated (with transparent huge pages if thp),
/// unmapped on destruction.
struct Region {
	char *p = nullptr;
	std::size_t len = 0;
	explicit Region(std::size_t bytes, bool thp = false) : len(bytes)
	{
		void *m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				 -1, 0);
		if (m == MAP_FAILED)
			throw std::system_error(errno, std::generic_category(), "mmap");
		p = static_cast<char *>(m);
		::madvise(p, len, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
		std::memset(p, 1, len);
	}
	~Region() { ::munmap(p, len); }
	Region(const Region &) = delete;
	Region &operator=(const Region &) = delete;
	Region(Region &&) = delete;
	Region &operator=(Region &&) = delete;
};

/// AnonHugePages of this process, in kB.
long anon_huge_kb()
{
	std::ifstream f("/proc/self/smaps_rollup");
	std::string line;
	long kb = 0;

	while (std::getline(f, line))
		if (std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kb) == 1)
			break;
	return kb;
}

enum class Layout { Scattered, Touching, TouchingThp };

const char *layout_name(Layout l)
{
	return l == Layout::Scattered ? "scattered" :
	       l == Layout::Touching  ? "touching" :
					"touching_thp";
}

/// Medians of one mapping case, in microseconds.
struct MappingTimes {
	int reps = 0;
	std::size_t ranges = 0;
	double reg = 0, map = 0, unmap = 0, loop = 0, loop_unreg = 0;
};

/*
 * reps times: the library (register_buffers, map, unmap), then the bare
 * loop (cudaHostRegister + cudaHostGetDevicePointer per buffer, then
 * cudaHostUnregister per buffer) over the same buffers.
 */
MappingTimes time_mapping(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda,
			  const std::vector<svmbatch::Buffer> &bufs, int reps)
{
	std::vector<double> reg_us, map_us, unmap_us, loop_us, loop_unreg_us;
	MappingTimes t{reps};

	for (int r = 0; r < reps; r++) {
		std::optional<svmbatch::Registration> reg;
		svmbatch::GpuMapping m;
		reg_us.push_back(time_us([&] { reg.emplace(ctx.register_buffers(bufs)); }));
		map_us.push_back(time_us([&] { m = cuda.map(*reg); }));
		unmap_us.push_back(time_us([&] { m.reset(); }));
		t.ranges = reg->ranges().size();

		std::vector<void *> dptr(bufs.size());
		loop_us.push_back(time_us([&] {
			for (std::size_t i = 0; i < bufs.size(); i++) {
				check(cudaHostRegister(bufs[i].ptr, bufs[i].len,
						       cudaHostRegisterMapped |
							       cudaHostRegisterPortable),
				      "cudaHostRegister");
				check(cudaHostGetDevicePointer(&dptr[i], bufs[i].ptr, 0),
				      "cudaHostGetDevicePointer");
			}
		}));
		loop_unreg_us.push_back(time_us([&] {
			for (const svmbatch::Buffer &b : bufs)
				check(cudaHostUnregister(b.ptr), "cudaHostUnregister");
		}));
	}
	t.reg = median(reg_us);
	t.map = median(map_us);
	t.unmap = median(unmap_us);
	t.loop = median(loop_us);
	t.loop_unreg = median(loop_unreg_us);
	return t;
}

std::string mapping_case(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda, std::size_t n,
			 std::size_t size, Layout layout)
{
	const bool touching = layout != Layout::Scattered;
	std::size_t stride = touching ? size : size + page; // a guard page between
	long huge_before = anon_huge_kb();
	Region region(n * stride, layout == Layout::TouchingThp);
	long thp_kb = anon_huge_kb() - huge_before;
	std::vector<svmbatch::Buffer> bufs;
	for (std::size_t i = 0; i < n; i++)
		bufs.push_back({region.p + i * stride, size});
	::mprotect(region.p, region.len, PROT_READ | PROT_WRITE);
	if (!touching) /* guard pages: no VMA merging, no touching ranges */
		for (std::size_t i = 0; i < n; i++)
			::mprotect(region.p + i * stride + size, page, PROT_NONE);

	const int reps = n * size >= (std::size_t{1} << 30) ? 3 : 7;
	MappingTimes t = time_mapping(ctx, cuda, bufs, reps);
	double lib = t.reg + t.map;
	char out[1024];
	std::snprintf(out, sizeof(out),
		      "{\"n\": %zu, \"size\": %zu, \"layout\": \"%s\", \"thp_kb\": %ld, "
		      "\"reps\": %d, \"ranges\": %zu, "
		      "\"lib_register_us\": %.1f, \"lib_map_us\": %.1f, \"lib_unmap_us\": %.1f, "
		      "\"loop_register_us\": %.1f, \"loop_unregister_us\": %.1f, "
		      "\"lib_us_per_buffer\": %.3f, \"loop_us_per_buffer\": %.3f, "
		      "\"speedup_loop_over_lib\": %.2f, \"speedup_loop_over_lib_map_only\": %.2f}",
		      n, size, layout_name(layout), thp_kb, t.reps, t.ranges, t.reg, t.map, t.unmap,
		      t.loop, t.loop_unreg, lib / static_cast<double>(n),
		      t.loop / static_cast<double>(n), t.loop / lib, t.loop / t.map);
	std::fprintf(stderr, "%s\n", out);
	return out;
}

/// nbuf page-aligned buffers of size bytes, zeroed, freed on destruction.
struct AlignedBuffers {
	std::vector<std::unique_ptr<char, void (*)(void *)>> mem;
	std::vector<svmbatch::Buffer> list;
	AlignedBuffers(std::size_t nbuf, std::size_t size)
	{
		for (std::size_t i = 0; i < nbuf; i++) {
			void *p = nullptr;
			if (::posix_memalign(&p, page, size))
				throw std::bad_alloc();
			std::memset(p, 0, size);
			mem.emplace_back(static_cast<char *>(p), std::free);
			list.push_back({p, size});
		}
	}
};

/// A file of total bytes in dir, unlinked at once: the fd keeps it.
int make_file(const std::string &dir, std::size_t total)
{
	std::string path = dir + "/svmbatch-cuda-bench-XXXXXX";
	int fd = ::mkstemp(path.data());
	if (fd < 0)
		throw std::system_error(errno, std::generic_category(), path);
	::unlink(path.c_str());
	std::vector<char> chunk(8 << 20, 'x');
	for (std::size_t off = 0; off < total; off += chunk.size())
		if (::pwrite(fd, chunk.data(), chunk.size(), static_cast<off_t>(off)) < 0)
			throw std::system_error(errno, std::generic_category(), "pwrite");
	return fd;
}

/// A CUDA stream and one event per batch, destroyed with it.
struct CopyStream {
	cudaStream_t stream{};
	std::vector<cudaEvent_t> done;
	explicit CopyStream(std::size_t batches) : done(batches)
	{
		check(cudaStreamCreate(&stream), "cudaStreamCreate");
		for (auto &e : done)
			check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
			      "cudaEventCreate");
	}
	~CopyStream()
	{
		for (auto &e : done)
			cudaEventDestroy(e);
		cudaStreamDestroy(stream);
	}
	CopyStream(const CopyStream &) = delete;
	CopyStream &operator=(const CopyStream &) = delete;
	CopyStream(CopyStream &&) = delete;
	CopyStream &operator=(CopyStream &&) = delete;
};

/// Medians of the pipeline's passes, in GB/s.
struct PipelineRates {
	double pread = 0, read = 0, h2d = 0, pipe = 0;
};

/*
 * The file -> READ_FIXED -> device memory pipeline over registered buffers,
 * in batches: reading batch b+1 overlaps copying batch b.  Each of `passes`
 * passes times a plain pread loop, the reads alone, the copies alone, and
 * both overlapped.
 */
PipelineRates time_pipeline(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda, int fd,
			    const AlignedBuffers &buffers, std::size_t batch, int passes)
{
	const std::size_t nbuf = buffers.list.size(), size = buffers.list[0].len,
			  total = nbuf * size;
	svmbatch::Registration reg = ctx.register_buffers(buffers.list);
	io_uring ring{};
	if (int ret = io_uring_queue_init(64, &ring, 0); ret < 0)
		throw std::system_error(-ret, std::generic_category(), "io_uring_queue_init");
	std::unique_ptr<io_uring, void (*)(io_uring *)> ring_owner(&ring, io_uring_queue_exit);
	svmbatch::FixedBuffers fixed = register_fixed(reg, ring);
	svmbatch::GpuMapping gpu = cuda.map(reg);
	svmbatch::Reader reader(ring, fixed, {32, 1 << 20, 512});
	char *dev = nullptr;
	check(cudaMalloc(&dev, total), "cudaMalloc");
	std::unique_ptr<char, cudaError_t (*)(void *)> dev_owner(dev, cudaFree);
	CopyStream copies(nbuf / batch);

	std::vector<svmbatch::ReadRequest> rq;
	for (std::size_t i = 0; i < nbuf; i++)
		rq.push_back({fd, i * size, size, i, 0});
	auto read_batch = [&](std::size_t b) {
		std::span<const svmbatch::ReadRequest> part(rq.data() + b * batch, batch);
		for (const auto &r : reader.read(part))
			if (r.err)
				throw std::system_error(r.err, std::generic_category(), "read");
	};
	auto copy_batch = [&](std::size_t b) {
		for (std::size_t i = b * batch; i < (b + 1) * batch; i++)
			check(cudaMemcpyAsync(dev + i * size, gpu.device_pointer<char>(i), size,
					      cudaMemcpyDefault, copies.stream),
			      "cudaMemcpyAsync");
		check(cudaEventRecord(copies.done[b], copies.stream), "cudaEventRecord");
	};
	auto sync = [&] { check(cudaStreamSynchronize(copies.stream), "sync"); };

	std::vector<double> pread_us, read_us, h2d_us, pipe_us;
	read_batch(0); /* warm: page cache, TLBs, the CUDA paths */
	copy_batch(0);
	sync();
	for (int p = 0; p < passes; p++) {
		pread_us.push_back(time_us(
			[&] { /* the reference: plain pread */
			      for (std::size_t i = 0; i < nbuf; i++)
				      if (::pread(fd, buffers.list[i].ptr, size,
						  static_cast<off_t>(i * size)) !=
					  static_cast<ssize_t>(size))
					      throw std::system_error(errno,
								      std::generic_category(),
								      "pread");
			}));
		read_us.push_back(time_us([&] {
			for (std::size_t b = 0; b < copies.done.size(); b++)
				read_batch(b);
		}));
		h2d_us.push_back(time_us([&] {
			for (std::size_t b = 0; b < copies.done.size(); b++)
				copy_batch(b);
			sync();
		}));
		pipe_us.push_back(time_us([&] {
			for (std::size_t b = 0; b < copies.done.size(); b++) {
				check(cudaEventSynchronize(copies.done[b]),
				      "event"); /* batch b free */
				read_batch(b);
				copy_batch(b); /* runs while the next batch is read */
			}
			sync();
		}));
	}
	auto gbps = [&](const std::vector<double> &us) {
		return static_cast<double>(total) / median(us) / 1e3;
	};
	return {gbps(pread_us), gbps(read_us), gbps(h2d_us), gbps(pipe_us)};
}

std::string pipeline_case(svmbatch::Context &ctx, svmbatch::CudaBackend &cuda,
			  const std::string &dir)
{
	const std::size_t nbuf = 2000, size = 1 << 20, batch = 250;
	const int passes = 7;
	AlignedBuffers buffers(nbuf, size);
	int fd = make_file(dir, nbuf * size);
	PipelineRates bw = time_pipeline(ctx, cuda, fd, buffers, batch, passes);
	::close(fd);

	char out[1024];
	std::snprintf(out, sizeof(out),
		      "{\"buffers\": %zu, \"buffer_bytes\": %zu, \"batch\": %zu, \"passes\": %d, "
		      "\"file_dir\": \"%s\", \"pread_GBps\": %.2f, \"page_cache_read_GBps\": %.2f, "
		      "\"h2d_GBps\": %.2f, "
		      "\"pipeline_GBps\": %.2f, \"pipeline_over_min\": %.3f}",
		      nbuf, size, batch, passes, dir.c_str(), bw.pread, bw.read, bw.h2d, bw.pipe,
		      bw.pipe / std::min(std::max(bw.read, bw.pread), bw.h2d));
	std::fprintf(stderr, "%s\n", out);
	return out;
}

const char *const method =
	"{\"mapping\": \"per case, median of reps (7; 3 from 1 GiB): lib = "
	"Context::register_buffers + Registration::map(CudaBackend) (one cuMemHostRegister "
	"PORTABLE|DEVICEMAP per merged range + cuMemHostGetDevicePointer); loop = "
	"cudaHostRegister(Mapped|Portable) + cudaHostGetDevicePointer per buffer; both "
	"undone after each rep, neither warmed up. scattered: a PROT_NONE guard page after "
	"each buffer (one range per buffer); touching: buffers carved back to back from one "
	"allocation (one range); touching_thp: the same with MADV_HUGEPAGE (thp_kb: what "
	"the kernel backed with huge pages). Memory populated before timing. "
	"speedup_loop_over_lib = loop / (register + map)\", "
	"\"pipeline\": \"2000 x 1 MiB registered buffers (io_uring fixed + CUDA), a "
	"2000 MiB file in the page cache (DIR). pread: a plain pread loop, one thread; "
	"page_cache_read: Reader (READ_FIXED, depth 32) alone; h2d: cudaMemcpyAsync of all "
	"buffers alone; pipeline: per batch of 250 buffers, the Reader reads it, then "
	"cudaMemcpyAsync moves it while the next batch is read. One warm-up batch, then "
	"medians of 7 passes; pipeline_over_min = pipeline / min(max(pread, "
	"page_cache_read), h2d)\"}";

} // namespace
int main(int argc, char **argv)
{
	std::string dir = "/tmp", commit = "unknown";
	for (int i = 1; i < argc; i++) {
		std::string_view a = argv[i];
		if (a == "--commit" && i + 1 < argc)
			commit = argv[++i];
		else
			dir = a;
	}
	try {
		check(cudaSetDevice(0), "cudaSetDevice");
		check(cudaFree(nullptr), "context");
		svmbatch::Context ctx;
		svmbatch::CudaBackend cuda;
		int driver = 0, runtime = 0;
		cudaDriverGetVersion(&driver);
		cudaRuntimeGetVersion(&runtime);

		std::string mapping;
		for (std::size_t n : {100, 2000, 16384}) {
			for (std::size_t size : {4096, 65536, 1 << 20}) {
				for (Layout layout :
				     {Layout::Scattered, Layout::Touching, Layout::TouchingThp}) {
					if (n * size > (std::size_t{4} << 30)) {
						std::fprintf(stderr, "skip %zu x %zu: over 4 GiB\n",
							     n, size);
						continue;
					}
					mapping += (mapping.empty() ? "\n    " : ",\n    ") +
						   mapping_case(ctx, cuda, n, size, layout);
				}
			}
		}
		std::string pipe = pipeline_case(ctx, cuda, dir);
		const std::string header =
			svmbatch::bench_meta::header("cuda", commit, cuda.device_name(),
						     svmbatch::mode_name(ctx.mode()), method);
		std::printf("{\n  %s,\n  \"cuda_driver\": %d, \"cuda_runtime\": %d,\n"
			    "  \"skipped\": \"N x S over 4 GiB (16384 x 1 MiB): pinning 16 GiB twice "
			    "per repetition costs device time and says nothing new\",\n"
			    "  \"mapping\": [%s\n  ],\n  \"pipeline\": %s\n}\n",
			    header.c_str(), driver, runtime, mapping.c_str(), pipe.c_str());
		return 0;
	} catch (const std::exception &e) {
		std::fprintf(stderr, "cuda_bench: %s\n", e.what());
		return 1;
	}
}
