#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The guest tests do not depend on where the checkout lives.  A copy of this
# working tree (svmbatch_source_files of tools/lib.sh, as `make deb` takes
# them) under /tmp builds the library's googletest binary (ASan + UBSan, as
# for vmtest-one), and a guest runs the binary in kernel mode, booted by
# that copy's tools/vmtest/run.sh with this checkout's module (make
# kmod-built: the build make check made already).  /tmp is the hard
# case: the guest's /init mounts a tmpfs over it, so a library that the
# image kept at its host path there is hidden (the binary then exits 127:
# "libsvmbatch_fake_cuda.so: cannot open shared object file").
#
# usage: tools/check-path-independence.sh [--kernel KERNEL] [--keep]
#
#   --kernel  the guest's kernel (default: the last of SVMBATCH_KERNELS)
#   --keep    leave the copy and its build in /tmp (its path is printed)
#
# Only what the guest runs is built in the copy: the test binary with its
# fakes (no examples, command or benchmark).  The guest runs the tests
# that load what the binary finds through its RUNPATH: the kernel-mode
# registrations and the backends over the fakes they dlopen (GTEST_FILTER
# below); the rest of the suite says nothing of paths and runs in the
# guests of make check.  About 3 minutes on the busy 2-core machine.  The guest's console is kept in
# build/check/path-independence-<kernel>.console of this checkout.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=tools/lib.sh
. tools/lib.sh
svmbatch_ccache
top=$PWD
kernel=${SVMBATCH_KERNELS##* } keep=0
while [[ $# -gt 0 ]]; do
	case $1 in
	--kernel) kernel=$2; shift 2 ;;
	--keep) keep=1; shift ;;
	*) sed -n '14,17s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
	esac
done

start=$SECONDS
work=$(mktemp -d /tmp/svmbatch-path-check.XXXXXX)
src=$work/src
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	if ((keep)); then echo "kept: $src"; else rm -rf "$work"; fi
}
trap cleanup EXIT

echo "copying the working tree to $src"
mkdir -p "$src"
svmbatch_source_files | tar --verbatim-files-from -T - -c | tar -x -C "$src"

abi=$(tools/vmtest/kernels.sh abi "$kernel")
make --no-print-directory kmod-built KERNEL="$kernel" >"$work/kmod.log" 2>&1 ||
	{ tail -n 30 "$work/kmod.log"; exit 1; }
module=$top/build/kmod/$abi/test/svmbatch.ko
echo "module: $module ($(tail -n 1 "$work/kmod.log"))"

# lib-asan's configuration (Makefile: LIB_ASAN_OUT), the test binary only,
# and at -O0 without -g (no CMAKE_BUILD_TYPE): a third of the compile time
# of RelWithDebInfo, and where the files are does not depend on it.
echo "building svmbatch_lib_tests (ASan + UBSan, -O0) in $src/build/lib-asan"
lib=$src/build/lib-asan
{
	cmake -S "$src/libsvmbatch" -B "$lib" -DCMAKE_BUILD_TYPE= \
		-DSVMBATCH_SANITIZE=ON -DSVMBATCH_EXAMPLES=OFF -DSVMBATCH_CLI=OFF &&
		cmake --build "$lib" --target svmbatch_lib_tests -j"$(nproc)"
} >"$work/lib.log" 2>&1 || { tail -n 30 "$work/lib.log"; exit 1; }
test=$lib/tests/svmbatch_lib_tests
echo "RUNPATH of the test binary: $(readelf -d "$test" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"
echo "built in $((SECONDS - start)) s"

mkdir -p "$top/build/check"
console=$top/build/check/path-independence-$kernel.console
out=$work/guest.out
rc=0
filter='KernelModeTest.*:Cuda/*:Hip/*:FakeHip/*:Ze/*:FakeZe.*:Hsa*:Rdma*:FakeVerbs.*:DrmBackend*'
"$src/tools/vmtest/run.sh" --kernel "$kernel" --module "$module" \
	--timeout 1200 --test-timeout 400 --log "$console" --gtest-filter "$filter" \
	"$test" 2>&1 | tee "$out" || rc=$?

if ((rc == 0)) && grep -qE '^  PASS +svmbatch_lib_tests ' "$out" &&
	grep -qE "^vmtest $kernel: [1-9][0-9]* passed, 0 failed, [0-9]+ skipped$" "$out"; then
	echo "PASS: svmbatch_lib_tests built in $src passed in the $kernel guest" \
		"($((SECONDS - start)) s in all)"
	exit 0
fi
# The loader's error, or a backend's when dlopen cannot find a fake.
lost='error while loading shared libraries|libsvmbatch[^ :]*\.so[^ :]*: cannot open shared object file'
if grep -qE "$lost" "$console"; then
	echo "FAIL: in the guest, svmbatch_lib_tests (built in $src) cannot find its" \
		"shared libraries: the guest depends on where the checkout lives" \
		"(tools/vmtest/mkinitramfs.sh: copy_libs)"
	grep -E "$lost" "$console" | head -n 10 | sed 's/^/    /'
fi
echo "FAIL: svmbatch_lib_tests built in $src did not pass in the $kernel guest" \
	"(run.sh rc $rc; console: $console)"
exit 1
