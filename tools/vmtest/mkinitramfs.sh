#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Build the guest initramfs (gzip'd newc cpio) for tools/vmtest/run.sh.
#
# usage: mkinitramfs.sh --kernel-dir DIR --module PATH|none -o OUT
#                       [--kmod NAME]... [--optional-kmod NAME]...
#                       [--file SRC:DST]... [--expect NAME]...
#                       [--gtest-filter FILTER] [--tests FILE...]
#
#   --kernel-dir  tree printed by `kernels.sh fetch` (boot/ + lib/modules/<abi>/)
#   --module      svmbatch.ko for that ABI; "none" only for runner self-tests
#   --kmod        extra kernel module to ship and load (repeatable)
#   --optional-kmod  the same, skipped with a note where the kernel lacks it
#   --expect      a feature the guest is built to have, for SVMBATCH_EXPECT
#                 (init): its tests fail rather than skip where it is
#                 absent (repeatable; vgem, writeback, odirect and mounts always are)
#   --file        file SRC (symlinks followed) at absolute path DST, with its
#                 shared libraries (repeatable)
#   --gtest-filter  GTEST_FILTER for the tests (init exports it)
#   --tests       test executables, run in the given order; everything after
#                 --tests is taken as a test
#
# Contents: busybox-static with its applet links, coreutils' timeout (busybox's
# lacks --foreground), the tests and their shared libraries (those from
# outside the system's library directories in /usr/lib/svmbatch-tests, which
# /etc/ld.so.cache lists: see copy_libs), svmbatch.ko under extra/, the
# kernel modules the guest needs with their dependency closure (decompressed,
# because busybox modprobe cannot read .ko.xz/.ko.zst), a fresh modules.dep,
# an 8 MiB ext4 image for writeback tests, and tools/vmtest/init.  Nothing
# may be shipped under /tmp, where /init mounts a tmpfs.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Shared libraries that are not in the system's library directories, in
# the guest (see copy_libs).
GUEST_LIBDIR=/usr/lib/svmbatch-tests

# Modules loaded by init, in this order. crc32c is ext4's soft dependency
# (modules.softdep), which modules.dep does not list.
BASE_KMODS=(vgem loop crc32c_generic crc32c-intel ext4)
# Features every guest has, whatever its kernel: vgem (BASE_KMODS, which
# add_kmod refuses to leave out), writeback and odirect (make_wb_image:
# /init mounts its ext4 at /mnt/wb as SVMBATCH_WRITEBACK_DIR) and mounts
# (the tests run as root in the initial namespaces, so a test may mount a
# tmpfs):
# /etc/vmtest/expect, which init exports as SVMBATCH_EXPECT.  run.sh adds
# what the kernel provides (kernel_expects), the Makefile the rest.
BASE_EXPECT=(vgem writeback odirect mounts)

die() {
	echo "mkinitramfs.sh: $*" >&2
	exit 1
}

usage() {
	sed -n '5,20s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
	exit 2
}

# Print the modules.dep line (relative paths: module then its full
# dependency closure) of kernel module NAME; '-' and '_' are equivalent.
kmod_dep_line() {
	local depfile=$1 name=${2//-/_}
	awk -v want="$name" '{
		mod = $1; sub(/:$/, "", mod)
		base = mod; sub(/.*\//, "", base); sub(/\.ko(\.(xz|zst|gz))?$/, "", base)
		gsub(/-/, "_", base)
		if (base == want) { $1 = mod; print; exit }
	}' "$depfile"
}

# Is NAME built into the kernel (so there is nothing to ship)?
kmod_is_builtin() {
	local builtin=$1 name=${2//-/_}
	sed 's/.*\///; s/\.ko$//; s/-/_/g' "$builtin" | grep -qx "$name"
}

# Copy module REL from the kernel tree into the initramfs, decompressed.
copy_kmod() {
	local src=$KMODDIR/$1 rel=${1%.xz}
	rel=${rel%.zst}
	rel=${rel%.gz}
	local dst=$ROOT/lib/modules/$ABI/$rel
	[[ -e $dst ]] && return 0
	mkdir -p "$(dirname "$dst")"
	case "$src" in
	*.ko.xz) xz -dc "$src" >"$dst" ;;
	*.ko.zst) zstd -qdc "$src" >"$dst" ;;
	*.ko.gz) gzip -dc "$src" >"$dst" ;;
	*.ko) cp "$src" "$dst" ;;
	*) die "unexpected module file $src" ;;
	esac
}

# Ship kernel module NAME and its dependencies; record NAME for init.
add_kmod() {
	local name=$1 line rel
	line=$(kmod_dep_line "$KMODDIR/modules.dep" "$name")
	if [[ -z $line ]]; then
		kmod_is_builtin "$KMODDIR/modules.builtin" "$name" && return 0
		# An accelerated variant the kernel may lack (the debug kernel).
		[[ $name == crc32c-intel ]] && return 0
		die "kernel module $name not found in $KMODDIR/modules.dep"
	fi
	for rel in $line; do
		copy_kmod "$rel"
	done
	echo "$name" >>"$ROOT/etc/vmtest/kmods"
}

