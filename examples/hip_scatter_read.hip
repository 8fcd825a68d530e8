// SPDX-License-Identifier: MIT
// hip_scatter_read: the scatter-read loop of a HIP program.  Scattered
// malloc'd host buffers are registered in one call, read into from a file
// with io_uring READ_FIXED, checked byte for byte on the CPU, and
// checksummed by a HIP kernel through their mapped device pointers.
//
// With the module (kernel mode) it does what a HIP application does
// without the library: one SVMBATCH_REGISTER ioctl through
// <linux/svmbatch.h> over the buffers' merged pages, liburing for the
// fixed buffers and the reads, hipHostRegister for the GPU.  Without it
// (userspace mode) it takes the library: a Registration, its fixed
// buffers, the Reader, and HipBackend for the GPU.
//
//   hip_scatter_read [--mode auto|kernel|userspace] [--buffers N] [--dir DIR]
//
// Prints TAP: register, read, bytes, gpu-checksum.  Without an AMD GPU
// (no /dev/kfd) the last is a skip that says what HIP answered.  Exit
// status 0 when nothing failed.  Built with hipcc for gfx90a, gfx942 and
// gfx1100 (examples/CMakeLists.txt).
#include <hip/hip_runtime.h>

#include <fcntl.h>
#include <liburing.h>
#include <linux/svmbatch.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <svmbatch/all.hpp>

