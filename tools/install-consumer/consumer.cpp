// SPDX-License-Identifier: MIT
// Built against an installed libsvmbatch (tools/check-install.sh).
#include <svmbatch/svmbatch.hpp>

#include <cstdio>
#include <vector>

int main()
{
	std::vector<char> mem(3 * 4096);
	std::vector<svmbatch::Buffer> b{{mem.data(), 100}, {mem.data() + 50, 100}};
	svmbatch::Context ctx(svmbatch::Mode::Userspace);
	svmbatch::Registration reg = ctx.register_buffers(b);

	std::printf("consumer (C++): %zu buffers -> %zu range(s)\n",
		    reg.buffers().size(), reg.ranges().size());
	return reg.ranges().size() == 1 ? 0 : 1;
}
