// SPDX-License-Identifier: MIT
// The svmbatch command: one function per subcommand.
#pragma once

#include <string>
#include <vector>

namespace svmbatch::cli {

/// Exit codes a shell user can test.
enum Exit : int {
	exit_ok = 0,
	exit_failed = 1, ///< a test, a benchmark or an operation failed
	exit_usage = 2, ///< bad command line
	exit_no_module = 3, ///< the module is not loaded (stat, selftest)
};

/// Where the module shows itself; options and SVMBATCH_* variables move
/// them (tests point them at fixtures).
struct Paths {
	std::string device = "/dev/svmbatch";
	std::string debugfs = "/sys/kernel/debug/svmbatch";
};

int info(const Paths &paths, bool json);
int stat(const Paths &paths, bool json);

struct BenchOptions {
	std::string out_dir = ".";
	std::vector<unsigned> batch_sizes{1, 4, 16, 64, 256, 1024, 4096};
	bool plot = true;
	bool progress = true;
};
int bench(const BenchOptions &options, const Paths &paths);

int selftest(const std::string &dir, const std::vector<std::string> &only, const Paths &paths);

} // namespace svmbatch::cli
