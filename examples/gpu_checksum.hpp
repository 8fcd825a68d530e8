// SPDX-License-Identifier: MIT
// Checksums computed by a CUDA kernel that reads each buffer through its
// device pointer (gpu_checksum.cu), and the same sum on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace svmbatch::device {

/// Position-weighted byte sum: sum of byte[i] * (i % 251 + 1).
std::uint64_t cpu_checksum(const void *p, std::size_t len);

/// One checksum per buffer, computed on the current CUDA device from the
/// device pointers (one block per buffer).  Throws std::runtime_error with
/// the CUDA error text on failure.
std::vector<std::uint64_t> gpu_checksums(const std::vector<std::uint64_t> &device_ptrs,
					 const std::vector<std::size_t> &lens);

/// The kernel writes `value` into byte `offset` of every buffer.
void gpu_write_byte(const std::vector<std::uint64_t> &device_ptrs, std::size_t offset,
		    std::uint8_t value);

} // namespace svmbatch::device
