// SPDX-License-Identifier: MIT
// Library benchmark (make bench-lib), not a test.  For N scattered buffers
// of one size, median over 21 to 201 repetitions:
//   fixed      Registration::register_fixed + destruction (io_uring table)
//   raw        io_uring_register_buffers + io_uring_unregister_buffers of
//              the same iovecs (the registration's merged ranges)
//   kernel     Context(Kernel).register_buffers + destruction (where
//              /dev/svmbatch exists)
//   userspace  Context(Userspace).register_buffers + destruction
// Prints a table, then JSON between SVMBATCH-BENCH-JSON-BEGIN/END lines, then
// a one-test TAP stream for the guest runner.
#include <liburing.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <svmbatch/all.hpp>

#include "anon_memory.hpp"
#include "bench_stats.hpp"

namespace {

using svmbatch::bench::AnonMemory;
using svmbatch::bench_stats::median;
using svmbatch::bench_stats::median_us;
using svmbatch::bench_stats::time_us;

/*
 * At least min_reps repetitions; more (up to max_reps) where one is short,
 * so that a few scheduler hiccups on a 2-core host cannot move the median.
 */
constexpr int min_reps = 21, max_reps = 201;
constexpr double budget_us = 300000;
/* The largest configuration: io_uring pins all of it, in a 3 GiB guest. */
constexpr std::size_t max_bytes = std::size_t{512} << 20;

struct Config {
	std::size_t n;
	std::size_t size;
	const char *name;
};

struct Result {
	Config c;
	std::size_t ranges = 0;
	int reps = 0;
	double fixed_us = 0, raw_us = 0, kernel_us = -1, userspace_us = 0;
	bool skipped = false;
};

template <typename A, typename B> std::pair<double, double> paired_median_us(int reps, A a, B b)
{
	std::vector<double> ta, tb;

	for (int i = 0; i < reps; i++) {
		if (i % 2) {
			ta.push_back(time_us(a));
			tb.push_back(time_us(b));
		} else {
			tb.push_back(time_us(b));
			ta.push_back(time_us(a));
		}
	}
	return {median(ta), median(tb)};
}

void check(int ret, const char *what)
{
	if (ret < 0)
		throw svmbatch::Error(-ret, svmbatch::Step::IoUringRegister, what);
}

Result bench(const Config &c, std::optional<svmbatch::Context> &kernel,
	     svmbatch::Context &userspace)
{
	Result r{c};

	if (c.n * c.size > max_bytes) {
		r.skipped = true;
		return r;
	}
	/* Every other slot: N separate buffers, N separate ranges. */
	AnonMemory mem(2 * c.n * c.size);
	std::vector<svmbatch::Buffer> b;
	for (std::size_t i = 0; i < c.n; i++)
		b.push_back({mem.get() + 2 * i * c.size, c.size});

	svmbatch::Registration reg = userspace.register_buffers(b);
	std::vector<iovec> iov;
	for (const svmbatch::KernelRange &k : reg.ranges()) {
		// NOLINTNEXTLINE(performance-no-int-to-ptr): the range's address, for io_uring
		iov.push_back({reinterpret_cast<void *>(k.addr), k.len});
	}
	r.ranges = iov.size();

	io_uring ring{};
	check(io_uring_queue_init(8, &ring, 0), "io_uring_queue_init");
	auto fixed = [&] { (void)register_fixed(reg, ring); };
	auto raw = [&] {
		check(io_uring_register_buffers(&ring, iov.data(),
						static_cast<unsigned>(iov.size())),
		      "io_uring_register_buffers");
		check(io_uring_unregister_buffers(&ring), "io_uring_unregister_buffers");
	};
	/* One untimed warm-up of each sizes the repetition count. */
	double once = time_us(fixed) + time_us(raw);
	r.reps =
		static_cast<int>(std::clamp(budget_us / once, double{min_reps}, double{max_reps})) |
		1;
	/* Interleaved, alternating which goes first: drift hits both alike. */
	std::tie(r.fixed_us, r.raw_us) = paired_median_us(r.reps, fixed, raw);
	io_uring_queue_exit(&ring);

	r.userspace_us = median_us(r.reps, [&] { (void)userspace.register_buffers(b); });
	if (kernel)
		r.kernel_us = median_us(r.reps, [&] { (void)kernel->register_buffers(b); });
	return r;
}

/* One row of the table on stdout (TAP comments). */
void print_row(const Result &r, bool kernel)
{
	char k_us[16] = "absent", k_u[16] = "-";

	if (kernel) {
		std::snprintf(k_us, sizeof(k_us), "%.1f", r.kernel_us);
		std::snprintf(k_u, sizeof(k_u), "%.2f", r.kernel_us / r.userspace_us);
	}
	std::printf("# %-6s %6zu %7zu %11.1f %11.1f %7.3f %11s %11.1f %7s\n", r.c.name, r.c.n,
		    r.ranges, r.fixed_us, r.raw_us, r.fixed_us / r.raw_us, k_us, r.userspace_us,
		    k_u);
	std::fflush(stdout);
}

/* The results as JSON, between the lines run-lib-bench.sh looks for. */
void print_json(const std::vector<Result> &results, bool kernel, const char *release)
{
	std::printf("SVMBATCH-BENCH-JSON-BEGIN\n{\n  \"benchmark\": \"lib\",\n");
	std::printf("  \"kernel\": \"%s\",\n  \"module\": %s,\n", release,
		    kernel ? "true" : "false");
	std::printf("  \"reps\": \"%d to %d, each result's own\",\n"
		    "  \"statistic\": \"median\",\n  \"results\": [\n",
		    min_reps, max_reps);
	for (std::size_t i = 0; i < results.size(); i++) {
		const Result &r = results[i];
		const char *sep = i + 1 < results.size() ? "," : "";

		if (r.skipped) {
			std::printf(
				"    {\"size\": \"%s\", \"n\": %zu, \"skipped\": \"over %zu MiB\"}%s\n",
				r.c.name, r.c.n, max_bytes >> 20, sep);
			continue;
		}
		std::printf("    {\"size\": \"%s\", \"n\": %zu, \"ranges\": %zu, \"reps\": %d, "
			    "\"library_fixed_us\": %.3f, \"raw_io_uring_us\": %.3f, "
			    "\"library_over_raw\": %.4f, ",
			    r.c.name, r.c.n, r.ranges, r.reps, r.fixed_us, r.raw_us,
			    r.fixed_us / r.raw_us);
		if (kernel)
			std::printf(R"("kernel_register_us": %.3f, "kernel_over_userspace": %.4f, )",
				    r.kernel_us, r.kernel_us / r.userspace_us);
		else
			std::printf(R"("kernel_register_us": "absent", )");
		std::printf("\"userspace_register_us\": %.3f}%s\n", r.userspace_us, sep);
	}
	std::printf("  ]\n}\nSVMBATCH-BENCH-JSON-END\n");
}

} // namespace

