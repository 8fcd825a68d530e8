// SPDX-License-Identifier: MIT
// ze_scatter_read: the scatter-read loop of a Level Zero program (Intel
// GPUs).  Scattered malloc'd host buffers are registered in one call, read
// into from a file with io_uring READ_FIXED through the Reader, checked
// byte for byte on the CPU, and handed to a Level Zero device with
// ZeBackend: in kernel mode the registration's dma-buf is imported once
// into the device, in userspace mode each merged range is imported as a
// host pointer.  The device then proves it reaches every buffer: its copy
// engine copies each one, through the mapping's device pointer, into
// memory of its own, and the CPU compares what came back.
//
//   ze_scatter_read [--mode auto|kernel|userspace] [--buffers N] [--dir DIR]
//
// Prints TAP: register, read, bytes, gpu-copy.  Without an Intel GPU and
// its Level Zero driver the last is a skip that says what the loader
// answered.  Exit status 0 when nothing failed.
#include <level_zero/ze_api.h>

#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
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

/// The file: pattern bytes, as many as the buffers hold, unlinked at once;
/// closed on destruction.
class PatternFile {
public:
	PatternFile(const std::string &dir, std::uint64_t total)
	{
		std::string path = dir + "/svmbatch-ze-scatter-XXXXXX";
		fd_ = ::mkstemp(path.data());
		if (fd_ < 0)
			throw std::system_error(errno, std::generic_category(), path);
		::unlink(path.c_str());
		std::vector<std::uint8_t> bytes(total);
		for (std::uint64_t k = 0; k < total; k++)
			bytes[k] = pattern(k);
		if (::pwrite(fd_, bytes.data(), total, 0) != static_cast<ssize_t>(total)) {
			int err = errno;
			::close(fd_);
			throw std::system_error(err, std::generic_category(), "pwrite");
		}
	}
	PatternFile(const PatternFile &) = delete;
	PatternFile &operator=(const PatternFile &) = delete;
	PatternFile(PatternFile &&) = delete;
	PatternFile &operator=(PatternFile &&) = delete;
	~PatternFile() { ::close(fd_); }
	int fd() const { return fd_; }

private:
	int fd_ = -1;
};

/// An io_uring instance, torn down on destruction.
struct Ring {
	Ring()
	{
		if (int ret = io_uring_queue_init(64, &ring, 0); ret < 0)
			throw std::system_error(-ret, std::generic_category(),
						"io_uring_queue_init");
	}
	Ring(const Ring &) = delete;
	Ring &operator=(const Ring &) = delete;
	Ring(Ring &&) = delete;
	Ring &operator=(Ring &&) = delete;
	~Ring() { io_uring_queue_exit(&ring); }

	io_uring ring{};
};

/// Buffers whose bytes are not the file's at their offsets; bytes[i] is
/// where buffer i's copy lies (the buffer itself for the CPU's check).
std::size_t bad_buffers(const HostBuffers &b, const std::vector<const std::uint8_t *> &bytes)
{
	std::size_t bad = 0;
	for (std::size_t i = 0; i < b.list.size(); i++) {
		for (std::size_t k = 0; k < b.list[i].len; k++) {
			if (bytes[i][k] != pattern(b.file_off[i] + k)) {
				bad++;
				break;
			}
		}
	}
	return bad;
}

/// "zeSomething: 0x78000001": the call that failed, for the TAP line.
void check(ze_result_t r, const char *what)
{
	if (r != ZE_RESULT_SUCCESS) {
		char code[16];
		std::snprintf(code, sizeof(code), "0x%x", static_cast<unsigned>(r));
		throw std::runtime_error(std::string(what) + ": " + code);
	}
}

