// SPDX-License-Identifier: MIT
#include "test_util.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace svmbatch::test {

Mode mode_under_test()
{
	const char *m = std::getenv("SVMBATCH_TEST_MODE");

	if (m && std::string_view(m) == "kernel")
		return Mode::Kernel;
	return Mode::Userspace;
}

Context make_context()
{
	return Context(mode_under_test());
}

bool kernel_available()
{
	return ::access(Context::default_device, F_OK) == 0;
}

std::uint64_t settled_pinned_bytes(std::uint64_t want, int timeout_ms)
{
	return pinned_bytes_when([want](std::uint64_t b) { return b == want; }, timeout_ms);
}

std::uint64_t pinned_bytes_at_most(std::uint64_t want, int timeout_ms)
{
	return pinned_bytes_when([want](std::uint64_t b) { return b <= want; }, timeout_ms);
}

std::uint64_t quiet_pinned_bytes(int quiet_ms, int timeout_ms)
{
	std::optional<std::uint64_t> last; /* none before the first look */
	int still = 0;

	return pinned_bytes_when(
		[&](std::uint64_t now) {
			still = last && now == *last ? still + 10 : 0;
			last = now;
			return still >= quiet_ms;
		},
		timeout_ms);
}

Ring::Ring(unsigned entries)
{
	int ret = io_uring_queue_init(entries, &ring_, 0);

	if (ret < 0)
		throw std::runtime_error(std::string("io_uring_queue_init: ") +
					 std::strerror(-ret));
}

Ring::~Ring()
{
	io_uring_queue_exit(&ring_);
}

ScratchFile::ScratchFile(std::size_t len)
{
	const char *dir = std::getenv("TMPDIR");
	std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/svmbatch-test-XXXXXX";
	std::vector<char> name(tmpl.begin(), tmpl.end());

	name.push_back('\0');
	fd_ = ::mkstemp(name.data());
	if (fd_ < 0)
		throw std::runtime_error("mkstemp failed");
	path_ = name.data();

	std::vector<std::uint8_t> chunk(1 << 20);
	for (std::size_t off = 0; off < len; off += chunk.size()) {
		std::size_t n = std::min(chunk.size(), len - off);

		for (std::size_t i = 0; i < n; i++)
			chunk[i] = pattern_byte(off + i);
		if (::pwrite(fd_, chunk.data(), n, static_cast<off_t>(off)) !=
		    static_cast<ssize_t>(n))
			throw std::runtime_error("pwrite failed");
	}
}

ScratchFile::~ScratchFile()
{
	if (fd_ >= 0)
		::close(fd_);
	if (!path_.empty())
		::unlink(path_.c_str());
}

bool drop_cap_ipc_lock()
{
	__user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
	__user_cap_data_struct data[2]{};

	if (::syscall(SYS_capget, &hdr, data))
		return false;
	data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	data[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
	return ::syscall(SYS_capset, &hdr, data) == 0;
}

} // namespace svmbatch::test
