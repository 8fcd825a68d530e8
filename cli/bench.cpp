// SPDX-License-Identifier: MIT
// svmbatch bench: what one registration of N ranges costs per range,
// against N registrations of one range, for growing N.  Writes
// bench-<date>.json and, with gnuplot, bench-<date>.png.
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include <svmbatch/all.hpp>

#include "bench_stats.hpp"
#include "cli.hpp"
#include "json_string.hpp"

namespace svmbatch::cli {

namespace {

using bench_stats::Clock;

struct Point {
	unsigned n = 0;
	int reps = 0;
	double batch_us = 0, single_us = 0; // medians, the whole N
};

/// Median of timings of fn, and their number: at least 5, up to 51 runs or ~0.2 s.
template <typename Fn> std::pair<double, int> median_us(Fn fn)
{
	std::vector<double> t;
	auto start = Clock::now();

	while (t.size() < 5 ||
	       (t.size() < 51 && Clock::now() - start < std::chrono::milliseconds(200)))
		t.push_back(bench_stats::time_us(fn));
	return {bench_stats::median(t), static_cast<int>(t.size())};
}

void progress(unsigned done, unsigned total, unsigned n)
{
	const int width = 30;
	int filled = static_cast<int>(width * done / total);

	std::fprintf(stderr, "\r[%s%s] %u/%u  N=%-6u", std::string(filled, '#').c_str(),
		     std::string(width - filled, ' ').c_str(), done, total, n);
	if (done == total)
		std::fprintf(stderr, "\n");
}

std::string today()
{
	char buf[16];
	std::time_t now = std::time(nullptr);
	std::tm tm{};

	::gmtime_r(&now, &tm);
	std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
	return buf;
}

void plot(const std::string &dat, const std::string &png, const std::string &title)
{
	FILE *gp = ::popen("gnuplot 2>&1", "w");

	if (!gp)
		throw std::system_error(errno, std::generic_category(), "gnuplot");
	std::fprintf(gp,
		     "set terminal pngcairo size 900,560\n"
		     "set output '%s'\n"
		     "set title '%s'\n"
		     "set logscale xy\n"
		     "set xlabel 'ranges per batch (N)'\n"
		     "set ylabel 'microseconds per range'\n"
		     "set grid\n"
		     "set key top right\n"
		     "plot '%s' using 1:2 with linespoints title 'one registration of N ranges', "
		     "'' using 1:3 with linespoints title 'N registrations of one range'\n",
		     png.c_str(), title.c_str(), dat.c_str());
	if (::pclose(gp) != 0)
		throw std::runtime_error(
			"gnuplot failed (apt-get install gnuplot-nox, or --no-plot)");
}

using Region = std::unique_ptr<void, std::function<void(void *)>>;

/// One page-sized buffer every other page for n buffers, a PROT_NONE page
/// after each: n ranges that never merge, in n separate VMAs.
Region map_scattered_pages(unsigned n, std::size_t page)
{
	std::size_t len = 2 * page * n;
	void *m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (m == MAP_FAILED)
		throw std::system_error(errno, std::generic_category(), "mmap");
	Region region(m, [len](void *p) { ::munmap(p, len); });
	for (unsigned i = 0; i < n; i++)
		::mprotect(static_cast<char *>(m) + (2 * i + 1) * page, page, PROT_NONE);
	return region;
}

/// For each batch size N: one registration of the first N pages, against
/// N registrations of one page each.
std::vector<Point> measure(Context &ctx, const BenchOptions &opt, void *base, std::size_t page)
{
	std::vector<Point> points;
	unsigned done = 0;
	const auto total = static_cast<unsigned>(opt.batch_sizes.size());

	for (unsigned n : opt.batch_sizes) {
		if (opt.progress)
			progress(done, total, n);
		std::vector<Buffer> bufs;
		for (std::size_t i = 0; i < n; i++)
			bufs.push_back({static_cast<char *>(base) + 2 * i * page, page});
		Point p{n};
		std::tie(p.batch_us, p.reps) = median_us([&] { (void)ctx.register_buffers(bufs); });
		p.single_us = median_us([&] {
				      for (const Buffer &buf : bufs)
					      (void)ctx.register_buffers(
						      std::span<const Buffer>(&buf, 1));
			      }).first;
		points.push_back(p);
		done++;
	}
	if (opt.progress)
		progress(done, done, points.back().n);
	return points;
}

/// What a registration does in the mode the figures were taken in.  In
/// userspace mode nothing is pinned at registration (a GPU backend or
/// io_uring pins later), so the figures, and the ratio between them, are
/// the cost of the library's own work per call, not of pinning.
const char *what_is_measured(Mode mode)
{
	if (mode == Mode::Kernel)
		return "kernel mode: the module's REGISTER, which validates, accounts and pins "
		       "the pages";
	return "userspace mode: the library's bookkeeping per call (planning the ranges, "
	       "checking their mappings, faulting them in), not pinning: nothing is pinned "
	       "until a GPU backend or io_uring takes the buffers";
}

/// The table on stdout, base.json (with where it ran) and base.dat for gnuplot.
void write_results(const std::vector<Point> &points, const Context &ctx, const utsname &u,
		   const std::string &base)
{
	const bool pins = ctx.mode() == Mode::Kernel;
	std::printf("mode:     %s (%s)\n", mode_name(ctx.mode()), ctx.info().reason.c_str());
	std::printf("measures: %s\n", what_is_measured(ctx.mode()));
	std::ofstream json(base + ".json");
	json << R"({"what": "svmbatch bench: 4 KiB ranges, one registration of N vs N of one", )"
	     << "\"mode\": " << json::quote(mode_name(ctx.mode()))
	     << ", \"reason\": " << json::quote(ctx.info().reason)
	     << ", \"pins\": " << (pins ? "true" : "false")
	     << ", \"measures\": " << json::quote(what_is_measured(ctx.mode()))
	     << ", \"kernel\": " << json::quote(u.release)
	     << ", \"machine\": " << json::quote(u.machine) << ", \"points\": [";
	std::ofstream dat(base + ".dat");
	std::printf("%8s %14s %14s %8s\n", "N", "batch us/range", "single us/range", "ratio");
	for (std::size_t i = 0; i < points.size(); i++) {
		const Point &p = points[i];
		double b = p.batch_us / p.n, s = p.single_us / p.n;
		std::printf("%8u %14.3f %14.3f %8.2f\n", p.n, b, s, s / b);
		json << (i ? ", " : "") << "{\"n\": " << p.n << ", \"reps\": " << p.reps
		     << ", \"batch_us\": " << p.batch_us << ", \"single_us\": " << p.single_us
		     << ", \"batch_us_per_range\": " << b << ", \"single_us_per_range\": " << s
		     << "}";
		dat << p.n << ' ' << b << ' ' << s << '\n';
	}
	json << "]}\n";
	json.close();
	dat.close();
	if (!json || !dat)
		throw std::runtime_error("cannot write " + base + ".json");
	std::printf("wrote %s.json\n", base.c_str());
}

} // namespace

int bench(const BenchOptions &opt, const Paths &paths)
{
	Context ctx(Mode::Auto, paths.device);
	const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
	unsigned max_n = *std::max_element(opt.batch_sizes.begin(), opt.batch_sizes.end());
	Region region = map_scattered_pages(max_n, page);
	std::vector<Point> points = measure(ctx, opt, region.get(), page);

	struct utsname u {};
	::uname(&u);
	std::string base = opt.out_dir + "/bench-" + today();
	write_results(points, ctx, u, base);
	if (opt.plot) {
		plot(base + ".dat", base + ".png",
		     std::string("svmbatch, ") + mode_name(ctx.mode()) + " mode" +
			     (ctx.mode() == Mode::Kernel ? "" : " (bookkeeping, no pinning)") +
			     ", " + u.release);
		std::printf("wrote %s.png\n", base.c_str());
	}
	return exit_ok;
}

} // namespace svmbatch::cli
