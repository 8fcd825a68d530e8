// SPDX-License-Identifier: MIT
// A GPU runtime loaded with dlopen (CUDA, HSA): libsvmbatch links neither.
#pragma once

#include <dlfcn.h>

#include <cerrno>
#include <string>

#include <svmbatch/error.hpp>

namespace svmbatch::detail {

/// dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE): the runtimes keep
/// process-wide state (threads, atexit handlers) that must outlive us, so
/// the destructor's dlclose drops only our reference and the code stays.
class DynamicLibrary {
public:
	/// Error(ENODEV, Step::GpuOpen, "no <what>: <dlerror>") if it does not load.
	DynamicLibrary(const std::string &name, const std::string &what);
	DynamicLibrary(const DynamicLibrary &) = delete;
	DynamicLibrary &operator=(const DynamicLibrary &) = delete;
	DynamicLibrary(DynamicLibrary &&) = delete;
	DynamicLibrary &operator=(DynamicLibrary &&) = delete;
	~DynamicLibrary() { ::dlclose(handle_); }

	/// fn = the symbol (versioned first, when given: cuda.h maps some
	/// names to _v2 symbols); Error(ENODEV) naming it when absent.
	template <typename Fn>
	void resolve(Fn &fn, const char *symbol, const char *versioned = nullptr) const
	{
		void *sym = versioned ? ::dlsym(handle_, versioned) : nullptr;

		if (!sym)
			sym = ::dlsym(handle_, symbol);
		if (!sym)
			throw Error(ENODEV, Step::GpuOpen,
				    name_ + " has no " + symbol + ": not a usable " + what_);
		fn = reinterpret_cast<Fn>(sym);
	}

private:
	void *handle_ = nullptr;
	std::string name_, what_;
};

} // namespace svmbatch::detail
