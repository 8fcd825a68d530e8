// SPDX-License-Identifier: MIT
// cuda_scatter_read: file -> registered buffers -> GPU.  2000 scattered
// malloc'd host buffers are registered once, handed to io_uring as fixed
// buffers and to CUDA as mapped host memory; a file is read into them with
// READ_FIXED (svmbatch::Reader), and a CUDA kernel checksums every buffer
// through its device pointer.  The sums must equal the CPU's sums of what
// the file holds at those offsets.
//
//   cuda_scatter_read [--buffers N] [--dir DIR]
//
// Exit status 0 when every buffer matched.  Needs a CUDA GPU (libcuda.so.1);
// built and run on the GPU machine by tools/device/run.sh.
#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include <svmbatch/svmbatch.hpp>

#include "gpu_checksum.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0)
{
	return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::uint8_t pattern(std::uint64_t off)
{
	return static_cast<std::uint8_t>((off * 2654435761u) >> 13);
}

struct FreeDeleter {
	void operator()(void *p) const { std::free(p); }
};

} // namespace

int main(int argc, char **argv)
{
	std::size_t nbuf = 2000;
	std::string dir = "/tmp";
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!std::strcmp(argv[i], "--buffers"))
			nbuf = std::strtoul(argv[i + 1], nullptr, 10);
		else if (!std::strcmp(argv[i], "--dir"))
			dir = argv[i + 1];
	}
	try {
		// Buffers of 4 KiB .. 1 MiB, log-uniform, at malloc's addresses.
		std::mt19937_64 rng(2026);
		std::vector<std::unique_ptr<char, FreeDeleter>> mem;
		std::vector<svmbatch::Buffer> bufs;
		std::vector<std::size_t> lens;
		std::vector<std::uint64_t> file_off;
		std::uint64_t total = 0;
		for (std::size_t i = 0; i < nbuf; i++) {
			double e = 12 + 8 * std::uniform_real_distribution<double>(0, 1)(rng);
			auto len = static_cast<std::size_t>(std::exp2(e));
			mem.emplace_back(static_cast<char *>(std::malloc(len)));
			if (!mem.back())
				throw std::bad_alloc();
			bufs.push_back({mem.back().get(), len});
			lens.push_back(len);
			file_off.push_back(total);
			total += len;
		}

		// The file: pattern bytes, as many as the buffers hold.
		std::string path = dir + "/svmbatch-cuda-scatter-XXXXXX";
		int fd = ::mkstemp(path.data());
		if (fd < 0)
			throw std::system_error(errno, std::generic_category(), path);
		::unlink(path.c_str());
		std::vector<std::uint8_t> chunk(1 << 20);
		for (std::uint64_t off = 0; off < total; off += chunk.size()) {
			std::size_t n = std::min<std::uint64_t>(chunk.size(), total - off);
			for (std::size_t b = 0; b < n; b++)
				chunk[b] = pattern(off + b);
			if (::pwrite(fd, chunk.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n))
				throw std::system_error(errno, std::generic_category(), "pwrite");
		}

		auto t0 = Clock::now();
		svmbatch::Context ctx;
		svmbatch::Registration reg = ctx.register_buffers(bufs);
		double reg_ms = ms_since(t0);

		io_uring ring{};
		if (int ret = io_uring_queue_init(64, &ring, 0); ret < 0)
			throw std::system_error(-ret, std::generic_category(), "io_uring_queue_init");
		std::unique_ptr<io_uring, void (*)(io_uring *)> ring_owner(&ring, io_uring_queue_exit);
		t0 = Clock::now();
		svmbatch::FixedBuffers fixed = reg.register_fixed(ring);
		double fixed_ms = ms_since(t0);

		svmbatch::CudaBackend cuda;
		t0 = Clock::now();
		svmbatch::GpuMapping gpu = reg.map(cuda);
		double map_ms = ms_since(t0);

		std::vector<svmbatch::ReadRequest> rq;
		for (std::size_t i = 0; i < nbuf; i++)
			rq.push_back({fd, file_off[i], lens[i], i, 0});
		svmbatch::Reader reader(ring, fixed);
		t0 = Clock::now();
		std::vector<svmbatch::ReadResult> res = reader.read(rq);
		double read_ms = ms_since(t0);
		std::size_t failed_reads = 0;
		for (const auto &r : res)
			failed_reads += r.err != 0;

		std::vector<std::uint64_t> dptrs(gpu.addresses().begin(), gpu.addresses().end());
		t0 = Clock::now();
		std::vector<std::uint64_t> sums = svmbatch::device::gpu_checksums(dptrs, lens);
		double gpu_ms = ms_since(t0);

		// The CPU's sum of what the file holds there (not of the buffer).
		std::size_t bad = 0;
		std::vector<std::uint8_t> want;
		for (std::size_t i = 0; i < nbuf; i++) {
			want.resize(lens[i]);
			for (std::size_t b = 0; b < lens[i]; b++)
				want[b] = pattern(file_off[i] + b);
			bad += sums[i] != svmbatch::device::cpu_checksum(want.data(), lens[i]);
		}
		::close(fd);

		std::printf("cuda_scatter_read: %zu buffers, %.1f MiB, %s mode, GPU %s\n", nbuf,
			    static_cast<double>(total) / (1 << 20), svmbatch::mode_name(ctx.mode()),
			    cuda.device_name().c_str());
		std::printf("  register %.2f ms, io_uring fixed %.2f ms, CUDA map %.2f ms "
			    "(%zu ranges)\n",
			    reg_ms, fixed_ms, map_ms, reg.ranges().size());
		std::printf("  READ_FIXED %.2f ms (%.2f GB/s, %zu reads), GPU checksum %.2f ms\n",
			    read_ms, static_cast<double>(total) / read_ms / 1e6, reader.submitted(),
			    gpu_ms);
		std::printf("cuda_scatter_read: %zu of %zu buffers match, %zu reads failed: %s\n",
			    nbuf - bad, nbuf, failed_reads, bad || failed_reads ? "FAIL" : "PASS");
		return bad || failed_reads ? 1 : 0;
	} catch (const std::exception &e) {
		std::fprintf(stderr, "cuda_scatter_read: %s\n", e.what());
		return 2;
	}
}
