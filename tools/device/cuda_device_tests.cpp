// SPDX-License-Identifier: MIT
// CudaBackend against the real CUDA driver, on a GPU machine (run.sh).
// The module cannot load there, so registrations are userspace mode: the
// CUDA side (cuMemHostRegister, device pointers, rollback, classification)
// is what these tests prove.
#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "gpu_checksum.hpp"
#include "gpu_io_kernels.hpp"

namespace svmbatch {
namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

using test::expect_error;

/* What the CUDA runtime says a host address is. */
cudaMemoryType cuda_type(const void *p)
{
	cudaPointerAttributes a{};

	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError();
		return cudaMemoryTypeUnregistered;
	}
	return a.type;
}

using Pages = test::MappedPages;

class CudaDevice : public ::testing::Test {
protected:
	void SetUp() override
	{
		int n = 0;
		if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess || n == 0)
			GTEST_SKIP()
				<< "no CUDA device on this machine (" << cudaGetErrorName(e) << ")";
		ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
		cuda_.emplace();
		ctx_.emplace();
	}
	void TearDown() override
	{
		/* Skipped: no GPU, or no driver, and then every call fails. */
		if (IsSkipped())
			return;
		EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "CUDA error state left set";
	}
	std::optional<CudaBackend> cuda_;
	std::optional<Context> ctx_;
};

TEST_F(CudaDevice, OpensTheDriverAndReportsTheDevice)
{
	std::printf("# device %s, unified addressing %d, read-only register %d, mode %s\n",
		    cuda_->device_name().c_str(), cuda_->unified_addressing(),
		    cuda_->read_only_register_supported(), mode_name(ctx_->mode()));
	EXPECT_FALSE(cuda_->device_name().empty());
	EXPECT_TRUE(cuda_->unified_addressing());
}

TEST_F(CudaDevice, TwoThousandScatteredBuffersChecksumOnTheGpuAndBack)
{
	std::mt19937_64 rng(7);
	std::vector<std::unique_ptr<std::uint8_t[]>> mem;
	std::vector<Buffer> bufs;
	std::vector<std::size_t> lens;
	for (int i = 0; i < 2000; i++) {
		std::size_t len = 4096 + rng() % (60 << 10);
		mem.push_back(std::make_unique_for_overwrite<std::uint8_t[]>(len));
		for (std::size_t b = 0; b < len; b++)
			mem.back()[b] = static_cast<std::uint8_t>(rng());
		bufs.push_back({mem.back().get(), len});
		lens.push_back(len);
	}
	Registration r = ctx_->register_buffers(bufs);
	GpuMapping m = cuda_->map(r);
	ASSERT_EQ(m.size(), bufs.size());
	std::vector<std::uint64_t> dptrs(m.addresses().begin(), m.addresses().end());
	for (std::size_t i = 0; i < bufs.size(); i++)
		ASSERT_EQ(dptrs[i], reinterpret_cast<std::uintptr_t>(bufs[i].ptr))
			<< "UVA: the device pointer is the host pointer";

	std::vector<std::uint64_t> gpu = device::gpu_checksums(dptrs, lens);
	for (std::size_t i = 0; i < bufs.size(); i++)
		ASSERT_EQ(gpu[i], device::cpu_checksum(bufs[i].ptr, lens[i])) << "buffer " << i;

	mem[17][100] ^= 0xff; /* the CPU writes, the GPU sees it */
	EXPECT_EQ(device::gpu_checksums({dptrs[17]}, {lens[17]})[0],
		  device::cpu_checksum(bufs[17].ptr, lens[17]));
	device::gpu_write_byte(dptrs, 5, 0xA5); /* the GPU writes, the CPU sees it */
	for (std::size_t i = 0; i < bufs.size(); i++)
		ASSERT_EQ(mem[i][5], 0xA5) << "buffer " << i;
	m.reset();
	EXPECT_EQ(cuda_type(bufs[0].ptr), cudaMemoryTypeUnregistered);
}

TEST_F(CudaDevice, RangeKFailingUnregistersRangesBeforeItAndLeavesCudaClean)
{
	Pages mem(std::size_t{5} * 18);
	std::vector<Buffer> bufs;
	for (std::size_t i = 0; i < 5; i++) /* 16-page buffers, gaps between */
		bufs.push_back({mem.p + 18 * i * page, 16 * page});
	std::memset(mem.p, 1, mem.len);
	Registration r = ctx_->register_buffers(bufs);
	ASSERT_EQ(r.ranges().size(), 5u);
	/* Someone registered one page in the middle of range 3. */
	char *blocker = mem.p + std::size_t{18} * 3 * page + 8 * page;
	ASSERT_EQ(cudaHostRegister(blocker, page, cudaHostRegisterDefault), cudaSuccess);

	Error e = expect_error([&] { (void)cuda_->map(r); });
	EXPECT_EQ(e.err(), EEXIST) << e.what();
	EXPECT_EQ(e.driver_status(), 712) << "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
	EXPECT_EQ(e.buffer_index(), 3u);
	std::printf("# %s\n", e.what());
	for (std::size_t i = 0; i < 3; i++)
		EXPECT_EQ(cuda_type(bufs[i].ptr), cudaMemoryTypeUnregistered)
			<< "range " << i << " still registered after the failure";
	EXPECT_EQ(cudaGetLastError(), cudaSuccess);
	EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);

	ASSERT_EQ(cudaHostUnregister(blocker), cudaSuccess);
	GpuMapping m = cuda_->map(r); /* now it works */
	EXPECT_EQ(cuda_type(bufs[4].ptr), cudaMemoryTypeHost);
}

