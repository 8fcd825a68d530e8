// SPDX-License-Identifier: MIT
// What the benchmarks (lib_bench.cpp, pipeline_bench.cpp, gpu_io_bench.cpp)
// take their buffers from: anonymous memory, populated before any timing.
#pragma once

#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <system_error>

namespace svmbatch::bench {

/// Private anonymous memory (page-aligned, so O_DIRECT can use it too),
/// populated with zero-filled pages of its own, unmapped on destruction.
class AnonMemory {
public:
	explicit AnonMemory(std::size_t len) : len_(len)
	{
		void *m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		if (m == MAP_FAILED)
			throw std::system_error(errno, std::generic_category(), "mmap");
		p_ = static_cast<char *>(m);
	}
	~AnonMemory() { ::munmap(p_, len_); }
	AnonMemory(const AnonMemory &) = delete;
	AnonMemory &operator=(const AnonMemory &) = delete;
	AnonMemory(AnonMemory &&) = delete;
	AnonMemory &operator=(AnonMemory &&) = delete;
	char *get() const noexcept { return p_; }

private:
	std::size_t len_;
	char *p_ = nullptr;
};

} // namespace svmbatch::bench
