// SPDX-License-Identifier: MIT
#include "test_util.hpp"

#include <fcntl.h>
#include <glob.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

namespace svmbatch::test {

Mode mode_under_test()
{
	const char *m = std::getenv("SVMBATCH_TEST_MODE");

	if (m && std::string_view(m) == "kernel")
		return Mode::Kernel;
	return Mode::Userspace;
}

Context make_context()
{
	return Context(mode_under_test());
}

bool kernel_available()
{
	return ::access(Context::default_device, F_OK) == 0;
}

std::uint64_t settled_pinned_bytes(std::uint64_t want, int timeout_ms)
{
	return pinned_bytes_when([want](std::uint64_t b) { return b == want; }, timeout_ms);
}

std::uint64_t pinned_bytes_at_most(std::uint64_t want, int timeout_ms)
{
	return pinned_bytes_when([want](std::uint64_t b) { return b <= want; }, timeout_ms);
}

std::uint64_t quiet_pinned_bytes(int quiet_ms, int timeout_ms)
{
	std::optional<std::uint64_t> last; /* none before the first look */
	int still = 0;

	return pinned_bytes_when(
		[&](std::uint64_t now) {
			still = last && now == *last ? still + 10 : 0;
			last = now;
			return still >= quiet_ms;
		},
		timeout_ms);
}

Ring::Ring(unsigned entries)
{
	int ret = io_uring_queue_init(entries, &ring_, 0);

	if (ret < 0)
		throw std::runtime_error(std::string("io_uring_queue_init: ") +
					 std::strerror(-ret));
}

Ring::~Ring()
{
	io_uring_queue_exit(&ring_);
}

std::string writeback_dir()
{
	const char *dir = std::getenv("SVMBATCH_WRITEBACK_DIR");

	return dir ? dir : "";
}

ScratchFile::ScratchFile(std::size_t len, const std::string &dir)
{
	const char *tmp = std::getenv("TMPDIR");
	std::string tmpl = (!dir.empty() ? dir :
			    tmp && *tmp	 ? tmp :
					   "/tmp") +
			   std::string("/svmbatch-test-XXXXXX");
	std::vector<char> name(tmpl.begin(), tmpl.end());

	name.push_back('\0');
	fd_ = ::mkstemp(name.data());
	if (fd_ < 0)
		throw std::runtime_error("mkstemp failed");
	path_ = name.data();

	std::vector<std::uint8_t> chunk(1 << 20);
	for (std::size_t off = 0; off < len; off += chunk.size()) {
		std::size_t n = std::min(chunk.size(), len - off);

		for (std::size_t i = 0; i < n; i++)
			chunk[i] = pattern_byte(off + i);
		if (::pwrite(fd_, chunk.data(), n, static_cast<off_t>(off)) !=
		    static_cast<ssize_t>(n))
			throw std::runtime_error("pwrite failed");
	}
}

ScratchFile::~ScratchFile()
{
	if (fd_ >= 0)
		::close(fd_);
	if (!path_.empty())
		::unlink(path_.c_str());
}

std::string expect_list()
{
	const char *e = std::getenv("SVMBATCH_EXPECT");

	return e ? e : "";
}

bool expected_here(const std::string &feature)
{
	std::stringstream list(expect_list());
	std::string item;

	while (std::getline(list, item, ','))
		if (item == feature)
			return true;
	return false;
}

bool has_capability(int cap)
{
	__user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
	__user_cap_data_struct data[2]{};

	if (::syscall(SYS_capget, &hdr, data))
		return false;
	return data[cap / 32].effective & (1u << (cap % 32));
}

namespace {

/// The directories an ld.so.conf file lists, following its includes.
void ld_conf_dirs(const std::string &file, std::vector<std::string> &dirs, int depth = 0)
{
	std::ifstream in(file);
	std::string line;

	while (depth < 4 && std::getline(in, line)) {
		line = line.substr(0, line.find('#'));
		std::stringstream words(line);
		std::string word, pattern;
		if (!(words >> word))
			continue;
		if (word != "include") {
			dirs.push_back(word);
			continue;
		}
		while (words >> pattern) {
			if (pattern[0] != '/')
				pattern.insert(0, "/etc/");
			::glob_t g{};
			if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
				for (std::size_t i = 0; i < g.gl_pathc; i++)
					ld_conf_dirs(g.gl_pathv[i], dirs, depth + 1);
			::globfree(&g);
		}
	}
}

} // namespace

std::string find_library(const std::string &soname, std::string *probed)
{
	std::vector<std::string> dirs;
	if (const char *env = std::getenv("LD_LIBRARY_PATH")) {
		std::stringstream list(env);
		std::string d;
		while (std::getline(list, d, ':'))
			if (!d.empty())
				dirs.push_back(d);
	}
	ld_conf_dirs("/etc/ld.so.conf", dirs);
#if defined(__x86_64__)
	for (const char *d : {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"})
		dirs.emplace_back(d);
#elif defined(__aarch64__)
	for (const char *d : {"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu"})
		dirs.emplace_back(d);
#endif
	for (const char *d : {"/lib64", "/usr/lib64", "/lib", "/usr/lib"})
		dirs.emplace_back(d);

	probed->clear();
	for (const std::string &d : dirs) {
		std::string path = d;
		path += "/";
		path += soname;
		if (::access(path.c_str(), F_OK) == 0)
			return path;
		*probed += (probed->empty() ? "" : ", ") + d;
	}
	return "";
}

std::size_t open_fds()
{
	std::size_t n = 0;
	for ([[maybe_unused]] const auto &e : std::filesystem::directory_iterator("/proc/self/fd"))
		n++;
	return n;
}

std::vector<int> thread_ids_named(const std::string &name)
{
	std::vector<int> ids;
	for (const auto &e : std::filesystem::directory_iterator("/proc/self/task")) {
		std::ifstream comm(e.path() / "comm");
		std::string s;
		// A thread that ended since the listing has no comm to read.
		if (std::getline(comm, s) && s == name)
			ids.push_back(std::stoi(e.path().filename().string()));
	}
	return ids;
}

std::size_t threads_named(const std::string &name)
{
	return thread_ids_named(name).size();
}

int times_running(int tid, int samples, std::chrono::microseconds every)
{
	const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
	int running = 0;
	for (int i = 0; i < samples; i++) {
		std::ifstream f(path);
		std::string stat;
		std::getline(f, stat);
		// The state follows the name, which is in parentheses.
		const std::size_t close = stat.rfind(')');
		if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'R')
			running++;
		std::this_thread::sleep_for(every);
	}
	return running;
}

bool drop_cap_ipc_lock()
{
	__user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
	__user_cap_data_struct data[2]{};

	if (::syscall(SYS_capget, &hdr, data))
		return false;
	data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	data[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
	return ::syscall(SYS_capset, &hdr, data) == 0;
}

} // namespace svmbatch::test