int main()
{
	const Config configs[] = {
		{16, 4096, "4KiB"},	{256, 4096, "4KiB"},	 {2000, 4096, "4KiB"},
		{16384, 4096, "4KiB"},	{16, 65536, "64KiB"},	 {256, 65536, "64KiB"},
		{2000, 65536, "64KiB"}, {16384, 65536, "64KiB"},
	};
	std::optional<svmbatch::Context> kernel;
	svmbatch::Context userspace(svmbatch::Mode::Userspace);
	std::vector<Result> results;
	utsname u{};

	std::printf("TAP version 13\n1..1\n");
	::uname(&u);
	try {
		if (::access(svmbatch::Context::default_device, F_OK) == 0)
			kernel.emplace(svmbatch::Mode::Kernel);
		else
			std::printf("# kernel mode absent: no %s\n",
				    svmbatch::Context::default_device);
		std::printf("# %-6s %6s %7s %11s %11s %7s %11s %11s %7s\n", "size", "N", "ranges",
			    "fixed_us", "raw_us", "fix/raw", "kernel_us", "user_us", "k/u");
		for (const Config &c : configs) {
			results.push_back(bench(c, kernel, userspace));
			if (!results.back().skipped)
				print_row(results.back(), kernel.has_value());
		}
	} catch (const std::exception &e) {
		std::printf("not ok 1 lib_bench # %s\n", e.what());
		return 1;
	}
	print_json(results, kernel.has_value(), u.release);
	std::printf("ok 1 lib_bench\n");
	return 0;
}
