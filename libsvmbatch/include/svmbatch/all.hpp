// SPDX-License-Identifier: MIT
// svmbatch: register many scattered buffers for GPU and io_uring in one step.
// The GPU and RDMA backends this build lacks (svmbatch/config.h) are left out.
#pragma once

#include <svmbatch/arena.hpp>
#include <svmbatch/buffer.hpp>
#include <svmbatch/config.h>
#include <svmbatch/context.hpp>
#include <svmbatch/diagnostics.hpp>
#include <svmbatch/dmabuf.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/fixed_buffers.hpp>
#if SVMBATCH_HAS_AMDGPU
#include <svmbatch/gpu/amdgpu_backend.hpp>
#endif
#include <svmbatch/gpu/backend.hpp>
#if SVMBATCH_HAS_CUDA
#include <svmbatch/gpu/cuda_backend.hpp>
#endif
#if SVMBATCH_HAS_DRM
#include <svmbatch/gpu/drm_backend.hpp>
#endif
#if SVMBATCH_HAS_HIP
#include <svmbatch/gpu/hip_backend.hpp>
#endif
#if SVMBATCH_HAS_HSA
#include <svmbatch/gpu/hsa_backend.hpp>
#endif
#include <svmbatch/io.hpp>
#include <svmbatch/gpu_io/loop.hpp>
#if SVMBATCH_HAS_RDMA
#include <svmbatch/rdma.hpp>
#endif
#include <svmbatch/reader.hpp>
#include <svmbatch/registration.hpp>
#include <svmbatch/writer.hpp>