namespace {

/// The byte the file holds at offset off.
std::uint8_t pattern(std::uint64_t off)
{
	return static_cast<std::uint8_t>((off * 2654435761u) >> 13);
}

/// What both the GPU and the CPU compute over a buffer: position-weighted,
/// so that a shifted or swapped byte shows.
__host__ __device__ std::uint64_t weigh(std::uint8_t byte, std::uint64_t at)
{
	return static_cast<std::uint64_t>(byte) * ((at & 255) + 1);
}

/// One block per buffer: sums[i] = the weighted sum of buffer i's bytes.
__global__ void checksum(const std::uint8_t *const *bufs, const std::uint64_t *lens,
			 unsigned long long *sums)
{
	const std::uint8_t *p = bufs[blockIdx.x];
	std::uint64_t sum = 0;

	for (std::uint64_t k = threadIdx.x; k < lens[blockIdx.x]; k += blockDim.x)
		sum += weigh(p[k], k);
	atomicAdd(&sums[blockIdx.x], static_cast<unsigned long long>(sum));
}

/// A few TAP lines.
struct Tap {
	int n = 0, failed = 0;
	void result(bool ok, const char *name, const std::string &detail)
	{
		std::printf("%sok %d - %s: %s\n", ok ? "" : "not ", ++n, name, detail.c_str());
		failed += !ok;
	}
	void skip(const char *name, const std::string &why)
	{
		std::printf("ok %d - %s # SKIP %s\n", ++n, name, why.c_str());
	}
};

/// The host buffers: buffer i receives file[file_off[i] .. + len).
struct HostBuffers {
	std::vector<std::unique_ptr<char[]>> mem;
	std::vector<svmbatch::Buffer> list;
	std::vector<std::uint64_t> file_off;
	std::uint64_t total = 0;
};

/* 1 byte .. 64 KiB, log-uniform, at malloc's addresses (new[] takes them
 * from malloc): buffers share pages, and ranges merge. */
HostBuffers allocate(std::size_t n)
{
	std::mt19937_64 rng(3);
	HostBuffers b;

	for (std::size_t i = 0; i < n; i++) {
		double e = 16 * std::uniform_real_distribution<double>(0, 1)(rng);
		auto len = static_cast<std::size_t>(std::exp2(e));
		b.mem.push_back(std::make_unique<char[]>(len));
		b.list.push_back({b.mem.back().get(), len});
		b.file_off.push_back(b.total);
		b.total += len;
	}
	return b;
}

/// An open file descriptor, closed on destruction.
struct Fd {
	int fd = -1;
	explicit Fd(int f) : fd(f) {}
	Fd(Fd &&o) noexcept : fd(std::exchange(o.fd, -1)) {}
	Fd(const Fd &) = delete;
	Fd &operator=(const Fd &) = delete;
	Fd &operator=(Fd &&) = delete;
	~Fd()
	{
		if (fd >= 0)
			::close(fd);
	}
};

/* The file: pattern bytes, as many as the buffers hold, unlinked at once. */
Fd write_pattern_file(const std::string &dir, std::uint64_t total)
{
	std::string path = dir + "/svmbatch-hip-scatter-XXXXXX";
	Fd f(::mkstemp(path.data()));
	if (f.fd < 0)
		throw std::system_error(errno, std::generic_category(), path);
	::unlink(path.c_str());
	std::vector<std::uint8_t> bytes(total);
	for (std::uint64_t k = 0; k < total; k++)
		bytes[k] = pattern(k);
	if (::pwrite(f.fd, bytes.data(), total, 0) != static_cast<ssize_t>(total))
		throw std::system_error(errno, std::generic_category(), "pwrite");
	return f;
}

std::size_t bad_buffers(const HostBuffers &b)
{
	std::size_t bad = 0;
	for (std::size_t i = 0; i < b.list.size(); i++) {
		const auto *p = static_cast<const std::uint8_t *>(b.list[i].ptr);
		for (std::size_t k = 0; k < b.list[i].len; k++) {
			if (p[k] != pattern(b.file_off[i] + k)) {
				bad++;
				break;
			}
		}
	}
	return bad;
}

/* The buffers' pages, merged where they touch: what SVMBATCH_REGISTER takes. */
std::vector<svmbatch_range> merged_pages(const HostBuffers &b)
{
	const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
	std::vector<svmbatch_range> spans;
	for (const svmbatch::Buffer &buf : b.list) {
		auto start = reinterpret_cast<std::uintptr_t>(buf.ptr);
		std::uintptr_t first = start & ~(page - 1);
		std::uintptr_t end = (start + buf.len + page - 1) & ~(page - 1);
		spans.push_back({first, end - first, 0, 0});
	}
	std::sort(spans.begin(), spans.end(),
		  [](const auto &x, const auto &y) { return x.addr < y.addr; });
	std::vector<svmbatch_range> merged;
	for (const svmbatch_range &s : spans) {
		if (!merged.empty() && s.addr <= merged.back().addr + merged.back().len)
			merged.back().len =
				std::max(merged.back().len, s.addr + s.len - merged.back().addr);
		else
			merged.push_back(s);
	}
	return merged;
}

/// Pages that ranges cover.
std::uint64_t pages_of(const std::vector<svmbatch_range> &ranges)
{
	const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
	std::uint64_t pages = 0;
	for (const svmbatch_range &r : ranges)
		pages += r.len / page;
	return pages;
}

/// The kernel-mode path: the ioctl, liburing and HIP, no library.
class RawPath {
public:
	explicit RawPath(const HostBuffers &b)
		: b_(b), dev_(::open("/dev/svmbatch", O_RDWR | O_CLOEXEC))
	{
		if (dev_.fd < 0)
			throw std::system_error(errno, std::generic_category(), "/dev/svmbatch");
		if (int ret = io_uring_queue_init(64, &ring_, 0); ret < 0)
			throw std::system_error(-ret, std::generic_category(),
						"io_uring_queue_init");
		ring_ok_ = true;
	}
	RawPath(const RawPath &) = delete;
	RawPath &operator=(const RawPath &) = delete;
	~RawPath()
	{
		for (void *addr : hip_registered_)
			(void)hipHostUnregister(addr);
		if (ring_ok_)
			io_uring_queue_exit(&ring_);
		if (handle_) {
			svmbatch_unregister u{};
			u.size = sizeof(u);
			u.handle = handle_;
			::ioctl(dev_.fd, SVMBATCH_UNREGISTER, &u);
		}
	}

