#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Gather what the GPU machine lacks into build/device-deps, which the device
# tool carries: Debian's static liburing, libdrm and libdrm_amdgpu with their
# headers, ROCm's HSA headers and googletest's sources.  The GPU machine
# (Ubuntu, CUDA) has g++, nvcc and CMake but none of these, and no network.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/device-deps
lib=/usr/lib/$(gcc -dumpmachine)
rm -rf "$out"
mkdir -p "$out"/{include,lib,src}
cp "$lib"/liburing.a "$lib"/libdrm.a "$lib"/libdrm_amdgpu.a "$out"/lib/
cp -r /usr/include/liburing.h /usr/include/liburing /usr/include/libdrm \
	/usr/include/xf86drm.h /usr/include/hsa "$out"/include/
cp -r /usr/src/googletest/googletest "$out"/src/
du -sh "$out"
# The commit the device run measures (results name it).
echo "$(git rev-parse HEAD)$(git diff --quiet HEAD -- libsvmbatch tools examples || echo -dirty)" >"$out"/COMMIT
