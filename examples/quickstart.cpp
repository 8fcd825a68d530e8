// SPDX-License-Identifier: MIT
// The smallest complete program (Documentation/quickstart.rst): three
// scattered heap buffers registered in one call through /dev/svmbatch.
// Built against the installed libsvmbatch-dev:
//   g++ -std=c++20 quickstart.cpp $(pkg-config --cflags --libs svmbatch)
#include <svmbatch/all.hpp>

#include <cstdio>
#include <memory>
#include <vector>

int main()
{
	std::vector<std::unique_ptr<char[]>> storage;
	std::vector<svmbatch::Buffer> buffers;
	for (std::size_t len : {4096, 100000, 1 << 20}) {
		storage.push_back(std::make_unique<char[]>(len));
		buffers.push_back({storage.back().get(), len});
	}
	try {
		// Mode::Kernel: fail rather than fall back to userspace mode.
		svmbatch::Context ctx(svmbatch::Mode::Kernel);
		svmbatch::Registration reg = ctx.register_buffers(buffers);
		std::printf(
			"quickstart: %zu buffers, %zu ranges, %llu pages pinned in kernel mode\n",
			reg.buffers().size(), reg.ranges().size(),
			static_cast<unsigned long long>(reg.pinned_pages()));
	} catch (const svmbatch::Error &e) {
		std::fprintf(stderr, "quickstart: %s\n", e.what());
		return 1;
	}
	return 0;
}
