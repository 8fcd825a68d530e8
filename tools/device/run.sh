#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Everything issue 6 needs from the GPU machine, in one call of the device
# tool (its machines keep nothing, and device time is scarce):
#   tools/device/prepare-deps.sh            # here: fills build/device-deps
#   device run: tools/device/run.sh         # carry build/device-deps
# Builds libsvmbatch (g++, no CMake package lookups: the static libraries
# come from build/device-deps), checks the CUDA loader's constants against
# cuda.h, runs the CUDA tests (googletest, real driver), the example and
# the benchmark, and writes under $OUT:
#   env.txt  build.log  cuda-tests.log  cuda_scatter_read.log  cuda-bench.json  cuda-bench.log
# Ends with "N passed, N failed" over: build, ABI check, tests, example,
# benchmark.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/svmbatch-device-out}
mkdir -p "$OUT"
deps=$PWD/build/device-deps
work=/tmp/svmbatch-device
rm -rf "$work" && mkdir -p "$work/obj"
passed=0 failed=0
exec 3>&1	# step's verdicts, whatever the step's own output is redirected to
step() {	# step NAME CMD...: run, log, count
	local name=$1
	shift
	local t0=$SECONDS
	if "$@"; then
		passed=$((passed + 1))
		echo "ok   $name ($((SECONDS - t0)) s)" >&3
	else
		failed=$((failed + 1))
		echo "FAIL $name ($((SECONDS - t0)) s)" >&3
	fi
}

[[ -d $deps/lib ]] || { echo "no $deps: run tools/device/prepare-deps.sh here first"; exit 2; }
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH=$cuda/bin:$PATH
{
	echo "commit: $(cat "$deps/COMMIT" 2>/dev/null || echo unknown)"
	echo "date: $(date -u +%FT%TZ)"
	echo "kernel: $(uname -r)"
	nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader
	nvcc --version | tail -2
	g++ --version | head -1
	nproc
	grep MemTotal /proc/meminfo
	df -h /tmp /dev/shm | tail -2
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

inc=(-Ilibsvmbatch/include -Iuapi -Ilibsvmbatch/src -Iexamples -I"$deps/include"
	-I"$deps/include/libdrm" -I"$deps/include/hsa" -I"$cuda/include" -Ilibsvmbatch/tests)
cxx=(g++ -std=c++20 -O2 -g -Wall -Wextra -Werror "${inc[@]}")
libs=("$work/libsvmbatch.a" "$deps/lib/liburing.a" "$deps/lib/libdrm_amdgpu.a"
	"$deps/lib/libdrm.a" -L"$cuda/lib64" -lcudart -ldl -lpthread)

build() {
	ls libsvmbatch/src/*.cpp | xargs -P "$(nproc)" -I{} sh -c \
		'"$@" -DSVMBATCH_BUILDING -fPIC -c {} -o '"$work"'/obj/$(basename {} .cpp).o' \
		_ "${cxx[@]}" || return 1
	ar rcs "$work/libsvmbatch.a" "$work"/obj/*.o &&
	g++ -std=c++17 -O2 -I"$deps/src/googletest/include" -I"$deps/src/googletest" \
		-c "$deps/src/googletest/src/gtest-all.cc" -o "$work/gtest-all.o" &&
	nvcc -std=c++20 -O2 -arch=sm_90 -Iexamples -c examples/gpu_checksum.cu \
		-o "$work/gpu_checksum.o" &&
	"${cxx[@]}" -I"$deps/src/googletest/include" tools/device/cuda_device_tests.cpp \
		"$deps/src/googletest/src/gtest_main.cc" "$work/gtest-all.o" \
		"$work/gpu_checksum.o" "${libs[@]}" -o "$work/cuda_device_tests" &&
	"${cxx[@]}" examples/cuda_scatter_read.cpp "$work/gpu_checksum.o" "${libs[@]}" \
		-o "$work/cuda_scatter_read" &&
	"${cxx[@]}" tools/bench/cuda_bench.cpp "${libs[@]}" -o "$work/cuda_bench"
}
step build build >"$OUT/build.log" 2>&1
tail -20 "$OUT/build.log"
step cuda-abi-check "${cxx[@]}" -fsyntax-only tools/device/cuda_abi_check.cpp
step cuda-tests "$work/cuda_device_tests" >"$OUT/cuda-tests.log" 2>&1
grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) |^#|Failure|Expected|Which|actual' "$OUT/cuda-tests.log" | head -60
step cuda_scatter_read "$work/cuda_scatter_read" --buffers 2000 --dir /tmp \
	>"$OUT/cuda_scatter_read.log" 2>&1
cat "$OUT/cuda_scatter_read.log"
step cuda-bench "$work/cuda_bench" /tmp >"$OUT/cuda-bench.json" 2>"$OUT/cuda-bench.log"
cat "$OUT/cuda-bench.log"
echo "device run: $passed passed, $failed failed"
[[ $failed == 0 ]]