TEST_F(CudaDevice, CudaHostAllocManagedAndDeviceMemoryAreClassified)
{
	void *host = nullptr, *managed = nullptr, *dev = nullptr;
	ASSERT_EQ(cudaHostAlloc(&host, 1 << 20, cudaHostAllocMapped | cudaHostAllocPortable),
		  cudaSuccess);
	ASSERT_EQ(cudaMallocManaged(&managed, 1 << 20), cudaSuccess);
	ASSERT_EQ(cudaMalloc(&dev, 1 << 20), cudaSuccess);
	std::memset(host, 3, 1 << 20);
	std::memset(managed, 4, 1 << 20);
	std::vector<std::uint8_t> plain(100000, 5);

	EXPECT_EQ(cuda_->classify(host), CudaMemory::Host);
	EXPECT_EQ(cuda_->classify(managed), CudaMemory::Managed);
	EXPECT_EQ(cuda_->classify(dev), CudaMemory::Device);
	EXPECT_EQ(cuda_->classify(plain.data()), CudaMemory::Unknown);
	{
		Buffer bufs[] = {{static_cast<char *>(host) + 10, 5000},
				 {managed, 1 << 20},
				 {plain.data(), plain.size()}};
		Registration r = ctx_->register_buffers(bufs);
		GpuMapping m = cuda_->map(r);
		void *host_dptr = nullptr;
		ASSERT_EQ(cudaHostGetDevicePointer(&host_dptr, host, 0), cudaSuccess);
		EXPECT_EQ(m.address(0), reinterpret_cast<std::uintptr_t>(host_dptr) + 10);
		EXPECT_EQ(m.device_pointer<void>(1), managed);
		std::vector<std::uint64_t> d(m.addresses().begin(), m.addresses().end());
		std::vector<std::size_t> lens{5000, 1 << 20, plain.size()};
		std::vector<std::uint64_t> sums = device::gpu_checksums(d, lens);
		for (std::size_t i = 0; i < 3; i++)
			EXPECT_EQ(sums[i], device::cpu_checksum(bufs[i].ptr, lens[i])) << i;
	}
	EXPECT_EQ(cuda_type(host), cudaMemoryTypeHost) << "cudaHostAlloc memory is not ours";
	/* Device memory is no host memory: refused before CUDA is asked. */
	Buffer devbuf[] = {{dev, 4096}};
	Error e = expect_error([&] { (void)ctx_->register_buffers(devbuf); });
	EXPECT_EQ(e.err(), EFAULT);
	cudaFreeHost(host);
	cudaFree(managed);
	cudaFree(dev);
}

TEST_F(CudaDevice, ARangeHalfRegisteredByCudaIsRefusedWhole)
{
	Pages mem(8);
	ASSERT_EQ(cudaHostRegister(mem.p, 4 * page, cudaHostRegisterDefault), cudaSuccess);
	Buffer bufs[] = {{mem.p, 4 * page}, {mem.p + 4 * page, 4 * page}};
	Registration r = ctx_->register_buffers(bufs);

	Error e = expect_error([&] { (void)cuda_->map(r); });
	EXPECT_EQ(e.err(), EEXIST);
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_EQ(cuda_type(mem.p + 4 * page), cudaMemoryTypeUnregistered);
	EXPECT_EQ(cudaHostUnregister(mem.p), cudaSuccess);
}

TEST_F(CudaDevice, ReadOnlyFileMemoryMapsForReading)
{
	char path[] = "/tmp/svmbatch-ro-XXXXXX";
	int fd = ::mkstemp(path);
	ASSERT_GE(fd, 0);
	std::vector<std::uint8_t> data(64 << 10);
	for (std::size_t i = 0; i < data.size(); i++)
		data[i] = static_cast<std::uint8_t>(i * 13);
	ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
	void *p = ::mmap(nullptr, data.size(), PROT_READ, MAP_SHARED, fd, 0);
	ASSERT_NE(p, MAP_FAILED);
	Buffer bufs[] = {{p, data.size(), Access::ReadOnly}};
	Registration r = ctx_->register_buffers(bufs);

	if (!cuda_->read_only_register_supported()) {
		Error e = expect_error([&] { (void)cuda_->map(r); });
		std::printf("# no read-only registration on this device: %s\n", e.what());
	} else {
		GpuMapping m = cuda_->map(r);
		std::vector<std::uint64_t> d{m.address(0)};
		EXPECT_EQ(device::gpu_checksums(d, {data.size()})[0],
			  device::cpu_checksum(data.data(), data.size()));
	}
	::munmap(p, data.size());
	::close(fd);
	::unlink(path);
}

