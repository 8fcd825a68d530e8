// SPDX-License-Identifier: MIT
#include "shim/dynamic_library.hpp"

namespace svmbatch::detail {

DynamicLibrary::DynamicLibrary(const std::string &name, const std::string &what, Step step)
	: handle_(::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE)), name_(name),
	  what_(what), step_(step)
{
	if (!handle_) {
		const char *why = ::dlerror(); // NOLINT(concurrency-mt-unsafe): read at once
		throw Error(ENODEV, step, "no " + what + ": " + (why ? why : name));
	}
}

void *DynamicLibrary::find(const char *name, const char *versioned) const
{
	void *sym = versioned ? ::dlsym(handle_, versioned) : nullptr;

	if (!sym)
		sym = ::dlsym(handle_, name);
	if (!sym)
		throw Error(ENODEV, step_, name_ + " has no " + name + ": not a usable " + what_);
	return sym;
}

} // namespace svmbatch::detail
