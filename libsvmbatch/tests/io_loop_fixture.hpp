// SPDX-License-Identifier: MIT
// What the IoLoop tests with CPU producers share (io_loop_test.cpp,
// io_loop_write_test.cpp; io_ring_steps_test.cpp's warps take
// on_threads()): the fixture, the registered buffers, the loop's options,
// the producer threads, and the producers that race stop().
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include <svmbatch/all.hpp>

#include "test_util.hpp"

namespace svmbatch::test {

/// The size of the files the loops read and write.
inline constexpr std::size_t file_bytes = 4 << 20;

/// Caller buffers, registered together: buffer i has sizes[i] bytes and
/// access[i] (ReadWrite past the end of access), guard bytes either side
/// of it, and fill(i, data, size) sets its bytes before the registration.
struct LoopBuffers {
	static constexpr char guard_byte = '\x5a';
	using Fill = std::function<void(std::size_t i, char *data, std::size_t size)>;

	LoopBuffers(Context &ctx, const std::vector<std::size_t> &sizes,
		    const std::vector<Access> &access, std::size_t guard_bytes,
		    const Fill &fill = {})
		: guard(guard_bytes)
	{
		for (std::size_t i = 0; i < sizes.size(); i++) {
			mem.emplace_back(sizes[i] + 2 * guard, guard_byte);
			if (fill)
				fill(i, mem.back().data() + guard, sizes[i]);
			Access a = i < access.size() ? access[i] : Access::ReadWrite;
			list.push_back({mem.back().data() + guard, sizes[i], a});
		}
		reg.emplace(ctx.register_buffers(list));
	}
	char *data(std::size_t i) const { return static_cast<char *>(list[i].ptr); }
	/// No byte either side of buffer i changed.
	bool guards_intact(std::size_t i) const
	{
		const auto &m = mem[i];
		for (std::size_t k = 0; k < guard; k++)
			if (m[k] != guard_byte || m[m.size() - 1 - k] != guard_byte)
				return false;
		return true;
	}

	std::size_t guard;
	std::vector<std::vector<char>> mem;
	std::vector<Buffer> list;
	std::optional<Registration> reg;
};

/// The tests' loop: slots slots, threads I/O threads, batches of 16.
inline IoLoopOptions loop_options(unsigned slots, unsigned threads)
{
	IoLoopOptions o;
	o.slots = slots;
	o.io.threads = threads;
	o.max_batch = 16;
	return o;
}

/// fn(i) on n threads at once, i of n's type; returns once every one
/// ended.
template <typename N, typename Fn> void on_threads(N n, const Fn &fn)
{
	std::vector<std::thread> threads;
	threads.reserve(static_cast<std::size_t>(n));
	for (N i = 0; i < n; i++)
		threads.emplace_back(fn, i);
	for (auto &t : threads)
		t.join();
}

/// How the requests of producers that raced stop() completed.
struct StopRace {
	std::uint64_t published = 0, whole = 0, cancelled = 0, other = 0;
};

/// producers threads publish request(p, i) (a ticket, or < 0 once the loop
/// is closed) one at a time and wait for each, until the loop closes;
/// loop.stop() once it completed after requests and before_stop()
/// returned (it may wait for requests in flight).  A completion is whole
/// with status 0 and len bytes.
template <typename Request, typename BeforeStop = void (*)()>
StopRace stop_while_producing(
	IoLoop &loop, IoLoopClient &client, int producers, std::uint64_t after, std::uint64_t len,
	const Request &request, const BeforeStop &before_stop = [] {})
{
	std::atomic<std::uint64_t> published{0}, whole{0}, cancelled{0}, other{0};
	std::atomic<bool> go{false};

	auto produce = [&](int p) {
		while (!go.load())
			std::this_thread::yield();
		for (std::uint64_t i = 0;; i++) {
			std::int64_t t = request(p, i);
			if (t < 0)
				return;
			published++;
			IoCompletion c = client.wait(t);
			if (c.status == 0 && c.bytes == len)
				whole++;
			else if (c.status == -ECANCELED)
				cancelled++;
			else
				other++;
		}
	};
	std::vector<std::thread> threads;
	threads.reserve(static_cast<std::size_t>(producers));
	for (int p = 0; p < producers; p++)
		threads.emplace_back(produce, p);
	go = true;
	while (loop.stats().completed < after)
		std::this_thread::yield();
	before_stop();
	loop.stop(std::chrono::milliseconds(2000));
	for (auto &t : threads)
		t.join();
	return {published.load(), whole.load(), cancelled.load(), other.load()};
}

/// A context of the suite's mode.
class IoLoopFixture : public ::testing::Test {
protected:
	void SetUp() override { ctx_.emplace(make_context()); }
	std::optional<Context> ctx_;
};

} // namespace svmbatch::test
