// SPDX-License-Identifier: MIT
// svmbatch selftest: run the installed kselftests and sum up their TAP.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.hpp"

namespace svmbatch::cli {

namespace {

struct Counts {
	unsigned passed = 0, failed = 0, skipped = 0;
};

/// Runs one kselftest, echoing its output, counting its TAP results.
Counts run_one(const std::string &path)
{
	Counts c;
	std::string cmd = "'" + path + "' 2>&1";
	FILE *out = ::popen(cmd.c_str(), "r");
	char line[4096];

	if (!out) {
		c.failed = 1;
		return c;
	}
	while (std::fgets(line, sizeof(line), out)) {
		std::fputs(line, stdout);
		std::string l(line);
		bool ok = l.rfind("ok ", 0) == 0, not_ok = l.rfind("not ok ", 0) == 0;
		if (ok && l.find("# SKIP") != std::string::npos)
			c.skipped++;
		else if (ok)
			c.passed++;
		else if (not_ok)
			c.failed++;
	}
	int status = ::pclose(out);
	bool clean = WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 4);
	if (!clean && c.failed == 0)
		c.failed = 1; // died outside a test
	return c;
}

} // namespace

int selftest(const std::string &dir, const std::vector<std::string> &only, const Paths &paths)
{
	std::error_code ec;
	std::vector<std::string> tests;

	if (!std::filesystem::is_directory(dir, ec)) {
		std::fprintf(stderr, "svmbatch: no selftests in %s (package svmbatch-tools)\n",
			     dir.c_str());
		return exit_failed;
	}
	if (::access(paths.device.c_str(), F_OK) != 0) {
		std::fprintf(stderr,
			     "svmbatch: the module is not loaded (no %s): "
			     "modprobe svmbatch\n",
			     paths.device.c_str());
		return exit_no_module;
	}
	for (const auto &e : std::filesystem::directory_iterator(dir, ec)) {
		std::string name = e.path().filename();
		bool wanted = only.empty() ||
			      std::find(only.begin(), only.end(), name) != only.end();
		if (wanted && e.is_regular_file() && ::access(e.path().c_str(), X_OK) == 0)
			tests.push_back(e.path());
	}
	std::sort(tests.begin(), tests.end());
	for (const std::string &name : only)
		if (std::none_of(tests.begin(), tests.end(), [&](const std::string &t) {
			    return std::filesystem::path(t).filename() == name;
		    })) {
			std::fprintf(stderr, "svmbatch: no selftest %s in %s\n", name.c_str(),
				     dir.c_str());
			return exit_usage;
		}

	Counts total;
	std::vector<std::string> summary;
	for (const std::string &t : tests) {
		Counts c = run_one(t);
		total.passed += c.passed;
		total.failed += c.failed;
		total.skipped += c.skipped;
		char line[256];
		std::snprintf(line, sizeof(line), "%-4s %-28s %u passed, %u failed, %u skipped",
			      c.failed ? "FAIL" : "PASS",
			      std::filesystem::path(t).filename().c_str(), c.passed, c.failed,
			      c.skipped);
		summary.emplace_back(line);
	}
	for (const auto &l : summary)
		std::printf("%s\n", l.c_str());
	std::printf("selftest: %u passed, %u failed, %u skipped\n", total.passed, total.failed,
		    total.skipped);
	return total.failed ? exit_failed : exit_ok;
}

} // namespace svmbatch::cli
