#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Install everything svmbatch needs to build and test on Debian 12.
# Idempotent and quiet: prints only when it installs something; runs
# `apt-get update` only when a package is missing (or cannot be resolved).
# The kernel headers are those of the current ABI of every supported kernel
# family (SVMBATCH_KERNELS in tools/lib.sh), resolved from Debian's meta
# packages.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/vmtest/kernels.sh
source "$HERE/vmtest/kernels.sh"

export DEBIAN_FRONTEND=noninteractive

PACKAGES=(
	build-essential bc kmod cpio xz-utils libelf-dev sparse
	qemu-system-x86 busybox-static e2fsprogs udev util-linux
	liburing-dev linux-source-6.12 cmake libgtest-dev pkg-config g++ clang-tidy
	libdrm-dev libhsa-runtime-dev python3-sphinx libcli11-dev gnuplot-nox
	debhelper dh-dkms dkms dpkg-dev fakeroot adduser
	flex bison libssl-dev
	shellcheck clang-format-14 jq
	# the compiler cache of make check's CMake builds (tools/lib.sh: svmbatch_ccache)
	ccache
	python3-dev pybind11-dev python3-pytest python3-numpy python3-torch libtorch-dev python3-pip
	python3-build python3-venv
	# what transformers imports (tools/python-deps.sh brings it, pinned, from
	# PyPI with huggingface-hub and tokenizers, without their dependencies)
	python3-regex python3-filelock python3-tqdm python3-yaml python3-requests python3-packaging
	libibverbs-dev ibverbs-providers iproute2 libucx-dev
	hipcc libamdhip64-dev
	# Level Zero's loader (ZeBackend's no-driver tests) and ze_api.h (the
	# ABI check of src/shim/libze.hpp); the library needs neither to build
	libze1 libze-dev
)
read -ra KERNELS <<<"$SVMBATCH_KERNELS"

die() {
	echo "install-deps.sh: $*" >&2
	exit 1
}

is_installed() {
	[[ $(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) == installed ]]
}

# linux-headers-<abi> for each kernel family; empty output if the package
# lists do not know the meta packages yet.
header_packages() {
	local k abi
	for k in "${KERNELS[@]}"; do
		abi=$(kernel_abi "$k" 2>/dev/null) || continue
		echo "linux-headers-$abi"
	done
}

missing_packages() {
	local p
	for p in "${PACKAGES[@]}" "$@"; do
		is_installed "$p" || echo "$p"
	done
}

need_root() {
	[[ $(id -u) -eq 0 ]] ||
		die "must run as root to install the missing packages: $*"
}

main() {
	local headers missing
	mapfile -t headers < <(header_packages)
	mapfile -t missing < <(missing_packages "${headers[@]}")

	# Refresh the lists only when something is missing or a kernel family
	# could not be resolved (stale or empty lists); the ABI may then change.
	if [[ ${#missing[@]} -gt 0 || ${#headers[@]} -lt ${#KERNELS[@]} ]]; then
		need_root "${missing[@]:-linux-headers-*}"
		apt-get -q=2 update
		mapfile -t headers < <(header_packages)
		[[ ${#headers[@]} -eq ${#KERNELS[@]} ]] ||
			die "cannot resolve the kernel ABIs of ${KERNELS[*]} from the meta packages"
		mapfile -t missing < <(missing_packages "${headers[@]}")
	fi
	[[ ${#missing[@]} -eq 0 ]] && return 0

	echo "install-deps.sh: installing ${missing[*]}"
	apt-get -q=2 install -y --no-install-recommends "${missing[@]}" </dev/null
}

main "$@"