/* GPU-driven writes (svmbatch_write()): a persistent kernel, one block per
 * SM x 4 warps, writes a 4 GiB file in tmpfs in 1 B .. 64 KiB pieces
 * (random sizes, covering it), copying each from device memory into its
 * warp's mapped buffer first; every write completes once with all its
 * bytes, and the file read back on the CPU is the image byte for byte. */
TEST_F(CudaDevice, AKernelWritesAFourGiBFileInPiecesReadBackByteForByte)
{
	constexpr std::uint64_t bytes = std::uint64_t{4} << 30, max_piece = 64 << 10;
	constexpr unsigned warps = 4;
	cudaDeviceProp prop{};
	ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
	const auto blocks = static_cast<unsigned>(prop.multiProcessorCount);
	const unsigned nwarps = blocks * warps;

	char path[] = "/dev/shm/svmbatch-gpu-write-XXXXXX";
	int fd = ::mkstemp(path);
	ASSERT_GE(fd, 0);
	::unlink(path);
	std::vector<device::IoPiece> pieces;
	std::mt19937_64 rng(23);
	for (std::uint64_t off = 0; off < bytes;) {
		const std::uint64_t len = std::min(bytes - off, 1 + rng() % max_piece);
		pieces.push_back({off, len});
		off += len;
	}
	const std::size_t buf_len = 32 * max_piece;
	test::MappedPages mem(nwarps * buf_len / page);
	ASSERT_NE(mem.p, nullptr);
	std::vector<Buffer> bufs;
	for (unsigned w = 0; w < nwarps; w++)
		bufs.push_back({mem.p + std::size_t{w} * buf_len, buf_len});
	Registration reg = ctx_->register_buffers(bufs);
	GpuMapping gpu = cuda_->map(reg);
	IoLoopOptions lo;
	lo.slots = 32768;
	lo.gpu = &*cuda_;
	IoLoop loop(*ctx_, reg, lo);
	const std::uint32_t file = loop.add_file(fd);
	device::IoRun run;
	{
		device::DeviceImage image(bytes);
		device::GpuQueue q(loop.device_queue());
		run = device::write_pieces(q, file, pieces, image,
					   std::vector<std::uint64_t>(gpu.addresses().begin(),
								      gpu.addresses().end()),
					   max_piece, blocks, warps, 32);
	}
	loop.stop();
	const IoLoopStats st = loop.stats();
	std::printf("# %zu pieces written by the GPU in %.2f s (%.2f GB/s); pump: %llu "
		    "completed, %llu failed, %llu deferred\n",
		    pieces.size(), run.seconds, static_cast<double>(bytes) / run.seconds / 1e9,
		    static_cast<unsigned long long>(st.completed),
		    static_cast<unsigned long long>(st.failed),
		    static_cast<unsigned long long>(st.deferred));
	EXPECT_EQ(run.errors, 0u);
	EXPECT_EQ(st.completed, pieces.size());
	EXPECT_EQ(st.failed, 0u);
	EXPECT_EQ(st.bytes, bytes);

	struct stat sb {};
	ASSERT_EQ(::fstat(fd, &sb), 0);
	EXPECT_EQ(static_cast<std::uint64_t>(sb.st_size), bytes);
	/* Byte for byte, on every core: the first mismatch of each chunk. */
	constexpr std::uint64_t chunk = 64 << 20;
	std::atomic<std::uint64_t> next{0}, mismatched{0}, first_bad{~std::uint64_t{0}};
	std::vector<std::thread> threads;
	for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); t++)
		threads.emplace_back([&] {
			std::vector<std::uint8_t> buf(chunk);
			for (std::uint64_t c; (c = next.fetch_add(chunk)) < bytes;) {
				const std::uint64_t n = std::min(chunk, bytes - c);
				if (::pread(fd, buf.data(), n, static_cast<off_t>(c)) !=
				    static_cast<ssize_t>(n)) {
					mismatched += n;
					continue;
				}
				for (std::uint64_t k = 0; k < n; k++)
					if (buf[k] != device::io_pattern(c + k)) {
						mismatched++;
						std::uint64_t cur = first_bad.load();
						while (c + k < cur &&
						       !first_bad.compare_exchange_weak(cur,
											c + k)) {
						}
					}
			}
		});
	for (auto &t : threads)
		t.join();
	EXPECT_EQ(mismatched.load(), 0u) << "first bad byte at " << first_bad.load();
	std::printf("# read back: %llu of %llu bytes differ from the image\n",
		    static_cast<unsigned long long>(mismatched.load()),
		    static_cast<unsigned long long>(bytes));
	::close(fd);
}

