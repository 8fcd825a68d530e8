// SPDX-License-Identifier: MIT
// The C++ umbrella's first name, kept for existing programs: <svmbatch/all.hpp>.
#pragma once
#include <svmbatch/all.hpp>
