// SPDX-License-Identifier: MIT
// process_pinned_bytes() and read_module_stats().
#include <svmbatch/diagnostics.hpp>
#include <svmbatch/detail/unique_fd.hpp>
#include <svmbatch/error.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <sstream>

namespace svmbatch {

namespace {

/* The whole of a small file (procfs, debugfs); Error with read's errno. */
std::string read_small_file(const std::string &path)
{
	detail::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
	std::string text;
	char chunk[4096];
	ssize_t n;

	if (!fd.valid())
		throw Error(errno, Step::Diagnostics, "cannot open " + path);
	while ((n = ::read(fd.get(), chunk, sizeof(chunk))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			throw Error(errno, Step::Diagnostics, "cannot read " + path);
		text.append(chunk, static_cast<std::size_t>(n));
	}
	return text;
}

} // namespace

std::uint64_t process_pinned_bytes()
{
	const char *path = "/proc/self/status";
	std::istringstream status(read_small_file(path));
	std::string line;

	while (std::getline(status, line)) {
		std::uint64_t kb;

		/* "VmPin:	     123 kB" */
		if (std::sscanf(line.c_str(), "VmPin: %" SCNu64 " kB", &kb) == 1)
			return kb * 1024;
	}
	throw Error(ENOENT, Step::Diagnostics, std::string(path) + " has no VmPin line");
}

std::map<std::string, std::uint64_t> read_module_stats(const std::string &debugfs_dir)
{
	std::istringstream text(read_small_file(debugfs_dir + "/stats"));
	std::map<std::string, std::uint64_t> stats;
	std::string line;

	while (std::getline(text, line)) {
		std::istringstream fields(line);
		std::string name, rest;
		std::uint64_t value;

		if (fields >> name >> value && !(fields >> rest))
			stats[name] = value;
	}
	return stats;
}

} // namespace svmbatch
