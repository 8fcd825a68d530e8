#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Gather what the GPU machine lacks into build/device-deps, which the device
# tool carries: Debian's static liburing, libdrm and libdrm_amdgpu with their
# headers and pkg-config files, Debian's pkg-config itself (pkgconf), ROCm's
# HSA headers and googletest's sources.  The GPU machine (Ubuntu, CUDA) has
# g++, nvcc, CMake and ninja but none of these, and no network.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/device-deps
lib=/usr/lib/$(gcc -dumpmachine)
rm -rf "$out"
mkdir -p "$out"/{include,lib/pkgconfig,pkgconf,src}
cp "$lib"/liburing.a "$lib"/libdrm.a "$lib"/libdrm_amdgpu.a "$out"/lib/
cp -r /usr/include/liburing.h /usr/include/liburing /usr/include/libdrm \
	/usr/include/xf86drm.h /usr/include/hsa "$out"/include/
cp -r /usr/src/googletest/googletest "$out"/src/
cp /usr/bin/pkgconf "$lib"/libpkgconf.so.3 "$out"/pkgconf/
# Debian's .pc files, moved to wherever the folder lands: ${pcfiledir} is
# the folder of the .pc file, so the prefix is the carried folder.
# shellcheck disable=SC2016 # ${...} are pkg-config's variables, not the shell's
for pc in liburing libdrm libdrm_amdgpu; do
	sed -e 's|^prefix=.*|prefix=${pcfiledir}/../..|' \
		-e 's|^libdir=.*|libdir=${prefix}/lib|' \
		-e 's|^includedir=.*|includedir=${prefix}/include|' \
		"$lib/pkgconfig/$pc.pc" >"$out/lib/pkgconfig/$pc.pc"
done
# pytest for the Python tests with the venv's interpreter (pure Python,
# from PyPI; the venv may lack it): run.sh uses it when the venv has none.
/usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
	--target "$out"/pytest 'pytest==8.3.3'
# The Python package as pip users get it: the sdist (pyproject.toml), and
# the build backend's wheels for an offline `pip install --no-index
# --no-build-isolation` (run.sh), pinned as pyproject.toml pins them.
/usr/bin/python3 -m build --sdist --outdir "$out"/dist . >/dev/null
/usr/bin/python3 -m pip download --quiet --disable-pip-version-check --no-deps \
	--dest "$out"/wheels 'scikit-build-core==0.11.6' 'pybind11==2.13.6' \
	'packaging==24.2' 'pathspec==0.12.1' 'tomli==2.2.1' 'exceptiongroup==1.2.2'
# The peer loaders of bench/loaders_bench.py, for the venv's CPython 3.12,
# and what they need that the venv lacks (typer for fastsafetensors,
# humanize for runai), pinned: their wheels from PyPI, installed offline.
/usr/bin/python3 -m pip download --quiet --disable-pip-version-check --no-deps \
	--python-version 3.12 --only-binary=:all: --platform manylinux_2_28_x86_64 \
	--platform manylinux2014_x86_64 --dest "$out"/peers \
	'instanttensor==0.2.2' 'fastsafetensors==0.5.0' 'runai-model-streamer==0.17.1' \
	'typer==0.29.2' 'click==8.3.1' 'rich==15.0.0' 'markdown-it-py==4.3.0' 'mdurl==0.1.2' \
	'pygments==2.21.0' 'shellingham==1.5.4' 'annotated-doc==0.0.7' 'humanize==4.17.0'
du -sh "$out"
# The commit the device run measures (results name it).
echo "$(git rev-parse HEAD)$(git diff --quiet HEAD -- libsvmbatch tools examples || echo -dirty)" >"$out"/COMMIT
