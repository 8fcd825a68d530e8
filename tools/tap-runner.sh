# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# How tools/check.sh judges a host test program, sourced by it and by its
# self-test (tools/tap-runner-test.sh).  Bash; nothing runs when sourced.
#
#   tap_judge LOG RC [PLAN]   count a TAP log, and find what makes it
#                             untrustworthy (tap_problems)
#   tap_program NAME CMD...   run a TAP program, counted per test
#   host_program NAME BIN CMD...  tap_program, and a failure when BIN is
#                             missing
#
# A program's results count only if it stated its plan (1..N, N > 0)
# before its first result, once, and then printed exactly N results,
# numbered 1..N; with PLAN given, N must equal it too (pytest's plan
# against a separate collection).  Each thing that fails this is one
# failure more, on top of the not-ok lines.

# Totals over every program, and the names of those that failed.
passed=${passed:-0} failed=${failed:-0} skipped=${skipped:-0}
[[ -v failures ]] || failures=()

# tap_judge LOG RC [PLAN]: sets tap_passed, tap_failed (not-ok lines plus
# one per problem), tap_skipped and the array tap_problems.
tap_judge() {
	local log=$1 rc=$2 want=${3:-} counts problem
	tap_problems=()
	# One awk pass: "counts P F S" first, then one "problem TEXT" a line.
	# shellcheck disable=SC2016 # $0 and friends are awk's
	counts=$(awk -v want="$want" -v rc="$rc" '
		/^1\.\.[0-9]+([ \t]|$)/ {
			if (++plans == 1) { plan = substr($1, 4) + 0; results_before_plan = results }
			next
		}
		/^(not )?ok [0-9]+([ \t]|$)/ {
			results++
			number = ($1 == "not") ? $3 : $2
			if (number + 0 != results && !misnumbered) misnumbered = results " is numbered " number
			if ($1 == "not") notok++
			else if ($0 ~ /#[ \t]*[Ss][Kk][Ii][Pp]/) skips++
			else oks++
		}
		END {
			printf "counts %d %d %d\n", oks, notok, skips
			if (plans == 0) print "problem no TAP plan (1..N)"
			else {
				if (plans > 1) print "problem " plans " TAP plans"
				if (results_before_plan) print "problem the plan comes after " results_before_plan " result(s), not before the first test"
				if (plan == 0) print "problem the plan is 1..0: the suite has no test"
				if (results != plan) print "problem planned " plan " tests, " results + 0 " ran"
				if (want != "" && plan != want + 0) print "problem planned " plan " tests, the suite has " want
			}
			if (misnumbered) print "problem result " misnumbered
			if (rc != 0 && !notok) print "problem exit status " rc " without a failed test (died outside a test?)"
		}' "$log")
	read -r _ tap_passed tap_failed tap_skipped <<<"${counts%%$'\n'*}"
	while IFS= read -r problem; do
		[[ $problem == problem\ * ]] && tap_problems+=("${problem#problem }")
	done <<<"$counts"
	tap_failed=$((tap_failed + ${#tap_problems[@]}))
}

# tap_program NAME CMD...: CMD prints TAP (SVMBATCH_TAP=1), counted per
# test; output in $TAP_LOGDIR/NAME.log.  TAP_EXPECT_PLAN, where set, is
# the number of tests the plan must state.
tap_program() {
	local name=$1 start=$SECONDS log="$TAP_LOGDIR/$1.log" rc problem
	shift
	SVMBATCH_TAP=1 "$@" >"$log" 2>&1
	rc=$?
	tap_judge "$log" "$rc" "${TAP_EXPECT_PLAN:-}"
	passed=$((passed + tap_passed)) failed=$((failed + tap_failed))
	skipped=$((skipped + tap_skipped))
	echo "$name: $tap_passed passed, $tap_failed failed, $tap_skipped skipped" \
		"(rc $rc, $((SECONDS - start)) s)"
	for problem in "${tap_problems[@]}"; do
		echo "    FAIL $name: $problem"
	done
	if ((tap_failed)); then
		failures+=("$name")
		grep -E '^not ok|^#' "$log" | head -n 40 | sed 's/^/    /'
		tail -n 15 "$log" | sed 's/^/    /'
	fi
	grep -E '# SKIP' "$log" | sed 's/^/    skip: /' | head -n 20
	return $((tap_failed != 0))
}

# host_program NAME BINARY CMD...: tap_program NAME CMD... for a BINARY
# (which CMD runs) that the build must have produced: a missing one is a
# failure, not a silent omission.
host_program() {
	local name=$1 bin=$2
	shift 2
	if [[ ! -x $bin ]]; then
		failed=$((failed + 1))
		failures+=("$name")
		echo "FAIL $name: $bin is missing: the build should have produced it"
		return 1
	fi
	tap_program "$name" "$@"
}
