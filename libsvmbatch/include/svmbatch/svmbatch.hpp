// SPDX-License-Identifier: MIT
// svmbatch: register many scattered buffers for GPU and io_uring in one step.
#pragma once

#include <svmbatch/amdgpu_backend.hpp>
#include <svmbatch/buffer.hpp>
#include <svmbatch/context.hpp>
#include <svmbatch/cuda_backend.hpp>
#include <svmbatch/dmabuf.hpp>
#include <svmbatch/drm_backend.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/fixed_buffers.hpp>
#include <svmbatch/gpu.hpp>
#include <svmbatch/hsa_backend.hpp>
#include <svmbatch/reader.hpp>
#include <svmbatch/registration.hpp>
