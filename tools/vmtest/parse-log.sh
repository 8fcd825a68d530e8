#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Judge a guest console log written by tools/vmtest/run.sh (see init for the
# SVMBATCH-VMTEST-* markers). Usable on its own to re-read an old log:
#
#   parse-log.sh --kernel NAME [--module-loaded 0|1] [--qemu-rc N]
#                [--timeout S] [--tests 'name1 name2 ...'] LOG
#
# Prints a per-executable summary and the failure reasons with the log lines
# behind them, then exactly one last line:
#   vmtest NAME: N passed, N failed, N skipped
# N counts individual TAP subtests, plus one failure per failing condition
# that is not a subtest. Exits 0 only if nothing failed.

set -euo pipefail

usage() {
	sed -n '6,7s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
	exit 2
}

# The whole judgement is one awk pass over the log; mawk-compatible (no
# gawk extensions), since that is Debian's default awk.
# shellcheck disable=SC2016 # $0 and friends are awk's, not the shell's
PARSER='
# A failing condition that is not a TAP subtest counts as one failure.
function fail(msg) { failed++; reason(msg) }
function reason(msg) { reasons[++nreasons] = msg }
# Attach log lines (one or more, newline-separated) to the last reason.
function note(msg) { details[nreasons] = details[nreasons] msg "\n" }
function at(n, text) { return sprintf("%6d: %s", n, text) }
function remember_tail(line) { tail[NR % 20] = at(NR, line) }
function dump_tail(   i) {
	for (i = NR - 19; i <= NR; i++) if (i >= 1) note(tail[i % 20])
}

# Taint with the O (out-of-tree, 4096) and E (unsigned, 8192) bits masked.
function masked_taint(t) {
	t = t + 0
	if (int(t / 4096) % 2) t -= 4096
	if (int(t / 8192) % 2) t -= 8192
	return t
}

BEGIN {
	ntests = split(tests, expected, " ")
	splat_re = "BUG:|WARNING:|Oops|Call Trace:|general protection fault|KASAN:|UBSAN:|kernel BUG|list_add corruption|possible recursive locking|INFO: task .* blocked"
}

{ sub(/\r+$/, ""); remember_tail($0) }

$0 ~ splat_re {
	if (++nsplat <= 30) splat_lines = splat_lines (nsplat > 1 ? "\n" : "") at(NR, $0)
}

# Markers are matched anywhere in the line: a kernel message may have been
# printed on the console right before them without a newline.
index($0, "SVMBATCH-VMTEST-") {
	m = substr($0, index($0, "SVMBATCH-VMTEST-") + 16)
	split(m, f, " ")
	kind = f[1]
	if (kind == "BEGIN") {
		cur = f[2]; began[cur] = 1; begin_line[cur] = NR
		if (f[3] ~ /^uptime=/) t_begin[cur] = substr(f[3], 8)
		plan[cur] = -1; nplans[cur] = 0; order[++nbegun] = cur
	} else if (kind == "END" && f[2] == cur) {
		rc[cur] = substr(f[3], 4); ended[cur] = NR
		if (f[4] ~ /^uptime=/) t_end[cur] = substr(f[4], 8)
		cur = ""
	} else if (kind == "RMMOD") {
		rmmod_rc = substr(f[2], 4); rmmod_line = NR
	} else if (kind == "TAINT") {
		taint = f[2]; taint_line = NR
	} else if (kind == "DONE") {
		done = NR
	} else if (kind == "FATAL" || kind == "ERROR") {
		fail("guest " kind ": " substr(m, length(kind) + 2))
		# The failing command printed its error just before.
		for (i = NR - 3; i <= NR; i++) if (i >= 1) note(tail[i % 20])
	} else if (kind == "BOOTED") {
		booted = substr(f[2], 8)
	} else if (kind == "KMEMLEAK") {
		leaks = substr(f[2], 7) + 0
		if (leaks) {
			fail("kmemleak: " leaks " unreferenced object(s) after the suite and rmmod")
			note(at(NR, $0))
		}
	} else if (kind == "UPTIME") {
		uptime = f[2]
	}
	next
}

cur != "" && /^1\.\.[0-9]+/ {
	nplans[cur]++
	plan[cur] = substr($0, 4) + 0
	next
}

