// SPDX-License-Identifier: MIT
// What the ExtentReader tests share (extent_reader_test.cpp,
// extent_reader_device_test.cpp): destinations with guards, random
// extents, small options.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "test_util.hpp"

namespace svmbatch::test {

inline constexpr std::size_t kib = 1024;
inline constexpr std::uint8_t guard_byte = 0xa5;

/// Destinations with a guard of guard bytes before each and after the last.
class Destinations {
public:
	static constexpr std::size_t guard = 64;
	/// In memory of their own.
	explicit Destinations(const std::vector<std::size_t> &lengths) : Destinations(lengths, {})
	{}
	/// At the start of memory (the fake CUDA's device memory, told once:
	/// it keeps what it was told until its reset, so memory freed and
	/// told again would overlap), or where memory is empty, in their own.
	Destinations(const std::vector<std::size_t> &lengths, std::span<std::uint8_t> memory)
	{
		std::size_t at = guard;
		for (std::size_t len : lengths) {
			at_.push_back(at);
			len_.push_back(len);
			at += len + guard;
		}
		if (memory.empty()) {
			own_.resize(at);
			memory = own_;
		}
		if (memory.size() < at)
			throw std::length_error("Destinations: " + std::to_string(at) +
						" bytes, in memory of " +
						std::to_string(memory.size()));
		mem_ = memory.first(at);
		reset();
	}
	Destinations(const Destinations &) = delete;
	Destinations &operator=(const Destinations &) = delete;
	Destinations(Destinations &&) = delete;
	Destinations &operator=(Destinations &&) = delete;
	~Destinations() = default;
	std::uint8_t *data(std::size_t i) { return mem_.data() + at_[i]; }
	std::uint64_t address(std::size_t i) { return reinterpret_cast<std::uintptr_t>(data(i)); }
	/// Destination i holds file bytes [off, off + n) and nothing else
	/// changed: its other bytes and every guard are still the guard byte.
	::testing::AssertionResult holds(std::size_t i, std::uint64_t off, std::size_t n)
	{
		const std::uint8_t *p = data(i);
		for (std::size_t k = 0; k < n; k++)
			if (p[k] != pattern_byte(off + k))
				return ::testing::AssertionFailure()
				       << "destination " << i << " byte " << k << " of " << len_[i]
				       << " is " << int{p[k]} << ", not "
				       << int{pattern_byte(off + k)};
		for (std::size_t k = n; k < len_[i]; k++)
			if (p[k] != guard_byte)
				return ::testing::AssertionFailure()
				       << "destination " << i << " byte " << k
				       << " was written past what arrived";
		return ::testing::AssertionSuccess();
	}
	::testing::AssertionResult guards_intact() const
	{
		std::size_t from = 0;
		for (std::size_t i = 0; i <= at_.size(); i++) {
			const std::size_t to = i < at_.size() ? at_[i] : mem_.size();
			for (std::size_t k = from; k < to; k++)
				if (mem_[k] != guard_byte)
					return ::testing::AssertionFailure()
					       << "guard byte " << k - from
					       << " before destination " << i << " was written";
			if (i < at_.size())
				from = at_[i] + len_[i];
		}
		return ::testing::AssertionSuccess();
	}
	void reset() { std::fill(mem_.begin(), mem_.end(), guard_byte); }
	/// Point each extent's dst at its destination.
	void place(std::vector<Extent> &extents)
	{
		for (std::size_t i = 0; i < extents.size(); i++)
			extents[i].dst = extents[i].length != 0 ? address(i) : 0;
	}
	/// All of it, guards included (what the fake CUDA is told is device memory).
	std::uint8_t *memory() { return mem_.data(); }
	std::size_t memory_bytes() const { return mem_.size(); }

private:
	std::vector<std::uint8_t> own_;
	std::span<std::uint8_t> mem_;
	std::vector<std::size_t> at_;
	std::vector<std::size_t> len_;
};

/// Chunks of chunk bytes, chunks of them, small reads and queue.
inline ExtentReaderOptions small_options(std::size_t chunk, std::size_t chunks,
					 unsigned threads = 2)
{
	ExtentReaderOptions o;
	o.chunk_bytes = chunk;
	o.staging_bytes = chunk * chunks;
	o.io.threads = threads;
	o.io.queue_depth = 8;
	o.io.max_io_bytes = 16 * kib;
	return o;
}

/// Random extents of files: sizes from a byte to several chunks, often
/// following the last one that is not empty in its file (a run), else
/// anywhere in any file, in no file order; now and then an empty one,
/// anywhere (no destination: dst stays 0).
inline std::vector<Extent> random_extents(std::mt19937_64 &rng, std::size_t n,
					  const std::vector<const ScratchFile *> &files,
					  const std::vector<std::size_t> &sizes, std::size_t chunk)
{
	std::vector<Extent> e;
	std::size_t last = 0; // the last extent that is not empty, and its file
	std::size_t last_file = files.size();
	for (std::size_t i = 0; i < n; i++) {
		std::size_t len = 0;
		switch (rng() % 16) {
		case 0:
			e.push_back(
				{files[rng() % files.size()]->fd(), rng() % (1ULL << 40), 0, 0});
			continue;
		case 1:
		case 2:
		case 3:
			len = 1 + rng() % 100;
			break;
		case 4:
		case 5:
		case 6:
		case 7:
			len = 1 + rng() % chunk;
			break;
		default:
			len = 1 + rng() % (4 * chunk);
		}
		std::size_t f = rng() % files.size();
		std::uint64_t off = 0;
		if (last_file < files.size() && rng() % 2 == 0 &&
		    e[last].file_offset + e[last].length + len <= sizes[last_file]) {
			f = last_file;
			off = e[last].file_offset + e[last].length;
		} else {
			len = std::min(len, sizes[f]);
			off = rng() % (sizes[f] - len + 1);
		}
		e.push_back({files[f]->fd(), off, len, 0});
		last = e.size() - 1;
		last_file = f;
	}
	return e;
}

/// The lengths of extents, for Destinations.
inline std::vector<std::size_t> lengths_of(const std::vector<Extent> &extents)
{
	std::vector<std::size_t> lengths;
	lengths.reserve(extents.size());
	for (const Extent &e : extents)
		lengths.push_back(e.length);
	return lengths;
}

} // namespace svmbatch::test
