#!/bin/bash
# SPDX-License-Identifier: MIT
#
# make bench-kmod: run bench/kmod_bench in a guest of KERNEL and write
# bench/results/kmod-<kernel>-<date>.json (the guest's JSON plus where and
# when it was measured).  usage: run-kmod-bench.sh KERNEL MODULE BENCH_BIN
set -euo pipefail

cd "$(dirname "$0")/.."
kernel=$1 module=$2 bin=$3
log=build/vmtest/bench-$kernel.log
out=bench/results/kmod-$kernel-$(date -u +%Y-%m-%d).json

tools/vmtest/run.sh --kernel "$kernel" --module "$module" --mem 3072 \
	--timeout 5400 --test-timeout 5000 --log "$log" "$bin"

sed -n '/^# *size /,/^SVMBATCH-BENCH-JSON-BEGIN/p' "$log" | sed '$d'
mkdir -p bench/results
{
	echo "{"
	echo "  \"measured\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
	echo "  \"commit\": \"$(git rev-parse --short HEAD 2>/dev/null || echo unknown)\","
	echo "  \"host\": \"$(nproc) cores, $(awk '/MemTotal/ {printf "%d GiB", $2 / 1048576}' /proc/meminfo), $(uname -r)\","
	echo "  \"guest\": \"QEMU $(qemu-system-x86_64 --version | head -n1 | awk '{print $4}'), TCG (software-emulated: only ratios measured in the same run mean anything), 2 vCPUs, 3 GiB\","
	sed -n '/SVMBATCH-BENCH-JSON-BEGIN/,/SVMBATCH-BENCH-JSON-END/p' "$log" |
		sed '1d;$d' | sed '1d'
} >"$out"
echo "wrote $out"
