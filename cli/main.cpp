// SPDX-License-Identifier: MIT
// svmbatch: inspect the module, benchmark, run the installed selftests.
//
//   svmbatch info [--json]         module, ABI, limits, features, library mode
//   svmbatch stat [--json]         global and per-process counters (debugfs)
//   svmbatch bench [--out DIR]     cost per range vs batch size, JSON + PNG
//   svmbatch selftest [TEST...]    the installed kselftests, TAP summary
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "cli.hpp"

namespace cli = svmbatch::cli;

namespace {

int run(int argc, char **argv)
{
	CLI::App app{"svmbatch: register scattered buffers for GPUs and io_uring in one step"};
	app.require_subcommand(1);
	app.set_version_flag("--version", SVMBATCH_VERSION);
	cli::Paths paths;
	if (const char *d = std::getenv("SVMBATCH_DEVICE"))
		paths.device = d;
	if (const char *d = std::getenv("SVMBATCH_DEBUGFS"))
		paths.debugfs = d;
	app.add_option("--device", paths.device, "the module's device node")->capture_default_str();
	app.add_option("--debugfs", paths.debugfs, "the module's debugfs directory")
		->capture_default_str();

	bool json = false;
	auto *info = app.add_subcommand("info", "module present? ABI version, limits, features, "
						"the mode the library would pick, with why, which "
						"GPU backends work here, and the memlock limit");
	info->add_flag("--json", json, "print JSON");

	auto *stat = app.add_subcommand("stat", "registrations, pinned bytes, stale count: "
						"global and per process (needs debugfs, root)");
	stat->add_flag("--json", json, "print JSON");

	cli::BenchOptions bopt;
	bool no_plot = false, quiet = false;
	auto *bench =
		app.add_subcommand("bench",
				   "cost per range against batch size (one "
				   "REGISTER of N ranges vs N single calls): JSON and a PNG plot");
	bench->add_option("--out", bopt.out_dir, "directory for bench-<date>.json and .png")
		->capture_default_str();
	bench->add_option("--sizes", bopt.batch_sizes, "batch sizes")
		->capture_default_str()
		->check(CLI::Range(1u, 16384u));
	bench->add_flag("--no-plot", no_plot, "no PNG (no gnuplot needed)");
	bench->add_flag("--quiet", quiet,
			"no progress bar (there is none unless stderr is a terminal)");

	std::string dir = SVMBATCH_SELFTEST_DIR;
	std::vector<std::string> only;
	auto *selftest = app.add_subcommand("selftest", "run the installed kselftests of the "
							"module (root) and print a summary");
	selftest->add_option("--dir", dir, "where the selftests are")->capture_default_str();
	selftest->add_option("tests", only, "run only these (names as in --dir)");

	try {
		app.parse(argc, argv);
	} catch (const CLI::ParseError &e) {
		int rc = app.exit(e);
		return rc == 0 ? cli::exit_ok : cli::exit_usage;
	}
	if (*info)
		return cli::info(paths, json);
	if (*stat)
		return cli::stat(paths, json);
	if (*bench) {
		bopt.plot = !no_plot;
		bopt.progress = !quiet && ::isatty(STDERR_FILENO);
		return cli::bench(bopt, paths);
	}
	return cli::selftest(dir, only, paths);
}

} // namespace

/* Whatever goes wrong, even building the parser, is a message and a status. */
int main(int argc, char **argv)
{
	try {
		return run(argc, argv);
	} catch (const std::exception &e) {
		std::fprintf(stderr, "svmbatch: %s\n", e.what());
	} catch (...) {
		std::fprintf(stderr, "svmbatch: unknown exception\n");
	}
	return cli::exit_failed;
}
