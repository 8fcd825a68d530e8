#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The Debian packages, as an admin and a developer would use them (make
# check, as root; it installs and then purges them on this machine):
# build them (make deb), install them with apt, let DKMS build the module
# for the 6.1 and 6.12 headers, boot a guest of each kernel with the
# DKMS-built module running the INSTALLED selftests, the installed svmbatch
# command's guest tests and the installed udev rule, build a consumer
# against the installed libsvmbatch-dev with pkg-config and with
# find_package(svmbatch), run the installed svmbatch command, then purge
# everything and check that nothing is left.  Prints TAP.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
top=$PWD
work=$top/build/check-packages
pkgs=(svmbatch-dkms libsvmbatch1 libsvmbatch-dev svmbatch-tools)
version=$(dpkg-parsechangelog -l debian/changelog -S Version)
upstream=${version%-*}
n=0 failed=0
rm -rf "$work" && mkdir -p "$work"

t() {	# t NAME CMD...: one TAP test, output in $work/NAME.log
	local name=$1
	shift
	n=$((n + 1))
	if "$@" >"$work/$name.log" 2>&1; then
		echo "ok $n $name"
	else
		echo "not ok $n $name (log: $work/$name.log)"
		tail -n 20 "$work/$name.log" | sed 's/^/#   /'
		failed=$((failed + 1))
	fi
}

purge() {
	apt-get -q=2 purge -y "${pkgs[@]}" </dev/null || true
}

# As Documentation/quickstart.rst: the build dependencies from
# debian/control, then make deb.
build() {
	DEBIAN_FRONTEND=noninteractive apt-get -q=2 build-dep -y ./ </dev/null &&
		make --no-print-directory deb && ls build/deb/*.deb
}

install_pkgs() {
	local debs=()
	for p in "${pkgs[@]}"; do
		debs+=("$top/build/deb/${p}_${version}_$( [[ $p == svmbatch-dkms ]] && echo all || dpkg --print-architecture).deb")
	done
	DEBIAN_FRONTEND=noninteractive apt-get -q=2 install -y --no-install-recommends \
		"${debs[@]}" </dev/null &&
		dpkg -s "${pkgs[@]}" | grep -c '^Status: install ok installed' | grep -qx 4 &&
		getent group svmbatch &&
		test -f /usr/lib/udev/rules.d/60-svmbatch.rules
}

# dkms KERNEL: DKMS builds and installs the module for that kernel's headers.
dkms_kernel() {
	local abi
	abi=$(tools/vmtest/kernels.sh abi "$1") || return 1
	dkms build -m svmbatch -v "$upstream" -k "$abi" &&
		dkms install -m svmbatch -v "$upstream" -k "$abi" --force &&
		dkms status -m svmbatch -v "$upstream" -k "$abi" | grep -q installed &&
		modinfo -k "$abi" -F vermagic svmbatch | grep -q "^$abi "
}

# Programs the guest tests run, built against the installed libsvmbatch-dev:
# the command's test helper, and the quickstart program exactly as
# Documentation/quickstart.rst builds it.
guest_programs() {
	[[ -x $work/hold_registration && -x $work/quickstart ]] && return 0
	g++ -std=c++20 -Wall -Wextra -Werror tools/cli/hold_registration.cpp \
		$(pkg-config --cflags --libs svmbatch) -o "$work/hold_registration" &&
		g++ -std=c++20 examples/quickstart.cpp $(pkg-config --cflags --libs svmbatch) \
			-o "$work/quickstart"
}

# guest KERNEL: the DKMS-built module, the installed selftests, and the
# installed command and udev rule (tools/cli/cli_guest_test.sh,
# packaging/udev_rule_test.sh) in a guest.
guest() {
	local abi ko dir=/usr/libexec/svmbatch/selftests
	abi=$(tools/vmtest/kernels.sh abi "$1") || return 1
	ko=$(modinfo -k "$abi" -n svmbatch) || return 1
	guest_programs || return 1
	echo "DKMS module: $ko"
	case $ko in	# busybox insmod reads only uncompressed modules
	*.xz) xz -dc "$ko" >"$work/svmbatch-$1.ko" ;;
	*.zst) zstd -dc "$ko" >"$work/svmbatch-$1.ko" ;;
	*) cp "$ko" "$work/svmbatch-$1.ko" ;;
	esac
	tools/vmtest/run.sh --kernel "$1" --module "$work/svmbatch-$1.ko" \
		--timeout 1200 --test-timeout 400 --log "$work/guest-$1.console" \
		--file /usr/bin/svmbatch:/usr/bin/svmbatch \
		--file "$work/hold_registration:/usr/libexec/svmbatch/tests/hold_registration" \
		--file "$work/quickstart:/usr/libexec/svmbatch/tests/quickstart" \
		--file "$dir/svmbatch_errno:$dir/svmbatch_errno" \
		--file "$dir/svmbatch_io_uring:$dir/svmbatch_io_uring" \
		--file /usr/lib/udev/rules.d/60-svmbatch.rules:/usr/lib/udev/rules.d/60-svmbatch.rules \
		--file /lib/systemd/systemd-udevd:/lib/systemd/systemd-udevd \
		--file /usr/bin/udevadm:/usr/bin/udevadm \
		--file /usr/bin/setpriv:/usr/bin/setpriv \
		$(find "$dir" -type f -executable | sort) \
		tools/cli/cli_guest_test.sh packaging/udev_rule_test.sh |
		tee "$work/guest-$1.out"
	grep -qE "^vmtest $1: [0-9]+ passed, 0 failed, [0-9]+ skipped$" "$work/guest-$1.out" &&
		grep -qE "PASS +cli_guest_test.sh .* 16 passed, 0 failed" "$work/guest-$1.out" &&
		grep -qE "PASS +udev_rule_test.sh .* 8 passed, 0 failed" "$work/guest-$1.out"
}

consumer_pkg_config() {
	local cflags libs
	cflags=$(pkg-config --cflags svmbatch) && libs=$(pkg-config --libs svmbatch) &&
		[[ $(pkg-config --modversion svmbatch) == "$upstream" ]] &&
		g++ -std=c++20 -Wall -Wextra -Werror tools/install-consumer/consumer.cpp \
			$cflags $libs -o "$work/consumer-pc" &&
		gcc -std=c11 -Wall -Wextra -Werror tools/install-consumer/consumer_c.c \
			$cflags $libs -o "$work/consumer-c-pc" &&
		"$work/consumer-pc" && "$work/consumer-c-pc"
}

consumer_cmake() {
	cmake -S tools/install-consumer -B "$work/consumer-cmake" &&
		cmake --build "$work/consumer-cmake" &&
		grep -q '/usr/lib/.*/cmake/svmbatch' "$work/consumer-cmake/CMakeCache.txt" &&
		"$work/consumer-cmake/consumer" && "$work/consumer-cmake/consumer_c"
}

