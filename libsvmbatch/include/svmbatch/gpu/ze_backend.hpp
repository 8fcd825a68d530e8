// SPDX-License-Identifier: MIT
#pragma once

#include <memory>
#include <string>

#include <svmbatch/api.h>
#include <svmbatch/gpu/backend.hpp>

namespace svmbatch {

namespace detail {
struct ZeState;
}

struct ZeOptions {
	/// The Level Zero loader, loaded with dlopen; "" is libze_loader.so.1.
	std::string library;
	/// Which driver (zeDriverGet's order) and which of its devices
	/// (zeDeviceGet's order).
	int driver = 0;
	int device = 0;
};

/// What Level Zero already knows about an address (zeMemGetAllocProperties,
/// then the driver's imported host pointers).
enum class ZeMemory {
	Unknown, ///< plain host memory: map() imports it
	Host, ///< zeMemAllocHost'd, or a host pointer already imported
	Managed, ///< zeMemAllocShared: the device uses the pointer as is
	Device, ///< zeMemAllocDevice: not host memory at all
};

/// Intel GPUs through oneAPI Level Zero (libze_loader), loaded at run time:
/// libsvmbatch neither links nor needs it.  The backend holds one Level
/// Zero context on its driver for one device.
///
/// Kernel mode: map() exports the registration's dma-buf and imports it
/// once into the device (zeMemAllocDevice with ze_external_memory_import_fd_t,
/// ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF); caller buffer i is the imported
/// allocation + dmabuf_offset(i).  The allocation is freed (zeMemFree)
/// when the mapping ends.
///
/// Userspace mode: map() imports the bytes each merged range's buffers
/// cover with the driver's zexDriverImportExternalPointer (the host
/// pointer import of Intel's driver, asked of it through
/// zeDriverGetExtensionFunctionAddress), each range all or nothing: if
/// range k fails, ranges 0..k-1 are released before the Error (carrying
/// the ze_result_t and its name) is thrown.  An imported pointer is used
/// by the device at its host address.
///
/// In both modes memory Level Zero already knows is classified first:
/// its host allocations and imported pointers are used as they are,
/// shared allocations map to themselves, and a range that mixes such
/// memory with plain memory, or holds device memory, is refused (EEXIST,
/// EINVAL, naming the buffer) before anything is imported.
///
/// Every Level Zero call is gated on zeInit: without a driver or a device
/// the constructor throws Error(ENODEV) with Level Zero's result and
/// nothing else is called.  Never run on an Intel GPU here: see
/// Documentation/intel.rst.
class SVMBATCH_API ZeBackend final : public GpuBackend {
public:
	/// Error(ENODEV, Step::GpuOpen) without the loader, without a driver
	/// or a device, or with a library that is not the Level Zero loader.
	explicit ZeBackend(const ZeOptions &options = {});
	ZeBackend(const ZeBackend &) = delete;
	ZeBackend &operator=(const ZeBackend &) = delete;
	ZeBackend(ZeBackend &&) = delete;
	ZeBackend &operator=(ZeBackend &&) = delete;
	~ZeBackend() override;

	const char *name() const noexcept override { return "ze"; }
	GpuMapping map(const Registration &registration) override;

	int driver() const noexcept { return driver_; }
	int device() const noexcept { return device_; }
	const std::string &device_name() const noexcept { return device_name_; }
	/// The library that loaded, e.g. "libze_loader.so.1".
	const std::string &library() const noexcept;
	/// The Level Zero handles the mappings' addresses belong to
	/// (ze_driver_handle_t, ze_device_handle_t, ze_context_handle_t): a
	/// dma-buf import is an allocation of this context, so command lists
	/// that touch the mapped buffers are made in it.  Valid while the
	/// backend lives.
	void *driver_handle() const noexcept;
	void *device_handle() const noexcept;
	void *context_handle() const noexcept;
	/// Whether the driver imports host pointers (userspace mode needs it).
	bool imports_host_pointers() const noexcept;
	ZeMemory classify(const void *ptr) const;

private:
	std::shared_ptr<const detail::ZeState> state_;
	int driver_ = 0;
	int device_ = 0;
	std::string device_name_;
};

} // namespace svmbatch
