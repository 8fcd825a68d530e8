// SPDX-License-Identifier: MIT
// gpu_io_loop: a GPU kernel reads a file by itself.  The story:
//
//  1. The host allocates one staging buffer per warp (scattered, malloc'd)
//     and registers them all in one call; CudaBackend maps them for the GPU.
//  2. An IoLoop gets the registration: its pump thread will service read
//     requests with READ_FIXED into those buffers, on the machine's cores.
//     Its request ring is host memory mapped for the GPU too.
//  3. A persistent kernel, one block per SM, takes pieces of the file (of
//     random sizes, 1 byte to --max-piece) from a shared counter; each lane
//     asks for one with svmbatch_read() (a warp's lanes publish with one
//     atomic), waits with svmbatch_wait(), and the warp checksums what
//     arrived through the buffer's device pointer.  No CPU thread decides
//     what is read when: the GPU does.
//  4. The host checks every piece's sum against its own, byte for byte.
//
//   gpu_io_loop [--gib N] [--dir DIR] [--max-piece BYTES] [--warps N] [--blocks N]
//
// Exit status 0 when every piece was read and matched.  Needs an NVIDIA
// GPU; built wherever nvcc is (examples/CMakeLists.txt), run on the GPU
// machine by tools/device/run.sh.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include <svmbatch/all.hpp>

#include "gpu_io_kernels.hpp"

