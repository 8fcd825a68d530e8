// SPDX-License-Identifier: MIT
// Timing for the C++ benchmarks (bench/lib_bench.cpp,
// bench/cuda_bench.cpp and `svmbatch bench`, cli/bench.cpp):
// one clock, the time of one call, the median of many.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <utility>
#include <vector>

namespace svmbatch::bench_stats {

using Clock = std::chrono::steady_clock;

/// Microseconds one call of fn takes.
template <typename Fn> double time_us(Fn &&fn)
{
	auto t0 = Clock::now();

	fn();
	return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

/// The median of t, which must not be empty; of an even count, the mean
/// of the two middle values.
inline double median(std::vector<double> t)
{
	const std::size_t mid = t.size() / 2;

	std::sort(t.begin(), t.end());
	return t.size() % 2 ? t[mid] : (t[mid - 1] + t[mid]) / 2;
}

/// The median time of reps calls of fn, in microseconds.
template <typename Fn> double median_us(int reps, Fn &&fn)
{
	std::vector<double> t;

	t.reserve(static_cast<std::size_t>(std::max(reps, 0)));
	for (int i = 0; i < reps; i++)
		t.push_back(time_us(fn));
	return median(std::move(t));
}

} // namespace svmbatch::bench_stats
