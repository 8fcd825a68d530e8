#!/bin/bash
# SPDX-License-Identifier: MIT
#
# make check: every test of the project, ending with one summary line
# "N passed, N failed, N skipped".  Each host check counts as one test;
# each guest contributes its kselftest subtests.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
KERNELS=${KERNELS:-6.1 6.12 debug}
LOGDIR=build/check
mkdir -p "$LOGDIR"

passed=0 failed=0 skipped=0
failures=()

# run NAME CMD...: one host check, output in build/check/NAME.log
run() {
	local name=$1 start=$SECONDS
	shift
	if "$@" >"$LOGDIR/$name.log" 2>&1; then
		passed=$((passed + 1))
		echo "PASS $name ($((SECONDS - start)) s)"
	else
		failed=$((failed + 1))
		failures+=("$name")
		echo "FAIL $name ($((SECONDS - start)) s), last lines of $LOGDIR/$name.log:"
		tail -n 25 "$LOGDIR/$name.log" | sed 's/^/    /'
	fi
}

# tap NAME CMD...: a host test program printing TAP (SVMBATCH_TAP=1),
# counted per test; output in build/check/NAME.log
tap() {
	local name=$1 start=$SECONDS log="$LOGDIR/$1.log" rc p f s
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
	local log="$LOGDIR/vmtest-$k.log" start=$SECONDS summary p f s
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

if ! run deps tools/install-deps.sh; then
	echo "cannot install the build dependencies; see $LOGDIR/deps.log"
	echo "$passed passed, $failed failed, $skipped skipped"
	exit 1
fi
run uapi-header make --no-print-directory uapi-check
run checkpatch make --no-print-directory checkpatch
run kernel-doc make --no-print-directory kernel-doc
# The debug kernel is built once per machine (cached); the first build
# takes tens of minutes.
if [[ " $KERNELS " == *" debug "* ]]; then
	run debug-kernel tools/vmtest/kernels.sh fetch debug
fi
for k in $KERNELS; do
	run "kmod-$k-W1" make --no-print-directory kmod-one KERNEL="$k"
	if [[ $k != debug ]] && command -v sparse >/dev/null; then
		run "kmod-$k-sparse" make --no-print-directory sparse-one KERNEL="$k"
	fi
done
run selftests-build make --no-print-directory selftests
run lib-build make --no-print-directory lib
run lib-asan-build make --no-print-directory lib-asan
run lib-clang-tidy make --no-print-directory lib-tidy
run lib-install tools/check-install.sh
run htmldocs make --no-print-directory htmldocs
if [[ -x build/lib-asan/tests/svmbatch_lib_tests ]]; then
	tap lib-tests-host build/lib-asan/tests/svmbatch_lib_tests
fi
if [[ -x build/lib/cli/svmbatch ]]; then
	tap cli-tests tools/cli/cli_test.sh build/lib/cli/svmbatch
fi
# Installs the .debs on this machine, boots guests with the DKMS-built
# module, purges them again.
tap packages tools/check-packages.sh
# The guest does not depend on where the checkout lives: the library tests
# built in a copy under /tmp pass in a guest (of the first of KERNELS that
# is not the debug kernel).
pk=6.12
for k in $KERNELS; do
	[[ $k != debug ]] && { pk=$k; break; }
done
run path-independence tools/check-path-independence.sh --kernel "$pk"
for k in $KERNELS; do
	guest "$k"
done

((${#failures[@]})) && echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
