// SPDX-License-Identifier: MIT
// AmdgpuBackend: dma-buf import and GPU VA mapping through libdrm_amdgpu.
// Follows libdrm's amdgpu.h: amdgpu_device_initialize, amdgpu_bo_import
// (amdgpu_bo_handle_type_dma_buf_fd), amdgpu_va_range_alloc
// (amdgpu_gpu_va_range_general, an alignment that is a multiple of
// amdgpu_query_buffer_size_alignment's, as the header asks),
// amdgpu_bo_va_op (AMDGPU_VA_OP_MAP), and the reverse on the way out.
#include <svmbatch/gpu/amdgpu_backend.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/registration.hpp>

#include <amdgpu.h>
#include <amdgpu_drm.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "core/range_plan.hpp"
#include "shim/libdrm.hpp"

namespace svmbatch {

namespace detail {

/// An initialized amdgpu device on an open node.
struct AmdgpuDevice {
	std::shared_ptr<const DrmNode> node;
	amdgpu_device_handle handle = nullptr;

	explicit AmdgpuDevice(std::shared_ptr<const DrmNode> n) : node(std::move(n))
	{
		if (node->driver != "amdgpu")
			throw Error(ENODEV, Step::GpuOpen,
				    node->path + " is " + node->driver + ", not amdgpu");
		std::uint32_t major = 0, minor = 0;
		if (int r = amdgpu_device_initialize(node->fd.get(), &major, &minor, &handle))
			throw Error(r < 0 ? -r : ENODEV, Step::GpuOpen,
				    "amdgpu_device_initialize on " + node->path, Error::no_index,
				    r);
	}
	AmdgpuDevice(const AmdgpuDevice &) = delete;
	AmdgpuDevice &operator=(const AmdgpuDevice &) = delete;
	AmdgpuDevice(AmdgpuDevice &&) = delete;
	AmdgpuDevice &operator=(AmdgpuDevice &&) = delete;
	~AmdgpuDevice() { amdgpu_device_deinitialize(handle); }
};

} // namespace detail

namespace {

constexpr std::uint64_t gpu_page = 4096;
constexpr std::uint64_t huge_page = 2u << 20; // the usual PTE fragment size

/// What map() set up, undone in reverse: VA mapping, VA range, the BO.
class AmdgpuImport final : public GpuMappingOwner {
public:
	explicit AmdgpuImport(std::shared_ptr<const detail::AmdgpuDevice> dev)
		: dev_(std::move(dev))
	{}
	AmdgpuImport(const AmdgpuImport &) = delete;
	AmdgpuImport &operator=(const AmdgpuImport &) = delete;
	AmdgpuImport(AmdgpuImport &&) = delete;
	AmdgpuImport &operator=(AmdgpuImport &&) = delete;
	~AmdgpuImport() override
	{
		if (mapped)
			amdgpu_bo_va_op(bo, 0, size, va, 0, AMDGPU_VA_OP_UNMAP);
		if (va_handle)
			amdgpu_va_range_free(va_handle);
		if (bo)
			amdgpu_bo_free(bo);
	}

	amdgpu_bo_handle bo = nullptr;
	amdgpu_va_handle va_handle = nullptr;
	std::uint64_t va = 0, size = 0;
	bool mapped = false;

private:
	std::shared_ptr<const detail::AmdgpuDevice> dev_;
};

int err_of(int r)
{
	return r < 0 ? -r : EIO; // libdrm_amdgpu: -errno, or >0 AMD codes
}

/// VA alignment for an imported object of `size` bytes: a multiple of the
/// GART page size (size_remote: the object lives in system memory), and
/// of the PTE fragment size (size_local, usually 2 MiB) once the object is
/// that large, so the GPU can use large TLB entries (what Mesa's
/// amdgpu_get_optimal_alignment does for its imports).
std::uint64_t va_alignment(amdgpu_device_handle dev, std::uint64_t size)
{
	amdgpu_buffer_size_alignments al{};

	if (amdgpu_query_buffer_size_alignment(dev, &al) != 0)
		al = {huge_page, gpu_page};
	std::uint64_t align = std::max(al.size_remote, gpu_page);
	std::uint64_t fragment = al.size_local ? al.size_local : huge_page;
	if (size >= fragment)
		align = std::max(align, fragment);
	return align;
}

} // namespace

AmdgpuBackend::AmdgpuBackend()
{
	auto node = detail::find_drm_node("amdgpu");

	if (!node)
		throw Error(ENODEV, Step::GpuOpen, "no amdgpu DRM device under /dev/dri");
	dev_ = std::make_shared<const detail::AmdgpuDevice>(std::move(node));
}

AmdgpuBackend::AmdgpuBackend(const std::string &node)
	: dev_(std::make_shared<const detail::AmdgpuDevice>(detail::open_drm_node(node)))
{}

AmdgpuBackend::~AmdgpuBackend() = default;

const std::string &AmdgpuBackend::node() const noexcept
{
	return dev_->node->path;
}

GpuMapping AmdgpuBackend::map(const Registration &registration)
{
	auto buffers = registration.buffers();
	bool writable = detail::all_writable(buffers);
	DmaBuf dmabuf = registration.export_dmabuf(writable);
	auto imp = std::make_unique<AmdgpuImport>(dev_);
	amdgpu_bo_import_result res{};

	if (int r = amdgpu_bo_import(dev_->handle, amdgpu_bo_handle_type_dma_buf_fd,
				     static_cast<std::uint32_t>(dmabuf.fd()), &res))
		throw Error(err_of(r), Step::GpuMap,
			    "amdgpu_bo_import of the dma-buf into " + dev_->node->path +
				    detail::read_only_import_hint(-r, writable, "amdgpu"),
			    Error::no_index, r);
	// The BO holds the dma-buf now; the fd closes when map() returns.
	imp->bo = res.buf_handle;
	imp->size = res.alloc_size;
	std::uint64_t align = va_alignment(dev_->handle, imp->size);
	if (int r = amdgpu_va_range_alloc(dev_->handle, amdgpu_gpu_va_range_general, imp->size,
					  align, 0, &imp->va, &imp->va_handle, 0))
		throw Error(err_of(r), Step::GpuMap,
			    "amdgpu_va_range_alloc of " + std::to_string(imp->size) + " bytes",
			    Error::no_index, r);
	// libdrm maps readable, writeable and executable whatever `flags`
	// says; a read-only registration is expected to fail the import
	// already (the attachment is mapped DMA_BIDIRECTIONAL).
	if (int r = amdgpu_bo_va_op(imp->bo, 0, imp->size, imp->va, 0, AMDGPU_VA_OP_MAP))
		throw Error(err_of(r), Step::GpuMap, "amdgpu_bo_va_op MAP", Error::no_index, r);
	imp->mapped = true;
	std::uint32_t kms = 0;
	if (int r = amdgpu_bo_export(imp->bo, amdgpu_bo_handle_type_kms, &kms))
		throw Error(err_of(r), Step::GpuMap, "amdgpu_bo_export (KMS handle)",
			    Error::no_index, r);

	std::vector<std::uint64_t> addresses(buffers.size());
	for (std::size_t i = 0; i < buffers.size(); i++)
		addresses[i] = imp->va + registration.dmabuf_offset(i);
	return {name(), GpuAddressKind::DevicePointer, std::move(addresses), std::move(imp), kms};
}

} // namespace svmbatch