/// The device's copy engine copies every buffer, through its mapped
/// device pointer, into one host allocation of the backend's context;
/// the CPU then compares.  Synchronous immediate command list: each copy
/// is done when the call returns.
std::string gpu_copy(const svmbatch::ZeBackend &ze, const svmbatch::GpuMapping &m,
		     const HostBuffers &b, bool &ok)
{
	auto ctx = static_cast<ze_context_handle_t>(ze.context_handle());
	auto dev = static_cast<ze_device_handle_t>(ze.device_handle());
	ze_command_queue_desc_t qdesc{};
	qdesc.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC;
	qdesc.mode = ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS;
	ze_command_list_handle_t list = nullptr;
	check(zeCommandListCreateImmediate(ctx, dev, &qdesc, &list),
	      "zeCommandListCreateImmediate");
	ze_host_mem_alloc_desc_t hdesc{};
	hdesc.stype = ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC;
	void *copy = nullptr;
	ze_result_t r = zeMemAllocHost(ctx, &hdesc, b.total, 64, &copy);
	if (r != ZE_RESULT_SUCCESS) {
		zeCommandListDestroy(list);
		check(r, "zeMemAllocHost");
	}
	std::vector<const std::uint8_t *> copies;
	for (std::size_t i = 0; i < b.list.size() && r == ZE_RESULT_SUCCESS; i++) {
		auto *dst = static_cast<std::uint8_t *>(copy) + b.file_off[i];
		copies.push_back(dst);
		r = zeCommandListAppendMemoryCopy(list, dst, m.device_pointer<const void>(i),
						  b.list[i].len, nullptr, 0, nullptr);
	}
	std::size_t bad = r == ZE_RESULT_SUCCESS ? bad_buffers(b, copies) : b.list.size();
	zeMemFree(ctx, copy);
	zeCommandListDestroy(list);
	check(r, "zeCommandListAppendMemoryCopy");
	ok = bad == 0;
	return std::to_string(b.list.size() - bad) + " of " + std::to_string(b.list.size()) +
	       " buffers copied by " + ze.device_name() + " from their " + m.backend() +
	       " device pointers hold the file's bytes";
}

int run(svmbatch::Mode mode, const HostBuffers &b, const std::string &dir)
{
	Tap tap;
	std::printf("TAP version 13\n1..4\n");
	PatternFile file(dir, b.total);
	svmbatch::Context ctx(mode);
	Ring ring;

	std::optional<svmbatch::Registration> reg;
	std::optional<svmbatch::FixedBuffers> fixed;
	try {
		reg.emplace(ctx.register_buffers(b.list));
		fixed.emplace(register_fixed(*reg, ring.ring));
		tap.result(true, "register",
			   std::to_string(b.list.size()) + " buffers, " +
				   std::to_string(reg->ranges().size()) + " ranges of " +
				   std::to_string(reg->pages()) + " pages, one call (" +
				   (reg->mode() == svmbatch::Mode::Kernel ? "kernel" :
									    "userspace") +
				   " mode)");
	} catch (const svmbatch::Error &e) {
		tap.result(false, "register", e.what());
		for (const char *name : {"read", "bytes", "gpu-copy"})
			tap.result(false, name, "not run: the registration failed");
		return 1;
	}
	std::size_t failed = 0;
	{
		svmbatch::Reader reader(ring.ring, *fixed);
		std::vector<svmbatch::ReadRequest> rq;
		for (std::size_t i = 0; i < b.list.size(); i++)
			rq.push_back({file.fd(), b.file_off[i], b.list[i].len, i, 0});
		for (const auto &r : reader.read(rq))
			failed += r.err != 0;
	}
	tap.result(failed == 0, "read",
		   std::to_string(b.list.size() - failed) + " READ_FIXED reads of " +
			   std::to_string(b.total) + " bytes completed");
	std::vector<const std::uint8_t *> own;
	for (const svmbatch::Buffer &buf : b.list)
		own.push_back(static_cast<const std::uint8_t *>(buf.ptr));
	std::size_t bad = bad_buffers(b, own);
	tap.result(bad == 0, "bytes",
		   std::to_string(b.list.size() - bad) + " of " + std::to_string(b.list.size()) +
			   " buffers hold the file's bytes");

	std::optional<svmbatch::ZeBackend> ze;
	try {
		ze.emplace();
	} catch (const svmbatch::Error &e) {
		if (e.err() != ENODEV)
			throw;
		tap.skip("gpu-copy", std::string("no Level Zero device: ") + e.what());
	}
	if (ze) {
		try {
			svmbatch::GpuMapping m = ze->map(*reg);
			bool ok = false;
			std::string detail = gpu_copy(*ze, m, b, ok);
			tap.result(ok, "gpu-copy", detail);
		} catch (const std::exception &e) {
			tap.result(false, "gpu-copy", e.what());
		}
	}
	std::printf("# ze_scatter_read: %d failed\n", tap.failed);
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
	if (mode != "auto" && mode != "kernel" && mode != "userspace") {
		std::fprintf(stderr, "usage: ze_scatter_read [--mode auto|kernel|userspace] "
				     "[--buffers N] [--dir DIR]\n");
		return 2;
	}
	const svmbatch::Mode m = mode == "kernel"    ? svmbatch::Mode::Kernel :
				 mode == "userspace" ? svmbatch::Mode::Userspace :
						       svmbatch::Mode::Auto;
	try {
		HostBuffers b = allocate(nbuf);
		std::printf("# ze_scatter_read: %zu buffers, %s mode asked\n", nbuf, mode.c_str());
		return run(m, b, dir);
	} catch (const std::exception &e) {
		std::printf("not ok - ze_scatter_read: %s\n", e.what());
		return 2;
	}
}
