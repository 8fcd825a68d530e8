#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Tests of the svmbatch command on a machine without the module (make
# check's host step): exit codes, --help, info, stat against a debugfs
# fixture, bench's JSON and PNG, selftest's summary.  Prints TAP.
#   cli/cli_test.sh path/to/svmbatch
set -u
cli=$(realpath "$1")
# shellcheck source=tools/lib.sh
. "$(dirname "$0")/../tools/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() {	# ok DESCRIPTION STATUS: a TAP line for STATUS; a failure shows $tmp/out
	(exit "$2")
	tap_ok "$1" "$tmp/out"
}
run() {	# run ARGS...: output in $tmp/out, exit status in $rc
	"$@" >"$tmp/out" 2>&1
	rc=$?
}
json() {	# json PYTHON-EXPRESSION-ON-d: true/false of $tmp/out as JSON
	python3 -c "import json,sys; d=json.load(open('$tmp/out')); sys.exit(0 if ($1) else 1)"
}
# The RDMA devices of this machine, as the kernel lists them.
rdma_here() {
	find /sys/class/infiniband -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort | tr '\n' ' '
}

tap_plan 39

run "$cli" --help
ok "--help exits 0 and lists every subcommand" $((rc != 0 || $(grep -cE '^  (info|stat|bench|selftest) ' "$tmp/out") != 4))
for sub in info stat bench selftest; do
	run "$cli" "$sub" --help
	ok "$sub --help exits 0" $((rc != 0 || $(grep -c 'Usage:' "$tmp/out") != 1))
done
run "$cli"
ok "no subcommand is a usage error (2)" $((rc != 2))
run "$cli" info --frobnicate
ok "an unknown option is a usage error (2)" $((rc != 2))
run "$cli" --version
ok "--version prints the version" $((rc != 0 || $(grep -cE '^[0-9]+\.[0-9]+\.[0-9]+$' "$tmp/out") != 1))

export SVMBATCH_DEVICE=$tmp/no-device SVMBATCH_DEBUGFS=$tmp/no-debugfs
run "$cli" info
ok "info without the module: not loaded, userspace mode, why" \
	$((rc != 0 || $(grep -cE '^module: +not loaded|^library mode: +userspace \(.*No such file' "$tmp/out") != 2))
run "$cli" info --json
json 'd["module_loaded"] is False and d["mode"] == "userspace" and d["max_ranges"] == 16384'
ok "info --json: not loaded, userspace mode, the default limits" $?
# Exactly the machine's devices (here, usually none), each with every key.
json "sorted(x['name'] for x in d['rdma_devices']) == '$(rdma_here)'.split() and all(set(x) == {'name', 'max_mr_size', 'dmabuf_mr', 'error'} for x in d['rdma_devices'])"
ok "info --json lists exactly the RDMA devices of /sys/class/infiniband, each with what it takes" $?
run "$cli" info
ok "info says which RDMA devices it sees (here: none, or each with its dma-buf answer)" \
	$((rc != 0 || $(grep -cE '^rdma devices: +(none \(|[^ ]+ \()' "$tmp/out") != 1))
