#!/bin/bash
# SPDX-License-Identifier: MIT
#
# make bench-lib: run lib_bench on this host (userspace mode only) and in a
# 6.12 guest with the module (both modes); write
# bench/results/lib-{host,guest-6.12}-<date>.json.
# usage: run-lib-bench.sh MODULE LIB_BENCH_BIN
set -euo pipefail

cd "$(dirname "$0")/.."
module=$1 bin=$2
date=$(date -u +%Y-%m-%d)
log=build/vmtest/bench-lib-6.12.log
mkdir -p bench/results build/vmtest
# HEAD, plus what of the measured code differs from it
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain -- kmod uapi libsvmbatch examples bench ':!bench/results' 2>/dev/null |
	awk '{print $2}' | tr '\n' ' ' | sed 's/ $//')
[ -z "$dirty" ] || commit="$commit, modified: $dirty"

# results WHERE DESCRIPTION LOG: the JSON block of LOG with provenance
results() {
	local where=$1 desc=$2 src=$3 out=bench/results/lib-$1-$date.json
	sed -n '/^# *size /,/^SVMBATCH-BENCH-JSON-BEGIN/p' "$src" | sed '$d'
	{
		echo "{"
		echo "  \"measured\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
		echo "  \"commit\": \"$commit\","
		echo "  \"where\": \"$where\","
		echo "  \"machine\": \"$desc\","
		sed -n '/SVMBATCH-BENCH-JSON-BEGIN/,/SVMBATCH-BENCH-JSON-END/p' "$src" |
			sed '1d;$d' | sed '1d'
	} >"$out"
	echo "wrote $out"
}

host_desc="$(nproc) cores, $(awk '/MemTotal/ {printf "%d GiB", $2 / 1048576}' /proc/meminfo), Linux $(uname -r), no svmbatch module"
"$bin" >build/vmtest/bench-lib-host.log
results host "$host_desc" build/vmtest/bench-lib-host.log

tools/vmtest/run.sh --kernel 6.12 --module "$module" --mem 3072 \
	--timeout 1800 --test-timeout 1500 --log "$log" "$bin"
results guest-6.12 "QEMU $(qemu-system-x86_64 --version | head -n1 | awk '{print $4}') TCG guest (software-emulated: only ratios from the same run mean anything), 2 vCPUs, 3 GiB, on a host with $host_desc" "$log"
