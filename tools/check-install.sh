#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The installed library works for a consumer: install libsvmbatch from
# make python's build (build/lib: make lib's, with the Python package; built
# here if make check has not yet, and never a second time) into a DESTDIR,
# check what was installed, then build tools/install-consumer
# (whose C++ program reads a file with the Reader through a ring of its own,
# so it calls liburing itself) against it every way a user would: pkg-config
# with the shared and with the static library, CMake's find_package(svmbatch)
# with svmbatch::svmbatch and svmbatch::svmbatch_static, and find_package
# from the build tree (svmbatch_DIR); run every program.  Then: one version
# everywhere, ldconfig run by a real install only, the Python package.
# SVMBATCH_INSTALL_TEST_DIR replaces build/install-test (so a second run
# does not remove the tree of one in progress), SVMBATCH_INSTALL_BUILD_DIR
# the build (a CMake build directory of libsvmbatch, with the Python
# package, prefix /usr/local, libdir lib).  Prints TAP.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/lib.sh
. tools/lib.sh
top=$PWD
work=${SVMBATCH_INSTALL_TEST_DIR:-$top/build/install-test}
TAP_LOGDIR=$work
root=$work/root
build=${SVMBATCH_INSTALL_BUILD_DIR:-$top/build/lib}
prefix=/usr/local
# Fixed, not GNUInstallDirs' guess, so that the paths below hold.
libdir=$prefix/lib

install_lib() {
	if [[ -z ${SVMBATCH_INSTALL_BUILD_DIR-} ]]; then
		make --no-print-directory python || return 1
	fi
	grep -qx 'CMAKE_INSTALL_LIBDIR:PATH=lib' "$build/CMakeCache.txt" &&
		grep -qx "CMAKE_INSTALL_PREFIX:PATH=$prefix" "$build/CMakeCache.txt" &&
		DESTDIR=$root cmake --install "$build"
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

# A program linked with the static library needs no libsvmbatch.so.
no_libsvmbatch_so() {
	! readelf -d "$1" | grep -q 'NEEDED.*libsvmbatch'
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
		g++ -std=c++20 -Wall -Wextra -Werror tools/install-consumer/consumer.cpp \
			"${cflags[@]}" "${static_libs[@]}" -o "$work/consumer-pc-static" &&
		gcc -std=c11 -Wall -Wextra -Werror tools/install-consumer/consumer_c.c \
			"${cflags[@]}" "${libs[@]}" -o "$work/consumer-c-pc" &&
		gcc -std=c11 -Wall -Wextra -Werror tools/install-consumer/consumer_c.c \
			"${cflags[@]}" "${static_libs[@]}" -o "$work/consumer-c-pc-static" &&
		no_libsvmbatch_so "$work/consumer-pc-static" &&
		no_libsvmbatch_so "$work/consumer-c-pc-static" &&
		LD_LIBRARY_PATH=$root$libdir "$work/consumer-pc" &&
		"$work/consumer-pc-static" &&
		LD_LIBRARY_PATH=$root$libdir "$work/consumer-c-pc" &&
		"$work/consumer-c-pc-static"
}

with_cmake() {
	local dir=$work/consumer-cmake
	cmake -S tools/install-consumer -B "$dir" -DCMAKE_PREFIX_PATH="$root$prefix" \
		-DSVMBATCH_EXPECT_VERSION="$(project_version)" &&
		cmake --build "$dir" &&
		no_libsvmbatch_so "$dir/consumer_static" &&
		no_libsvmbatch_so "$dir/consumer_c" &&
		LD_LIBRARY_PATH=$root$libdir "$dir/consumer" &&
		"$dir/consumer_static" &&
		"$dir/consumer_c"
}

# find_package(svmbatch) with svmbatch_DIR at the build directory, nothing
# installed: the shared program must load the build tree's library.
with_build_tree() {
	local dir=$work/consumer-build-tree
	cmake -S tools/install-consumer -B "$dir" -Dsvmbatch_DIR="$build" \
		-DSVMBATCH_EXPECT_VERSION="$(project_version)" &&
		cmake --build "$dir" &&
		ldd "$dir/consumer" | grep -F "libsvmbatch.so.1 => $build/" &&
		no_libsvmbatch_so "$dir/consumer_static" &&
		"$dir/consumer" &&
		"$dir/consumer_static" &&
		"$dir/consumer_c"
}

# project(VERSION) of the build: the one version everything else must say.
project_version() {
	sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$build/CMakeCache.txt"
}

# One version: project(VERSION) is what the library file, pkg-config, the
# CMake package, svmbatch --version, Python's svmbatch.__version__ and
# debian/changelog say.  The soname stays libsvmbatch.so.<major>.
versions() {
	local v got bad=0 name
	v=$(project_version)
	[[ $v =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "project version: '$v'"; return 1; }
	echo "project(VERSION): $v"
	while read -r name got; do
		echo "$name: $got"
		[[ $got == "$v" ]] || { echo "  $name disagrees"; bad=1; }
	done < <(
		echo "library-file $(readlink "$root$libdir/libsvmbatch.so.${v%%.*}" |
			sed 's/^libsvmbatch\.so\.//')"
		echo "pkg-config $(pc --modversion)"
		echo "cmake-package $(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")$/\1/p' \
			"$root$libdir/cmake/svmbatch/svmbatchConfigVersion.cmake")"
		echo "svmbatch_--version $("$root$prefix/bin/svmbatch" --version)"
		echo "python $(cd / && PYTHONPATH=$(python_dir) /usr/bin/python3 -c \
			'import svmbatch; print(svmbatch.__version__)')"
		echo "debian/changelog $(dpkg-parsechangelog -l debian/changelog -S Version |
			sed 's/-[^-]*$//')"
	)
	readelf -d "$root$libdir/libsvmbatch.so" | grep -q "SONAME.*\[libsvmbatch\.so\.${v%%.*}\]" ||
		{ echo "SONAME is not libsvmbatch.so.${v%%.*}"; bad=1; }
	return $bad
}

