// SPDX-License-Identifier: MIT
// svmbatch: register many scattered buffers for GPU and io_uring in one step.
#pragma once

#include <svmbatch/buffer.hpp>
#include <svmbatch/context.hpp>
#include <svmbatch/diagnostics.hpp>
#include <svmbatch/dmabuf.hpp>
#include <svmbatch/error.hpp>
#include <svmbatch/fixed_buffers.hpp>
#include <svmbatch/gpu/amdgpu_backend.hpp>
#include <svmbatch/gpu/backend.hpp>
#include <svmbatch/gpu/cuda_backend.hpp>
#include <svmbatch/gpu/drm_backend.hpp>
#include <svmbatch/gpu/hsa_backend.hpp>
#include <svmbatch/reader.hpp>
#include <svmbatch/registration.hpp>