# What decides how much may be pinned, as the shell sees it: `ulimit -l`
# counts KiB; JSON gives bytes, or "unlimited".
memlock_json() {	# memlock_json SOFT-OR-HARD: the limit as info --json should say it
	local l
	l=$(ulimit "-$1l")
	[[ $l == unlimited ]] && echo '"unlimited"' || echo $((l * 1024))
}
run "$cli" info --json
python3 -m json.tool "$tmp/out" >/dev/null
ok "info --json is JSON (python3 -m json.tool)" $?
json "d['rlimit_memlock'] == {'soft': $(memlock_json S), 'hard': $(memlock_json H)}"
ok "info --json: rlimit_memlock soft and hard as ulimit -Sl and -Hl say" $?
cap=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
json "d['cap_ipc_lock'] is bool((0x$cap >> 14) & 1) and type(d['vm_pin_bytes']) is int and d['vm_pin_bytes'] >= 0"
ok "info --json: cap_ipc_lock as CapEff bit 14 says, vm_pin_bytes a count" $?
# Every backend built in, each usable or not with a reason; without the
# module drm and amdgpu never are (they map the module's dma-buf).
json "[b['name'] for b in d['gpu_backends_usable']] == d['gpu_backends'] and all(set(b) == {'name', 'usable', 'device', 'reason'} and type(b['usable']) is bool and (b['usable'] == (b['reason'] == '')) and (b['usable'] == (b['device'] != '')) for b in d['gpu_backends_usable']) and not any(b['usable'] for b in d['gpu_backends_usable'] if b['name'] in ('drm', 'amdgpu'))"
ok "info --json: each built backend usable or not and why; drm and amdgpu not without the module" $?
run "$cli" info
soft=$(ulimit -Sl) hard=$(ulimit -Hl)
[[ $soft == unlimited ]] || soft="$soft KiB"
[[ $hard == unlimited ]] || hard="$hard KiB"
ok "info: memlock limit as ulimit -l, CAP_IPC_LOCK, VmPin" \
	$((rc != 0 || $(grep -cE "^memlock limit: $soft soft, $hard hard |^CAP_IPC_LOCK: +(yes|no) |^VmPin: +[0-9]+ KiB " "$tmp/out") != 3))
built=$(sed -n 's/^gpu backends: *\(.*\) (built into the library)$/\1/p' "$tmp/out")
[[ $built == - ]] && built=
ok "info: a line per built backend, usable or not usable with a reason" \
	$((rc != 0 || $(grep -cE "^  [a-z]+: +(usable: .+|not usable: [a-z ]+: .+)$" "$tmp/out") != $(wc -w <<<"$built")))
(ulimit -S -l 64 && "$cli" info --json >"$tmp/out" 2>&1)
json "d['rlimit_memlock']['soft'] == 65536"
ok "info --json reads the limit of the moment (ulimit -S -l 64)" $?
# The fake CUDA driver of the library's tests, loaded as libcuda.so.1 is.
fake_cuda=$(dirname "$cli")/../tests/libsvmbatch_fake_cuda.so
if [[ -e $fake_cuda ]] && grep -qw cuda <<<"$built"; then
	mkdir -p "$tmp/fake-cuda"
	ln -s "$(realpath "$fake_cuda")" "$tmp/fake-cuda/libcuda.so.1"
	LD_LIBRARY_PATH=$tmp/fake-cuda run "$cli" info --json
	json "[(b['usable'], b['reason']) for b in d['gpu_backends_usable'] if b['name'] == 'cuda'] == [(True, '')]"
	ok "info --json: cuda usable where a driver with a device loads" $?
else
	tap_skip "info --json: cuda usable where a driver with a device loads" "no fake CUDA driver built beside $cli"
fi
SVMBATCH_MODE=kernel run "$cli" info
ok "info with SVMBATCH_MODE=kernel and no module fails (1) and says why" \
	$((rc != 1 || $(grep -c 'svmbatch.ko loaded' "$tmp/out") != 1))
run "$cli" stat
ok "stat without the module exits 3" $((rc != 3 || $(grep -c 'not loaded' "$tmp/out") != 1))

# A debugfs fixture: two files of this shell's pid, one of pid 1.
mkdir -p "$tmp/debugfs"
cat >"$tmp/debugfs/stats" <<EOT
contexts 3
registrations 4
pinned_pages 300
meta_bytes 5000
registered_total 17
failed_registrations 2
stale_total 1
pin_retries 5
exports 1
dmabuf_segments 3
dmabuf_attachments 1
EOT
printf 'id tgid registrations pinned_pages failed\n1 %d 3 200 1\n2 %d 1 50 0\n3 1 0 50 1\n' $$ $$ >"$tmp/debugfs/clients"
export SVMBATCH_DEVICE=/dev/null SVMBATCH_DEBUGFS=$tmp/debugfs
run "$cli" stat
ok "stat: global counters" $((rc != 0 || $(grep -cE '^registrations: +4 live, 17 since load, 2 failed|^pinned: +300 pages \(1\.2 MiB\)|^stale: +1 |^pin retries: +5 ' "$tmp/out") != 4))
ok "stat: one line per process, files summed" $(($(grep -cE "^$$ +[^ ]+ +2 +4 +1000\.0 KiB +1$" "$tmp/out") != 1))
run "$cli" stat --json
json "d['global']['stale_total'] == 1 and [(p['pid'], p['files'], p['registrations'], p['pinned_bytes']) for p in d['processes']] == [(1, 1, 0, 50 * 4096), ($$, 2, 4, 250 * 4096)]"
ok "stat --json: global and per process" $?
SVMBATCH_DEBUGFS=$tmp/nowhere run "$cli" stat
ok "stat with the module but no debugfs fails (1) and says why" \
	$((rc != 1 || $(grep -c 'cannot read .*debugfs mounted' "$tmp/out") != 1))

