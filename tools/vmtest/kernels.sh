#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Debian kernels the project supports, resolved from the meta packages so
# that no ABI number is hard-coded (Debian bumps them with every security
# update).
#
# "debug" is the project's own debug kernel (KASAN, lockdep, kmemleak, fault
# injection), built from Debian's linux-source-6.12 by build-debug-kernel.sh
# and cached by (source package version, hash of its config and recipe).
#
# The families and their meta packages are listed in tools/lib.sh.
#
# Library:  source tools/vmtest/kernels.sh; kernel_abi 6.12; kernel_fetch 6.1
# CLI:      tools/vmtest/kernels.sh abi|fetch|headers KERNEL

set -euo pipefail

SVMBATCH_CACHE=${SVMBATCH_CACHE:-/var/cache/svmbatch}
KERNELS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/lib.sh
. "$KERNELS_DIR/../lib.sh"

# Version of Debian's linux-source-6.12, e.g. 6.12.117-1~deb12u1.
debug_source_version() {
	dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null ||
		{ echo "kernels.sh: linux-source-6.12 is not installed" >&2; return 1; }
}

# Cache key of the debug kernel: a new source package or a changed config
# or recipe means a new build.
debug_key() {
	local ver sum
	ver=$(debug_source_version) || return 1
	sum=$(cat "$KERNELS_DIR/debug.config" "$KERNELS_DIR/build-debug-kernel.sh" |
		sha256sum | cut -c1-12)
	echo "$ver-$sum"
}

# 6.12.117-1~deb12u1 -> 6.12.117-svmbatch-debug (LOCALVERSION in debug.config)
debug_abi() {
	local ver
	ver=$(debug_source_version) || return 1
	echo "${ver%%-*}-svmbatch-debug"
}

# Build the debug kernel unless the cache has it; print its directory.
debug_fetch() {
	local key dir tmp
	key=$(debug_key) || return 1
	dir=$SVMBATCH_CACHE/debug-kernel/$key
	if [[ -f $dir/.complete ]]; then
		echo "$dir"
		return 0
	fi
	mkdir -p "$SVMBATCH_CACHE/debug-kernel"
	tmp=$(mktemp -d "$SVMBATCH_CACHE/debug-kernel/.build-$key.XXXXXX")
	echo "kernels.sh: building the debug kernel ($key) into $tmp" >&2
	if ! "$KERNELS_DIR/build-debug-kernel.sh" "$tmp" >&2; then
		rm -rf "$tmp"
		echo "kernels.sh: the debug kernel build failed" >&2
		return 1
	fi
	if [[ $(cat "$tmp/release") != "$(debug_abi)" ]]; then
		echo "kernels.sh: built $(cat "$tmp/release"), expected $(debug_abi)" >&2
		rm -rf "$tmp"
		return 1
	fi
	touch "$tmp/.complete"
	# Only one debug kernel is kept: older keys are several GiB each.
	find "$SVMBATCH_CACHE/debug-kernel" -mindepth 1 -maxdepth 1 \
		! -name ".build-*" ! -name "$key" -exec rm -rf {} +
	mv -T "$tmp" "$dir"
	echo "$dir"
}

# kernel_abi NAME: print the ABI string, e.g. 6.1.0-56-amd64.
kernel_abi() {
	local meta abi
	[[ $1 == debug ]] && { debug_abi; return; }
	meta=$(svmbatch_kernel_meta "$1") || return 1
	# "Depends: linux-image-6.1.0-56-amd64" -> "6.1.0-56-amd64". Skip the
	# alternatives' "|Depends" form and unsigned/dbg variants.
	abi=$(apt-cache depends "$meta" 2>/dev/null |
		sed -n 's/^ *Depends: linux-image-\([0-9][^ ]*-amd64\)$/\1/p' | head -n1)
	if [[ -z $abi ]]; then
		echo "kernels.sh: cannot resolve the ABI of $1 from '$meta'" \
			"(run apt-get update?)" >&2
		return 1
	fi
	echo "$abi"
}

# kernel_headers NAME: print the KDIR to build modules against.
kernel_headers() {
	local abi dir
	if [[ $1 == debug ]]; then
		dir=$(debug_fetch) || return 1
		echo "$dir/src"
		return
	fi
	abi=$(kernel_abi "$1") || return 1
	echo "/usr/src/linux-headers-$abi"
}

# kernel_fetch NAME: download and unpack linux-image-<abi> (never installed
# on the host) and print the directory that holds boot/vmlinuz-<abi> and
# lib/modules/<abi>/. A completed fetch is marked with a stamp file so that a
# second call (or a call after an interrupted one) does the right thing.
kernel_fetch() {
	local abi dir tmp deb
	[[ $1 == debug ]] && { debug_fetch; return; }
	abi=$(kernel_abi "$1") || return 1
	dir=$SVMBATCH_CACHE/kernels/$abi
	if [[ -f $dir/.complete ]]; then
		echo "$dir"
		return 0
	fi
	mkdir -p "$SVMBATCH_CACHE/kernels"
	tmp=$(mktemp -d "$SVMBATCH_CACHE/kernels/.fetch-$abi.XXXXXX")
	# Download as root: the _apt sandbox user cannot write into our cache.
	if ! (cd "$tmp" && apt-get -q=2 -o APT::Sandbox::User=root \
		download "linux-image-$abi" >&2); then
		rm -rf "$tmp"
		echo "kernels.sh: apt-get download linux-image-$abi failed" >&2
		return 1
	fi
	deb=$(echo "$tmp"/linux-image-"$abi"_*.deb)
	mkdir -p "$tmp/root"
	dpkg-deb -x "$deb" "$tmp/root"
	if [[ ! -f $tmp/root/boot/vmlinuz-$abi || ! -d $tmp/root/lib/modules/$abi ]]; then
		rm -rf "$tmp"
		echo "kernels.sh: $deb lacks boot/vmlinuz-$abi or lib/modules/$abi" >&2
		return 1
	fi
	rm -f "$deb"
	# The package ships no modules.dep (postinst generates it): make one so
	# that the initramfs builder can resolve dependency closures.
	depmod -b "$tmp/root" "$abi"
	touch "$tmp/root/.complete"
	# Atomic publish: concurrent runs either see nothing or a full tree. If
	# another run published first, keep its copy (mv -T refuses a non-empty
	# target instead of moving ours inside it).
	if [[ ! -f $dir/.complete ]]; then
		rm -rf "$dir"
		mv -T "$tmp/root" "$dir" 2>/dev/null || [[ -f $dir/.complete ]]
	fi
	rm -rf "$tmp"
	echo "$dir"
}

kernels_usage() {
	echo "usage: $0 abi|fetch|headers ${SVMBATCH_KERNELS// /|}|debug" >&2
	exit 2
}

kernels_main() {
	[[ $# -eq 2 ]] || kernels_usage
	case "$1" in
	abi) kernel_abi "$2" ;;
	fetch) kernel_fetch "$2" ;;
	headers) kernel_headers "$2" ;;
	*) kernels_usage ;;
	esac
}

# Run the CLI only when executed, not when sourced.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	kernels_main "$@"
fi
