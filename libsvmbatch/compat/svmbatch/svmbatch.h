/* SPDX-License-Identifier: MIT */
/* The C API's first name, kept for existing programs: <svmbatch/capi.h>. */
#ifndef SVMBATCH_SVMBATCH_H
#define SVMBATCH_SVMBATCH_H
#include <svmbatch/capi.h>
#endif
