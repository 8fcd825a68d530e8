#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The svmbatch command against the real module, in a test guest (busybox
# sh, as root, svmbatch.ko loaded, debugfs mounted): info, stat with live
# and stale registrations, bench, selftest.  Prints TAP.
#
# The guest runner ships the files (run.sh --file, svmbatch_guest_files
# in tools/lib.sh):
#   /usr/bin/svmbatch                            the command under test
#   /usr/libexec/svmbatch/tests/hold_registration  cli/hold_registration.cpp
#   /usr/libexec/svmbatch/tests/lib.sh           tools/lib.sh (tap_ok, tap_done)
#   <selftest dir>/svmbatch_errno, svmbatch_io_uring  at the command's default --dir
set -u
CLI=${SVMBATCH_CLI:-/usr/bin/svmbatch}
HOLD=${SVMBATCH_HOLD:-/usr/libexec/svmbatch/tests/hold_registration}
PARAMS=/sys/module/svmbatch/parameters
# shellcheck source=tools/lib.sh
. /usr/libexec/svmbatch/tests/lib.sh || exit 1
tmp=$(mktemp -d)

ok() {	# ok DESCRIPTION: the last command's status; a failure shows $tmp/out
	tap_ok "$1" "$tmp/out"
}
run() {	# run ARGS...: output in $tmp/out, exit status in $rc
	"$@" >"$tmp/out" 2>&1
	rc=$?
}
has() {	# has EXTENDED-REGEX: $tmp/out has a matching line
	grep -qE "$1" "$tmp/out"
}
global() {	# global NAME: the global counter NAME in $tmp/out (stat --json)
	sed -n 's/^{"global": {\([^}]*\)}.*/\1/p' "$tmp/out" | tr ',' '\n' |
		sed -n "s/^ *\"$1\": //p"
}
stat_value() {	# stat_value NAME: the global counter NAME now
	"$CLI" stat --json >"$tmp/out" 2>&1 && global "$1"
}

# hold_start COUNT BYTES [--stale]: a process that holds a registration
# until hold_stop; waits for it to say "ready" (and "stale").
hold_start() {
	rm -f "$tmp/hold.in" && mkfifo "$tmp/hold.in"
	"$HOLD" "$@" <"$tmp/hold.in" >"$tmp/hold.out" 2>&1 &
	hold_pid=$!
	exec 3>"$tmp/hold.in"
	want=ready
	[ "${3:-}" = --stale ] && want=stale
	i=0
	while [ $i -lt 300 ] && ! grep -qx "$want" "$tmp/hold.out" && kill -0 $hold_pid 2>/dev/null; do
		sleep 0.2
		i=$((i + 1))
	done
	grep -qx "$want" "$tmp/hold.out"
}
hold_stop() {	# end of file on the holder's stdin: it unregisters and exits
	exec 3>&-
	wait $hold_pid
}

echo "TAP version 13"

run "$CLI" info
abi=$(sed -n 's/^module: *loaded (\/dev\/svmbatch, ABI \([0-9]*\))$/\1/p' "$tmp/out")
[ $rc = 0 ] && [ -n "$abi" ] && has '^library mode: +kernel '
ok "info: module loaded, its ABI, kernel mode"

run "$CLI" info --json
[ $rc = 0 ] && has '"module_loaded": true' && has "\"abi_version\": $abi, \"library_abi_version\": $abi," &&
	has '"mode": "kernel"'
ok "info --json: loaded, the module's ABI is the library's, mode kernel"

has "\"max_ranges\": $(cat $PARAMS/max_ranges)," &&
	has "\"max_registrations\": $(cat $PARAMS/max_registrations)," &&
	has "\"max_range_bytes\": $(cat $PARAMS/max_range_bytes),"
ok "info --json: the limits are the module's parameters"

has '"features": \["dmabuf", "stale-notify"'
ok "info --json: features dma-buf and stale notification"

# The soft-RoCE device that svmbatch_rdma_tests made earlier in this guest:
# a guest built with rxe (SVMBATCH_EXPECT has rxe: tools/vmtest/init) must
# have it; elsewhere its absence is a skip.
if [ -d /sys/class/infiniband/svmb_rxe0 ]; then
	run "$CLI" info
	[ $rc = 0 ] && has '^rdma devices: .*svmb_rxe0 \(dma-buf memory regions: no\)'
	ok "info: the soft-RoCE device, which takes no dma-buf memory regions"
else
	case ",${SVMBATCH_EXPECT:-}," in
	*,rxe,*)
		echo "no /sys/class/infiniband/svmb_rxe0 in a guest built with rxe" >"$tmp/out"
		false
		ok "info: the soft-RoCE device"
		;;
	*) tap_skip "info: the soft-RoCE device" \
		"no /sys/class/infiniband/svmb_rxe0 (svmbatch_rdma_tests makes it)" ;;
	esac