# An install to the real prefix, as root, runs ldconfig so that the new
# library is found at once; one into a DESTDIR (a package, this test)
# never does.  A stub ldconfig first in PATH stands in for the real one.
ldconfig_on_install() {
	local stub=$work/ldconfig-stub log=$work/ldconfig-calls
	mkdir -p "$stub" &&
		printf '#!/bin/sh\necho "ldconfig $*" >>"%s"\n' "$log" >"$stub/ldconfig" &&
		chmod +x "$stub/ldconfig" || return 1
	rm -f "$log"
	DESTDIR=$work/root-again PATH=$stub:$PATH cmake --install "$build" >/dev/null || return 1
	[[ ! -e $log ]] || { echo "a DESTDIR install ran: $(cat "$log")"; return 1; }
	echo "DESTDIR install: no ldconfig"
	PATH=$stub:$PATH cmake --install "$build" --prefix "$work/prefix" >/dev/null || return 1
	if [[ $(id -u) == 0 ]]; then
		[[ -s $log ]] || { echo "an install as root did not run ldconfig"; return 1; }
		echo "install as root to $work/prefix: $(tr '\n' ';' <"$log")"
	else
		[[ ! -e $log ]] || { echo "an install as a user ran: $(cat "$log")"; return 1; }
		echo "install as a user: no ldconfig"
	fi
}

# make install's Python package, where Debian's python3 looks for local
# installs (here under DESTDIR), imported from outside the tree.
python_dir() {
	echo "$root$prefix/lib/python$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')/dist-packages"
}

python_package() {
	local dir
	dir=$(python_dir)
	[[ -f $dir/svmbatch/__init__.py && -f $dir/svmbatch/torch.py ]] &&
		ls "$dir"/svmbatch/_svmbatch.*.so >/dev/null &&
		(cd / && PYTHONPATH=$dir /usr/bin/python3 -c 'import svmbatch, sys
assert svmbatch.__file__.startswith(sys.argv[1]), svmbatch.__file__' "$dir")
}

rm -rf "$work" && mkdir -p "$work" || exit 1
tap_plan 8
tap_step install install_lib
tap_step layout check_layout
tap_step pkg-config with_pkg_config
tap_step find-package with_cmake
tap_step build-tree with_build_tree
tap_step versions versions
tap_step ldconfig ldconfig_on_install
tap_step python-package python_package
tap_done check-install
