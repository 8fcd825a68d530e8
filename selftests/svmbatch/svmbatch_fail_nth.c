// SPDX-License-Identifier: GPL-2.0
#include "svmbatch_utils.h"
TEST_HARNESS_MAIN
