// SPDX-License-Identifier: MIT
// The few CUDA driver API entry points CudaBackend uses, loaded with
// dlopen so that libsvmbatch builds and runs without CUDA.  The types and
// constants mirror cuda.h; tools/device/cuda_abi_check.cpp static_asserts
// them against the real header on the GPU machine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace svmbatch::detail {

namespace cu {
using Result = int; // CUresult
using Device = int; // CUdevice
using Context = struct CUctx_st *;
using DevicePtr = unsigned long long; // CUdeviceptr (64-bit)
using Stream = struct CUstream_st *;
using Event = struct CUevent_st *;

constexpr Result success = 0;
constexpr Result error_invalid_value = 1;
constexpr Result error_out_of_memory = 2;
constexpr Result error_not_initialized = 3;
constexpr Result error_stub_library = 34;
constexpr Result error_not_ready = 600;
constexpr Result error_no_device = 100;
constexpr Result error_invalid_device = 101;
constexpr Result error_operating_system = 304;
constexpr Result error_host_memory_already_registered = 712;
constexpr Result error_host_memory_not_registered = 713;
constexpr Result error_not_permitted = 800;
constexpr Result error_not_supported = 801;

constexpr unsigned host_register_portable = 0x01;
constexpr unsigned host_register_devicemap = 0x02;
constexpr unsigned host_register_read_only = 0x08;

constexpr unsigned stream_non_blocking = 0x1;
constexpr unsigned event_disable_timing = 0x2;

constexpr int pointer_attribute_memory_type = 2;
constexpr int pointer_attribute_is_managed = 8;
constexpr unsigned memorytype_host = 1;
constexpr unsigned memorytype_device = 2;
constexpr unsigned memorytype_array = 3;
constexpr unsigned memorytype_unified = 4;

constexpr int device_attribute_can_map_host_memory = 19;
constexpr int device_attribute_unified_addressing = 41;
constexpr int device_attribute_can_use_host_pointer_for_registered_mem = 91;
constexpr int device_attribute_read_only_host_register_supported = 113;
} // namespace cu

/// libcuda, loaded.  Never unloaded (RTLD_NODELETE): the driver keeps
/// process-wide state that outlives any object of ours.
struct LibCuda {
	explicit LibCuda(std::string library);

	std::string library;
	cu::Result (*init)(unsigned flags) = nullptr;
	cu::Result (*device_get_count)(int *count) = nullptr;
	cu::Result (*device_get)(cu::Device *dev, int ordinal) = nullptr;
	cu::Result (*device_get_name)(char *name, int len, cu::Device dev) = nullptr;
	cu::Result (*device_get_attribute)(int *value, int attribute, cu::Device dev) = nullptr;
	cu::Result (*primary_ctx_retain)(cu::Context *ctx, cu::Device dev) = nullptr;
	cu::Result (*primary_ctx_release)(cu::Device dev) = nullptr;
	cu::Result (*ctx_push_current)(cu::Context ctx) = nullptr;
	cu::Result (*ctx_pop_current)(cu::Context *ctx) = nullptr;
	cu::Result (*mem_host_register)(void *p, std::size_t bytes, unsigned flags) = nullptr;
	cu::Result (*mem_host_unregister)(void *p) = nullptr;
	cu::Result (*mem_host_get_device_pointer)(cu::DevicePtr *dptr, void *p,
						  unsigned flags) = nullptr;
	cu::Result (*pointer_get_attribute)(void *data, int attribute, cu::DevicePtr ptr) = nullptr;
	cu::Result (*get_error_name)(cu::Result error, const char **str) = nullptr;
	// CudaCopyEngine's and CudaStreamCopier's.
	cu::Result (*stream_create)(cu::Stream *stream, unsigned flags) = nullptr;
	cu::Result (*stream_destroy)(cu::Stream stream) = nullptr;
	cu::Result (*stream_synchronize)(cu::Stream stream) = nullptr;
	cu::Result (*event_create)(cu::Event *event, unsigned flags) = nullptr;
	cu::Result (*event_destroy)(cu::Event event) = nullptr;
	cu::Result (*event_record)(cu::Event event, cu::Stream stream) = nullptr;
	cu::Result (*event_query)(cu::Event event) = nullptr;
	cu::Result (*event_synchronize)(cu::Event event) = nullptr;
	cu::Result (*memcpy_htod_async)(cu::DevicePtr dst, const void *src, std::size_t bytes,
					cu::Stream stream) = nullptr;

	/// "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED (712)".
	std::string error_name(cu::Result r) const;
};

/// The errno that best says what a CUresult means (EIO when nothing does).
int cuda_errno(cu::Result r);

/// A device's primary context, retained for as long as this lives.
class CudaContext {
public:
	CudaContext(std::shared_ptr<const LibCuda> driver, int ordinal);
	CudaContext(const CudaContext &) = delete;
	CudaContext &operator=(const CudaContext &) = delete;
	CudaContext(CudaContext &&) = delete;
	CudaContext &operator=(CudaContext &&) = delete;
	~CudaContext();

	const LibCuda &driver() const { return *driver_; }
	cu::Device device() const { return device_; }
	cu::Context get() const { return ctx_; }

private:
	std::shared_ptr<const LibCuda> driver_;
	cu::Device device_ = 0;
	cu::Context ctx_ = nullptr;
};

/// Makes a context current on this thread for a scope, then restores.
class CudaCurrent {
public:
	explicit CudaCurrent(const CudaContext &ctx);
	CudaCurrent(const CudaCurrent &) = delete;
	CudaCurrent &operator=(const CudaCurrent &) = delete;
	CudaCurrent(CudaCurrent &&) = delete;
	CudaCurrent &operator=(CudaCurrent &&) = delete;
	~CudaCurrent();

private:
	const CudaContext &ctx_;
};

} // namespace svmbatch::detail