	/// One SVMBATCH_REGISTER over every page, then the buffers as io_uring
	/// fixed buffers (one per caller buffer); ok when the module pinned
	/// every page of the merged ranges.
	std::string register_all(bool &ok)
	{
		ranges_ = merged_pages(b_);
		svmbatch_register reg{};
		reg.size = sizeof(reg);
		reg.ranges = reinterpret_cast<std::uintptr_t>(ranges_.data());
		reg.nr_ranges = static_cast<std::uint32_t>(ranges_.size());
		reg.range_size = sizeof(svmbatch_range);
		if (::ioctl(dev_.fd, SVMBATCH_REGISTER, &reg) < 0)
			throw std::system_error(errno, std::generic_category(),
						"SVMBATCH_REGISTER (range " +
							std::to_string(reg.error_index) + ")");
		handle_ = reg.handle;
		std::vector<iovec> iov;
		for (const svmbatch::Buffer &buf : b_.list)
			iov.push_back({buf.ptr, buf.len});
		if (int ret = io_uring_register_buffers(&ring_, iov.data(),
							static_cast<unsigned>(iov.size()));
		    ret < 0)
			throw std::system_error(-ret, std::generic_category(),
						"io_uring_register_buffers");
		ok = reg.nr_pages == pages_of(ranges_);
		return std::to_string(b_.list.size()) + " buffers, " +
		       std::to_string(ranges_.size()) + " ranges, " + std::to_string(reg.nr_pages) +
		       " of their " + std::to_string(pages_of(ranges_)) +
		       " pages pinned by one ioctl";
	}

	/// READ_FIXED of every buffer's part of the file, short reads continued;
	/// how many buffers failed.
	std::size_t read_all(int fd)
	{
		std::vector<std::uint64_t> done(b_.list.size(), 0);
		std::size_t next = 0, inflight = 0, failed = 0;
		auto submit = [&](std::size_t i) {
			io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
			char *dst = static_cast<char *>(b_.list[i].ptr) + done[i];
			io_uring_prep_read_fixed(sqe, fd, dst,
						 static_cast<unsigned>(b_.list[i].len - done[i]),
						 b_.file_off[i] + done[i], static_cast<int>(i));
			io_uring_sqe_set_data64(sqe, i);
			inflight++;
		};
		while (next < b_.list.size() || inflight) {
			while (next < b_.list.size() && inflight < 64)
				submit(next++);
			io_uring_cqe *cqe = nullptr;
			if (int ret = io_uring_submit_and_wait(&ring_, 1); ret < 0)
				throw std::system_error(-ret, std::generic_category(),
							"io_uring_submit");
			while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
				std::size_t i = io_uring_cqe_get_data64(cqe);
				int res = cqe->res;
				io_uring_cqe_seen(&ring_, cqe);
				inflight--;
				if (res <= 0) {
					failed++;
					continue;
				}
				done[i] += static_cast<std::uint64_t>(res);
				if (done[i] < b_.list[i].len)
					submit(i); /* short read: the rest */
			}
		}
		return failed;
	}

	/// hipHostRegister each merged range (the program's own buffers are all
	/// that lies there), then each buffer's device pointer.
	std::vector<const std::uint8_t *> map_for_gpu()
	{
		std::vector<const std::uint8_t *> dptrs;
		std::vector<std::uintptr_t> range_dptr;
		for (const svmbatch_range &r : ranges_) {
			void *addr = reinterpret_cast<void *>(static_cast<std::uintptr_t>(r.addr));
			hipError_t e =
				hipHostRegister(addr, r.len,
						hipHostRegisterPortable | hipHostRegisterMapped);
			if (e != hipSuccess)
				throw std::runtime_error(std::string("hipHostRegister: ") +
							 hipGetErrorName(e));
			hip_registered_.push_back(addr);
			void *d = nullptr;
			if ((e = hipHostGetDevicePointer(&d, addr, 0)) != hipSuccess)
				throw std::runtime_error(std::string("hipHostGetDevicePointer: ") +
							 hipGetErrorName(e));
			range_dptr.push_back(reinterpret_cast<std::uintptr_t>(d));
		}
		for (const svmbatch::Buffer &buf : b_.list) {
			auto host = reinterpret_cast<std::uintptr_t>(buf.ptr);
			auto r = std::upper_bound(ranges_.begin(), ranges_.end(), host,
						  [](std::uintptr_t a, const svmbatch_range &x) {
							  return a < x.addr;
						  }) -
				 ranges_.begin() - 1;
			dptrs.push_back(reinterpret_cast<const std::uint8_t *>(
				range_dptr[static_cast<std::size_t>(r)] +
				(host - ranges_[static_cast<std::size_t>(r)].addr)));
		}
		return dptrs;
	}

private:
	const HostBuffers &b_;
	Fd dev_;
	io_uring ring_{};
	bool ring_ok_ = false;
	std::uint32_t handle_ = 0;
	std::vector<svmbatch_range> ranges_;
	std::vector<void *> hip_registered_;
};

