// SPDX-License-Identifier: MIT
// What the C API's files share: the handles behind the opaque types, and
// the conversion of exceptions into -errno and this thread's message.
#pragma once

#include <svmbatch/capi.h>
#include <svmbatch/all.hpp>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

struct svmbatch_ctx {
	svmbatch::Context ctx;
};

struct svmbatch_reg {
	svmbatch::Registration reg;
};

struct svmbatch_fixed {
	svmbatch::FixedBuffers fixed;
};

namespace svmbatch::capi {

/// This thread's message (svmbatch_last_error).
std::string &last_error() noexcept;

/*
 * Store this thread's message.  Runs inside catch handlers and after
 * argument checks, where a bad_alloc would cross the C boundary: the
 * message is best effort, the errno is what counts.
 */
void set_error(const char *what, const char *detail = "") noexcept;

/* Run fn; map what it throws to -errno, the message and the failed index. */
template <typename Fn> int guarded(size_t *failed_index, Fn fn) noexcept
{
	last_error().clear();
	if (failed_index)
		*failed_index = SVMBATCH_LIB_NO_INDEX;
	try {
		fn();
		return 0;
	} catch (const svmbatch::Error &e) {
		if (failed_index)
			*failed_index = e.buffer_index();
		set_error(e.what());
		/* 0 would read as success with a NULL handle. */
		return e.err() > 0 ? -e.err() : -EIO;
	} catch (const std::bad_alloc &) {
		set_error("svmbatch: out of memory");
		return -ENOMEM;
	} catch (const std::exception &e) {
		/* Not an svmbatch::Error: a library bug, not the caller's input. */
		set_error("svmbatch: unexpected C++ exception (reported as EIO): ", e.what());
		return -EIO;
	} catch (...) {
		set_error("svmbatch: unexpected non-standard exception (reported as EIO)");
		return -EIO;
	}
}

inline int fail(int err, const char *what) noexcept
{
	set_error("svmbatch: ", what);
	return -err;
}

inline int invalid(const char *what) noexcept
{
	return fail(EINVAL, what);
}

/*
 * A C caller may store any int in an enum; in C++ loading a value outside
 * the enum's range is undefined (UBSan says so), so read the bytes.
 */
template <typename E> std::underlying_type_t<E> raw_value(const E &e) noexcept
{
	std::underlying_type_t<E> v;

	std::memcpy(&v, &e, sizeof(v));
	return v;
}

} // namespace svmbatch::capi
