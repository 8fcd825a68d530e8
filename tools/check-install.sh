#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The installed library works for a consumer: install libsvmbatch into a
# DESTDIR, then build tools/install-consumer against it with pkg-config and
# with CMake's find_package(svmbatch), and run the programs.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
top=$PWD
work=$top/build/install-test
root=$work/root
prefix=/usr/local
passed=0 failed=0

step() {
	local name=$1
	shift
	if "$@" >"$work/$name.log" 2>&1; then
		passed=$((passed + 1))
		echo "ok $name"
	else
		failed=$((failed + 1))
		echo "not ok $name (log: $work/$name.log)"
		tail -n 15 "$work/$name.log" | sed 's/^/    /'
	fi
}

install_lib() {
	cmake -S libsvmbatch -B "$work/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DCMAKE_INSTALL_PREFIX=$prefix -DSVMBATCH_TESTS=OFF \
		-DSVMBATCH_EXAMPLES=OFF &&
		cmake --build "$work/build" -j"$(nproc)" &&
		DESTDIR=$root cmake --install "$work/build"
}

with_pkg_config() {
	local pc="pkg-config --define-prefix"
	export PKG_CONFIG_PATH=$root$prefix/lib/pkgconfig
	# shellcheck disable=SC2046 # pkg-config output is a list of flags
	g++ -std=c++20 -Wall -Wextra -Werror tools/install-consumer/consumer.cpp \
		$($pc --cflags svmbatch) $($pc --libs svmbatch) -o "$work/consumer-pc" &&
		gcc -std=c11 -Wall -Wextra -Werror tools/install-consumer/consumer_c.c \
			$($pc --cflags svmbatch) $($pc --libs --static svmbatch) \
			-o "$work/consumer-c-pc" &&
		LD_LIBRARY_PATH=$root$prefix/lib "$work/consumer-pc" &&
		LD_LIBRARY_PATH=$root$prefix/lib "$work/consumer-c-pc"
}

with_cmake() {
	cmake -S tools/install-consumer -B "$work/consumer-cmake" \
		-DCMAKE_PREFIX_PATH="$root$prefix" &&
		cmake --build "$work/consumer-cmake" &&
		LD_LIBRARY_PATH=$root$prefix/lib "$work/consumer-cmake/consumer" &&
		"$work/consumer-cmake/consumer_c"
}

rm -rf "$work" && mkdir -p "$work"
step install install_lib
step pkg-config with_pkg_config
step find-package with_cmake
echo "check-install: $passed passed, $failed failed"
((failed == 0))
