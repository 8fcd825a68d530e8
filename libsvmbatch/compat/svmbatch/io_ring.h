/* SPDX-License-Identifier: MIT */
/* The GPU-driven I/O ring's first name, kept for existing programs. */
#ifndef SVMBATCH_IO_RING_FORWARD_H
#define SVMBATCH_IO_RING_FORWARD_H
#include <svmbatch/gpu_io/ring.h>
#endif
