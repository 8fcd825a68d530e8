// SPDX-License-Identifier: MIT
// svmbatch stat: the module's debugfs counters, global and per process.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <svmbatch/diagnostics.hpp>
#include <svmbatch/error.hpp>

#include "cli.hpp"
#include "json_string.hpp"

namespace svmbatch::cli {

namespace {

using Counters = std::map<std::string, std::uint64_t>;

struct Process {
	std::string command;
	unsigned files = 0;
	unsigned long long registrations = 0, pinned_pages = 0, failed = 0;
};
using Processes = std::map<long, Process>;

std::string command_of(long pid)
{
	std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
	std::string comm;

	std::getline(f, comm);
	return comm.empty() ? "?" : comm;
}

std::string human(unsigned long long bytes)
{
	const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	auto v = static_cast<double>(bytes);
	int u = 0;
	char buf[32];

	while (v >= 1024 && u < 4)
		v /= 1024, u++;
	std::snprintf(buf, sizeof(buf), u ? "%.1f %s" : "%.0f %s", v, unit[u]);
	return buf;
}

bool exists(const std::string &path)
{
	struct stat st {};
	return ::stat(path.c_str(), &st) == 0;
}

/// The module's debugfs clients file (one line per open file, after a
/// header), summed per process.
Processes read_processes(const std::string &debugfs)
{
	Processes procs;
	std::ifstream clients(debugfs + "/clients");
	std::string line;

	std::getline(clients, line); // header
	while (std::getline(clients, line)) {
		std::istringstream in(line);
		unsigned long long id, regs, pages, failed;
		long tgid;
		if (!(in >> id >> tgid >> regs >> pages >> failed))
			continue;
		Process &p = procs[tgid];
		p.files++;
		p.registrations += regs;
		p.pinned_pages += pages;
		p.failed += failed;
	}
	for (auto &[pid, p] : procs)
		p.command = command_of(pid);
	return procs;
}

void print_json(const Counters &g, const Processes &procs, unsigned long long page)
{
	std::string out = "{\"global\": {";
	bool first = true;
	for (const auto &[k, v] : g) {
		out += (first ? "" : ", ") + json::quote(k) + ": " + std::to_string(v);
		first = false;
	}
	out += "}, \"page_size\": " + std::to_string(page) + ", \"processes\": [";
	first = true;
	for (const auto &[pid, p] : procs) {
		out += std::string(first ? "" : ", ") + "{\"pid\": " + std::to_string(pid) +
		       ", \"command\": " + json::quote(p.command) +
		       ", \"files\": " + std::to_string(p.files) +
		       ", \"registrations\": " + std::to_string(p.registrations) +
		       ", \"pinned_bytes\": " + std::to_string(p.pinned_pages * page) +
		       ", \"failed\": " + std::to_string(p.failed) + "}";
		first = false;
	}
	std::printf("%s]}\n", out.c_str());
}

void print_text(const Counters &g, const Processes &procs, unsigned long long page)
{
	/* A counter this module version does not have reads as 0. */
	auto c = [&g](const char *name) -> unsigned long long {
		auto it = g.find(name);
		return it == g.end() ? 0 : it->second;
	};

	std::printf("registrations:  %llu live, %llu since load, %llu failed\n", c("registrations"),
		    c("registered_total"), c("failed_registrations"));
	std::printf("pinned:         %llu pages (%s)\n", c("pinned_pages"),
		    human(c("pinned_pages") * page).c_str());
	std::printf("metadata:       %s\n", human(c("meta_bytes")).c_str());
	std::printf("stale:          %llu registrations went stale since load\n", c("stale_total"));
	std::printf("pin retries:    %llu pin attempts repeated (an invalidation raced them)\n",
		    c("pin_retries"));
	std::printf("dma-buf:        %llu exported, %llu attachments\n", c("exports"),
		    c("dmabuf_attachments"));
	std::printf("open files:     %llu\n", c("contexts"));
	std::printf("\n%-8s %-16s %5s %13s %12s %7s\n", "PID", "COMMAND", "FILES", "REGISTRATIONS",
		    "PINNED", "FAILED");
	for (const auto &[pid, p] : procs)
		std::printf("%-8ld %-16s %5u %13llu %12s %7llu\n", pid, p.command.c_str(), p.files,
			    p.registrations, human(p.pinned_pages * page).c_str(), p.failed);
}

} // namespace

int stat(const Paths &paths, bool json)
{
	Counters g;

	try {
		g = read_module_stats(paths.debugfs);
	} catch (const Error &e) {
		const std::string stats_path = paths.debugfs + "/stats";

		if (!exists(paths.device) && !exists(stats_path)) {
			std::fprintf(stderr, "svmbatch: the module is not loaded (no %s)\n",
				     paths.device.c_str());
			return exit_no_module;
		}
		std::fprintf(stderr, "svmbatch: cannot read %s: %s (%s)\n", stats_path.c_str(),
			     std::strerror(e.err()),
			     e.err() == EACCES ? "run as root" :
						 "is debugfs mounted on /sys/kernel/debug?");
		return exit_failed;
	}
	const Processes procs = read_processes(paths.debugfs);
	const auto page = static_cast<unsigned long long>(::sysconf(_SC_PAGESIZE));

	if (json)
		print_json(g, procs, page);
	else
		print_text(g, procs, page);
	return exit_ok;
}

} // namespace svmbatch::cli
