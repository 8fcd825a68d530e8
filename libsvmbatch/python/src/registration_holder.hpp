// SPDX-License-Identifier: MIT
// The Python-side owners of a Context and a Registration.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include <pybind11/pybind11.h>

#include <svmbatch/context.hpp>
#include <svmbatch/registration.hpp>

#include "dlpack.hpp"

namespace svmbatch::python {

namespace py = pybind11;

/// One caller buffer's exporter, kept until the registration object dies:
/// the object itself, its buffer-protocol view (released), or the DLPack
/// tensor taken from it (its deleter called).
class HeldBuffer {
public:
	HeldBuffer() = default;
	explicit HeldBuffer(py::object owner) : owner_(std::move(owner)) {}
	HeldBuffer(HeldBuffer &&other) noexcept;
	HeldBuffer &operator=(HeldBuffer &&other) noexcept;
	HeldBuffer(const HeldBuffer &) = delete;
	HeldBuffer &operator=(const HeldBuffer &) = delete;
	~HeldBuffer();

	/// Take the buffer-protocol view (released on destruction).
	void hold_view(const Py_buffer &view);
	/// Take a consumed DLPack tensor (its deleter called on destruction).
	void hold_dlpack(DLManagedTensor *managed) { managed_ = managed; }

private:
	void release() noexcept;

	py::object owner_;
	std::optional<Py_buffer> view_;
	DLManagedTensor *managed_ = nullptr;
};

/// svmbatch.Registration: the library's Registration plus what keeps the
/// caller's memory alive.  close() unregisters; the memory owners are
/// released only when the object dies, since views (reg.buffer(i)) and
/// DLPack capsules of it reference the object, not the registration.  An
/// arena's registration is shared with the arena (not closable).
class PyRegistration {
public:
	PyRegistration(std::shared_ptr<Registration> registration, std::vector<HeldBuffer> held,
		       bool closable)
		: held_(std::move(held)), registration_(std::move(registration)),
		  closable_(closable)
	{}

	/// The open registration; ValueError when closed.
	const Registration &get() const;
	void close();
	bool closed() const noexcept { return !registration_ || !*registration_; }

private:
	// Declared first, destroyed last: unregister, then let the memory go.
	std::vector<HeldBuffer> held_;
	std::shared_ptr<Registration> registration_;
	bool closable_;
};

} // namespace svmbatch::python
