#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Build the debug guest kernel (KASAN, lockdep, kmemleak, fault injection,
# gup_test) from Debian's linux-source-6.12 into OUTDIR, laid out like an
# unpacked image package so run.sh boots it like the others:
#   OUTDIR/boot/vmlinuz-<release>, OUTDIR/lib/modules/<release>/,
#   OUTDIR/src (the built tree: KDIR for out-of-tree modules).
# usage: build-debug-kernel.sh OUTDIR     (kernels.sh calls it, and caches)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FRAGMENT=$HERE/debug.config
TARBALL=${KSRC_TAR:-/usr/src/linux-source-6.12.tar.xz}
OUT=$1
SRC=$OUT/src
JOBS=$(nproc)

log() { echo "build-debug-kernel: $*" >&2; }

mkdir -p "$SRC"
start=$SECONDS
log "unpacking $TARBALL"
tar -xJf "$TARBALL" -C "$SRC" --strip-components=1

cd "$SRC"
make -s x86_64_defconfig
scripts/kconfig/merge_config.sh -m -O . .config "$FRAGMENT" >/dev/null
make -s olddefconfig

# Every option the fragment asks for must have survived olddefconfig.
missing=0
while IFS= read -r line; do
	if ! grep -qxF "$line" .config; then
		log "option lost by olddefconfig: $line"
		missing=1
	fi
done < <(grep -E '^CONFIG_[A-Z0-9_]+=y$' "$FRAGMENT")
((missing == 0)) || exit 1

log "building with $JOBS jobs (tens of minutes on 2 cores)"
make -s -j"$JOBS" bzImage modules
release=$(make -s kernelrelease)
make -s modules_install INSTALL_MOD_PATH="$OUT" INSTALL_MOD_STRIP=1 DEPMOD=/sbin/depmod
mkdir -p "$OUT/boot"
cp arch/x86/boot/bzImage "$OUT/boot/vmlinuz-$release"
echo "$release" >"$OUT/release"
log "built $release in $((SECONDS - start)) s"