namespace {

using svmbatch::device::io_pattern;
using svmbatch::device::io_weigh;
using svmbatch::device::IoPiece;

/// Run fn(first, last) over [0, n) on every core.
template <typename Fn> void parallel(std::size_t n, Fn fn)
{
	unsigned k = std::max(1u, std::thread::hardware_concurrency());
	std::vector<std::thread> threads;
	for (unsigned t = 0; t < k; t++)
		threads.emplace_back(fn, n * t / k, n * (t + 1) / k);
	for (auto &t : threads)
		t.join();
}

/// The file: pattern bytes, written by every core, unlinked at once.
int write_pattern_file(const std::string &dir, std::uint64_t bytes)
{
	std::string path = dir + "/svmbatch-gpu-io-XXXXXX";
	int fd = ::mkstemp(path.data());
	if (fd < 0)
		throw std::system_error(errno, std::generic_category(), path);
	::unlink(path.c_str());
	if (::ftruncate(fd, static_cast<off_t>(bytes)) < 0)
		throw std::system_error(errno, std::generic_category(), "ftruncate");
	constexpr std::uint64_t chunk = 1 << 20;
	std::atomic<bool> ok{true};
	parallel((bytes + chunk - 1) / chunk, [&](std::size_t a, std::size_t b) {
		std::vector<std::uint8_t> buf(chunk);
		for (std::size_t c = a; c < b; c++) {
			std::uint64_t off = c * chunk, n = std::min(chunk, bytes - off);
			for (std::uint64_t k = 0; k < n; k++)
				buf[k] = io_pattern(off + k);
			if (::pwrite(fd, buf.data(), n, static_cast<off_t>(off)) !=
			    static_cast<ssize_t>(n))
				ok = false;
		}
	});
	if (!ok)
		throw std::runtime_error("pwrite of the pattern file failed");
	return fd;
}

struct Options {
	std::uint64_t bytes = std::uint64_t{4} << 30;
	std::string dir = "/tmp";
	std::uint64_t max_piece = 64 << 10;
	unsigned warps = 4; ///< per block
	unsigned blocks = 0; ///< 0: one per SM
};

int run(const Options &o)
{
	cudaDeviceProp prop{};
	if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
		throw std::runtime_error("no CUDA device");
	const unsigned blocks = o.blocks ? o.blocks :
					   static_cast<unsigned>(prop.multiProcessorCount);
	const unsigned nwarps = blocks * o.warps;

	std::printf(
		"gpu_io_loop: %s, %u blocks x %u warps, %.1f GiB file, pieces of 1 B .. %llu KiB\n",
		prop.name, blocks, o.warps, static_cast<double>(o.bytes) / (1 << 30),
		static_cast<unsigned long long>(o.max_piece >> 10));
	int fd = write_pattern_file(o.dir, o.bytes);

	// The pieces: random sizes, covering the file.
	std::vector<IoPiece> pieces;
	std::mt19937_64 rng(19);
	for (std::uint64_t off = 0; off < o.bytes;) {
		std::uint64_t len = std::min(o.bytes - off, 1 + rng() % o.max_piece);
		pieces.push_back({off, len});
		off += len;
	}

	// 1. One staging buffer per warp (malloc'd), registered in one call,
	// mapped for the GPU once.
	const std::size_t buf_len = 32 * o.max_piece;
	std::vector<std::unique_ptr<char[]>> mem;
	std::vector<svmbatch::Buffer> bufs;
	for (unsigned w = 0; w < nwarps; w++) {
		mem.push_back(std::make_unique<char[]>(buf_len));
		bufs.push_back({mem.back().get(), buf_len});
	}
	svmbatch::Context ctx;
	svmbatch::Registration reg = ctx.register_buffers(bufs);
	svmbatch::CudaBackend cuda;
	svmbatch::GpuMapping gpu = cuda.map(reg);

	// 2. The loop: its pump services the ring, which it maps for the GPU.
	svmbatch::IoLoopOptions lo;
	lo.slots = 32768;
	lo.gpu = &cuda;
	svmbatch::IoLoop loop(ctx, reg, lo);
	std::uint32_t file = loop.add_file(fd);

	// 3. The persistent kernel reads and sums every piece.
	std::uint64_t read_errors = 0;
	double secs = 0;
	std::vector<std::uint64_t> got;
	{
		svmbatch::device::GpuQueue q(loop.device_queue());
		got = svmbatch::device::read_and_checksum(
			q, file, pieces,
			std::vector<std::uint64_t>(gpu.addresses().begin(), gpu.addresses().end()),
			o.max_piece, blocks, o.warps, &read_errors, &secs);
	}
	loop.stop();
	svmbatch::IoLoopStats st = loop.stats();

	// 4. Every piece, against the CPU's sum of the same bytes.
	std::atomic<std::size_t> bad{0};
	parallel(pieces.size(), [&](std::size_t a, std::size_t b) {
		for (std::size_t i = a; i < b; i++) {
			std::uint64_t s = 0;
			for (std::uint64_t k = 0; k < pieces[i].length; k++)
				s += io_weigh(io_pattern(pieces[i].offset + k),
					      pieces[i].offset + k);
			bad += s != got[i];
		}
	});
	::close(fd);
	std::printf(
		"  %zu pieces read by the GPU through the loop in %.2f s: %.2f GB/s, %.0f requests/s\n",
		pieces.size(), secs, static_cast<double>(o.bytes) / secs / 1e9,
		static_cast<double>(pieces.size()) / secs);
	std::printf(
		"  pump: %llu requests, %llu completions, %llu failed, %llu batches, %llu deferred, %llu parks\n",
		static_cast<unsigned long long>(st.requests),
		static_cast<unsigned long long>(st.completed),
		static_cast<unsigned long long>(st.failed),
		static_cast<unsigned long long>(st.batches),
		static_cast<unsigned long long>(st.deferred),
		static_cast<unsigned long long>(st.parks));
	const bool pass = bad == 0 && read_errors == 0 && st.completed == pieces.size();
	std::printf("gpu_io_loop: %zu of %zu pieces match the CPU's sums, %llu read errors: %s\n",
		    pieces.size() - bad.load(), pieces.size(),
		    static_cast<unsigned long long>(read_errors), pass ? "PASS" : "FAIL");
	return pass ? 0 : 1;
}

} // namespace

int main(int argc, char **argv)
{
	Options o;
	for (int i = 1; i + 1 < argc; i += 2) {
		std::string_view opt = argv[i];
		const char *v = argv[i + 1];
		if (opt == "--gib")
			o.bytes = static_cast<std::uint64_t>(std::strtod(v, nullptr) * (1 << 30));
		else if (opt == "--dir")
			o.dir = v;
		else if (opt == "--max-piece")
			o.max_piece = std::strtoull(v, nullptr, 10);
		else if (opt == "--warps")
			o.warps = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
		else if (opt == "--blocks")
			o.blocks = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
	}
	try {
		return run(o);
	} catch (const std::exception &e) {
		std::fprintf(stderr, "gpu_io_loop: %s\n", e.what());
		return 2;
	}
}
