// SPDX-License-Identifier: MIT
// hip_gpu_io: GPU-driven I/O from a HIP kernel, with the same device
// header as CUDA's (<svmbatch/gpu_io/device.cuh>).  A kernel copies a file
// to another one by itself: each lane asks for a piece with
// svmbatch_read() into its slice of a registered, GPU-mapped buffer,
// waits, adds 1 to every byte of it through the buffer's device pointer,
// fences, and asks for the slice to be written at the same offset of the
// second file with svmbatch_write().  The CPU then checks the second file
// byte for byte (each byte the first file's plus 1).
//
//   hip_gpu_io [--mib N] [--dir DIR]
//
// Prints TAP: hip-device, copy, bytes.  Without an AMD GPU (no /dev/kfd)
// the first is a skip that says what HIP answered and the others are not
// run.  Exit status 0 when nothing failed.  Built with hipcc for the
// GPUs its toolchain can target (examples/hip_programs.cmake).
#include <hip/hip_runtime.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <svmbatch/all.hpp>
#include <svmbatch/gpu_io/device.cuh>

namespace {

constexpr unsigned blocks = 8, threads = 64;
constexpr std::uint64_t slice = 16 << 10;

std::uint8_t pattern(std::uint64_t off)
{
	return static_cast<std::uint8_t>((off * 2654435761u) >> 13);
}

struct Piece {
	std::uint64_t offset, length;
};

/// Each thread copies pieces tid, tid + n, ... from file `in` to file
/// `out` through its slice of buffer 0, adding 1 to every byte.
__global__ void copy_kernel(svmbatch_gpu_queue q, std::uint32_t in, std::uint32_t out,
			    const Piece *pieces, unsigned long long npieces, std::uint8_t *buf,
			    unsigned long long *errors)
{
	const unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
	const unsigned n = gridDim.x * blockDim.x;
	std::uint8_t *mine = buf + tid * slice;

	for (unsigned long long i = tid; i < npieces; i += n) {
		const Piece p = pieces[i];
		svmbatch_io_result r = svmbatch_wait(q, svmbatch_read(q, in, p.offset, p.length, 0,
								      tid * slice, i));
		if (r.status != 0 || r.bytes != p.length) {
			atomicAdd(errors, 1ull);
			continue;
		}
		for (std::uint64_t k = 0; k < p.length; k++)
			mine[k] = static_cast<std::uint8_t>(mine[k] + 1);
		r = svmbatch_wait(q, svmbatch_write(q, out, p.offset, p.length, 0, tid * slice, i));
		if (r.status != 0 || r.bytes != p.length)
			atomicAdd(errors, 1ull);
	}
}

void check(hipError_t e, const char *what)
{
	if (e != hipSuccess)
		throw std::runtime_error(std::string(what) + ": " + hipGetErrorName(e));
}

int temp_file(const std::string &dir)
{
	std::string path = dir + "/svmbatch-hip-gpu-io-XXXXXX";
	int fd = ::mkstemp(path.data());
	if (fd < 0)
		throw std::system_error(errno, std::generic_category(), path);
	::unlink(path.c_str());
	return fd;
}

int run(std::uint64_t bytes, const std::string &dir)
{
	std::printf("TAP version 13\n1..3\n");
	int ndev = 0;
	if (hipError_t e = hipGetDeviceCount(&ndev); e != hipSuccess || ndev == 0) {
		std::printf("ok 1 - hip-device # SKIP no HIP device: hipGetDeviceCount says %s, "
			    "%d devices\nok 2 - copy # SKIP no device\nok 3 - bytes # SKIP no "
			    "device\n",
			    hipGetErrorName(e), ndev);
		return 0;
	}
	std::printf("ok 1 - hip-device: %d\n", ndev);

	int in = temp_file(dir), out = temp_file(dir);
	std::vector<std::uint8_t> data(bytes);
	for (std::uint64_t k = 0; k < bytes; k++)
		data[k] = pattern(k);
	if (::pwrite(in, data.data(), bytes, 0) != static_cast<ssize_t>(bytes))
		throw std::runtime_error("pwrite of the input file failed");
	std::vector<Piece> pieces;
	std::mt19937_64 rng(5);
	for (std::uint64_t off = 0; off < bytes;) {
		const std::uint64_t len = std::min(bytes - off, 1 + rng() % slice);
		pieces.push_back({off, len});
		off += len;
	}

	std::vector<char> mem(blocks * threads * slice);
	svmbatch::Buffer buf{mem.data(), mem.size()};
	svmbatch::Context ctx;
	svmbatch::Registration reg = ctx.register_buffers({&buf, 1});
	svmbatch::HipBackend hip;
	svmbatch::GpuMapping gpu = hip.map(reg);
	svmbatch::IoLoopOptions o;
	o.slots = 1024;
	o.gpu = &hip;
	svmbatch::IoLoop loop(ctx, reg, o);
	const std::uint32_t fin = loop.add_file(in), fout = loop.add_file(out);
	svmbatch_gpu_queue q;
	check(svmbatch_gpu_queue_create(loop.device_queue(), &q), "svmbatch_gpu_queue_create");
	Piece *d_pieces = nullptr;
	unsigned long long *d_errors = nullptr;
	check(hipMalloc(&d_pieces, pieces.size() * sizeof(Piece)), "hipMalloc");
	check(hipMalloc(&d_errors, sizeof(*d_errors)), "hipMalloc");
	check(hipMemcpy(d_pieces, pieces.data(), pieces.size() * sizeof(Piece),
			hipMemcpyHostToDevice),
	      "hipMemcpy");
	check(hipMemset(d_errors, 0, sizeof(*d_errors)), "hipMemset");
	// NOLINTNEXTLINE(performance-no-int-to-ptr): the buffer's device address
	auto *dbuf = reinterpret_cast<std::uint8_t *>(gpu.address(0));
	copy_kernel<<<dim3(blocks), dim3(threads)>>>(q, fin, fout, d_pieces, pieces.size(), dbuf,
						     d_errors);
	check(hipGetLastError(), "launch");
	check(hipDeviceSynchronize(), "copy_kernel");
	unsigned long long errors = 0;
	check(hipMemcpy(&errors, d_errors, sizeof(errors), hipMemcpyDeviceToHost), "hipMemcpy");
	loop.stop();
	svmbatch_gpu_queue_destroy(&q);
	(void)hipFree(d_pieces);
	(void)hipFree(d_errors);
	const svmbatch::IoLoopStats st = loop.stats();
	std::printf("%s 2 - copy: %zu pieces read and written by the GPU, %llu errors, %llu "
		    "completions\n",
		    errors == 0 && st.completed == 2 * pieces.size() ? "ok" : "not ok",
		    pieces.size(), errors, static_cast<unsigned long long>(st.completed));

	std::vector<std::uint8_t> back(bytes);
	std::uint64_t bad = 0;
	if (::pread(out, back.data(), bytes, 0) != static_cast<ssize_t>(bytes))
		bad = bytes;
	else
		for (std::uint64_t k = 0; k < bytes; k++)
			bad += back[k] != static_cast<std::uint8_t>(pattern(k) + 1);
	std::printf("%s 3 - bytes: %llu of %llu differ\n", bad ? "not ok" : "ok",
		    static_cast<unsigned long long>(bad), static_cast<unsigned long long>(bytes));
	::close(in);
	::close(out);
	return errors || bad || st.completed != 2 * pieces.size() ? 1 : 0;
}

} // namespace

int main(int argc, char **argv)
{
	std::uint64_t mib = 64;
	std::string dir = "/tmp";
	for (int i = 1; i + 1 < argc; i += 2) {
		std::string_view opt = argv[i];
		if (opt == "--mib")
			mib = std::strtoull(argv[i + 1], nullptr, 10);
		else if (opt == "--dir")
			dir = argv[i + 1];
	}
	try {
		return run(mib << 20, dir);
	} catch (const std::exception &e) {
		std::printf("not ok - hip_gpu_io: %s\n", e.what());
		return 1;
	}
}
