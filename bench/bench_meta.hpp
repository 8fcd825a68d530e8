// SPDX-License-Identifier: MIT
// What a benchmark's JSON says about itself (bench/cuda_bench.cpp,
// pipeline_bench.cpp, gpu_io_bench.cpp): the benchmark, the commit it
// measured (--commit, which tools/device/run.sh passes), the date, the
// machine, the library's mode and the method, all written by the program
// that measured, never assembled by hand afterwards.
#pragma once

#include <sys/utsname.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>

#include "json_string.hpp"

namespace svmbatch::bench_meta {

/// The time now, UTC, as 2026-11-25T21:00:00Z.
inline std::string utc_now()
{
	std::time_t t = std::time(nullptr);
	std::tm tm{};
	char buf[32];

	::gmtime_r(&t, &tm);
	std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return buf;
}

/// MemTotal of /proc/meminfo in kB, 0 where it cannot be read.
inline unsigned long long mem_total_kb()
{
	std::ifstream f("/proc/meminfo");
	std::string line;
	unsigned long long kb = 0;

	while (std::getline(f, line))
		if (std::sscanf(line.c_str(), "MemTotal: %llu kB", &kb) == 1)
			break;
	return kb;
}

/// The members every result file starts with (no braces around them):
/// benchmark, commit, date, machine {gpu, cpus, memory_kB, kernel}, mode
/// and method (a JSON value: a string or an object).
inline std::string header(std::string_view benchmark, std::string_view commit, std::string_view gpu,
			  std::string_view mode, const std::string &method_json)
{
	struct utsname u {};
	::uname(&u);
	std::string s;
	s += "\"benchmark\": " + json::quote(benchmark) + ",\n";
	s += "  \"commit\": " + json::quote(commit) + ",\n";
	s += "  \"date\": " + json::quote(utc_now()) + ",\n";
	s += R"(  "machine": {"gpu": )" + json::quote(gpu) +
	     ", \"cpus\": " + std::to_string(std::thread::hardware_concurrency()) +
	     ", \"memory_kB\": " + std::to_string(mem_total_kb()) +
	     ", \"kernel\": " + json::quote(u.release) + "},\n";
	s += "  \"mode\": " + json::quote(mode) + ",\n";
	s += "  \"method\": " + method_json;
	return s;
}

} // namespace svmbatch::bench_meta
