#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The Debian packages, as an admin and a developer would use them (make
# check, as root; it installs and then purges them on this machine):
# build them as a distribution does (make deb in a release tarball: the
# git archive of the working tree, without .git), install them with apt,
# let DKMS build the module for the headers of each kernel family of
# tools/lib.sh, boot a guest of each kernel with the
# DKMS-built module running the INSTALLED selftests, the installed svmbatch
# command's guest tests and the installed udev rule, build a consumer
# against the installed libsvmbatch-dev with pkg-config and with
# find_package(svmbatch), run the installed svmbatch command, read its
# manual pages with man, then purge everything and check that nothing is
# left.  Prints TAP.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/lib.sh
. tools/lib.sh
top=$PWD
work=$top/build/check-packages
TAP_LOGDIR=$work
pkgs=(svmbatch-dkms libsvmbatch1 libsvmbatch-dev svmbatch-tools python3-svmbatch)
version=$(dpkg-parsechangelog -l debian/changelog -S Version)
upstream=${version%-*}
# The release tarball's tree, where the packages are built.
src=$work/svmbatch-$upstream
rm -rf "$work" && mkdir -p "$work"

# Purge whichever of the packages dpkg knows (installed, or removed with
# their configuration left); a failed purge fails (nothing_left then says
# what stayed).
purge() {
	local p status known=()
	for p in "${pkgs[@]}"; do
		status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) &&
			[[ $status != *not-installed ]] && known+=("$p")
	done
	((${#known[@]} == 0)) || apt-get -q=2 purge -y "${known[@]}" </dev/null
}

# The release tarball of the working tree, unpacked into $src: git archive
# of a tree object holding every file of svmbatch_source_files, written
# through a private index (neither the index nor HEAD change).
tarball() {
	local index=$work/git-index tree
	if [[ ! -e .git ]]; then	# a release tarball already
		svmbatch_source_files | tar --verbatim-files-from -T - -c |
			{ mkdir -p "$src" && tar -x -C "$src"; }
		return
	fi
	svmbatch_source_files | GIT_INDEX_FILE=$index git update-index --add --stdin &&
		tree=$(GIT_INDEX_FILE=$index git write-tree) &&
		git archive --format=tar --prefix="svmbatch-$upstream/" "$tree" | tar -x -C "$work"
}

# As Documentation/quickstart.rst, in the tarball's tree: the build
# dependencies from debian/control, then make deb.
build() {
	tarball && [[ ! -e $src/.git ]] &&
		DEBIAN_FRONTEND=noninteractive apt-get -q=2 build-dep -y "$src" </dev/null &&
		make -C "$src" --no-print-directory deb && ls "$src"/build/deb/*.deb
}

install_pkgs() {
	local debs=() p arch
	for p in "${pkgs[@]}"; do
		arch=$(dpkg --print-architecture)
		[[ $p == svmbatch-dkms ]] && arch=all
		debs+=("$src/build/deb/${p}_${version}_$arch.deb")
	done
	DEBIAN_FRONTEND=noninteractive apt-get -q=2 install -y --no-install-recommends \
		"${debs[@]}" </dev/null &&
		[[ $(dpkg -s "${pkgs[@]}" | grep -c '^Status: install ok installed') == "${#pkgs[@]}" ]] &&
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
	local flags
	[[ -x $work/hold_registration && -x $work/quickstart ]] && return 0
	read -ra flags <<<"$(pkg-config --cflags --libs svmbatch)" || return 1
	g++ -std=c++20 -Wall -Wextra -Werror cli/hold_registration.cpp \
		"${flags[@]}" -o "$work/hold_registration" &&
		g++ -std=c++20 examples/quickstart.cpp "${flags[@]}" -o "$work/quickstart"
}

# guest KERNEL: the DKMS-built module, the installed selftests, and the
# installed command and udev rule (cli/cli_guest_test.sh,
# packaging/udev_rule_test.sh) in a guest.
guest() {
	local abi ko dir=/usr/libexec/svmbatch/selftests selftests files
	abi=$(tools/vmtest/kernels.sh abi "$1") || return 1
	ko=$(modinfo -k "$abi" -n svmbatch) || return 1
	guest_programs || return 1
	echo "DKMS module: $ko"
	case $ko in	# busybox insmod reads only uncompressed modules
	*.xz) xz -dc "$ko" >"$work/svmbatch-$1.ko" ;;
	*.zst) zstd -dc "$ko" >"$work/svmbatch-$1.ko" ;;
	*) cp "$ko" "$work/svmbatch-$1.ko" ;;
	esac
	mapfile -t selftests < <(find "$dir" -type f -executable | sort)
	mapfile -t files < <(svmbatch_guest_files /usr/bin/svmbatch "$work/hold_registration" \
		"$work/quickstart" "$dir" "$dir" /usr/lib/udev/rules.d/60-svmbatch.rules)
	tools/vmtest/run.sh --kernel "$1" --module "$work/svmbatch-$1.ko" \
		--timeout 1200 --test-timeout 400 --log "$work/guest-$1.console" \
		"${selftests[@]}" "${files[@]}" | tee "$work/guest-$1.out"
	# The two scripts must have run (and, as every test, passed).
	grep -qE "^vmtest $1: [0-9]+ passed, 0 failed, [0-9]+ skipped$" "$work/guest-$1.out" &&
		grep -qE "PASS +cli_guest_test.sh .* [1-9][0-9]* passed, 0 failed" "$work/guest-$1.out" &&
		grep -qE "PASS +udev_rule_test.sh .* [1-9][0-9]* passed, 0 failed" "$work/guest-$1.out"
}

consumer_pkg_config() {
	local flags
	read -ra flags <<<"$(pkg-config --cflags --libs svmbatch)" &&
		[[ $(pkg-config --modversion svmbatch) == "$upstream" ]] &&
		g++ -std=c++20 -Wall -Wextra -Werror tools/install-consumer/consumer.cpp \
			"${flags[@]}" -o "$work/consumer-pc" &&
		gcc -std=c11 -Wall -Wextra -Werror tools/install-consumer/consumer_c.c \
			"${flags[@]}" -o "$work/consumer-c-pc" &&
		"$work/consumer-pc" && "$work/consumer-c-pc"
}

consumer_cmake() {
	cmake -S tools/install-consumer -B "$work/consumer-cmake" &&
		cmake --build "$work/consumer-cmake" &&
		grep -q '/usr/lib/.*/cmake/svmbatch' "$work/consumer-cmake/CMakeCache.txt" &&
		"$work/consumer-cmake/consumer" && "$work/consumer-cmake/consumer_c"
}

# The installed package, from outside the tree (Debian's python3, no
# PYTHONPATH): registers, and svmbatch.torch imports with Debian's torch.
python_installed() {
	(cd / && env -u PYTHONPATH /usr/bin/python3 -c '
import svmbatch, svmbatch.torch
assert svmbatch.__file__.startswith("/usr/lib/python3/dist-packages/"), svmbatch.__file__
with svmbatch.Context().register([bytearray(4096)]) as r:
    assert len(r) == 1
print("python3-svmbatch:", svmbatch.__file__)')
}

cli_installed() {
	/usr/bin/svmbatch --version | grep -qx "$upstream" &&
		/usr/bin/svmbatch info &&
		/usr/bin/svmbatch selftest --help
}

# The manual pages the packages install (libsvmbatch-dev: the C API's
# man3, svmbatch-tools: svmbatch(1)), as a user reads them: man-db's man
# (priority important, on every standard Debian system) finds and formats
# them.
man_installed() {
	command -v man >/dev/null || { echo "no man: install man-db"; return 1; }
	[[ $(man -w svmbatch_reg_create) == /usr/share/man/man3/svmbatch_reg_create.3.gz ]] &&
		MANWIDTH=100 man svmbatch_reg_create 2>/dev/null |
		grep -q 'svmbatch_reg_create - register many buffers in one step' &&
		MANWIDTH=100 man 1 svmbatch 2>/dev/null | grep -q '^ *svmbatch - inspect the svmbatch module'
}

# After purge: no package, no DKMS tree, no module, no files of ours.
nothing_left() {
	local left=0 p abi
	for p in "${pkgs[@]}"; do
		dpkg -s "$p" 2>/dev/null | grep -q '^Status: install' && { echo "still installed: $p"; left=1; }
	done
	for f in /usr/src/svmbatch-"$upstream" /var/lib/dkms/svmbatch /usr/include/svmbatch \
		/usr/include/linux/svmbatch.h /usr/bin/svmbatch /usr/libexec/svmbatch \
		/usr/lib/udev/rules.d/60-svmbatch.rules /usr/share/man/man3/libsvmbatch.3.gz \
		/usr/share/man/man1/svmbatch.1.gz; do
		[[ -e $f ]] && { echo "left behind: $f"; left=1; }
	done
	for k in $SVMBATCH_KERNELS; do
		abi=$(tools/vmtest/kernels.sh abi "$k")
		if find "/lib/modules/$abi" -name 'svmbatch.ko*' 2>/dev/null | grep -q .; then
			echo "module left in /lib/modules/$abi"
			left=1
		fi
	done
	return $left
}

# Left by a run that was cut short: a failure here shows in the purge
# step at the end, which tries again.
purge >/dev/null 2>&1
read -ra kernels <<<"$SVMBATCH_KERNELS"
tap_plan $((9 + 2 * ${#kernels[@]}))
tap_step deb-from-tarball build
tap_step install install_pkgs
for k in $SVMBATCH_KERNELS; do
	tap_step "dkms-$k" dkms_kernel "$k"
done
for k in $SVMBATCH_KERNELS; do
	tap_step "guest-$k-dkms-module" guest "$k"
	grep -E "^vmtest $k:" "$work/guest-$k-dkms-module.log" | sed 's/^/# /'
done
tap_step consumer-pkg-config consumer_pkg_config
tap_step consumer-find-package consumer_cmake
tap_step cli-installed cli_installed
tap_step man-installed man_installed
tap_step python-installed python_installed
tap_step purge purge
tap_step nothing-left nothing_left
tap_done check-packages
