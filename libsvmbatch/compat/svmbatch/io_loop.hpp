// SPDX-License-Identifier: MIT
// The GPU-driven I/O loop's first name, kept for existing programs.
#pragma once
#include <svmbatch/gpu_io/loop.hpp>
