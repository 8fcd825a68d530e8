// SPDX-License-Identifier: MIT
// StagingChunks: the device reads' staging (staging.hpp).
#include "gpu_io/staging.hpp"

#include <svmbatch/error.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string>

namespace svmbatch::detail {

StagingChunks::StagingChunks(std::span<const FixedSlice> slices, std::size_t chunk_bytes,
			     std::size_t direct_alignment, std::uint32_t buffer,
			     std::size_t max_bytes)
	: chunk_bytes_(chunk_bytes), aligned_(chunk_bytes % direct_alignment == 0),
	  max_taken_(max_bytes ? std::max<std::size_t>(1, max_bytes / chunk_bytes) : SIZE_MAX)
{
	for (const FixedSlice &s : slices) {
		for (std::size_t at = 0; at + chunk_bytes <= s.len; at += chunk_bytes) {
			char *addr = static_cast<char *>(s.addr) + at;
			aligned_ &= reinterpret_cast<std::uintptr_t>(addr) % direct_alignment == 0;
			chunks_.push_back({addr, s.index, static_cast<int>(chunks_.size())});
		}
	}
	if (chunks_.empty())
		throw Error(EINVAL, Step::Validate,
			    "IoLoop device.staging holds no chunk of " +
				    std::to_string(chunk_bytes) + " bytes",
			    buffer);
	for (std::size_t i = chunks_.size(); i-- > 0;)
		free_.push_back(static_cast<int>(i));
}

std::optional<StagingChunk> StagingChunks::take()
{
	std::lock_guard lock(mu_);

	if (free_.empty() || taken_ >= max_taken_)
		return std::nullopt;
	const StagingChunk c = chunks_[static_cast<std::size_t>(free_.back())];
	free_.pop_back();
	taken_++;
	return c;
}

void StagingChunks::give_back(int index) noexcept
{
	std::lock_guard lock(mu_);

	free_.push_back(index); // within the capacity every chunk filled
	taken_--;
}

} // namespace svmbatch::detail
