// SPDX-License-Identifier: MIT
// RDMA memory regions from a registration, for the engines that own the
// NIC (rdma-core, UCX, libfabric): libibverbs is loaded at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <svmbatch/api.h>

struct ibv_pd;
struct ibv_mr;

namespace svmbatch {

class Registration;

/// How RdmaBackend::register_memory() makes memory regions.
enum class RdmaPath {
	/// DmaBuf where the module exports and the device takes dma-buf
	/// memory regions (EOPNOTSUPP from either falls back), else PerRange.
	Auto,
	/// ibv_reg_dmabuf_mr on the registration's dma-buf (kernel mode):
	/// key(i).addr is caller buffer i's byte offset in the dma-buf.
	DmaBuf,
	/// ibv_reg_mr per kernel range (both modes; verbs pins the pages
	/// itself): key(i).addr is caller buffer i's address.
	PerRange,
};

SVMBATCH_API const char *rdma_path_name(RdmaPath path) noexcept;

struct RdmaOptions {
	/// libibverbs, loaded with dlopen: the copy that made the caller's
	/// protection domain (an soname already loaded resolves to it).
	std::string library = "libibverbs.so.1";
	RdmaPath path = RdmaPath::Auto;
	/// Largest memory region: 0 for the device's max_mr_size
	/// (ibv_query_device), else the smaller of this and the device's.
	std::uint64_t max_mr_bytes = 0;
};

/// What a work request names for a caller buffer: the address within its
/// memory region, the local key (scatter/gather entries) and the remote
/// key (a peer's RDMA READ/WRITE).
struct RdmaKey {
	std::uint64_t addr = 0;
	std::uint32_t lkey = 0;
	std::uint32_t rkey = 0;
};

/// One memory region.
struct RdmaRegion {
	::ibv_mr *mr = nullptr;
	std::uint64_t addr = 0; ///< first byte: a user address or a dma-buf offset (iova)
	std::uint64_t len = 0;
	int access = 0; ///< the IBV_ACCESS_* flags it was registered with
	std::size_t first_buffer = 0; ///< lowest caller index among its buffers
};

namespace detail {
struct RdmaRegions;
}

/// A registration's buffers as memory regions of one protection domain.
/// Move-only; the destructor deregisters them.  Independent of the
/// Registration object's lifetime (a dma-buf memory region holds the
/// dma-buf, which holds the pinned pages; a per-range region pins its
/// own), but the caller's memory must stay mapped while a NIC uses it,
/// and the protection domain must outlive the regions.
class SVMBATCH_API RdmaMemoryRegions {
public:
	RdmaMemoryRegions();
	explicit RdmaMemoryRegions(std::unique_ptr<detail::RdmaRegions> regions);
	RdmaMemoryRegions(RdmaMemoryRegions &&) noexcept;
	RdmaMemoryRegions &operator=(RdmaMemoryRegions &&) noexcept;
	RdmaMemoryRegions(const RdmaMemoryRegions &) = delete;
	RdmaMemoryRegions &operator=(const RdmaMemoryRegions &) = delete;
	~RdmaMemoryRegions();

	/// DmaBuf or PerRange: the path taken.
	RdmaPath path() const noexcept;
	/// Why RdmaPath::Auto did not take DmaBuf ("" if it did).
	const std::string &fallback_reason() const noexcept;
	/// Number of caller buffers.
	std::size_t size() const noexcept;
	/// Caller buffer i's key (std::out_of_range past the end).
	RdmaKey key(std::size_t buffer) const;
	/// The region holding caller buffer i (an index into regions()).
	std::size_t region_of(std::size_t buffer) const;
	std::span<const RdmaRegion> regions() const noexcept;

	/// Deregister now.  Idempotent.
	void reset() noexcept;
	explicit operator bool() const noexcept { return regions_ != nullptr; }

private:
	std::unique_ptr<detail::RdmaRegions> regions_;
};

namespace detail {
struct LibIbverbs;
}

/// Registers a Registration with an RDMA device: all of its buffers in
/// memory regions of a protection domain the caller allocated, no region
/// longer than the device's max_mr_size and none cutting through a caller
/// buffer.  Regions of read-only buffers get the caller's access flags
/// without the write ones (LOCAL_WRITE, REMOTE_WRITE, REMOTE_ATOMIC).
/// All or nothing: if region k fails, regions 0..k-1 are deregistered
/// before the Error (Step::RdmaRegister, the verbs errno, the first
/// buffer of region k) is thrown.
class SVMBATCH_API RdmaBackend {
public:
	/// Error(ENODEV, Step::RdmaOpen) without libibverbs; the errno of
	/// ibv_query_device (Step::RdmaOpen) if the device does not answer.
	explicit RdmaBackend(::ibv_pd *pd, const RdmaOptions &options = {});
	RdmaBackend(const RdmaBackend &) = delete;
	RdmaBackend &operator=(const RdmaBackend &) = delete;
	RdmaBackend(RdmaBackend &&) = delete;
	RdmaBackend &operator=(RdmaBackend &&) = delete;
	~RdmaBackend();

	/// access: IBV_ACCESS_* flags (IBV_ACCESS_LOCAL_WRITE |
	/// IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE, say).
	RdmaMemoryRegions register_memory(const Registration &registration, int access) const;

	/// The cap on one region: the device's max_mr_size, or smaller (options).
	std::uint64_t max_mr_bytes() const noexcept { return max_mr_bytes_; }
	/// The device's name (ibv_get_device_name), e.g. "rxe0", "mlx5_0".
	const std::string &device_name() const noexcept { return device_name_; }

private:
	std::shared_ptr<const detail::LibIbverbs> verbs_;
	::ibv_pd *pd_;
	RdmaOptions options_;
	std::uint64_t max_mr_bytes_ = 0;
	std::string device_name_;
};

/// An RDMA device as rdma_devices() sees it.
struct RdmaDeviceInfo {
	std::string name;
	std::uint64_t max_mr_size = 0;
	/// The device takes dma-buf memory regions: ibv_reg_dmabuf_mr on a bad
	/// fd fails with something other than EOPNOTSUPP.
	bool dmabuf_mr = false;
	std::string error; ///< why the device could not be asked ("" if it was)
};

/// Every device libibverbs lists.  Error(ENODEV, Step::RdmaOpen) without
/// libibverbs; an empty list without devices.
SVMBATCH_API std::vector<RdmaDeviceInfo>
rdma_devices(const std::string &library = "libibverbs.so.1");

} // namespace svmbatch
