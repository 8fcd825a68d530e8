// SPDX-License-Identifier: MIT
// What a GPU runtime's status code tells a caller: an errno and a name.
// CUDA's CUresult and HIP's hipError_t are both ints with 0 for success,
// so the shims share the lookup and list only their own codes.
#pragma once

#include <algorithm>
#include <cerrno>
#include <span>
#include <string>

namespace svmbatch::detail {

/// A status code and the errno that best says what it means.
struct StatusErrno {
	int status;
	int err;
};

/// The errno of status in table: 0 for success (0), EIO where the table
/// has none.
inline int status_errno(int status, std::span<const StatusErrno> table) noexcept
{
	if (status == 0)
		return 0;
	auto it = std::ranges::find(table, status, &StatusErrno::status);
	return it == table.end() ? EIO : it->err;
}

/// "NAME (status)", with fallback where the runtime has no name for it.
inline std::string status_name(const char *name, const char *fallback, int status)
{
	return std::string(name ? name : fallback) + " (" + std::to_string(status) + ")";
}

} // namespace svmbatch::detail
