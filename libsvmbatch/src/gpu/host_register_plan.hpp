// SPDX-License-Identifier: MIT
// What the backends that register host memory with a GPU runtime (CUDA's
// cuMemHostRegister, HIP's hipHostRegister) plan alike: which ranges the
// runtime already knows, and which bytes of each range to register.
#pragma once

#include <cerrno>
#include <cstddef>
#include <string>
#include <vector>

#include <svmbatch/error.hpp>
#include <svmbatch/registration.hpp>

namespace svmbatch::detail {

/// The system's page size.
std::size_t page_size() noexcept;

/// The most bytes one host-register call is given.  CUDA fails one
/// cuMemHostRegister of 512 GiB or more (CUDA_ERROR_OUT_OF_MEMORY), and
/// no driver pins faster in one call than in 64 GiB pieces of it.
inline constexpr std::size_t host_register_chunk_default = std::size_t{64} << 30;

/// The limit in force: host_register_chunk_default unless a test lowered it.
std::size_t host_register_chunk_bytes() noexcept;
/// For tests: bytes (rounded down to pages, at least one page); 0 restores
/// the default.
void set_host_register_chunk_bytes(std::size_t bytes) noexcept;

/// A span cut into pieces of at most limit bytes (a multiple of page),
/// each cut on a page boundary, so that no page is registered twice.
std::vector<KernelRange> chunk_span(const KernelRange &span, std::size_t limit, std::size_t page);

/// Per range, the bytes its buffers cover: from the first byte of the
/// first to the last byte of the last (clipped to the range).  The runtime
/// registers those, not the whole pages: the rest of a page belongs to
/// whoever else malloc put there, and a later buffer there that straddled
/// a registered region's edge would fail every copy the runtime makes.
std::vector<KernelRange> covered_spans(const Registration &registration);

/// Per range: what the runtime knows of it (classify(address) -> Kind),
/// from both ends of each buffer that starts in it.  EEXIST when a range
/// mixes kinds of memory, EINVAL for device memory, both blaming the
/// buffer.  Kind has the enumerators Unknown (plain host memory) and
/// Device; name(Kind) says what a kind is, runtime names the runtime.
///
/// Each buffer is asked about at both ends, even where two buffers share a
/// page: a runtime answers by the byte, not by the page (on an H100,
/// cudaPointerGetAttributes says registered for the 100 bytes
/// cudaHostRegister was given and unregistered 1 byte past them, in the
/// same page), so one page's answer does not hold for its other bytes.
template <typename Kind, typename Classify, typename Name>
std::vector<Kind> classify_ranges(const Registration &registration, Classify classify, Name name,
				  const std::string &runtime)
{
	auto buffers = registration.buffers();
	std::vector<Kind> kind(registration.ranges().size(), Kind::Unknown);
	std::vector<bool> classified(kind.size(), false);

	for (std::size_t i = 0; i < buffers.size(); i++) {
		std::size_t r = registration.location(i).range;
		const auto *p = static_cast<const char *>(buffers[i].ptr);

		for (const char *at : {p, p + buffers[i].len - 1}) {
			Kind m = classify(at);

			if (!classified[r]) {
				kind[r] = m;
				classified[r] = true;
			} else if (m != kind[r]) {
				throw Error(EEXIST, Step::GpuMap,
					    "range " + std::to_string(r) + " mixes " +
						    name(kind[r]) + " and " + name(m) +
						    "; register them separately",
					    i);
			}
		}
		if (kind[r] == Kind::Device)
			throw Error(EINVAL, Step::GpuMap,
				    runtime + " device memory is not host memory to map", i);
	}
	return kind;
}

/// The first caller buffer of range r with a page the runtime knows,
/// looked at page by page (beyond the ends classify_ranges probed), else
/// fallback: whom to blame when the runtime says the range was already
/// registered.
template <typename Kind, typename Classify>
std::size_t first_buffer_known(const Registration &registration, std::size_t r,
			       std::size_t fallback, Classify classify)
{
	const std::size_t page = page_size();
	auto buffers = registration.buffers();

	for (std::size_t i = 0; i < buffers.size(); i++) {
		if (registration.location(i).range != r)
			continue;
		const auto *p = static_cast<const char *>(buffers[i].ptr);
		for (std::size_t off = 0; off < buffers[i].len; off += page)
			if (classify(p + off) != Kind::Unknown)
				return i;
	}
	return fallback;
}

} // namespace svmbatch::detail
