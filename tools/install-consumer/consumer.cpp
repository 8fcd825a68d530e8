// SPDX-License-Identifier: MIT
// Built against an installed libsvmbatch and against its build tree
// (tools/check-install.sh): what a user of the Reader writes.  It makes
// its own ring with liburing (the Reader takes an io_uring&), so it links
// only where the package puts liburing on the consumer's link line.
// Registers 100 buffers, reads a file it wrote into them with the Reader
// and checks every byte.  Userspace mode: no module, no GPU.
#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>
/* The umbrella's first name still works (a forwarding header). */
#include <svmbatch/svmbatch.hpp>

namespace {

constexpr std::size_t nr_buffers = 100;
/* Not a page multiple: buffers are registered at byte granularity. */
constexpr std::size_t buffer_bytes = 1000;

unsigned char pattern(std::size_t off)
{
	return static_cast<unsigned char>(off * 7 + off / 251);
}

/* A file of nr_buffers * buffer_bytes pattern bytes, already unlinked. */
int make_file()
{
	const char *dir = std::getenv("TMPDIR");
	std::string path = std::string(dir && *dir ? dir : "/tmp") + "/svmbatch-consumer-XXXXXX";
	std::vector<unsigned char> data(nr_buffers * buffer_bytes);
	int fd = mkstemp(path.data());

	if (fd < 0) {
		std::perror(path.c_str());
		return -1;
	}
	unlink(path.c_str());
	for (std::size_t i = 0; i < data.size(); i++)
		data[i] = pattern(i);
	if (write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
		std::perror("write");
		close(fd);
		return -1;
	}
	return fd;
}

/* The Reader reads the file into the 100 buffers: true when every byte is right. */
bool read_into_buffers(svmbatch::Context &ctx, io_uring &ring, int fd)
{
	std::vector<std::vector<unsigned char>> mem(nr_buffers,
						    std::vector<unsigned char>(buffer_bytes));
	std::vector<svmbatch::Buffer> b;
	std::vector<svmbatch::ReadRequest> req;

	for (std::size_t i = 0; i < nr_buffers; i++) {
		b.push_back({mem[i].data(), buffer_bytes});
		req.push_back({.fd = fd,
			       .file_offset = i * buffer_bytes,
			       .length = buffer_bytes,
			       .buffer = i,
			       .buffer_offset = 0});
	}
	svmbatch::Registration reg = ctx.register_buffers(b);
	svmbatch::FixedBuffers fixed = svmbatch::register_fixed(reg, ring);
	svmbatch::Reader reader(ring, fixed);
	std::vector<svmbatch::ReadResult> res = reader.read(req);
	std::size_t bad = 0;

	for (std::size_t i = 0; i < nr_buffers; i++) {
		if (res[i].err || res[i].bytes != buffer_bytes) {
			std::fprintf(stderr, "consumer (C++): read %zu: %s, %zu bytes\n", i,
				     std::strerror(res[i].err), res[i].bytes);
			return false;
		}
		for (std::size_t j = 0; j < buffer_bytes; j++)
			bad += mem[i][j] != pattern(i * buffer_bytes + j);
	}
	std::printf("consumer (C++): Reader read %zu bytes into %zu buffers, %zu wrong\n",
		    nr_buffers * buffer_bytes, reg.buffers().size(), bad);
	return bad == 0;
}

int run()
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
	if (reg.ranges().size() != 1)
		return 1;

	io_uring ring;
	int fd = make_file();
	int ret = fd < 0 ? -EBADF : io_uring_queue_init(8, &ring, 0);
	bool ok = false;

	if (ret < 0) {
		std::fprintf(stderr, "consumer (C++): io_uring_queue_init: %s\n",
			     std::strerror(-ret));
	} else {
		try {
			ok = read_into_buffers(ctx, ring, fd);
		} catch (const std::exception &e) {
			std::fprintf(stderr, "consumer (C++): %s\n", e.what());
		}
		io_uring_queue_exit(&ring);
	}
	if (fd >= 0)
		close(fd);
	return ok ? 0 : 1;
}

} // namespace

int main()
{
	try {
		return run();
	} catch (const std::exception &e) {
		std::fprintf(stderr, "consumer (C++): %s\n", e.what());
		return 1;
	}
}