/* Device reads through the real copy engine: 4 CPU producers read a 1 GiB
 * file in pieces of 1 byte to 3 MiB into device memory at the same
 * offsets, through 64 MiB of staging; read back, byte for byte. */
TEST_F(CudaDevice, DeviceReadsLandInDeviceMemoryByteForByte)
{
	constexpr std::uint64_t bytes = std::uint64_t{1} << 30, max_piece = 3 << 20;
	constexpr int producers = 4;
	char path[] = "/dev/shm/svmbatch-gpu-read-device-XXXXXX";
	const int fd = ::mkstemp(path);
	ASSERT_GE(fd, 0);
	::unlink(path);
	{
		std::vector<std::uint8_t> buf(64 << 20);
		for (std::uint64_t off = 0; off < bytes; off += buf.size()) {
			for (std::size_t k = 0; k < buf.size(); k++)
				buf[k] = device::io_pattern(off + k);
			ASSERT_EQ(::pwrite(fd, buf.data(), buf.size(), static_cast<off_t>(off)),
				  static_cast<ssize_t>(buf.size()));
		}
	}
	std::vector<std::pair<std::uint64_t, std::uint64_t>> pieces;
	std::mt19937_64 rng(29);
	for (std::uint64_t off = 0; off < bytes;) {
		const std::uint64_t len = std::min(bytes - off, 1 + rng() % max_piece);
		pieces.emplace_back(off, len);
		off += len;
	}
	std::shuffle(pieces.begin(), pieces.end(), rng);
	void *dev = nullptr;
	ASSERT_EQ(cudaMalloc(&dev, bytes), cudaSuccess);
	ASSERT_EQ(cudaMemset(dev, 0, bytes), cudaSuccess);
	test::MappedPages staging((64 << 20) / page);
	ASSERT_NE(staging.p, nullptr);
	Buffer sb{staging.p, std::size_t{64} << 20};
	Registration reg = ctx_->register_buffers({&sb, 1});
	GpuMapping mapped = cuda_->map(reg);
	std::uint64_t failed = 0;
	{
		CudaCopyEngine engine(*cuda_);
		const IoLoopDeviceBuffer d{reinterpret_cast<std::uintptr_t>(dev), bytes};
		IoLoopOptions lo;
		lo.device.engine = &engine;
		lo.device.buffers = {&d, 1};
		IoLoop loop(*ctx_, reg, lo);
		IoLoopClient client(loop.host_queue());
		const std::uint32_t file = loop.add_file(fd);
		std::atomic<std::size_t> next{0};
		std::atomic<std::uint64_t> wrong{0};
		std::vector<std::thread> threads;
		threads.reserve(producers);
		for (int p = 0; p < producers; p++)
			threads.emplace_back([&] {
				// Eight requests out per producer, waited for in order.
				std::deque<std::pair<std::int64_t, std::uint64_t>> out;
				for (;;) {
					const std::size_t i = next.fetch_add(1);
					if (i < pieces.size()) {
						const auto [off, len] = pieces[i];
						out.emplace_back(client.read_device(file, off, len,
										    0, off),
								 len);
						if (out.size() < 8)
							continue;
					}
					if (out.empty())
						return;
					const IoCompletion c = client.wait(out.front().first);
					if (c.status || c.bytes != out.front().second)
						wrong++;
					out.pop_front();
				}
			});
		for (auto &t : threads)
			t.join();
		failed = wrong.load();
		loop.stop();
		EXPECT_EQ(loop.stats().completed, pieces.size());
		EXPECT_EQ(loop.stats().bytes, bytes);
	}
	EXPECT_EQ(failed, 0u);
	std::vector<std::uint8_t> back(bytes);
	ASSERT_EQ(cudaMemcpy(back.data(), dev, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
	std::uint64_t mismatched = 0;
	for (std::uint64_t k = 0; k < bytes; k++)
		mismatched += back[k] != device::io_pattern(k);
	EXPECT_EQ(mismatched, 0u);
	std::printf("# %zu device reads, %llu failed; %llu of %llu bytes differ\n", pieces.size(),
		    static_cast<unsigned long long>(failed),
		    static_cast<unsigned long long>(mismatched),
		    static_cast<unsigned long long>(bytes));
	EXPECT_EQ(cudaFree(dev), cudaSuccess);
	::close(fd);
}

} // namespace
} // namespace svmbatch