cli_installed() {
	/usr/bin/svmbatch --version | grep -qx "$upstream" &&
		/usr/bin/svmbatch info &&
		/usr/bin/svmbatch selftest --help
}

# After purge: no package, no DKMS tree, no module, no files of ours.
nothing_left() {
	local left=0 p abi
	for p in "${pkgs[@]}"; do
		dpkg -s "$p" 2>/dev/null | grep -q '^Status: install' && { echo "still installed: $p"; left=1; }
	done
	for f in /usr/src/svmbatch-"$upstream" /var/lib/dkms/svmbatch /usr/include/svmbatch \
		/usr/include/linux/svmbatch.h /usr/bin/svmbatch /usr/libexec/svmbatch \
		/usr/lib/udev/rules.d/60-svmbatch.rules; do
		[[ -e $f ]] && { echo "left behind: $f"; left=1; }
	done
	for k in 6.1 6.12; do
		abi=$(tools/vmtest/kernels.sh abi "$k")
		if find "/lib/modules/$abi" -name 'svmbatch.ko*' 2>/dev/null | grep -q .; then
			echo "module left in /lib/modules/$abi"
			left=1
		fi
	done
	return $left
}

purge >/dev/null 2>&1	# a run that was cut short
t build build
t install install_pkgs
for k in 6.1 6.12; do
	t "dkms-$k" dkms_kernel "$k"
done
for k in 6.1 6.12; do
	t "guest-$k-dkms-module" guest "$k"
	grep -E "^vmtest $k:" "$work/guest-$k-dkms-module.log" | sed 's/^/# /'
done
t consumer-pkg-config consumer_pkg_config
t consumer-find-package consumer_cmake
t cli-installed cli_installed
t purge purge
t nothing-left nothing_left
echo "1..$n"
echo "# check-packages: $((n - failed)) passed, $failed failed"
((failed == 0))
