#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The self-test of tools/tap-runner.sh, the judge of make check's host test
# programs: fixture logs that must count, and every way a program's TAP
# can be untrustworthy (no plan, a plan after the results, 1..0, tests
# that vanished, a plan other than the collection's, misnumbered results,
# a death outside a test, two plans), each of which must fail; a missing
# test binary must fail; lib.sh's tap_plan/tap_done must catch a shell
# runner that ran other than it planned; tools/vmtest/parse-log.sh, the
# guests' judge, must fail an executable short of its plan and one with
# 1..0 that did not skip.  Prints TAP.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/lib.sh
. tools/lib.sh
# shellcheck source=tools/tap-runner.sh
. tools/tap-runner.sh
TAP_LOGDIR=$(mktemp -d)
trap 'rm -rf "$TAP_LOGDIR"' EXIT

tap_plan 18

# judged DESCRIPTION LOG-TEXT RC PLAN "P F S" [PROBLEM-REGEX]: tap_judge of
# LOG-TEXT gives those counts, and a problem matching PROBLEM-REGEX (or,
# without it, none).
judged() {
	local what=$1 text=$2 rc=$3 plan=$4 want=$5 problem=${6:-} log=$TAP_LOGDIR/log got
	printf '%b' "$text" >"$log"
	tap_judge "$log" "$rc" "$plan"
	got="$tap_passed $tap_failed $tap_skipped"
	if [[ $got != "$want" ]]; then
		tap_result 1 "$what: counts $got, expected $want (problems: ${tap_problems[*]})"
	elif [[ -z $problem ]]; then
		((${#tap_problems[@]} == 0))
		tap_ok "$what (problems: ${tap_problems[*]})"
	else
		[[ ${#tap_problems[@]} == 1 && ${tap_problems[0]} =~ $problem ]]
		tap_ok "$what: '${tap_problems[*]}'"
	fi
}

judged "a sound log counts per test" \
	'TAP version 13\n1..3\nok 1 a\nnot ok 2 b\nok 3 c # SKIP no d\n# 1 passed\n' 1 "" "1 1 1"
judged "a sound log matching the collection's count" \
	'1..2\nok 1 a\nok 2 b\n' 0 2 "2 0 0"
judged "no plan fails" \
	'ok 1 a\nok 2 b\n' 0 "" "2 1 0" 'no TAP plan'
judged "a plan after the results fails" \
	'ok 1 a\nok 2 b\n1..2\n' 0 "" "2 1 0" 'plan comes after 2 result'
judged "an empty suite (1..0) fails" \
	'1..0\n' 0 "" "0 1 0" 'has no test'
judged "a test that vanished fails" \
	'1..3\nok 1 a\nok 2 b\n' 0 "" "2 1 0" 'planned 3 tests, 2 ran'
judged "a plan short of the collection fails" \
	'1..2\nok 1 a\nok 2 b\n' 0 5 "2 1 0" 'the suite has 5'
judged "misnumbered results fail" \
	'1..2\nok 1 a\nok 1 b\n' 0 "" "2 1 0" 'result 2 is numbered 1'
judged "an exit status without a failed test fails" \
	'1..1\nok 1 a\n' 134 "" "1 1 0" 'exit status 134'
judged "two plans fail" \
	'1..1\nok 1 a\n1..1\n' 0 "" "1 1 0" '2 TAP plans'

# A missing binary fails and is named; a present one is run and counted.
passed=0 failed=0 skipped=0 failures=()
host_program gone "$TAP_LOGDIR/no-such-test" "$TAP_LOGDIR/no-such-test" >/dev/null
[[ $failed == 1 && ${failures[*]} == gone ]]
tap_ok "a missing test binary fails (failed $failed, failures: ${failures[*]})"
printf '#!/bin/sh\necho 1..2\necho ok 1 a\necho "ok 2 b # SKIP c"\n' >"$TAP_LOGDIR/prog"
chmod +x "$TAP_LOGDIR/prog"
passed=0 failed=0 skipped=0 failures=()
host_program prog "$TAP_LOGDIR/prog" "$TAP_LOGDIR/prog" >/dev/null
[[ "$passed $failed $skipped" == "1 0 1" && ${#failures[@]} == 0 ]]
tap_ok "a present test binary is run and counted ($passed passed, $failed failed, $skipped skipped)"

# lib.sh: tap_done of a shell runner holds it to its tap_plan.
runner() {	# runner PLAN RESULTS: a lib.sh runner that planned and ran those
	sh -c '. tools/lib.sh; tap_plan "$1"; i=0
		while [ "$i" -lt "$2" ]; do true; tap_ok "t$i"; i=$((i + 1)); done
		tap_done runner' runner "$@" >"$TAP_LOGDIR/runner" 2>&1
}
runner 2 2
tap_ok "tap_done: a runner that ran its plan passes" "$TAP_LOGDIR/runner"
runner 3 2
(($? == 1)) && grep -qx '# runner: planned 3 tests, ran 2' "$TAP_LOGDIR/runner"
tap_ok "tap_done: a runner short of its plan fails and says so" "$TAP_LOGDIR/runner"
runner 2 2
tap_judge "$TAP_LOGDIR/runner" 0
[[ "$tap_passed $tap_failed" == "2 0" ]] && ((${#tap_problems[@]} == 0)) &&
	[[ $(head -n 1 "$TAP_LOGDIR/runner") == 1..2 ]]
tap_ok "tap_plan states the plan first, as tap_judge wants it" "$TAP_LOGDIR/runner"

# parse-log.sh over console logs made up of its markers.
guest_log() {	# guest_log TEXT: parse-log.sh's last line for a guest that printed TEXT
	printf '%b' "$1SVMBATCH-VMTEST-DONE\n" >"$TAP_LOGDIR/console"
	tools/vmtest/parse-log.sh --kernel fx --module-loaded 0 "$TAP_LOGDIR/console" \
		>"$TAP_LOGDIR/verdict" 2>&1
	echo "rc=$? $(tail -n 1 "$TAP_LOGDIR/verdict")"
}
b='SVMBATCH-VMTEST-BEGIN' e='SVMBATCH-VMTEST-END'
got=$(guest_log "$b a uptime=10.5\n1..2\nok 1 x\nok 2 y # SKIP z\n$e a rc=0 uptime=12.34\n$b s\n1..0 # SKIP no vgem\n$e s rc=4 uptime=13.5\n")
[[ $got == "rc=0 vmtest fx: 1 passed, 0 failed, 2 skipped" ]]
tap_ok "parse-log: a sound guest, a whole-file skip (rc 4) counted ($got)" "$TAP_LOGDIR/verdict"
got=$(guest_log "$b a\n1..3\nok 1 x\n$e a rc=0\n")
[[ $got == "rc=1 vmtest fx: 1 passed, 1 failed, 0 skipped" ]] &&
	grep -q 'a: plan 1..3 but 1 results' "$TAP_LOGDIR/verdict"
tap_ok "parse-log: an executable short of its plan fails ($got)" "$TAP_LOGDIR/verdict"
got=$(guest_log "$b a\n1..0\n$e a rc=0\n")
[[ $got == "rc=1 vmtest fx: 0 passed, 1 failed, 0 skipped" ]] &&
	grep -q 'a: plan 1..0 with exit status 0' "$TAP_LOGDIR/verdict"
tap_ok "parse-log: 1..0 without the skip status fails ($got)" "$TAP_LOGDIR/verdict"

tap_done tap-runner-test