# Copy an ELF file's shared libraries and dynamic loader; static
# executables and scripts need nothing.  Libraries from the system's
# library directories (/lib*, /usr/lib*) keep their paths.  Any other one
# (the fake CUDA driver and HSA runtime that the library tests link, found
# in the build tree through their RUNPATH; something in /usr/local/lib)
# goes to GUEST_LIBDIR under the name the loader looks for, and the image's
# ld.so.cache lists that directory (make_ld_cache).  So nothing in the
# guest depends on where the checkout lives: kept at its host path, a
# library of a checkout under /tmp would even be hidden by the tmpfs that
# /init mounts there (the tests then exited 127).
copy_libs() {
	local line lib dst
	while read -r line; do
		case $line in
		*"=> not found"*) die "$1 needs ${line%% *}, which the host's loader does not find" ;;
		*"=> /"*) lib=${line#*=> } ;;
		/*) lib=$line ;; # the dynamic loader
		*) continue ;;   # linux-vdso, "not a dynamic executable"
		esac
		lib=${lib%% (0x*}
		case $lib in
		/lib/* | /lib64/* | /usr/lib/* | /usr/lib64/*) dst=$lib ;;
		*) dst=$GUEST_LIBDIR/${lib##*/} ;;
		esac
		if [[ -e $ROOT$dst ]]; then
			cmp -s "$lib" "$ROOT$dst" ||
				die "$1 needs $lib, and another library is shipped as $dst already"
			continue
		fi
		mkdir -p "$ROOT$(dirname "$dst")"
		cp -L "$lib" "$ROOT$dst"
	done < <(ldd "$1" 2>/dev/null || true)
}

# The guest's loader finds GUEST_LIBDIR through ld.so.cache, like a system
# directory (not through LD_LIBRARY_PATH, which a test that clears its
# environment would lose).  Every library shipped there must be in it.
make_ld_cache() {
	local f cached
	[[ -d $ROOT$GUEST_LIBDIR ]] || return 0
	echo "$GUEST_LIBDIR" >"$ROOT/etc/ld.so.conf"
	ldconfig -X -r "$ROOT" || die "ldconfig -r $ROOT failed"
	cached=$(ldconfig -p -C "$ROOT/etc/ld.so.cache")
	for f in "$ROOT$GUEST_LIBDIR"/*; do
		grep -qF " => $GUEST_LIBDIR/${f##*/}" <<<"$cached" ||
			die "$GUEST_LIBDIR/${f##*/} is shipped but not in the guest's ld.so.cache"
	done
}

# /init mounts a tmpfs over /tmp, so nothing shipped there would be seen.
check_tmp_empty() {
	local f
	f=$(find "$ROOT/tmp" -mindepth 1 -print -quit)
	[[ -z $f ]] || die "${f#"$ROOT"} would be hidden by the tmpfs that /init mounts on /tmp"
}

install_busybox() {
	local applet
	mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin}
	cp /bin/busybox "$ROOT/bin/busybox"
	for applet in $(/bin/busybox --list-full); do
		# Relative links keep the tree relocatable.
		[[ -e $ROOT/$applet ]] || ln -s "$(realpath -m --relative-to="$ROOT/$(dirname "$applet")" "$ROOT/bin/busybox")" "$ROOT/$applet"
	done
	# Coreutils' timeout replaces busybox's (which rejects --foreground).
	rm -f "$ROOT/usr/bin/timeout"
	cp /usr/bin/timeout "$ROOT/usr/bin/timeout"
	copy_libs /usr/bin/timeout
}

install_tests() {
	local t name
	: >"$ROOT/etc/vmtest/tests"
	for t in "${TESTS[@]}"; do
		[[ -f $t && -x $t ]] || die "test $t is not an executable file"
		name=$(basename "$t")
		[[ -e $ROOT/tests/$name ]] && die "two tests named $name"
		cp "$t" "$ROOT/tests/$name"
		copy_libs "$t"
		echo "$name" >>"$ROOT/etc/vmtest/tests"
	done
}

