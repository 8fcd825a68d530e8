#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Debian kernels the project supports, resolved from the meta packages so
# that no ABI number is hard-coded (Debian bumps them with every security
# update).
#
# Library:  source tools/vmtest/kernels.sh; kernel_abi 6.12; kernel_fetch 6.1
# CLI:      tools/vmtest/kernels.sh abi|fetch|headers 6.1|6.12

set -euo pipefail

SVMBATCH_CACHE=${SVMBATCH_CACHE:-/var/cache/svmbatch}

# Meta package whose single linux-image-* dependency is the current ABI.
kernel_meta_package() {
	case "$1" in
	6.1) echo linux-image-amd64 ;;
	6.12) echo linux-image-6.12-amd64 ;;
	*)
		echo "kernels.sh: unknown kernel '$1' (expected 6.1 or 6.12)" >&2
		return 1
		;;
	esac
}

# kernel_abi NAME: print the ABI string, e.g. 6.1.0-56-amd64.
kernel_abi() {
	local meta abi
	meta=$(kernel_meta_package "$1") || return 1
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
	local abi
	abi=$(kernel_abi "$1") || return 1
	echo "/usr/src/linux-headers-$abi"
}

# kernel_fetch NAME: download and unpack linux-image-<abi> (never installed
# on the host) and print the directory that holds boot/vmlinuz-<abi> and
# lib/modules/<abi>/. A completed fetch is marked with a stamp file so that a
# second call (or a call after an interrupted one) does the right thing.
kernel_fetch() {
	local abi dir tmp deb
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
	echo "usage: $0 abi|fetch|headers 6.1|6.12" >&2
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
