// SPDX-License-Identifier: MIT
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <exception>

#include <svmbatch/diagnostics.hpp>

namespace svmbatch::test {

template <typename Done> std::uint64_t pinned_bytes_when(Done done, int timeout_ms)
{
	std::uint64_t bytes = process_pinned_bytes();

	for (int waited = 0; !done(bytes) && waited < timeout_ms; waited += 10) {
		::usleep(10 * 1000);
		bytes = process_pinned_bytes();
	}
	return bytes;
}

template <typename Fn> int run_in_child(Fn fn)
{
	pid_t pid = ::fork();

	if (pid < 0)
		return -1;
	if (pid == 0) {
		int status = 99;

		try {
			status = fn();
		} catch (const std::exception &) {
			status = 98;
		}
		::_exit(status);
	}
	int wstatus = 0;

	if (::waitpid(pid, &wstatus, 0) != pid)
		return -1;
	if (WIFSIGNALED(wstatus))
		return 128 + WTERMSIG(wstatus);
	return WEXITSTATUS(wstatus);
}

} // namespace svmbatch::test
