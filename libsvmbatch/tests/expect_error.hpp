// SPDX-License-Identifier: MIT
// Header-only helpers shared by the library tests and the GPU machine's
// CUDA tests (tools/device), which do not link test_util.cpp.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>

#include <svmbatch/error.hpp>

namespace svmbatch::test {

/// The svmbatch::Error that fn throws; a test failure if it throws none.
template <typename Fn> Error expect_error(Fn fn)
{
	try {
		fn();
	} catch (const Error &e) {
		return e;
	}
	ADD_FAILURE() << "no svmbatch::Error thrown";
	return {0, Step::Open, "none"};
}

/// n anonymous private pages (not populated), unmapped on destruction;
/// p is nullptr if mmap failed.
class MappedPages {
public:
	explicit MappedPages(std::size_t n, int prot = PROT_READ | PROT_WRITE)
		: len(n * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)))
	{
		void *m = ::mmap(nullptr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		p = m == MAP_FAILED ? nullptr : static_cast<char *>(m);
	}
	~MappedPages()
	{
		if (p)
			::munmap(p, len);
	}
	MappedPages(const MappedPages &) = delete;
	MappedPages &operator=(const MappedPages &) = delete;
	MappedPages(MappedPages &&) = delete;
	MappedPages &operator=(MappedPages &&) = delete;

	char *p = nullptr;
	std::size_t len;
};

} // namespace svmbatch::test
