#!/bin/bash
# SPDX-License-Identifier: MIT
#
# libsvmbatch with every optional backend off (SVMBATCH_WITH_CUDA, _HIP, _HSA, _ZE,
# _AMDGPU, _DRM, _RDMA), as a user without CUDA, ROCm, libdrm or rdma-core
# builds it:
# configure and build the library, its tests and the command; run the
# tests (userspace mode); install into a DESTDIR and build
# tools/install-consumer against it with pkg-config and with CMake's
# find_package(svmbatch) (its C++ program reads a file with the Reader);
# check that every report (svmbatch/config.h, the
# command's info, pkg-config's "backends", the CMake package's
# svmbatch_BACKENDS) says: no backend.  Release build, no sanitizers: what
# is checked is what gets built and installed.  SVMBATCH_MINIMAL_BUILD_DIR
# replaces build/minimal.  Prints TAP.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/lib.sh
. tools/lib.sh
svmbatch_ccache
work=${SVMBATCH_MINIMAL_BUILD_DIR:-$PWD/build/minimal}
TAP_LOGDIR=$work
build=$work/build
root=$work/root
prefix=/usr/local
libdir=$prefix/lib

configure() {
	cmake -S libsvmbatch -B "$build" -DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_INSTALL_PREFIX=$prefix -DCMAKE_INSTALL_LIBDIR=lib \
		-DSVMBATCH_WITH_CUDA=OFF -DSVMBATCH_WITH_HIP=OFF -DSVMBATCH_WITH_HSA=OFF \
		-DSVMBATCH_WITH_AMDGPU=OFF -DSVMBATCH_WITH_DRM=OFF -DSVMBATCH_WITH_ZE=OFF \
		-DSVMBATCH_WITH_RDMA=OFF \
		-DSVMBATCH_PYTHON=OFF -DSVMBATCH_EXAMPLES=OFF &&
		grep -x '#define SVMBATCH_BACKENDS ""' "$build/include/svmbatch/config.h" &&
		grep -x '#define SVMBATCH_HAS_RDMA 0' "$build/include/svmbatch/config.h"
}

# The library, the tests and the command; the library needs no libdrm.
build_all() {
	cmake --build "$build" -j"$(nproc)" &&
		! readelf -d "$build/libsvmbatch.so" | grep 'NEEDED.*libdrm'
}

lib_tests() {
	SVMBATCH_TAP=1 "$build/tests/svmbatch_lib_tests"
}

cli_info() {
	local out
	out=$("$build/cli/svmbatch" info) || return 1
	echo "$out"
	grep -qx 'gpu backends:  - (built into the library)' <<<"$out" &&
		grep -qx 'rdma devices:  none (the library was built without the RDMA backend)' <<<"$out"
}

# Installed: no backend header, no libdrm in the .pc, an empty "backends".
install_lib() {
	local pc=$root$libdir/pkgconfig/svmbatch.pc
	DESTDIR=$root cmake --install "$build" &&
		[[ -e $root$prefix/include/svmbatch/gpu/backend.hpp ]] &&
		[[ -e $root$prefix/include/svmbatch/config.h ]] &&
		! ls "$root$prefix"/include/svmbatch/gpu/*_backend.hpp 2>/dev/null &&
		[[ ! -e $root$prefix/include/svmbatch/rdma.hpp ]] &&
		cat "$pc" && grep -qx 'backends=' "$pc" && ! grep -q libdrm "$pc"
}

pc() {
	PKG_CONFIG_PATH=$root$libdir/pkgconfig pkg-config --define-prefix "$@" svmbatch
}

with_pkg_config() {
	local -a cflags libs
	[[ -z $(pc --variable=backends) ]] &&
		read -ra cflags <<<"$(pc --cflags)" &&
		read -ra libs <<<"$(pc --libs)" &&
		g++ -std=c++20 -Wall -Wextra -Werror tools/install-consumer/consumer.cpp \
			"${cflags[@]}" "${libs[@]}" -o "$work/consumer-pc" &&
		gcc -std=c11 -Wall -Wextra -Werror tools/install-consumer/consumer_c.c \
			"${cflags[@]}" "${libs[@]}" -o "$work/consumer-c-pc" &&
		LD_LIBRARY_PATH=$root$libdir "$work/consumer-pc" &&
		LD_LIBRARY_PATH=$root$libdir "$work/consumer-c-pc"
}

# The consumer's CMakeLists checks svmbatch_BACKENDS and the components.
with_cmake() {
	cmake -S tools/install-consumer -B "$work/consumer-cmake" \
		-DCMAKE_PREFIX_PATH="$root$prefix" -DSVMBATCH_EXPECT_BACKENDS= &&
		cmake --build "$work/consumer-cmake" &&
		LD_LIBRARY_PATH=$root$libdir "$work/consumer-cmake/consumer" &&
		"$work/consumer-cmake/consumer_static" &&
		"$work/consumer-cmake/consumer_c"
}

rm -rf "$work" && mkdir -p "$work" || exit 1
# Seven steps; a step that fails leaves out those that need it, and the
# run falls short of the plan.
tap_plan 7
tap_step configure configure &&
	tap_step build build_all &&
	{
		tap_step lib-tests lib_tests
		tap_step cli-info cli_info
		tap_step install install_lib &&
			tap_step pkg-config with_pkg_config &&
			tap_step find-package with_cmake
	}
tap_done check-minimal-build
