#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The expectation rule on one probe-guarded skip: a test that finds a
# feature absent skips, unless SVMBATCH_EXPECT declares the feature (as
# the guests and tools/check.sh's host runs do): then it fails.  The
# absence is forced: the page-cache drop test's file on a tmpfs, which
# keeps a file's pages (its "writeback" probe).  TAP; make check runs it
# before the host's library tests.
#
# usage: expect-test.sh SVMBATCH_LIB_TESTS

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/lib.sh
. "$HERE/../lib.sh"

bin=${1:?usage: expect-test.sh SVMBATCH_LIB_TESTS}
test_name=PageCache.DroppedPagesAreNotResident
work=$(mktemp -d)
shm=$(mktemp -d /dev/shm/svmbatch-expect-XXXXXX) || shm=
trap 'rm -rf "$work" ${shm:+"$shm"}' EXIT

# run_test LOG EXPECT: the one test, its file on the tmpfs, under
# SVMBATCH_EXPECT=EXPECT, with googletest's own output; its exit status.
run_test() {
	env -u SVMBATCH_TAP SVMBATCH_WRITEBACK_DIR="$shm" SVMBATCH_EXPECT="$2" \
		"$bin" --gtest_filter="$test_name" >"$1" 2>&1
}

tap_plan 4

[[ -x $bin && -n $shm && $(stat -f -c %T "$shm") == tmpfs ]]
tap_ok "the absence is forced: $bin runs, its file on a tmpfs (${shm:-no /dev/shm})"

run_test "$work/undeclared" vgem,rxe
rc=$?
[[ $rc == 0 ]] && grep -qF "[  SKIPPED ] $test_name" "$work/undeclared"
tap_ok "writeback not declared: the test skips (rc $rc)" "$work/undeclared"

# A name that only starts like the feature's declares nothing.
run_test "$work/prefix" vgem,writebacks
rc=$?
[[ $rc == 0 ]] && grep -qF "[  SKIPPED ] $test_name" "$work/prefix"
tap_ok "writebacks declared, not writeback: the test skips (rc $rc)" "$work/prefix"

run_test "$work/declared" vgem,writeback,rxe
rc=$?
[[ $rc != 0 ]] && grep -qF "[  FAILED  ] $test_name" "$work/declared" &&
	grep -qF "writeback is absent" "$work/declared"
tap_ok "writeback declared: the skip fails the run (rc $rc)" "$work/declared"

tap_done expect-test
