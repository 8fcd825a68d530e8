// SPDX-License-Identifier: MIT
// DrmBackend: a registration's dma-buf imported into a DRM device (PRIME).
#include <svmbatch/gpu/drm_backend.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/registration.hpp>

#include <xf86drm.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "core/range_plan.hpp"
#include "shim/libdrm.hpp"

namespace svmbatch {

namespace {

/// Closes the GEM handle of an imported dma-buf; keeps the node open.
class GemImport final : public GpuMappingOwner {
public:
	GemImport(std::shared_ptr<const detail::DrmNode> node, std::uint32_t handle)
		: node_(std::move(node)), handle_(handle)
	{}
	GemImport(const GemImport &) = delete;
	GemImport &operator=(const GemImport &) = delete;
	GemImport(GemImport &&) = delete;
	GemImport &operator=(GemImport &&) = delete;
	~GemImport() override { drmCloseBufferHandle(node_->fd.get(), handle_); }

private:
	std::shared_ptr<const detail::DrmNode> node_;
	std::uint32_t handle_;
};

} // namespace

DrmBackend::DrmBackend() : node_(detail::find_drm_node(""))
{
	if (!node_)
		throw Error(ENODEV, Step::GpuOpen, "no DRM device under /dev/dri opens");
}

DrmBackend::DrmBackend(const std::string &node) : node_(detail::open_drm_node(node))
{}

DrmBackend::~DrmBackend() = default;

const std::string &DrmBackend::node() const noexcept
{
	return node_->path;
}

const std::string &DrmBackend::driver() const noexcept
{
	return node_->driver;
}

int DrmBackend::fd() const noexcept
{
	return node_->fd.get();
}

GpuMapping DrmBackend::map(const Registration &registration)
{
	auto buffers = registration.buffers();
	bool writable = detail::all_writable(buffers);
	DmaBuf dmabuf = registration.export_dmabuf(writable);
	std::uint32_t handle = 0;

	if (drmPrimeFDToHandle(node_->fd.get(), dmabuf.fd(), &handle)) {
		int err = errno;

		// PRIME import maps DMA_BIDIRECTIONAL; a read-only export allows
		// only DMA_TO_DEVICE, since the device must not write those pages.
		throw Error(err, Step::GpuMap,
			    node_->driver + " (" + node_->path + ") refused the dma-buf" +
				    detail::read_only_import_hint(err, writable, "the importer"));
	}
	// The GEM object now holds the dma-buf; the fd is closed on return.
	auto owner = std::make_unique<GemImport>(node_, handle);
	std::vector<std::uint64_t> offsets(buffers.size());
	for (std::size_t i = 0; i < buffers.size(); i++)
		offsets[i] = registration.dmabuf_offset(i);
	return {name(), GpuAddressKind::ObjectOffset, std::move(offsets), std::move(owner), handle};
}

} // namespace svmbatch