/// The userspace-mode path: the library, HipBackend for the GPU.
class LibraryPath {
public:
	explicit LibraryPath(const HostBuffers &b) : b_(b), ctx_(svmbatch::Mode::Userspace)
	{
		if (int ret = io_uring_queue_init(64, &ring_, 0); ret < 0)
			throw std::system_error(-ret, std::generic_category(),
						"io_uring_queue_init");
		ring_ok_ = true;
	}
	LibraryPath(const LibraryPath &) = delete;
	LibraryPath &operator=(const LibraryPath &) = delete;
	~LibraryPath()
	{
		gpu_.reset();
		reader_.reset();
		fixed_.reset();
		if (ring_ok_)
			io_uring_queue_exit(&ring_);
	}

	/// ok when the library's ranges are the buffers' merged pages.
	std::string register_all(bool &ok)
	{
		reg_.emplace(ctx_.register_buffers(b_.list));
		fixed_.emplace(register_fixed(*reg_, ring_));
		const std::vector<svmbatch_range> want = merged_pages(b_);
		ok = reg_->ranges().size() == want.size() && reg_->pages() == pages_of(want);
		for (std::size_t i = 0; ok && i < want.size(); i++)
			ok = reg_->ranges()[i].addr == want[i].addr &&
			     reg_->ranges()[i].len == want[i].len;
		return std::to_string(b_.list.size()) + " buffers, " +
		       std::to_string(reg_->ranges().size()) + " ranges of " +
		       std::to_string(reg_->pages()) + " pages (" + std::to_string(want.size()) +
		       " and " + std::to_string(pages_of(want)) +
		       " expected), one register_buffers call";
	}

	std::size_t read_all(int fd)
	{
		reader_.emplace(ring_, *fixed_);
		std::vector<svmbatch::ReadRequest> rq;
		for (std::size_t i = 0; i < b_.list.size(); i++)
			rq.push_back({fd, b_.file_off[i], b_.list[i].len, i, 0});
		std::size_t failed = 0;
		for (const auto &r : reader_->read(rq))
			failed += r.err != 0;
		return failed;
	}

	std::vector<const std::uint8_t *> map_for_gpu()
	{
		svmbatch::HipBackend hip;
		gpu_.emplace(hip.map(*reg_));
		std::vector<const std::uint8_t *> dptrs;
		for (std::size_t i = 0; i < b_.list.size(); i++)
			dptrs.push_back(gpu_->device_pointer<const std::uint8_t>(i));
		return dptrs;
	}

private:
	const HostBuffers &b_;
	svmbatch::Context ctx_;
	io_uring ring_{};
	bool ring_ok_ = false;
	std::optional<svmbatch::Registration> reg_;
	std::optional<svmbatch::FixedBuffers> fixed_;
	std::optional<svmbatch::Reader> reader_;
	std::optional<svmbatch::GpuMapping> gpu_;
};

/// Why HIP cannot be used here, or nothing: every HIP call is gated on this.
std::optional<std::string> no_hip_device()
{
	int n = 0;
	hipError_t e = hipGetDeviceCount(&n);
	if (e != hipSuccess)
		return std::string("no HIP device: hipGetDeviceCount says ") + hipGetErrorName(e) +
		       " (" + std::to_string(static_cast<int>(e)) + ")";
	if (n == 0)
		return std::string("no HIP device: hipGetDeviceCount found 0");
	return std::nullopt;
}

