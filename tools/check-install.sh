#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The installed library works for a consumer: install libsvmbatch (release)
# into a DESTDIR, check what was installed, then build tools/install-consumer
# against it with pkg-config and with CMake's find_package(svmbatch), and run
# the programs.  SVMBATCH_INSTALL_TEST_DIR replaces build/install-test (so a
# second run does not remove the tree of one in progress).  Prints TAP.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/lib.sh
. tools/lib.sh
top=$PWD
work=${SVMBATCH_INSTALL_TEST_DIR:-$top/build/install-test}
TAP_LOGDIR=$work
root=$work/root
prefix=/usr/local
# Fixed, not GNUInstallDirs' guess, so that the paths below hold.
libdir=$prefix/lib

install_lib() {
	cmake -S libsvmbatch -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_INSTALL_PREFIX=$prefix -DCMAKE_INSTALL_LIBDIR=lib \
		-DSVMBATCH_TESTS=OFF -DSVMBATCH_EXAMPLES=OFF \
		-DSVMBATCH_PYTHON=ON -DPython3_EXECUTABLE=/usr/bin/python3 &&
		cmake --build "$work/build" -j"$(nproc)" &&
		DESTDIR=$root cmake --install "$work/build"
}

# What a packager would look at: the files, the soname, the C entry points.
check_layout() {
	local f sym syms bad=0
	for f in include/svmbatch/capi.h include/svmbatch/all.hpp \
		include/svmbatch/svmbatch.h include/svmbatch/svmbatch.hpp \
		include/svmbatch/torch.hpp include/svmbatch/io_ring.h \
		include/linux/svmbatch.h lib/libsvmbatch.a lib/libsvmbatch.so \
		lib/libsvmbatch.so.1 lib/pkgconfig/svmbatch.pc \
		lib/cmake/svmbatch/svmbatchConfig.cmake \
		lib/cmake/svmbatch/svmbatchConfigVersion.cmake \
		lib/cmake/svmbatch/svmbatchTargets.cmake; do
		[[ -e $root$prefix/$f ]] || { echo "missing: $f"; bad=1; }
	done
	readelf -d "$root$libdir/libsvmbatch.so" | grep -q 'SONAME.*\[libsvmbatch\.so\.1\]' ||
		{ echo "SONAME is not libsvmbatch.so.1"; bad=1; }
	# The C API, and the deprecated names it keeps for existing callers.
	# nm's output is read once: grep -q leaving a pipe early would kill nm
	# with SIGPIPE, which pipefail reports as a failure.
	syms=$(nm -D --defined-only "$root$libdir/libsvmbatch.so")
	for sym in svmbatch_ctx_open svmbatch_reg_create svmbatch_reg_destroy \
		svmbatch_fixed_create svmbatch_fixed_destroy svmbatch_last_error \
		svmbatch_register svmbatch_unregister svmbatch_register_fixed \
		svmbatch_unregister_fixed; do
		grep -qw "$sym" <<<"$syms" || { echo "not exported: $sym"; bad=1; }
	done
	return $bad
}

pc() {
	PKG_CONFIG_PATH=$root$libdir/pkgconfig pkg-config --define-prefix "$@" svmbatch
}

with_pkg_config() {
	local -a cflags libs static_libs
	read -ra cflags <<<"$(pc --cflags)" &&
		read -ra libs <<<"$(pc --libs)" &&
		read -ra static_libs <<<"$(pc --libs --static)" || return 1
	# The archive, with only the private flags the .pc gives for it.
	static_libs=("${static_libs[@]/#-lsvmbatch/-l:libsvmbatch.a}")
	echo "cflags: ${cflags[*]}"
	echo "libs: ${libs[*]}"
	echo "static libs: ${static_libs[*]}"
	g++ -std=c++20 -Wall -Wextra -Werror tools/install-consumer/consumer.cpp \
		"${cflags[@]}" "${libs[@]}" -o "$work/consumer-pc" &&
		gcc -std=c11 -Wall -Wextra -Werror tools/install-consumer/consumer_c.c \
			"${cflags[@]}" "${libs[@]}" -o "$work/consumer-c-pc" &&
		gcc -std=c11 -Wall -Wextra -Werror tools/install-consumer/consumer_c.c \
			"${cflags[@]}" "${static_libs[@]}" -o "$work/consumer-c-pc-static" &&
		! readelf -d "$work/consumer-c-pc-static" | grep -q 'NEEDED.*libsvmbatch' &&
		LD_LIBRARY_PATH=$root$libdir "$work/consumer-pc" &&
		LD_LIBRARY_PATH=$root$libdir "$work/consumer-c-pc" &&
		"$work/consumer-c-pc-static"
}

with_cmake() {
	cmake -S tools/install-consumer -B "$work/consumer-cmake" \
		-DCMAKE_PREFIX_PATH="$root$prefix" &&
		cmake --build "$work/consumer-cmake" &&
		LD_LIBRARY_PATH=$root$libdir "$work/consumer-cmake/consumer" &&
		"$work/consumer-cmake/consumer_c"
}

# make install's Python package, where Debian's python3 looks for local
# installs (here under DESTDIR), imported from outside the tree.
python_package() {
	local dir
	dir=$root$prefix/lib/python$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')/dist-packages
	[[ -f $dir/svmbatch/__init__.py && -f $dir/svmbatch/torch.py ]] &&
		ls "$dir"/svmbatch/_svmbatch.*.so >/dev/null &&
		(cd / && PYTHONPATH=$dir /usr/bin/python3 -c 'import svmbatch, sys
assert svmbatch.__file__.startswith(sys.argv[1]), svmbatch.__file__' "$dir")
}

rm -rf "$work" && mkdir -p "$work" || exit 1
tap_plan 5
tap_step install install_lib
tap_step layout check_layout
tap_step pkg-config with_pkg_config
tap_step find-package with_cmake
tap_step python-package python_package
tap_done check-install
