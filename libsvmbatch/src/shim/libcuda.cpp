// SPDX-License-Identifier: MIT
// Loading libcuda and holding a device's primary context.
#include "shim/libcuda.hpp"

#include <cerrno>

#include <svmbatch/error.hpp>

#include "shim/dynamic_library.hpp"
#include "shim/runtime_status.hpp"

namespace svmbatch::detail {

LibCuda::LibCuda(std::string lib_name) : library(std::move(lib_name))
{
	DynamicLibrary lib(library, "CUDA driver");

	lib.resolve(Symbol(init, "cuInit"), Symbol(device_get_count, "cuDeviceGetCount"),
		    Symbol(device_get, "cuDeviceGet"), Symbol(device_get_name, "cuDeviceGetName"),
		    Symbol(device_get_attribute, "cuDeviceGetAttribute"),
		    Symbol(primary_ctx_retain, "cuDevicePrimaryCtxRetain"),
		    Symbol(primary_ctx_release, "cuDevicePrimaryCtxRelease",
			   "cuDevicePrimaryCtxRelease_v2"),
		    Symbol(ctx_push_current, "cuCtxPushCurrent", "cuCtxPushCurrent_v2"),
		    Symbol(ctx_pop_current, "cuCtxPopCurrent", "cuCtxPopCurrent_v2"),
		    Symbol(mem_host_register, "cuMemHostRegister", "cuMemHostRegister_v2"),
		    Symbol(mem_host_unregister, "cuMemHostUnregister"),
		    Symbol(mem_host_get_device_pointer, "cuMemHostGetDevicePointer",
			   "cuMemHostGetDevicePointer_v2"),
		    Symbol(pointer_get_attribute, "cuPointerGetAttribute"),
		    Symbol(get_error_name, "cuGetErrorName"),
		    Symbol(stream_create, "cuStreamCreate"),
		    Symbol(stream_destroy, "cuStreamDestroy", "cuStreamDestroy_v2"),
		    Symbol(stream_synchronize, "cuStreamSynchronize"),
		    Symbol(event_create, "cuEventCreate"),
		    Symbol(event_destroy, "cuEventDestroy", "cuEventDestroy_v2"),
		    Symbol(event_record, "cuEventRecord"), Symbol(event_query, "cuEventQuery"),
		    Symbol(event_synchronize, "cuEventSynchronize"),
		    Symbol(memcpy_htod_async, "cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2"));
}

namespace {

/// The CUresults that an errno says better than EIO.
constexpr StatusErrno cuda_errnos[] = {
	{cu::error_invalid_value, EINVAL},
	{cu::error_out_of_memory, ENOMEM},
	{cu::error_host_memory_already_registered, EEXIST},
	{cu::error_host_memory_not_registered, ENOENT},
	{cu::error_not_permitted, EPERM},
	{cu::error_not_supported, EOPNOTSUPP},
	{cu::error_no_device, ENODEV},
	{cu::error_invalid_device, ENODEV},
	{cu::error_stub_library, ENODEV},
	{cu::error_not_initialized, ENODEV},
};

} // namespace

std::string LibCuda::error_name(cu::Result r) const
{
	const char *name = nullptr;

	if (get_error_name(r, &name) != cu::success)
		name = nullptr;
	return status_name(name, "CUDA_ERROR_UNKNOWN", r);
}

int cuda_errno(cu::Result r)
{
	return status_errno(r, cuda_errnos);
}

CudaContext::CudaContext(std::shared_ptr<const LibCuda> driver, int ordinal)
	: driver_(std::move(driver))
{
	const LibCuda &d = *driver_;
	cu::Result r = d.init(0);
	int count = 0;

	if (r == cu::success)
		r = d.device_get_count(&count);
	if (r != cu::success)
		throw Error(cuda_errno(r) == EIO ? ENODEV : cuda_errno(r), Step::GpuOpen,
			    "cuInit: " + d.error_name(r), Error::no_index, r);
	if (ordinal < 0 || ordinal >= count)
		throw Error(ENODEV, Step::GpuOpen,
			    "no CUDA device " + std::to_string(ordinal) + " (" +
				    std::to_string(count) + " present)");
	r = d.device_get(&device_, ordinal);
	if (r == cu::success)
		r = d.primary_ctx_retain(&ctx_, device_);
	if (r != cu::success)
		throw Error(cuda_errno(r), Step::GpuOpen,
			    "primary context of device " + std::to_string(ordinal) + ": " +
				    d.error_name(r),
			    Error::no_index, r);
}

CudaContext::~CudaContext()
{
	driver_->primary_ctx_release(device_);
}

CudaCurrent::CudaCurrent(const CudaContext &ctx) : ctx_(ctx)
{
	cu::Result r = ctx_.driver().ctx_push_current(ctx_.get());

	if (r != cu::success)
		throw Error(cuda_errno(r), Step::GpuMap,
			    "cuCtxPushCurrent: " + ctx_.driver().error_name(r), Error::no_index, r);
}

CudaCurrent::~CudaCurrent()
{
	cu::Context popped = nullptr;

	ctx_.driver().ctx_pop_current(&popped);
}

} // namespace svmbatch::detail
