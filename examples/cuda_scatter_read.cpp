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
// built wherever the CUDA toolkit is (examples/CMakeLists.txt), run on the
// GPU machine by tools/device/run.sh.
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

#include <svmbatch/all.hpp>

#include "gpu_checksum.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0)
{
	return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

/// The byte the file holds at offset off.
std::uint8_t pattern(std::uint64_t off)
{
	return static_cast<std::uint8_t>((off * 2654435761u) >> 13);
}

/// The host buffers; buffer i receives file[file_off[i] .. + lens[i]).
/// The memory is operator new[]'s, which takes it from malloc.
struct HostBuffers {
	std::vector<std::unique_ptr<char[]>> mem;
	std::vector<svmbatch::Buffer> list;
	std::vector<std::size_t> lens;
	std::vector<std::uint64_t> file_off;
	std::uint64_t total = 0;
};

/// How long each stage took, in milliseconds.
struct Timings {
	double reg = 0, fixed = 0, map = 0, read = 0, gpu = 0;
};

/* Buffers of 4 KiB .. 1 MiB, log-uniform, at malloc's addresses. */
HostBuffers allocate(std::size_t n)
{
	std::mt19937_64 rng(2026);
	HostBuffers b;

	for (std::size_t i = 0; i < n; i++) {
		double e = 12 + 8 * std::uniform_real_distribution<double>(0, 1)(rng);
		auto len = static_cast<std::size_t>(std::exp2(e));
		b.mem.push_back(std::make_unique_for_overwrite<char[]>(len));
		b.list.push_back({b.mem.back().get(), len});
		b.lens.push_back(len);
		b.file_off.push_back(b.total);
		b.total += len;
	}
	return b;
}

/* The file: pattern bytes, as many as the buffers hold, unlinked at once. */
int write_pattern_file(const std::string &dir, std::uint64_t total)
{
	std::string path = dir + "/svmbatch-cuda-scatter-XXXXXX";
	int fd = ::mkstemp(path.data());
	if (fd < 0)
		throw std::system_error(errno, std::generic_category(), path);
	::unlink(path.c_str());
	std::vector<std::uint8_t> chunk(1 << 20);
	for (std::uint64_t off = 0; off < total; off += chunk.size()) {
		std::size_t n = std::min<std::uint64_t>(chunk.size(), total - off);
		for (std::size_t k = 0; k < n; k++)
			chunk[k] = pattern(off + k);
		if (::pwrite(fd, chunk.data(), n, static_cast<off_t>(off)) !=
		    static_cast<ssize_t>(n)) {
			int err = errno;
			::close(fd);
			throw std::system_error(err, std::generic_category(), "pwrite");
		}
	}
	return fd;
}

/* READ_FIXED of every buffer's part of the file; how many reads failed. */
std::size_t read_file(svmbatch::Reader &reader, int fd, const HostBuffers &b)
{
	std::vector<svmbatch::ReadRequest> rq;
	for (std::size_t i = 0; i < b.list.size(); i++)
		rq.push_back({fd, b.file_off[i], b.lens[i], i, 0});
	std::size_t failed = 0;
	for (const auto &r : reader.read(rq))
		failed += r.err != 0;
	return failed;
}

/* How many GPU sums differ from the CPU's sum of what the file holds there. */
std::size_t count_mismatches(const std::vector<std::uint64_t> &sums, const HostBuffers &b)
{
	std::size_t bad = 0;
	std::vector<std::uint8_t> want;
	for (std::size_t i = 0; i < b.list.size(); i++) {
		want.resize(b.lens[i]);
		for (std::size_t k = 0; k < b.lens[i]; k++)
			want[k] = pattern(b.file_off[i] + k);
		bad += sums[i] != svmbatch::device::cpu_checksum(want.data(), b.lens[i]);
	}
	return bad;
}

int run(std::size_t nbuf, const std::string &dir)
{
	HostBuffers buffers = allocate(nbuf);
	int fd = write_pattern_file(dir, buffers.total);
	Timings ms;

	// Register once; hand the registration to io_uring and to CUDA.
	auto t0 = Clock::now();
	svmbatch::Context ctx;
	svmbatch::Registration reg = ctx.register_buffers(buffers.list);
	ms.reg = ms_since(t0);

	io_uring ring{};
	if (int ret = io_uring_queue_init(64, &ring, 0); ret < 0)
		throw std::system_error(-ret, std::generic_category(), "io_uring_queue_init");
	std::unique_ptr<io_uring, void (*)(io_uring *)> ring_owner(&ring, io_uring_queue_exit);
	t0 = Clock::now();
	svmbatch::FixedBuffers fixed = register_fixed(reg, ring);
	ms.fixed = ms_since(t0);

	svmbatch::CudaBackend cuda;
	t0 = Clock::now();
	svmbatch::GpuMapping gpu = cuda.map(reg);
	ms.map = ms_since(t0);

	// The file into the buffers, then the GPU reads them.
	svmbatch::Reader reader(ring, fixed);
	t0 = Clock::now();
	std::size_t failed_reads = read_file(reader, fd, buffers);
	ms.read = ms_since(t0);
	::close(fd);

	std::vector<std::uint64_t> dptrs(gpu.addresses().begin(), gpu.addresses().end());
	t0 = Clock::now();
	std::vector<std::uint64_t> sums = svmbatch::device::gpu_checksums(dptrs, buffers.lens);
	ms.gpu = ms_since(t0);
	std::size_t bad = count_mismatches(sums, buffers);

	std::printf("cuda_scatter_read: %zu buffers, %.1f MiB, %s mode, GPU %s\n", nbuf,
		    static_cast<double>(buffers.total) / (1 << 20), svmbatch::mode_name(ctx.mode()),
		    cuda.device_name().c_str());
	std::printf("  register %.2f ms, io_uring fixed %.2f ms, CUDA map %.2f ms (%zu ranges)\n",
		    ms.reg, ms.fixed, ms.map, reg.ranges().size());
	std::printf("  READ_FIXED %.2f ms (%.2f GB/s, %zu reads), GPU checksum %.2f ms\n", ms.read,
		    static_cast<double>(buffers.total) / ms.read / 1e6, reader.submitted(), ms.gpu);
	std::printf("cuda_scatter_read: %zu of %zu buffers match, %zu reads failed: %s\n",
		    nbuf - bad, nbuf, failed_reads, bad || failed_reads ? "FAIL" : "PASS");
	return bad || failed_reads ? 1 : 0;
}

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
		return run(nbuf, dir);
	} catch (const std::exception &e) {
		std::fprintf(stderr, "cuda_scatter_read: %s\n", e.what());
		return 2;
	}
}
