// SPDX-License-Identifier: MIT
// Exceptions of the extension that are not the library's svmbatch::Error.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace svmbatch::python {

/// An Arena cannot carve a block: svmbatch.ArenaFullError (a MemoryError)
/// in Python, saying whether the arena is full or only fragmented.
class ArenaFull : public std::runtime_error {
public:
	ArenaFull(const std::string &what, std::size_t requested, std::size_t free_bytes,
		  std::size_t largest_free)
		: std::runtime_error(what), requested(requested), free_bytes(free_bytes),
		  largest_free(largest_free)
	{}

	std::size_t requested;
	std::size_t free_bytes;
	std::size_t largest_free;
};

} // namespace svmbatch::python
