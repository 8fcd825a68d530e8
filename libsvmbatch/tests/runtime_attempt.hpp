// SPDX-License-Identifier: MIT
// Opening a backend on a real GPU runtime that may have no device here
// (hip_runtime_test.cpp, ze_runtime_test.cpp): the backend or the Error it
// threw, and what an installed runtime without a device must do.
#pragma once

#include <gtest/gtest.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "test_util.hpp"

namespace svmbatch::test {

/// The backend on the real runtime, or the Error it threw.
template <typename Backend> struct Attempt {
	std::unique_ptr<Backend> backend;
	std::optional<Error> error;
};

/// Backend with its default options.
template <typename Backend> Attempt<Backend> try_open()
{
	Attempt<Backend> a;
	try {
		a.backend = std::make_unique<Backend>();
	} catch (const Error &e) {
		a.error = e;
	}
	return a;
}

/// e, the first try's Error on an installed runtime (installed: its
/// file), is that of a runtime without a device: it loaded (e does not
/// say no_library), ENODEV at gpu-open carrying the runtime's status; a
/// second try fails the same way, and neither left a file descriptor or
/// a pinned page (fds and pinned: counted before the first).
template <typename Backend>
void expect_no_device(const Error &e, const std::string &installed, const char *no_library,
		      std::size_t fds, std::uint64_t pinned)
{
	ASSERT_EQ(std::string(e.what()).find(no_library), std::string::npos)
		<< installed << " is installed but did not load: " << e.what();
	EXPECT_EQ(e.err(), ENODEV) << e.what();
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_NE(e.driver_status(), 0) << "the runtime's status is carried";

	Attempt<Backend> again = try_open<Backend>();
	ASSERT_TRUE(again.error);
	EXPECT_EQ(again.error->driver_status(), e.driver_status());
	EXPECT_EQ(open_fds(), fds) << "the runtime left a file descriptor open";
	EXPECT_EQ(process_pinned_bytes(), pinned);
}

/// On a device: 64 scattered buffers registered and mapped through b, each
/// at an address, known to the runtime as host memory while mapped (in
/// kernel mode only where the backend registers the buffers themselves:
/// known_in_kernel_mode), plain memory again once the mapping ends.
template <typename Backend>
void expect_maps_scattered_buffers(Backend &b, bool known_in_kernel_mode)
{
	using Memory = decltype(b.classify(nullptr));
	Context ctx = make_context();
	std::vector<std::vector<char>> mem(64);
	std::vector<Buffer> bufs;
	for (std::size_t i = 0; i < mem.size(); i++) {
		mem[i].resize(1000 + 4099 * i);
		bufs.push_back({mem[i].data(), mem[i].size()});
	}
	Registration reg = ctx.register_buffers(bufs);
	const bool known = reg.mode() == Mode::Userspace || known_in_kernel_mode;
	{
		GpuMapping m = b.map(reg);
		ASSERT_EQ(m.size(), bufs.size());
		for (std::size_t i = 0; i < bufs.size(); i++) {
			EXPECT_NE(m.address(i), 0u) << "buffer " << i;
			if (known) {
				EXPECT_EQ(b.classify(bufs[i].ptr), Memory::Host) << "buffer " << i;
			}
		}
	}
	for (std::size_t i = 0; i < bufs.size(); i++)
		EXPECT_EQ(b.classify(bufs[i].ptr), Memory::Unknown) << "buffer " << i;
}

} // namespace svmbatch::test
