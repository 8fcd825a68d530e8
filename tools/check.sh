#!/bin/bash
# SPDX-License-Identifier: MIT
#
# make check: every test of the project, ending with one summary line
# "N passed, N failed, N skipped".  Each host step is one TAP line and
# counts as one test; the host programs that print TAP (the library tests,
# the command's, check-install.sh, check-packages.sh) and each guest
# contribute their subtests.  No test can vanish: a host program counts
# only with its plan stated first and met (tools/tap-runner.sh, tested by
# tools/tap-runner-test.sh), a test program the build should have made
# and did not is a failure, the Python suite's plan must equal what a
# separate collection finds, and a guest's executables are held to their
# plans by tools/vmtest/parse-log.sh.
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
# tap_program, host_program
# shellcheck source=tools/tap-runner.sh
. tools/tap-runner.sh

summary() {
	local steps
	read -ra steps <<<"$TAP_FAILURES"
	failures+=("${steps[@]}")
	((${#failures[@]})) && echo "failed: ${failures[*]}"
	echo "$((passed + TAP_N - TAP_FAILED - TAP_SKIPPED)) passed," \
		"$((failed + TAP_FAILED)) failed, $((skipped + TAP_SKIPPED)) skipped"
	((failed + TAP_FAILED == 0))
}

# The test programs that the build makes only where a tool or library is:
# "absent=$(svmbatch_probe NAME)" (tools/lib.sh) succeeds where the
# program must exist (a missing one fails), else says why it is skipped.
absent=

# What this host declares it has, for the library tests' probe-guarded
# skips (SVMBATCH_SKIP_ABSENT, libsvmbatch/tests/test_util.hpp): the
# runtimes that the deps step installs everywhere (libamdhip64-dev,
# libhsa-runtime-dev, libze1), whose absence is then a failure.  The
# host's kernel (thp, hugetlb, numa...) is not ours to declare: the
# guests declare theirs (tools/vmtest/run.sh).
HOST_EXPECT=hip,hsa,ze

# guest_boot KERNEL: the guest tests in a guest of KERNEL (make
# vmtest-boot: everything it runs is built already), its console's verdict
# in vmtest-KERNEL.log and its seconds in vmtest-KERNEL.seconds.
guest_boot() {
	local k=$1 start=$SECONDS
	make --no-print-directory vmtest-boot KERNEL="$k" >"$TAP_LOGDIR/vmtest-$k.log" 2>&1
	echo $((SECONDS - start)) >"$TAP_LOGDIR/vmtest-$k.seconds"
}

# guest_count KERNEL: guest_boot's verdict, counted per subtest
guest_count() {
	local k=$1
	local log="$TAP_LOGDIR/vmtest-$k.log" summary p f s
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
	echo "$summary ($(cat "$TAP_LOGDIR/vmtest-$k.seconds" 2>/dev/null) s, log $log)"
	if ((f)); then
		failures+=("vmtest-$k")
		# parse-log.sh's FAILURES: block, each reason with its lines
		sed -n '/^FAILURES:$/,/^vmtest [^ ]*: [0-9]/{/^vmtest /d;p}' "$log" |
			head -n 40 | sed 's/^/    /'
	fi
	grep -E "^# SKIP|# SKIP " "$log" | sort | uniq -c | sed 's/^/    skip: /' | head -n 20
}

if ! tap_step deps tools/install-deps.sh; then
	echo "cannot install the build dependencies; see $TAP_LOGDIR/deps.log"
	summary
	exit 1
fi
# Every CMake build below (and pip's of the Python package, and the
# packages') compiles through ccache, which the deps step installed; its
# cache outlives the checkout (tools/lib.sh).
svmbatch_ccache
tap_step shellcheck make --no-print-directory shellcheck
# The judge of the host programs below, on fixtures it must fail.
tap_program tap-runner tools/tap-runner-test.sh
tap_step uapi-header make --no-print-directory uapi-check
tap_step checkpatch make --no-print-directory checkpatch
tap_step format-check make --no-print-directory format-check
tap_step kernel-doc make --no-print-directory kernel-doc
# Committed benchmark results are what their benchmark wrote, their
# summaries are what their rows give, and every figure README and the
# docs quote is the result member it names; the planted-drift test proves
# the check sees a moved figure, a bare one, a moved summary and an
# edited result.
tap_step bench-results /usr/bin/python3 bench/check-results.py
tap_step bench-results-planted /usr/bin/python3 bench/check_results_test.py
# The benchmarks' shared harness: medians, interleaving, checked loads,
# the exit status on an inexact load of ours, summaries from the rows.
tap_step bench-harness /usr/bin/python3 -m pytest -q -p no:cacheprovider bench/test_harness.py
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
# The ABI checks (src/shim/ against the real headers, compiled, never
# linked) are targets only where CMake finds the headers: built by name,
# so that one CMake left out fails where the probe finds its header.
for abi in hip ze; do
	if absent=$(svmbatch_probe "${abi}_api"); then
		tap_step "$abi-abi-check" cmake --build build/lib-asan --target "${abi}_abi_check"
	else
		tap_skip "$abi-abi-check" "$absent: CMake configures no ${abi}_abi_check"
	fi
done
tap_step lib-tsan-build make --no-print-directory lib-tsan
# lib-tidy skips a file that passed with the same input; the cache's own
# test first, on a unit of its own.
tap_program tidy-cache tools/clang-tidy-cached-test.sh
tap_step lib-clang-tidy make --no-print-directory lib-tidy
tap_program lib-install tools/check-install.sh
# A build with every optional GPU backend off (no ROCm, no libdrm headers
# needed) builds, passes its tests and says it has no backends.
tap_program minimal-build tools/check-minimal-build.sh
tap_step htmldocs make --no-print-directory htmldocs
# A skip whose feature is declared fails: shown on one test, first.
tap_program expect-rule tools/vmtest/expect-test.sh build/lib-asan/tests/svmbatch_lib_tests
host_program lib-tests-host build/lib-asan/tests/svmbatch_lib_tests \
	env SVMBATCH_EXPECT="$HOST_EXPECT" build/lib-asan/tests/svmbatch_lib_tests
# HIP without an AMD GPU: Debian's runtime on its no-device path (in a
# process of its own; built wherever SVMBATCH_WITH_HIP is, the default),
# and the HIP example in userspace mode (the library, the reads, the byte
# check; the GPU step skips, saying why).
host_program hip-runtime-host build/lib-asan/tests/svmbatch_hip_runtime_tests \
	env SVMBATCH_EXPECT="$HOST_EXPECT" build/lib-asan/tests/svmbatch_hip_runtime_tests
# Level Zero without an Intel GPU: Debian's loader on its no-driver path,
# in a process of its own (built wherever SVMBATCH_WITH_ZE is, the default).
host_program ze-runtime-host build/lib-asan/tests/svmbatch_ze_runtime_tests \
	env SVMBATCH_EXPECT="$HOST_EXPECT" build/lib-asan/tests/svmbatch_ze_runtime_tests
# The Level Zero example in userspace mode (the library, the reads, the
# byte check; the GPU step skips, saying what the loader answered): built
# wherever libze-dev is (make deps installs it).
if absent=$(svmbatch_probe ze); then
	host_program ze-scatter-read-host build/lib-asan/examples/ze_scatter_read \
		build/lib-asan/examples/ze_scatter_read --mode userspace
else
	tap_skip ze-scatter-read-host "$absent: make lib-asan builds no ze_scatter_read"
fi
if absent=$(svmbatch_probe hip); then
	host_program hip-scatter-read-host build/lib-asan/examples/hip_scatter_read \
		build/lib-asan/examples/hip_scatter_read --mode userspace
	# GPU-driven I/O under hipcc: it links and runs; its kernel needs an
	# AMD GPU (make hip-device-test), so its steps say why they skip.
	host_program hip-gpu-io-host build/lib-asan/examples/hip_gpu_io \
		build/lib-asan/examples/hip_gpu_io
else
	tap_skip hip-scatter-read-host "$absent: make lib-asan builds no hip_scatter_read"
	tap_skip hip-gpu-io-host "$absent: make lib-asan builds no hip_gpu_io"
fi
# UCX (Debian's 1.13) over a registration's merged ranges: two processes,
# ucp_mem_map, put and get, byte for byte; tcp here (examples/ucx_put_get.cpp).
if absent=$(svmbatch_probe ucx); then
	host_program ucx-host build/lib-asan/examples/ucx_put_get \
		env UCX_TLS=tcp build/lib-asan/examples/ucx_put_get
else
	tap_skip ucx-host "$absent: make lib-asan builds no ucx_put_get"
fi
# ThreadSanitizer over the same tests (the Reader's and Writer's threads);
# ASLR off for GCC 12's TSan runtime, a race fails the run (Makefile).
host_program lib-tests-tsan build/lib-tsan/tests/svmbatch_lib_tests \
	env TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 SVMBATCH_EXPECT="$HOST_EXPECT" \
	setarch "$(uname -m)" -R build/lib-tsan/tests/svmbatch_lib_tests
# The Python package with Debian's torch (CPU), userspace mode; the
# reference safetensors and transformers from PyPI (pinned, into
# build/pydeps).  torch, numpy, safetensors and transformers are required:
# a failed import fails.  The suite's TAP plan (conftest.py) must equal
# the tests that pytest --collect-only finds, and a collection error fails
# python-collect.
tap_step python-build make --no-print-directory python
# Everything the guests run is built now.  The debug kernel's guest, the
# slowest (KASAN, lockdep and kmemleak under TCG), boots at once in the
# background, beside the host steps below that leave a core idle (pytest,
# pip, dpkg, the other guests); it is counted at the end.
background_guests=()
if [[ " $KERNELS " == *" debug "* ]]; then
	rm -f "$TAP_LOGDIR/vmtest-debug.log" "$TAP_LOGDIR/vmtest-debug.seconds"
	guest_boot debug &
	background_guests=(debug)
fi
# python_suite SUFFIX PYTHON PYTHONPATH: the suite with that interpreter,
# planned (python-collect$SUFFIX) and counted per test (python-tests$SUFFIX).
python_suite() {
	local pytest_cmd=(env PYTHONPATH="$3" "$2" -m pytest -p no:cacheprovider
		libsvmbatch/python/tests) tests
	tap_step "python-collect$1" "${pytest_cmd[@]}" --collect-only -q
	tests=$(grep -cE '^libsvmbatch/python/tests/[^ :]+\.py::' "$TAP_LOGDIR/python-collect$1.log")
	TAP_EXPECT_PLAN=$tests host_program "python-tests$1" build/lib/python/svmbatch \
		"${pytest_cmd[@]}" -p no:terminal
}
tap_step python-deps tools/python-deps.sh
python_suite "" /usr/bin/python3 build/lib/python:build/pydeps
# Again with PyPI's torch 2.x, the one users run (pinned in
# requirements-torch2.txt with transformers 5 and its own numpy, in a venv
# of Debian's interpreter: the same extension): there every dtype test
# runs, none may skip (test_safetensors.py).  The venv is kept in
# /var/cache/svmbatch: a fresh machine downloads it once (2.2 GB).
tap_step python-deps-torch2 tools/python-deps.sh --torch2
python_suite -torch2 build/venv-torch2/bin/python build/lib/python
# The same tests against the package as pip installs it: the wheel built
# from the sdist (pyproject.toml), in a fresh venv.
tap_program python-package tools/check-python-package.sh
# <svmbatch/torch.hpp> against Debian's libtorch-dev (make lib builds it
# where CMake finds Torch).
if absent=$(svmbatch_probe torch); then
	host_program torch-cpp-tests build/lib/tests/svmbatch_torch_tests \
		build/lib/tests/svmbatch_torch_tests
else
	tap_skip torch-cpp-tests "$absent: make lib builds no svmbatch_torch_tests"
fi
host_program cli-tests build/lib/cli/svmbatch cli/cli_test.sh build/lib/cli/svmbatch
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
# The guests run the HIP and Level Zero examples where the probes that
# the Makefile's VMTEST_HIP and VMTEST_ZE ask find their tools; else a
# named skip here, not a program that silently leaves the guests.
for p in hip ze; do
	absent=$(svmbatch_probe "$p") ||
		tap_skip "vmtest-$p-example" "$absent: the guests run no ${p}_scatter_read"
done
for k in $KERNELS; do
	[[ $k == debug ]] && continue
	guest_boot "$k"
	guest_count "$k"
done
wait
for k in "${background_guests[@]}"; do
	guest_count "$k"
done

summary