fi

run "$CLI" stat
[ $rc = 0 ] && has '^registrations: +[0-9]+ live, [0-9]+ since load, [0-9]+ failed$' &&
	has '^PID +COMMAND +FILES +REGISTRATIONS +PINNED +FAILED$'
ok "stat: exits 0 with the counters and the process table"

live0=$(stat_value registrations) pages0=$(stat_value pinned_pages)
total0=$(stat_value registered_total) stale0=$(stat_value stale_total)
# 8 buffers of 64 KiB: 128 pages, 512 KiB, one open file.
if hold_start 8 65536; then
	run "$CLI" stat
	[ $rc = 0 ] && has "^registrations: +$((live0 + 1)) live, $((total0 + 1)) since load" &&
		has "^pinned: +$((pages0 + 128)) pages" &&
		has "^$hold_pid +hold_registrati +1 +1 +512\.0 KiB +0$"
	ok "stat: a live registration of 8 x 64 KiB, and its process"
	run "$CLI" stat --json
	[ $rc = 0 ] && [ "$(global registrations)" = $((live0 + 1)) ] &&
		[ "$(global pinned_pages)" = $((pages0 + 128)) ] &&
		has "\{\"pid\": $hold_pid, \"command\": \"hold_registrati\", \"files\": 1, \"registrations\": 1, \"pinned_bytes\": 524288, \"failed\": 0\}"
	ok "stat --json: the same, per process in bytes"
	hold_stop
	hold_rc=$?
	run "$CLI" stat --json
	[ $hold_rc = 0 ] && [ "$(global registrations)" = "$live0" ] &&
		[ "$(global pinned_pages)" = "$pages0" ] && ! has "\"pid\": $hold_pid,"
	ok "stat: back to the baseline once the process unregistered"
else
	cp "$tmp/hold.out" "$tmp/out"
	for t in "live registration" "stat --json" "baseline"; do
		false
		ok "stat: $t (the holder did not start)"
	done
fi

if hold_start 4 4096 --stale; then
	run "$CLI" stat
	[ $rc = 0 ] && has "^stale: +$((stale0 + 1)) registrations went stale"
	ok "stat: an unmapped registered buffer counts as stale"
	run "$CLI" stat --json
	[ "$(global stale_total)" = $((stale0 + 1)) ]
	ok "stat --json: stale_total"
	hold_stop
else
	cp "$tmp/hold.out" "$tmp/out"
	false
	ok "stat: stale (the holder did not start)"
	false
	ok "stat --json: stale_total (the holder did not start)"
fi

total1=$(stat_value registered_total)
run "$CLI" bench --sizes 1 16 --no-plot --out "$tmp"
[ $rc = 0 ] && has '^measures: +kernel mode: ' &&
	grep -qE '"mode": "kernel", .*"pins": true,.*"n": 1,.*"n": 16,' "$tmp"/bench-*.json
ok "bench: kernel mode, pinning, said in the table and the JSON; both batch sizes"
run "$CLI" stat --json
[ "$(global registered_total)" -gt "$total1" ] && [ "$(global pinned_pages)" = "$pages0" ]
ok "bench: its registrations were counted, and nothing stays pinned"

dir=$("$CLI" selftest --help | sed -n 's/^ *--dir TEXT=\([^ ]*\)$/\1/p')
run "$CLI" selftest
[ $rc = 0 ] && [ -x "$dir/svmbatch_errno" ] && [ -x "$dir/svmbatch_io_uring" ] &&
	has '^PASS +svmbatch_errno +[1-9][0-9]* passed, 0 failed' &&
	has '^PASS +svmbatch_io_uring +[1-9][0-9]* passed, 0 failed' &&
	has '^selftest: [1-9][0-9]* passed, 0 failed, [0-9]+ skipped$'
ok "selftest: runs the installed selftests in $dir, all pass"
run "$CLI" selftest svmbatch_io_uring
[ $rc = 0 ] && [ "$(grep -c '^PASS ' "$tmp/out")" = 1 ] &&
	has '^PASS +svmbatch_io_uring ' && ! has 'svmbatch_errno'
ok "selftest NAME: runs that one only"
run "$CLI" selftest no_such_test
[ $rc = 2 ] && has 'no selftest no_such_test'
ok "selftest with an unknown name: usage error (2)"
run "$CLI" selftest --dir /nonexistent
[ $rc = 1 ] && has 'no selftests in /nonexistent'
ok "selftest --dir without selftests: fails (1) and says where it looked"

rm -rf "$tmp"
tap_done cli_guest_test
