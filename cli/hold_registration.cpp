// SPDX-License-Identifier: MIT
// Test helper for cli/cli_guest_test.sh, not installed: registers
// COUNT separately mmapped buffers of BYTES each through the module, prints
// "ready", and holds the registration until stdin reaches end of file.
// With --stale it then unmaps one registered buffer first, so that the
// registration goes stale while `svmbatch stat` looks on.
//
//   hold_registration COUNT BYTES [--stale]
#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <svmbatch/all.hpp>

namespace {

struct Unmap {
	std::size_t len;
	void operator()(void *p) const { ::munmap(p, len); }
};
using Mapping = std::unique_ptr<void, Unmap>;

Mapping map_anonymous(std::size_t len)
{
	void *p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		throw std::system_error(errno, std::generic_category(), "mmap");
	std::memset(p, 0x5a, len);
	return Mapping(p, Unmap{len});
}

void wait_for_eof()
{
	char buf[64];

	while (std::fread(buf, 1, sizeof(buf), stdin) > 0)
		;
}

} // namespace

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4 || (argc == 4 && std::string(argv[3]) != "--stale")) {
		std::fprintf(stderr, "usage: %s COUNT BYTES [--stale]\n", argv[0]);
		return 2;
	}
	const auto count = std::strtoul(argv[1], nullptr, 0);
	const auto bytes = std::strtoul(argv[2], nullptr, 0);
	const bool stale = argc == 4;

	try {
		std::vector<Mapping> maps;
		std::vector<svmbatch::Buffer> buffers;
		for (unsigned long i = 0; i < count; i++) {
			maps.push_back(map_anonymous(bytes));
			buffers.push_back({maps.back().get(), bytes});
		}
		svmbatch::Context ctx(svmbatch::Mode::Kernel);
		svmbatch::Registration reg = ctx.register_buffers(buffers);
		std::printf("ready\n");
		std::fflush(stdout);
		if (stale) {
			maps.front().reset();
			if (!reg.stale()) {
				std::fprintf(stderr, "hold_registration: not stale after munmap\n");
				return 1;
			}
			std::printf("stale\n");
			std::fflush(stdout);
		}
		wait_for_eof();
	} catch (const std::exception &e) {
		std::fprintf(stderr, "hold_registration: %s\n", e.what());
		return 1;
	}
	return 0;
}
