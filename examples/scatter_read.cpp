// SPDX-License-Identifier: MIT
// scatter_read: the job svmbatch exists for.  Allocate many scattered
// buffers, register them in one call, hand them to io_uring as fixed
// buffers, read a file into all of them with READ_FIXED (by one thread, then
// by every core), verify every byte, and see a batch with one bad buffer
// fail as a whole.
//
//   scatter_read [--mode auto|kernel|userspace] [--buffers N] [--dir DIR]
//
// With SVMBATCH_TAP=1 (the guest runner) it also prints a one-test TAP
// stream.  Exit status: 0 when every byte matched and the bad batch failed
// as it should.
#include <liburing.h>
#include <fcntl.h>
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
#include <string_view>
#include <vector>

#include <svmbatch/diagnostics.hpp>
#include <svmbatch/all.hpp>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
	svmbatch::Mode mode = svmbatch::Mode::Auto;
	std::size_t buffers = 2000;
	std::string dir = "/tmp";
};

/// Heap memory from operator new[], which takes it from malloc: the kind
/// of scattered buffers callers hand the library.
using HeapBytes = std::unique_ptr<char[]>;

/// The caller's buffers: where each one lives and which bytes of the file
/// it receives (buffer i gets file[offsets[i] .. offsets[i] + len)).
struct ScatteredBuffers {
	std::vector<HeapBytes> mem, spacers;
	std::vector<svmbatch::Buffer> list;
	std::vector<std::size_t> offsets;
	std::size_t total = 0;
};

