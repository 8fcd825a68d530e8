#!/bin/bash
# SPDX-License-Identifier: MIT
#
# make check: every test of the project, ending with one summary line
# "N passed, N failed, N skipped".  Each host step is one TAP line and
# counts as one test; the host programs that print TAP (the library tests,
# the command's, check-install.sh, check-packages.sh) and each guest
# contribute their subtests.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/lib.sh
. tools/lib.sh
KERNELS=${KERNELS:-$SVMBATCH_KERNELS debug}
TAP_LOGDIR=build/check
mkdir -p "$TAP_LOGDIR"

# The subtests of the TAP programs and the guests; the steps are counted
# by tools/lib.sh (TAP_N, TAP_FAILED, TAP_SKIPPED).
passed=0 failed=0 skipped=0
failures=()

summary() {
	local steps
	read -ra steps <<<"$TAP_FAILURES"
	failures+=("${steps[@]}")
	((${#failures[@]})) && echo "failed: ${failures[*]}"
	echo "$((passed + TAP_N - TAP_FAILED - TAP_SKIPPED)) passed," \
		"$((failed + TAP_FAILED)) failed, $((skipped + TAP_SKIPPED)) skipped"
	((failed + TAP_FAILED == 0))
}

# tap_program NAME CMD...: a host test program printing TAP
# (SVMBATCH_TAP=1), counted per test; output in build/check/NAME.log
tap_program() {
	local name=$1 start=$SECONDS log="$TAP_LOGDIR/$1.log" rc p f s
	shift
	SVMBATCH_TAP=1 "$@" >"$log" 2>&1
	rc=$?
	p=$(grep -cE '^ok [0-9]+' "$log")
	s=$(grep -cE '^ok [0-9]+ .*# SKIP' "$log")
	f=$(grep -cE '^not ok [0-9]+' "$log")
	p=$((p - s))
	if ((rc && !f)); then
		f=1 # died outside a test (sanitizer report at exit, crash)
	fi
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
	echo "$name: $p passed, $f failed, $s skipped (rc $rc, $((SECONDS - start)) s)"
	if ((f)); then
		failures+=("$name")
		grep -E '^not ok|^#' "$log" | head -n 40 | sed 's/^/    /'
		tail -n 15 "$log" | sed 's/^/    /'
	fi
	grep -E '# SKIP' "$log" | sed 's/^/    skip: /' | head -n 20
}

# guest KERNEL: the selftests in a guest, counted per subtest
guest() {
	local k=$1
	local log="$TAP_LOGDIR/vmtest-$k.log" start=$SECONDS summary p f s
	make --no-print-directory vmtest-one KERNEL="$k" >"$log" 2>&1
	summary=$(grep -E "^vmtest $k: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$" "$log" | tail -n 1)
	if [[ -z $summary ]]; then
		failed=$((failed + 1))
		failures+=("vmtest-$k")
		echo "FAIL vmtest-$k: no summary line, last lines of $log:"
		tail -n 40 "$log" | sed 's/^/    /'
		return
	fi
	read -r p f s < <(sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped/\1 \2 \3/' <<<"$summary")
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
	echo "$summary ($((SECONDS - start)) s, log $log)"
	if ((f)); then
		failures+=("vmtest-$k")
		grep -E "^(FAIL|not ok|#  +FAIL)|BUG:|WARNING:" "$log" | head -n 40 | sed 's/^/    /'
	fi
	grep -E "^# SKIP|# SKIP " "$log" | sort | uniq -c | sed 's/^/    skip: /' | head -n 20
}

if ! tap_step deps tools/install-deps.sh; then
	echo "cannot install the build dependencies; see $TAP_LOGDIR/deps.log"
	summary
	exit 1
fi
tap_step shellcheck make --no-print-directory shellcheck
tap_step uapi-header make --no-print-directory uapi-check
tap_step checkpatch make --no-print-directory checkpatch
tap_step format-check make --no-print-directory format-check
tap_step kernel-doc make --no-print-directory kernel-doc
# The debug kernel is built once per machine (cached); the first build
# takes tens of minutes.
if [[ " $KERNELS " == *" debug "* ]]; then
	tap_step debug-kernel tools/vmtest/kernels.sh fetch debug
fi
# Each module is built here, once: sparse, the guests and the
# path-independence check reuse these builds (make kmod-built).
for k in $KERNELS; do
	tap_step "kmod-$k-W1" make --no-print-directory kmod-one KERNEL="$k"
	if [[ $k != debug ]] && command -v sparse >/dev/null; then
		tap_step "kmod-$k-sparse" make --no-print-directory sparse-one KERNEL="$k"
	fi
done
tap_step selftests-build make --no-print-directory selftests
tap_step lib-build make --no-print-directory lib
# make lib compiles the CUDA programs where CMake finds nvcc.
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
	tap_step cuda-programs make --no-print-directory cuda-programs
else
	tap_skip cuda-programs "no nvcc (CUDA toolkit) on this machine: make lib built no CUDA program"
fi
# make lib compiles the HIP example where hipcc is (make deps installs it).
if command -v hipcc >/dev/null; then
	tap_step hip-programs make --no-print-directory hip-programs
else
	tap_skip hip-programs "no hipcc (Debian: hipcc) on this machine: make lib built no HIP program"
fi
tap_step lib-asan-build make --no-print-directory lib-asan
tap_step lib-tsan-build make --no-print-directory lib-tsan
tap_step lib-clang-tidy make --no-print-directory lib-tidy
tap_program lib-install tools/check-install.sh
# A build with every optional GPU backend off (no ROCm, no libdrm headers
# needed) builds, passes its tests and says it has no backends.
tap_program minimal-build tools/check-minimal-build.sh
tap_step htmldocs make --no-print-directory htmldocs
if [[ -x build/lib-asan/tests/svmbatch_lib_tests ]]; then
	tap_program lib-tests-host build/lib-asan/tests/svmbatch_lib_tests
fi
# HIP without an AMD GPU: Debian's runtime on its no-device path (in a
# process of its own), and the HIP example in userspace mode (the library,
# the reads, the byte check; the GPU step skips, saying why).
if [[ -x build/lib-asan/tests/svmbatch_hip_runtime_tests ]]; then
	tap_program hip-runtime-host build/lib-asan/tests/svmbatch_hip_runtime_tests
fi
if [[ -x build/lib-asan/examples/hip_scatter_read ]]; then
	tap_program hip-scatter-read-host build/lib-asan/examples/hip_scatter_read --mode userspace
else
	tap_skip hip-scatter-read-host "make lib-asan built no hip_scatter_read (no hipcc)"
fi
# UCX (Debian's 1.13) over a registration's merged ranges: two processes,
# ucp_mem_map, put and get, byte for byte; tcp here (examples/ucx_put_get.cpp).
if [[ -x build/lib-asan/examples/ucx_put_get ]]; then
	tap_program ucx-host env UCX_TLS=tcp build/lib-asan/examples/ucx_put_get
else
	tap_skip ucx-host "make lib-asan built no ucx_put_get (no libucx-dev)"
fi
# ThreadSanitizer over the same tests (the Reader's and Writer's threads);
# ASLR off for GCC 12's TSan runtime, a race fails the run (Makefile).
if [[ -x build/lib-tsan/tests/svmbatch_lib_tests ]]; then
	tap_program lib-tests-tsan env TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
		setarch "$(uname -m)" -R build/lib-tsan/tests/svmbatch_lib_tests
fi
# The Python package with Debian's torch (CPU), userspace mode; the
# reference safetensors from PyPI (pinned, into build/pydeps).
tap_step python-build make --no-print-directory python
tap_step python-deps tools/python-deps.sh
if [[ -d build/lib/python/svmbatch ]]; then
	tap_program python-tests env PYTHONPATH=build/lib/python:build/pydeps \
		/usr/bin/python3 -m pytest -p no:terminal -p no:cacheprovider libsvmbatch/python/tests
fi
# <svmbatch/torch.hpp> against Debian's libtorch-dev (make lib builds it
# where CMake finds Torch).
if [[ -x build/lib/tests/svmbatch_torch_tests ]]; then
	tap_program torch-cpp-tests build/lib/tests/svmbatch_torch_tests
else
	tap_skip torch-cpp-tests "make lib found no libtorch (libtorch-dev): svmbatch_torch_tests not built"
fi
if [[ -x build/lib/cli/svmbatch ]]; then
	tap_program cli-tests tools/cli/cli_test.sh build/lib/cli/svmbatch
fi
# Builds the .debs from a release tarball of the working tree, installs
# them on this machine, boots guests with the DKMS-built module, purges
# them again.
tap_program packages tools/check-packages.sh
# The guest does not depend on where the checkout lives: the library tests
# built in a copy under /tmp pass in a guest (of the first of KERNELS that
# is not the debug kernel).
pk=${SVMBATCH_KERNELS%% *}
for k in $KERNELS; do
	[[ $k != debug ]] && { pk=$k; break; }
done
tap_step path-independence tools/check-path-independence.sh --kernel "$pk"
for k in $KERNELS; do
	guest "$k"
done

summary
