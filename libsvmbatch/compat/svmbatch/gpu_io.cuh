// SPDX-License-Identifier: MIT
// The GPU-driven I/O device header's first name, kept for existing programs.
#pragma once
#include <svmbatch/gpu_io/device.cuh>