double ms_since(Clock::time_point t0)
{
	return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

/// This process's VmPin in kB: what the kernel charges for pinned pages.
long long pinned_kb()
{
	return static_cast<long long>(svmbatch::process_pinned_bytes() / 1024);
}

/// The byte the file holds at offset off.
std::uint8_t pattern(std::uint64_t off)
{
	return static_cast<std::uint8_t>((off * 2654435761u) >> 13);
}

std::string human(double bytes)
{
	const char *unit[] = {"B", "KiB", "MiB", "GiB"};
	int u = 0;
	char buf[32];

	while (bytes >= 1024 && u < 3) {
		bytes /= 1024;
		u++;
	}
	std::snprintf(buf, sizeof(buf), "%.1f %s", bytes, unit[u]);
	return buf;
}

[[noreturn]] void usage(const char *argv0)
{
	std::fprintf(stderr, "usage: %s [--mode auto|kernel|userspace] [--buffers N] [--dir DIR]\n",
		     argv0);
	std::exit(2);
}

Options parse(int argc, char **argv)
{
	Options o;

	for (int i = 1; i < argc; i++) {
		std::string_view a = argv[i];

		if (i + 1 >= argc)
			usage(argv[0]);
		std::string_view v = argv[++i];
		if (a == "--mode" && v == "auto")
			o.mode = svmbatch::Mode::Auto;
		else if (a == "--mode" && v == "kernel")
			o.mode = svmbatch::Mode::Kernel;
		else if (a == "--mode" && v == "userspace")
			o.mode = svmbatch::Mode::Userspace;
		else if (a == "--buffers")
			o.buffers = std::strtoul(argv[i], nullptr, 10);
		else if (a == "--dir")
			o.dir = v;
		else
			usage(argv[0]);
	}
	if (!o.buffers || o.buffers > 16384)
		usage(argv[0]);
	return o;
}

/*
 * Step 1: n malloc'd buffers of 4 KiB .. 1 MiB (log-normal around 64 KiB),
 * with a small allocation between each two so that they do not touch.
 */
ScatteredBuffers allocate(std::size_t n)
{
	std::mt19937 rng(2026);
	std::lognormal_distribution<double> size_dist(std::log(64.0 * 1024), 1.2);
	ScatteredBuffers b;

	for (std::size_t i = 0; i < n; i++) {
		auto len = static_cast<std::size_t>(std::clamp(size_dist(rng), 4096.0, 1048576.0));

		b.mem.push_back(std::make_unique_for_overwrite<char[]>(len));
		b.spacers.push_back(std::make_unique_for_overwrite<char[]>(64 + rng() % 4096));
		b.list.push_back({b.mem.back().get(), len});
		b.offsets.push_back(b.total);
		b.total += len;
	}
	return b;
}

void print_setup(const svmbatch::Context &ctx, const ScatteredBuffers &b)
{
	const svmbatch::Info &info = ctx.info();

	std::printf("svmbatch scatter_read\n");
	std::printf("  mode               %s (%s)\n", svmbatch::mode_name(ctx.mode()),
		    info.reason.c_str());
	if (ctx.mode() == svmbatch::Mode::Kernel)
		std::printf("  module             ABI %u, max %u ranges, features 0x%llx\n",
			    info.abi_version, info.max_ranges,
			    static_cast<unsigned long long>(info.features));
	std::printf("  buffers            %zu malloc'd, 4 KiB .. 1 MiB, %s in all\n", b.list.size(),
		    human(static_cast<double>(b.total)).c_str());
}

/*
 * Step 2: register every buffer in one call, after registering them one
 * call each for comparison (first, so that both see the same faulted-in
 * memory).
 */
svmbatch::Registration register_buffers(svmbatch::Context &ctx, const ScatteredBuffers &b)
{
	auto t0 = Clock::now();
	for (const svmbatch::Buffer &x : b.list)
		(void)ctx.register_buffers(std::span(&x, 1));
	double single_ms = ms_since(t0);

	long long pin_before = pinned_kb();
	t0 = Clock::now();
	svmbatch::Registration reg = ctx.register_buffers(b.list);
	double batch_ms = ms_since(t0);

	std::printf("  ranges             %zu buffers -> %zu ranges after merging\n", b.list.size(),
		    reg.ranges().size());
	std::printf("  pages              %llu covered, %llu pinned by the module, VmPin +%lld kB\n",
		    static_cast<unsigned long long>(reg.pages()),
		    static_cast<unsigned long long>(reg.pinned_pages()), pinned_kb() - pin_before);
	std::printf("  register           %8.2f ms in one call\n", batch_ms);
	std::printf("                     %8.2f ms in %zu calls (%.1fx)\n", single_ms,
		    b.list.size(), single_ms / batch_ms);
	return reg;
}

/* A file of len pattern bytes, unlinked at once (the fd keeps it). */
int write_pattern_file(const std::string &dir, std::size_t len)
{
	std::string tmpl = dir + "/scatter_read-XXXXXX";
	std::vector<char> name(tmpl.begin(), tmpl.end());
	name.push_back('\0');
	int fd = ::mkstemp(name.data());

	if (fd < 0)
		return -1;
	::unlink(name.data());
	std::vector<std::uint8_t> chunk(1 << 20);
	for (std::size_t off = 0; off < len; off += chunk.size()) {
		std::size_t n = std::min(chunk.size(), len - off);

		for (std::size_t k = 0; k < n; k++)
			chunk[k] = pattern(off + k);
		if (::pwrite(fd, chunk.data(), n, static_cast<off_t>(off)) !=
		    static_cast<ssize_t>(n)) {
			::close(fd);
			return -1;
		}
	}
	return fd;
}

const char *parallelism_name(const svmbatch::Reader &r)
{
	if (r.threads() == 1)
		return "the caller's ring";
	if (r.parallelism() == svmbatch::Parallelism::AsyncWorkers)
		return "one ring, io-wq workers";
	return r.buffer_sharing() == svmbatch::BufferSharing::Cloned ?
		       "a ring per thread, cloned buffer table" :
		       "a ring per thread, buffers registered per ring";
}

/* Every byte of every buffer is the file's byte at its offset. */
bool verify(const ScatteredBuffers &b)
{
	std::size_t bad = 0;

	for (std::size_t i = 0; i < b.list.size(); i++) {
		const auto *p = static_cast<const std::uint8_t *>(b.list[i].ptr);

		for (std::size_t k = 0; k < b.list[i].len; k++)
			bad += p[k] != pattern(b.offsets[i] + k);
	}
	return !bad;
}

/*
 * Read file[offsets[i]..] into every buffer with READ_FIXED (the Reader:
 * bounded depth, short reads continued), after zeroing them, then check
 * every byte.  Returns the milliseconds, or a negative number on failure.
 */
double read_and_verify(svmbatch::Reader &reader, int fd, const ScatteredBuffers &b)
{
	std::vector<svmbatch::ReadRequest> rq;
	for (std::size_t i = 0; i < b.list.size(); i++) {
		std::memset(b.list[i].ptr, 0, b.list[i].len);
		rq.push_back({fd, b.offsets[i], b.list[i].len, i, 0});
	}
	auto t0 = Clock::now();
	std::vector<svmbatch::ReadResult> res = reader.read(rq);
	double ms = ms_since(t0);
	for (std::size_t i = 0; i < res.size(); i++) {
		if (res[i].err) {
			std::fprintf(stderr, "READ_FIXED into buffer %zu: %s\n", i,
				     std::strerror(res[i].err));
			return -1;
		}
	}
	return verify(b) ? ms : -1;
}

/*
 * Step 3: the same buffers as io_uring fixed buffers, a file of pattern
 * bytes, and the file read into all of them: by one thread, then by every
 * core (a read from the page cache is a memcpy done by whoever submits it).
 * True when every byte arrived both times.
 */
bool read_file(const svmbatch::Registration &reg, const ScatteredBuffers &b, const std::string &dir)
{
	io_uring ring{};
	if (int ret = io_uring_queue_init(128, &ring, 0); ret < 0) {
		std::fprintf(stderr, "io_uring_queue_init: %s\n", std::strerror(-ret));
		return false;
	}
	std::unique_ptr<io_uring, void (*)(io_uring *)> ring_owner(&ring, io_uring_queue_exit);

	long long pin_before = pinned_kb();
	auto t0 = Clock::now();
	svmbatch::FixedBuffers fixed = register_fixed(reg, ring);
	double fixed_ms = ms_since(t0);
	/* io_uring pins (and charges) the pages again, in either mode. */
	std::printf("  io_uring           %8.2f ms for %u fixed buffers, VmPin +%lld kB\n",
		    fixed_ms, fixed.nr_slots(), pinned_kb() - pin_before);

	int fd = write_pattern_file(dir, b.total);
	if (fd < 0) {
		std::fprintf(stderr, "cannot write a %s file in %s\n",
			     human(static_cast<double>(b.total)).c_str(), dir.c_str());
		return false;
	}
	std::unique_ptr<int, void (*)(int *)> fd_owner(&fd, [](int *f) { ::close(*f); });
	svmbatch::ReaderOptions one;
	one.threads = 1;
	svmbatch::Reader single(ring, fixed, one);
	svmbatch::Reader parallel(ring, fixed);
	double one_ms = read_and_verify(single, fd, b);
	double all_ms = one_ms < 0 ? -1 : read_and_verify(parallel, fd, b);
	if (one_ms < 0 || all_ms < 0) {
		std::printf("  READ_FIXED         FAILED (an error, or a byte that differs)\n");
		return false;
	}
	const auto mb_s = [&](double ms) { return static_cast<double>(b.total) / ms / 1e3; };
	std::printf("  READ_FIXED         %8.2f ms, %6.0f MB/s, 1 thread (page cache)\n", one_ms,
		    mb_s(one_ms));
	std::printf("                     %8.2f ms, %6.0f MB/s, %u threads: %s (%.1fx)\n", all_ms,
		    mb_s(all_ms), parallel.threads(), parallelism_name(parallel), one_ms / all_ms);
	std::printf("  verify             %zu bytes, after each read: OK\n", b.total);
	return true;
}

/*
 * Step 5, all or nothing: one unmapped buffer fails the whole batch with
 * EFAULT at its index, and nothing stays pinned.
 */
bool bad_batch_fails(svmbatch::Context &ctx, const ScatteredBuffers &b)
{
	const std::size_t bad = b.list.size() / 2;
	std::vector<svmbatch::Buffer> broken = b.list;
	// NOLINTNEXTLINE(performance-no-int-to-ptr): an unmapped page on purpose
	broken[bad] = {reinterpret_cast<void *>(4096), 8};
	long long pin_before = pinned_kb();

	try {
		(void)ctx.register_buffers(broken);
	} catch (const svmbatch::Error &e) {
		long long pin_change = pinned_kb() - pin_before;

		std::printf("  bad batch          %s at buffer %zu, VmPin %+lld kB\n",
			    std::strerror(e.err()), e.buffer_index(), pin_change);
		return e.err() == EFAULT && e.buffer_index() == bad && pin_change == 0;
	}
	std::printf("  bad batch          registered?! (expected EFAULT)\n");
	return false;
}

int run(const Options &o)
{
	svmbatch::Context ctx(o.mode);
	ScatteredBuffers buffers = allocate(o.buffers);

	print_setup(ctx, buffers);
	svmbatch::Registration reg = register_buffers(ctx, buffers);
	bool ok = read_file(reg, buffers, o.dir);
	reg.reset();
	ok = bad_batch_fails(ctx, buffers) && ok;
	return ok ? 0 : 1;
}

} // namespace

int main(int argc, char **argv)
{
	Options o = parse(argc, argv);
	const char *tap = std::getenv("SVMBATCH_TAP");
	bool tap_out = tap && std::string_view(tap) == "1";
	int status;

	if (tap_out)
		std::printf("TAP version 13\n1..1\n");
	try {
		status = run(o);
	} catch (const std::exception &e) {
		std::fprintf(stderr, "scatter_read: %s\n", e.what());
		status = 1;
	}
	if (tap_out)
		std::printf("%s 1 scatter_read\n", status ? "not ok" : "ok");
	return status;
}