cur != "" && /^(not )?ok [0-9]+( |$)/ {
	results[cur]++
	if ($0 ~ /#[ \t]*[Ss][Kk][Ii][Pp]/) { skipped++; nskip[cur]++ }
	else if ($0 ~ /^not ok/) {
		failed++; nfail[cur]++
		notok_lines[cur] = notok_lines[cur] (nfail[cur] > 1 ? "\n" : "") at(NR, $0)
	} else { passed++; npass[cur]++ }
}

# Judge one executable; returns its one-word verdict.
function judge(t,   r, verdict, endl) {
	if (!(t in began)) {
		if (done) fail(t ": never started")
		return "NOT-RUN"
	}
	verdict = "PASS"
	if (!(t in ended)) {
		fail(t ": did not finish (guest died or hung while it ran)")
		note(at(begin_line[t], "SVMBATCH-VMTEST-BEGIN " t))
		return "UNFINISHED"
	}
	r = rc[t]
	endl = at(ended[t], "SVMBATCH-VMTEST-END " t " rc=" r)
	if (r == 124 || r == 137) {
		fail(t ": killed by the per-test timeout (rc=" r ")"); note(endl); verdict = "FAIL"
	} else if (r != 0 && r != 4) {
		fail(t ": exit status " r); note(endl); verdict = "FAIL"
	}
	if (nplans[t] == 0) {
		fail(t ": no TAP plan (1..N) between log lines " begin_line[t] " and " ended[t]); verdict = "FAIL"
	} else if (nplans[t] > 1) {
		fail(t ": " nplans[t] " TAP plans between log lines " begin_line[t] " and " ended[t]); verdict = "FAIL"
	} else if (plan[t] != results[t] + 0) {
		fail(t ": plan 1.." plan[t] " but " results[t] + 0 " results between log lines " begin_line[t] " and " ended[t])
		verdict = "FAIL"
	} else if (plan[t] == 0 && r != 4) {
		# 1..0 is a whole-file skip only with the skip status (4).
		fail(t ": plan 1..0 with exit status " r ": no test ran, and it did not skip"); verdict = "FAIL"
	}
	if (nfail[t]) {
		reason(t ": " nfail[t] " subtest(s) not ok")  # counted as subtests
		note(notok_lines[t]); verdict = "FAIL"
	}
	if (verdict == "PASS" && r == 4) {
		verdict = "SKIP"
		if (results[t] + 0 == 0) skipped++  # a whole-file skip, 1..0
	}
	return verdict
}

END {
	for (i = 1; i <= ntests; i++) {
		t = expected[i]
		v = judge(t)
		summary = summary sprintf("  %-10s %-32s rc=%-4s %d passed, %d failed, %d skipped%s\n", \
			v, t, (t in rc) ? rc[t] : "-", npass[t], nfail[t], nskip[t], \
			(t in t_begin) && (t in t_end) ? sprintf(" (%.0f s)", t_end[t] - t_begin[t]) : "")
	}
	if (!done) {
		if (qemu_rc == 124 || qemu_rc == 137)
			fail("guest did not finish: no SVMBATCH-VMTEST-DONE within the " timeout " s timeout (hang?)")
		else
			fail("guest did not finish: QEMU exited with rc=" qemu_rc " before SVMBATCH-VMTEST-DONE (panic or crash?)")
		note("last console lines:"); dump_tail()
	}
	if (rmmod_line && rmmod_rc != 0) {
		fail("rmmod svmbatch failed (rc=" rmmod_rc ")")
		note(at(rmmod_line, "SVMBATCH-VMTEST-RMMOD rc=" rmmod_rc))
	} else if (module_loaded && done && !rmmod_line && nbegun) {
		# (Without BEGINs, insmod failed: FATAL was reported already.)
		fail("rmmod svmbatch never ran")
	}
	if (nsplat) {
		fail("kernel splat on the console (" nsplat " matching lines)")
		note(splat_lines)
	}
	if (taint_line && masked_taint(taint) != 0) {
		fail("kernel tainted: " taint " (" masked_taint(taint) " with O and E masked)")
		note(at(taint_line, "SVMBATCH-VMTEST-TAINT " taint))
	}

	printf "vmtest %s: executables\n%s", kernel, summary
	if (booted != "") printf "guest: /init at %s s, done at %s s of guest uptime\n", booted, (uptime != "" ? uptime : "?")
	if (nreasons) {
		printf "FAILURES:\n"
		for (i = 1; i <= nreasons; i++) {
			printf "- %s\n", reasons[i]
			if (details[i] != "") printf "%s", details[i]
		}
	}
	printf "vmtest %s: %d passed, %d failed, %d skipped\n", kernel, passed, failed, skipped
	exit failed ? 1 : 0
}
'

main() {
	local kernel='' module_loaded=1 qemu_rc=0 timeout=0 tests='' log
	while [[ $# -gt 1 ]]; do
		case "$1" in
		--kernel) kernel=$2; shift 2 ;;
		--module-loaded) module_loaded=$2; shift 2 ;;
		--qemu-rc) qemu_rc=$2; shift 2 ;;
		--timeout) timeout=$2; shift 2 ;;
		--tests) tests=$2; shift 2 ;;
		*) usage ;;
		esac
	done
	[[ $# -eq 1 && -n $kernel ]] || usage
	log=$1
	# Without an explicit list, judge the executables the guest announced.
	if [[ -z $tests ]]; then
		tests=$(sed -n 's/\r$//; s/.*SVMBATCH-VMTEST-BEGIN \([^ ]*\).*/\1/p' "$log" | tr '\n' ' ')
	fi
	awk -v kernel="$kernel" -v module_loaded="$module_loaded" -v qemu_rc="$qemu_rc" \
		-v timeout="$timeout" -v tests="$tests" "$PARSER" "$log"
}

main "$@"