export SVMBATCH_DEVICE=$tmp/no-device
# bench opens the device SVMBATCH_DEVICE (or --device) names, none here:
# userspace mode asked for first, then found.
SVMBATCH_MODE=userspace run "$cli" bench --sizes 1 4 16 --out "$tmp" --quiet
ok "bench exits 0 and says what it wrote" $((rc != 0 || $(grep -cE '^wrote .*/bench-[0-9-]+\.(json|png)$' "$tmp/out") != 2))
ok "bench says it ran in userspace mode and measured bookkeeping, not pinning" \
	$(($(grep -cE '^mode: +userspace \(|^measures: +userspace mode: .*not pinning' "$tmp/out") != 2))
cp "$tmp"/bench-*.json "$tmp/out"
json '[p["n"] for p in d["points"]] == [1, 4, 16] and all(p["batch_us"] > 0 and p["single_us"] > 0 for p in d["points"])'
ok "bench JSON: every batch size, both timings" $?
json 'd["mode"] == "userspace" and d["pins"] is False and "not pinning" in d["measures"]'
ok "bench JSON: userspace mode, pins nothing, says what it measured" $?
png=$(ls "$tmp"/bench-*.png 2>/dev/null)
[[ -n $png && $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]]
ok "bench PNG is a PNG" $?
rm -f "$tmp"/bench-*
run "$cli" bench --sizes 2 --out "$tmp" --no-plot --quiet
ok "bench --no-plot writes no PNG" $((rc != 0 || $(find "$tmp" -name 'bench-*.png' | wc -l) != 0))
cp "$tmp"/bench-*.json "$tmp/out"
json 'd["mode"] == "userspace" and "/no-device" in d["reason"]'
ok "bench opens the device SVMBATCH_DEVICE names, and says so" $?
run "$cli" bench --sizes 0
ok "bench --sizes 0 is a usage error (2)" $((rc != 2))

run "$cli" selftest --dir "$tmp/none"
ok "selftest without selftests fails (1)" $((rc != 1))
mkdir -p "$tmp/st"
printf '#!/bin/sh\necho "TAP version 13"\necho "1..2"\necho "ok 1 a"\necho "ok 2 b # SKIP no"\n' >"$tmp/st/good"
printf '#!/bin/sh\necho "1..1"\necho "not ok 1 c"\nexit 1\n' >"$tmp/st/bad"
printf '#!/bin/sh\nkill -9 $$\n' >"$tmp/st/dies"
chmod +x "$tmp/st/good" "$tmp/st/bad" "$tmp/st/dies"
run "$cli" selftest --dir "$tmp/st"
ok "selftest without the module exits 3" $((rc != 3))
export SVMBATCH_DEVICE=/dev/null
run "$cli" selftest --dir "$tmp/st"
ok "selftest counts TAP and a test that dies" $((rc != 1 || $(grep -c '^selftest: 1 passed, 2 failed, 1 skipped$' "$tmp/out") != 1))
run "$cli" selftest --dir "$tmp/st" good
ok "selftest NAME runs only that one" $((rc != 0 || $(grep -c '^selftest: 1 passed, 0 failed, 1 skipped$' "$tmp/out") != 1))
run "$cli" selftest --dir "$tmp/st" nosuch
ok "selftest of an unknown name is a usage error (2)" $((rc != 2))

tap_done cli_test