# Extra files (--file SRC:DST) that tests call by path.
install_files() {
	local spec src dst
	for spec in "${FILES[@]}"; do
		src=${spec%%:*} dst=${spec#*:}
		[[ $spec == *:* && -f $src && $dst == /* ]] ||
			die "--file $spec: want SRC:DST, an existing SRC and an absolute DST"
		[[ $dst == /tmp/* ]] &&
			die "--file $spec: /init mounts a tmpfs over /tmp, which would hide $dst"
		[[ -e $ROOT$dst ]] && die "--file $spec: $dst is shipped already"
		mkdir -p "$ROOT$(dirname "$dst")"
		cp -L "$src" "$ROOT$dst"
		copy_libs "$src"
	done
}

# What the guest is built to have, one name a line, for init.
write_expect() {
	local e
	: >"$ROOT/etc/vmtest/expect"
	for e in "${BASE_EXPECT[@]}" "${EXPECTS[@]}"; do
		[[ $e =~ ^[a-z0-9_-]+$ ]] || die "--expect $e: want a name of [a-z0-9_-]"
		echo "$e" >>"$ROOT/etc/vmtest/expect"
	done
}

install_svmbatch() {
	[[ $MODULE == none ]] && return 0
	[[ -f $MODULE ]] || die "module $MODULE not found"
	local vermagic dep
	# A module built for the other kernel would only fail inside the guest.
	vermagic=$(modinfo -F vermagic "$MODULE")
	[[ ${vermagic%% *} == "$ABI" ]] ||
		die "$MODULE is built for '${vermagic%% *}', not $ABI"
	mkdir -p "$ROOT/lib/modules/$ABI/extra"
	cp "$MODULE" "$ROOT/lib/modules/$ABI/extra/svmbatch.ko"
	# Ship the kernel modules svmbatch itself depends on.
	for dep in $(modinfo -F depends "$MODULE" | tr ',' ' '); do
		add_kmod "$dep"
	done
}

# modules.dep for the shipped (decompressed) modules only.
regen_modules_dep() {
	local f
	for f in modules.builtin modules.builtin.modinfo modules.order; do
		[[ -f $KMODDIR/$f ]] && cp "$KMODDIR/$f" "$ROOT/lib/modules/$ABI/"
	done
	depmod -b "$ROOT" "$ABI"
}

make_wb_image() {
	truncate -s 8M "$ROOT/wb.img"
	mkfs.ext4 -q -F "$ROOT/wb.img"
}

# /dev/console must exist before init runs, or init starts without stdio
# (the kernel does not mount devtmpfs on an initramfs root by itself).
make_dev_nodes() {
	mkdir -p "$ROOT/dev"
	mknod -m 600 "$ROOT/dev/console" c 5 1 2>/dev/null ||
		echo "mkinitramfs.sh: warning: cannot mknod /dev/console" >&2
}

pack() {
	(cd "$ROOT" && find . -print0 | LC_ALL=C sort -z |
		cpio --null -o -H newc --quiet --owner=0:0) | gzip -1 >"$OUT"
}

main() {
	KDIR='' MODULE='' OUT='' TESTS=() EXTRA_KMODS=() OPTIONAL_KMODS=() FILES=() EXPECTS=()
	GTEST_FILTER=
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--kernel-dir) KDIR=$2; shift 2 ;;
		--module) MODULE=$2; shift 2 ;;
		--kmod) EXTRA_KMODS+=("$2"); shift 2 ;;
		--optional-kmod) OPTIONAL_KMODS+=("$2"); shift 2 ;;
		--file) FILES+=("$2"); shift 2 ;;
		--expect) EXPECTS+=("$2"); shift 2 ;;
		--gtest-filter) GTEST_FILTER=$2; shift 2 ;;
		-o | --out) OUT=$2; shift 2 ;;
		--tests) shift; TESTS=("$@"); break ;;
		*) usage ;;
		esac
	done
	[[ -n $KDIR && -n $MODULE && -n $OUT ]] || usage

	local dirs=("$KDIR"/lib/modules/*/)
	[[ ${#dirs[@]} -eq 1 && -d ${dirs[0]} ]] || die "expected one lib/modules/<abi> in $KDIR"
	ABI=$(basename "${dirs[0]}")
	KMODDIR=$KDIR/lib/modules/$ABI
	[[ -f $KMODDIR/modules.dep ]] || die "$KMODDIR/modules.dep missing (fetch with kernels.sh)"

	ROOT=$(mktemp -d)
	trap 'rm -rf "$ROOT"' EXIT
	# mktemp's 0700 would become the guest's /: tests run as other users too.
	chmod 755 "$ROOT"
	mkdir -p "$ROOT"/{etc/vmtest,proc,sys,tmp,mnt/wb,tests,lib/modules/"$ABI"}
	: >"$ROOT/etc/vmtest/kmods"

	install_busybox
	install_tests
	install_files
	local m
	for m in "${BASE_KMODS[@]}" "${EXTRA_KMODS[@]}"; do
		add_kmod "$m"
	done
	for m in "${OPTIONAL_KMODS[@]}"; do
		if [[ -n $(kmod_dep_line "$KMODDIR/modules.dep" "$m") ]] ||
			kmod_is_builtin "$KMODDIR/modules.builtin" "$m"; then
			add_kmod "$m"
		else
			echo "mkinitramfs.sh: note: kernel $ABI has no $m (optional)" >&2
		fi
	done
	install_svmbatch
	write_expect
	printf '%s\n' "$GTEST_FILTER" >"$ROOT/etc/vmtest/gtest_filter"
	make_ld_cache
	check_tmp_empty
	regen_modules_dep
	make_wb_image
	make_dev_nodes
	install -m 755 "$HERE/init" "$ROOT/init"
	pack
}

main "$@"
