// SPDX-License-Identifier: MIT
// A runtime loaded with dlopen (CUDA, HSA, libibverbs): libsvmbatch links
// none of them.
#pragma once

#include <dlfcn.h>

#include <cerrno>
#include <string>

#include <svmbatch/error.hpp>

namespace svmbatch::detail {

/// One entry point to load: where it goes, its name, and the name to try
/// first when given (cuda.h maps some names to _v2 symbols).
template <typename Fn> struct Symbol {
	Symbol(Fn &fn, const char *name, const char *versioned = nullptr) noexcept
		: fn(&fn), name(name), versioned(versioned)
	{}
	Fn *fn;
	const char *name;
	const char *versioned;
};

/// dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE): the runtimes keep
/// process-wide state (threads, atexit handlers) that must outlive us, so
/// the destructor's dlclose drops only our reference and the code stays.
class DynamicLibrary {
public:
	/// Error(ENODEV, step, "no <what>: <dlerror>") if it does not load.
	DynamicLibrary(const std::string &name, const std::string &what, Step step = Step::GpuOpen);
	DynamicLibrary(const DynamicLibrary &) = delete;
	DynamicLibrary &operator=(const DynamicLibrary &) = delete;
	DynamicLibrary(DynamicLibrary &&) = delete;
	DynamicLibrary &operator=(DynamicLibrary &&) = delete;
	~DynamicLibrary() { ::dlclose(handle_); }

	/// Load every entry point, in order; Error(ENODEV, the step) naming
	/// the first that is absent.
	template <typename... Fn> void resolve(const Symbol<Fn> &...symbols) const
	{
		(resolve_one(symbols), ...);
	}

	/// Load entry points that may be absent (left null), e.g. those of a
	/// newer version of the library.
	template <typename... Fn> void resolve_optional(const Symbol<Fn> &...symbols) const
	{
		((*symbols.fn = reinterpret_cast<Fn>(find_optional(symbols.name))), ...);
	}

private:
	template <typename Fn> void resolve_one(const Symbol<Fn> &symbol) const
	{
		*symbol.fn = reinterpret_cast<Fn>(find(symbol.name, symbol.versioned));
	}
	/// The address of versioned, else of name; Error(ENODEV) if neither.
	void *find(const char *name, const char *versioned) const;
	void *find_optional(const char *name) const { return ::dlsym(handle_, name); }

	void *handle_ = nullptr;
	std::string name_, what_;
	Step step_;
};

} // namespace svmbatch::detail