/// The HIP kernel's sums, compared with the CPU's; a description.
std::string gpu_checksum(const HostBuffers &b, const std::vector<const std::uint8_t *> &dptrs,
			 bool &ok)
{
	const std::size_t n = b.list.size();
	std::vector<std::uint64_t> lens(n);
	for (std::size_t i = 0; i < n; i++)
		lens[i] = b.list[i].len;
	const std::uint8_t **d_bufs = nullptr;
	std::uint64_t *d_lens = nullptr;
	unsigned long long *d_sums = nullptr;
	auto check = [](hipError_t e, const char *what) {
		if (e != hipSuccess)
			throw std::runtime_error(std::string(what) + ": " + hipGetErrorName(e));
	};
	check(hipMalloc(&d_bufs, n * sizeof(*d_bufs)), "hipMalloc");
	check(hipMalloc(&d_lens, n * sizeof(*d_lens)), "hipMalloc");
	check(hipMalloc(&d_sums, n * sizeof(*d_sums)), "hipMalloc");
	check(hipMemcpy(d_bufs, dptrs.data(), n * sizeof(*d_bufs), hipMemcpyHostToDevice),
	      "hipMemcpy");
	check(hipMemcpy(d_lens, lens.data(), n * sizeof(*d_lens), hipMemcpyHostToDevice),
	      "hipMemcpy");
	check(hipMemset(d_sums, 0, n * sizeof(*d_sums)), "hipMemset");
	checksum<<<dim3(static_cast<unsigned>(n)), dim3(256)>>>(d_bufs, d_lens, d_sums);
	check(hipGetLastError(), "checksum launch");
	std::vector<unsigned long long> sums(n);
	check(hipMemcpy(sums.data(), d_sums, n * sizeof(*d_sums), hipMemcpyDeviceToHost),
	      "hipMemcpy");
	(void)hipFree(d_bufs);
	(void)hipFree(d_lens);
	(void)hipFree(d_sums);

	std::size_t bad = 0;
	for (std::size_t i = 0; i < n; i++) {
		std::uint64_t want = 0;
		for (std::uint64_t k = 0; k < lens[i]; k++)
			want += weigh(pattern(b.file_off[i] + k), k);
		bad += sums[i] != want;
	}
	ok = bad == 0;
	return std::to_string(n - bad) + " of " + std::to_string(n) +
	       " GPU checksums equal the CPU's";
}

template <typename Path> int run(Path &path, const HostBuffers &b, const std::string &dir)
{
	Tap tap;
	std::printf("TAP version 13\n1..4\n");
	Fd file = write_pattern_file(dir, b.total);

	bool registered = false;
	std::string detail;
	try {
		detail = path.register_all(registered);
	} catch (const std::exception &e) {
		detail = e.what();
	}
	tap.result(registered, "register", detail);
	if (!registered) {
		for (const char *name : {"read", "bytes", "gpu-checksum"})
			tap.result(false, name, "not run: the registration failed");
		std::printf("# hip_scatter_read: %d failed\n", tap.failed);
		return 1;
	}
	std::size_t failed_reads = path.read_all(file.fd);
	tap.result(failed_reads == 0, "read",
		   std::to_string(b.list.size() - failed_reads) + " READ_FIXED reads of " +
			   std::to_string(b.total) + " bytes completed");
	std::size_t bad = bad_buffers(b);
	tap.result(bad == 0, "bytes",
		   std::to_string(b.list.size() - bad) + " of " + std::to_string(b.list.size()) +
			   " buffers hold the file's bytes");
	if (std::optional<std::string> why = no_hip_device()) {
		tap.skip("gpu-checksum", *why);
	} else {
		bool ok = false;
		std::string detail = gpu_checksum(b, path.map_for_gpu(), ok);
		tap.result(ok, "gpu-checksum", detail);
	}
	std::printf("# hip_scatter_read: %d failed\n", tap.failed);
	return tap.failed ? 1 : 0;
}

} // namespace

int main(int argc, char **argv)
{
	std::string mode = "auto", dir = "/tmp";
	std::size_t nbuf = 1000;
	for (int i = 1; i + 1 < argc; i += 2) {
		std::string_view opt = argv[i];
		if (opt == "--mode")
			mode = argv[i + 1];
		else if (opt == "--buffers")
			nbuf = std::strtoul(argv[i + 1], nullptr, 10);
		else if (opt == "--dir")
			dir = argv[i + 1];
	}
	if (mode == "auto")
		mode = ::access("/dev/svmbatch", R_OK | W_OK) == 0 ? "kernel" : "userspace";
	if (mode != "kernel" && mode != "userspace") {
		std::fprintf(stderr, "usage: hip_scatter_read [--mode auto|kernel|userspace] "
				     "[--buffers N] [--dir DIR]\n");
		return 2;
	}
	try {
		HostBuffers b = allocate(nbuf);
		std::printf("# hip_scatter_read: %zu buffers, %s mode\n", nbuf, mode.c_str());
		if (mode == "kernel") {
			RawPath path(b);
			return run(path, b, dir);
		}
		LibraryPath path(b);
		return run(path, b, dir);
	} catch (const std::exception &e) {
		std::printf("not ok - hip_scatter_read: %s\n", e.what());
		return 2;
	}
}
