// SPDX-License-Identifier: MIT
// The GPU side of the device tests and the example: kernels that read and
// write host buffers through the device pointers a GpuMapping gives.
#include "gpu_checksum.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace svmbatch::device {

namespace {

void check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess)
		throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " " +
					 cudaGetErrorString(e));
}

__global__ void checksum_kernel(const unsigned long long *ptrs, const unsigned long long *lens,
				unsigned long long *sums)
{
	const auto *p = reinterpret_cast<const unsigned char *>(ptrs[blockIdx.x]);
	unsigned long long len = lens[blockIdx.x], sum = 0;

	for (unsigned long long i = threadIdx.x; i < len; i += blockDim.x)
		sum += static_cast<unsigned long long>(p[i]) * (i % 251 + 1);
	atomicAdd(&sums[blockIdx.x], sum);
}

__global__ void write_kernel(const unsigned long long *ptrs, unsigned long long offset,
			     unsigned char value)
{
	if (threadIdx.x == 0)
		reinterpret_cast<unsigned char *>(ptrs[blockIdx.x])[offset] = value;
}

/// A device copy of a host vector, freed on destruction.
template <typename T> struct DeviceArray {
	T *p = nullptr;
	explicit DeviceArray(const std::vector<T> &host)
	{
		check(cudaMalloc(&p, host.size() * sizeof(T) + 1), "cudaMalloc");
		check(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
		      "cudaMemcpy");
	}
	~DeviceArray() { cudaFree(p); }
	DeviceArray(const DeviceArray &) = delete;
	DeviceArray &operator=(const DeviceArray &) = delete;
};

} // namespace

std::uint64_t cpu_checksum(const void *p, std::size_t len)
{
	const auto *b = static_cast<const unsigned char *>(p);
	std::uint64_t sum = 0;

	for (std::size_t i = 0; i < len; i++)
		sum += static_cast<std::uint64_t>(b[i]) * (i % 251 + 1);
	return sum;
}

std::vector<std::uint64_t> gpu_checksums(const std::vector<std::uint64_t> &device_ptrs,
					 const std::vector<std::size_t> &lens)
{
	std::vector<unsigned long long> ptrs(device_ptrs.begin(), device_ptrs.end());
	std::vector<unsigned long long> l(lens.begin(), lens.end());
	std::vector<unsigned long long> zero(ptrs.size(), 0);
	DeviceArray<unsigned long long> dptrs(ptrs), dlens(l), dsums(zero);

	if (!ptrs.empty())
		checksum_kernel<<<static_cast<unsigned>(ptrs.size()), 256>>>(dptrs.p, dlens.p,
									     dsums.p);
	check(cudaGetLastError(), "checksum_kernel launch");
	check(cudaDeviceSynchronize(), "checksum_kernel");
	check(cudaMemcpy(zero.data(), dsums.p, zero.size() * sizeof(unsigned long long),
			 cudaMemcpyDeviceToHost),
	      "cudaMemcpy sums");
	return {zero.begin(), zero.end()};
}

void gpu_write_byte(const std::vector<std::uint64_t> &device_ptrs, std::size_t offset,
		    std::uint8_t value)
{
	std::vector<unsigned long long> ptrs(device_ptrs.begin(), device_ptrs.end());
	DeviceArray<unsigned long long> dptrs(ptrs);

	if (!ptrs.empty())
		write_kernel<<<static_cast<unsigned>(ptrs.size()), 32>>>(dptrs.p, offset, value);
	check(cudaGetLastError(), "write_kernel launch");
	check(cudaDeviceSynchronize(), "write_kernel");
}

} // namespace svmbatch::device
