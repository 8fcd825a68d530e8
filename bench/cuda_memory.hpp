// SPDX-License-Identifier: MIT
// What the CUDA benchmarks (cuda_bench.cpp, pipeline_bench.cpp,
// gpu_io_bench.cpp) share of the CUDA runtime: a checked call and device
// memory that frees itself.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

namespace svmbatch::bench {

/// Throw what failed, with CUDA's name for the error, unless e is success.
inline void check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess)
		throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
					 cudaGetErrorString(e) + ")");
}

/// Device memory, freed on destruction.
class DeviceBuffer {
public:
	explicit DeviceBuffer(std::size_t len)
	{
		void *p = nullptr;
		check(cudaMalloc(&p, len), "cudaMalloc");
		p_.reset(static_cast<char *>(p));
	}
	char *get() const noexcept { return p_.get(); }

private:
	struct Free {
		void operator()(char *p) const noexcept { cudaFree(p); }
	};
	std::unique_ptr<char, Free> p_;
};

} // namespace svmbatch::bench
