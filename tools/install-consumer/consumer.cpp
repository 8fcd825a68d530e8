// SPDX-License-Identifier: MIT
// Built against an installed libsvmbatch (tools/check-install.sh).
#include <svmbatch/all.hpp>
/* The umbrella's first name still works (a forwarding header). */
#include <svmbatch/svmbatch.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main()
{
	std::vector<char> mem(3 * 4096);
	std::vector<svmbatch::Buffer> b{{mem.data(), 100}, {mem.data() + 50, 100}};
	svmbatch::Context ctx(svmbatch::Mode::Userspace);
	svmbatch::Registration reg = ctx.register_buffers(b);

	std::string backends;

	for (const std::string &name : svmbatch::built_backends())
		backends += " " + name;
	std::printf("consumer (C++): %zu buffers -> %zu range(s); GPU backends:%s\n",
		    reg.buffers().size(), reg.ranges().size(),
		    backends.empty() ? " none" : backends.c_str());
	return reg.ranges().size() == 1 ? 0 : 1;
}
