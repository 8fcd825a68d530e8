#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The CUDA checks that need a GPU, in one call of the device tool (its
# machines keep nothing, and device time is scarce):
#   tools/device/prepare-deps.sh            # here: fills build/device-deps
#   device run: tools/device/run.sh         # carry build/device-deps
# Builds libsvmbatch and the CUDA programs with the tree's own CMake
# (examples/CMakeLists.txt; static liburing, libdrm and googletest from
# build/device-deps), checks the CUDA loader's constants against cuda.h,
# runs the CUDA tests (googletest, real driver), the example and the
# benchmark, and writes under $OUT:
#   env.txt  build.log  cuda-tests.log  cuda_scatter_read.log  cuda-bench.json  cuda-bench.log
#   pipeline-bench.json  pipeline-bench.log  gpu-io-loop.log  gpu-io-tests.log
#   gpu-io-bench.json  gpu-io-bench.log
#   python-build.log  python-tests.log  torch-cpp-tests.log  torch-bench.json  torch-bench.log
#   loaders-bench-TAG.json  loaders-bench-TAG.log  pool-bench.json  distributed-bench.json
# Ends with "N passed, N failed" over: build, ABI check, tests, example,
# benchmark, pipeline benchmark, the Python package's build, its tests
# with the venv's torch and CUDA, the torch benchmark, the loaders'
# benchmark.
# SVMBATCH_DEVICE_STEPS picks groups (comma-separated; default all): cuda
# (ABI check, tests, example, benchmark), pipeline, gpuio (GPU-driven I/O:
# the 4 GiB read and write tests and the benchmark; SVMBATCH_GPUIO_EXTRA:
# further benchmark runs, each a set of its arguments, ';' between sets,
# written to gpu-io-bench-<N>.json), torch (the Python package, its tests,
# the C++ torch tests, the benchmark), torchbench (the Python package and
# the benchmark alone), loaders (the Python package, the peer loaders and
# bench/loaders_bench.py; SVMBATCH_LOADERS_ARGS passes it arguments,
# SVMBATCH_LOADERS_CELLS its cells, e.g. the cold ones alone in a call of
# their own, SVMBATCH_LOADERS_TAG the name of its loaders-bench-TAG.json), pool
# (bench/pool_bench.py: pinned pools and pin() against the floor;
# SVMBATCH_POOL_ARGS), distributed (the 2-GPU machine: the NCCL tests of
# test_distributed.py, then bench/distributed_bench.py under torchrun on
# every GPU; SVMBATCH_DISTRIBUTED_ARGS); the CMake build runs for the
# groups that need it.
# Each benchmark writes its JSON itself, with the commit measured
# (build/device-deps/COMMIT, from prepare-deps.sh: the C++ ones through
# --commit, the Python ones read it themselves, bench/harness.py), the
# machine, the mode and its method inside.  The builds under /tmp/svmbatch-device are kept,
# so that a second call on a machine still warm rebuilds only what
# changed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-/tmp/svmbatch-device-out}
mkdir -p "$OUT"
deps=$PWD/build/device-deps
work=/tmp/svmbatch-device
# A build of another checkout's path is not reused (CMake refuses it).
[[ $(cat "$work/source" 2>/dev/null) == "$PWD" ]] || rm -rf "${work:?}"
rm -rf "${work:?}/bin" && mkdir -p "$work/bin" && echo "$PWD" >"$work/source"
# shellcheck source=tools/tap-runner.sh
source tools/tap-runner.sh
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
# nvcc, and CMake and ninja, which come with the GPU machine's Python
# environment (on PATH there as a rule, but not for every shell).
export PATH=$cuda/bin:$PATH
python=$(command -v python3) && PATH=$PATH:${python%/*}
# Debian's pkg-config, which prepare-deps.sh carried, reading only the
# carried libraries' .pc files.
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$deps/pkgconf" "$deps/pkgconf/pkgconf" \
	>"$work/bin/pkg-config"
chmod +x "$work/bin/pkg-config"
export PATH=$work/bin:$PATH PKG_CONFIG_LIBDIR=$deps/lib/pkgconfig PKG_CONFIG_PATH=
commit=$(cat "$deps/COMMIT" 2>/dev/null || echo unknown)
{
	echo "commit: $commit"
	echo "date: $(date -u +%FT%TZ)"
	echo "kernel: $(uname -r)"
	nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader
	nvcc --version | tail -2
	g++ --version | head -1
	cmake --version | head -1
	nproc
	grep MemTotal /proc/meminfo
	df -h /tmp /dev/shm | tail -2
	# The disk of the O_DIRECT figures.
	findmnt -no SOURCE,FSTYPE,OPTIONS --target /var/tmp
	lsblk -o NAME,SIZE,ROTA,TYPE,MODEL
	for q in rotational logical_block_size max_sectors_kb nr_requests scheduler; do
		echo "vda $q: $(cat /sys/block/vda/queue/$q 2>/dev/null)"
	done
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
build() {
	# googletest from its sources, installed with its CMake package.
	cmake -S "$deps/src/googletest" -B "$work/gtest-build" "${generator[@]}" \
		-DCMAKE_BUILD_TYPE=Release -DINSTALL_GTEST=ON \
		-DCMAKE_INSTALL_PREFIX="$work/gtest" -DCMAKE_INSTALL_LIBDIR=lib \
		-DCMAKE_INSTALL_INCLUDEDIR=include &&
	cmake --build "$work/gtest-build" -j "$(nproc)" &&
	cmake --install "$work/gtest-build" &&
	# The library with the CUDA programs (examples/CMakeLists.txt); the
	# library's own tests and the CLI (CLI11) are not for this machine.
	cmake -S libsvmbatch -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DCMAKE_PREFIX_PATH="$deps;$work/gtest" -DSVMBATCH_TESTS=OFF -DSVMBATCH_CLI=OFF \
		-DSVMBATCH_CUDA_PROGRAMS=ON &&
	cmake --build "$work/build" -j "$(nproc)" \
		--target cuda_device_tests cuda_scatter_read cuda_bench pipeline_bench \
		gpu_io_loop gpu_io_bench
}
# On this machine a GPU is present: a googletest run that skipped a test,
# or ran none, failed (gtest_all_ran BINARY...).
gtest_all_ran() {
	local log rc
	log=$(mktemp)
	"$@" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	if ((rc == 0)) && grep -q '^\[  SKIPPED \]' "$log"; then
		echo "device run: a test skipped on a machine with a GPU"
		rc=1
	fi
	if ((rc == 0)) && ! grep -qE '^\[  PASSED  \] [1-9][0-9]* test' "$log"; then
		echo "device run: no test passed"
		rc=1
	fi
	rm -f "$log"
	return "$rc"
}
# pytest as make check runs it (tools/check.sh): a separate collection
# counts the tests, the suite prints TAP (conftest.py) whose plan must
# equal that count, judged by tools/tap-runner.sh's tap_program; and on
# this machine a skip fails unless its reason is a GPU feature the machine
# lacks (SVMBATCH_GPU_ABSENT_SKIPS, a regex; a second GPU where there is
# one, ROCm, Level Zero), or the "CUDA present" halves of tests that need
# CUDA absent (pytest_planned NAME CMD...: CMD runs pytest).
gpu_absent_skips=${SVMBATCH_GPU_ABSENT_SKIPS:-'NCCL on two CUDA devices|built without the Level Zero backend|torch has a CUDA device here: only a missing one is tested|CUDA is present'}
pytest_planned() {
	local name=$1 plan bad
	shift
	if ! "$@" --collect-only -q >"$OUT/$name-collect.log" 2>&1; then
		echo "device run: $name: the collection failed"
		tail -20 "$OUT/$name-collect.log"
		return 1
	fi
	plan=$(grep -cE '^libsvmbatch/python/tests/[^ :]+\.py::' "$OUT/$name-collect.log")
	# A subshell: tap_program counts into its own totals, not this script's.
	(TAP_LOGDIR=$OUT TAP_EXPECT_PLAN=$plan tap_program "$name" "$@" -p no:terminal) || return 1
	bad=$(grep -E '^ok [0-9]+ .*# SKIP' "$OUT/$name.log" | grep -vE "# SKIP .*($gpu_absent_skips)")
	if [[ -n $bad ]]; then
		echo "device run: $name: skips that are no missing GPU feature of this machine:"
		echo "$bad"
		return 1
	fi
}
steps=${SVMBATCH_DEVICE_STEPS:-all}
want() { [[ $steps == all || ,$steps, == *,$1,* ]]; }
# The CMake build is for the groups that run its programs.
if want cuda || want pipeline || want gpuio || want torch; then
	step build build >"$OUT/build.log" 2>&1
	tail -20 "$OUT/build.log"
fi
if want cuda; then
	step cuda-abi-check cmake --build "$work/build" --target cuda_abi_check
	# The GPU-driven I/O tests are the gpuio group's.
	step cuda-tests gtest_all_ran "$work/build/examples/cuda_device_tests" \
		--gtest_filter='-CudaDevice.AKernelWrites*:CudaDevice.DeviceReads*' \
		>"$OUT/cuda-tests.log" 2>&1
	grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) |^#|Failure|Expected|Which|actual' "$OUT/cuda-tests.log" | head -60
	step cuda_scatter_read "$work/build/examples/cuda_scatter_read" --buffers 2000 --dir /tmp \
		>"$OUT/cuda_scatter_read.log" 2>&1
	cat "$OUT/cuda_scatter_read.log"
	step cuda-bench "$work/build/examples/cuda_bench" /tmp --commit "$commit" \
		>"$OUT/cuda-bench.json" 2>"$OUT/cuda-bench.log"
	cat "$OUT/cuda-bench.log"
fi
# file <-> GPU at the machine's bandwidth: a 4 GiB file in the page cache
# (tmpfs: no writeback to the disk disturbs the write figures) and 1 GiB
# with O_DIRECT on the root disk.
if want pipeline; then
	step pipeline-bench "$work/build/examples/pipeline_bench" --dir /dev/shm --gib 4 \
		--direct-dir /var/tmp --direct-gib 1 --reps 5 --commit "$commit" \
		>"$OUT/pipeline-bench.json" 2>"$OUT/pipeline-bench.log"
	cat "$OUT/pipeline-bench.log"
fi
# GPU-driven I/O (IoLoop, <svmbatch/gpu_io/device.cuh>): a persistent kernel reads
# a 4 GiB file in random pieces and checksums them against the CPU's, a
# kernel writes a 4 GiB file in random pieces that the CPU reads back byte
# for byte, device reads through the copy engine land byte for byte
# (cuda_device_tests' GPU-driven I/O tests), then the benchmark
# against the host-driven pipelines.  Each under a timeout: a protocol bug
# would hang the kernel.
if want gpuio; then
	step gpu-io-loop timeout 300 "$work/build/examples/gpu_io_loop" --gib 4 --dir /dev/shm \
		>"$OUT/gpu-io-loop.log" 2>&1
	cat "$OUT/gpu-io-loop.log"
	step gpu-io-tests gtest_all_ran timeout 300 "$work/build/examples/cuda_device_tests" \
		--gtest_filter='CudaDevice.AKernelWrites*:CudaDevice.DeviceReads*' \
		>"$OUT/gpu-io-tests.log" 2>&1
	grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) |^#|Failure|Expected|Which|actual' \
		"$OUT/gpu-io-tests.log"
	machine="$(nvidia-smi --query-gpu=name,pcie.link.gen.max,pcie.link.width.max \
		--format=csv,noheader | head -n 1), $(nproc) cores, kernel $(uname -r)"
	step gpu-io-bench timeout 420 "$work/build/examples/gpu_io_bench" --dir /dev/shm --gib 4 \
		--small-gib 1 --reps 5 --latency-dir /var/tmp --machine "$machine" --commit "$commit" \
		>"$OUT/gpu-io-bench.json" 2>"$OUT/gpu-io-bench.log"
	cat "$OUT/gpu-io-bench.log" "$OUT/gpu-io-bench.json"
	IFS=';' read -ra gpuio_extra <<<"${SVMBATCH_GPUIO_EXTRA:-}"
	for n in "${!gpuio_extra[@]}"; do
		read -ra extra_args <<<"${gpuio_extra[$n]}"
		step "gpu-io-bench-$((n + 1))" timeout 420 "$work/build/examples/gpu_io_bench" \
			--dir /dev/shm --gib 4 --small-gib 1 --reps 5 --latency-dir /var/tmp \
			--machine "$machine" \
			--commit "$commit" "${extra_args[@]}" >"$OUT/gpu-io-bench-$((n + 1)).json" \
			2>"$OUT/gpu-io-bench-$((n + 1)).log"
		python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("summary"))' \
			"$OUT/gpu-io-bench-$((n + 1)).json"
	done
fi
# The Python package as pip users install it: the sdist of
# prepare-deps.sh installed into the venv with pip (offline: the build
# backend's wheels are carried), then its tests with the venv's torch and
# safetensors (pytest carried in build/device-deps/pytest where the venv
# has none), the benchmark.  The import must come from the venv.
python_install() {
	local t0=$SECONDS
	"$python" -m pip install --disable-pip-version-check --no-index \
		--find-links "$deps/wheels" scikit-build-core pybind11 &&
	"$python" -m pip install --disable-pip-version-check --no-index --no-build-isolation \
		--force-reinstall --no-deps "$deps"/dist/svmbatch-*.tar.gz &&
	echo "pip install $(basename "$deps"/dist/svmbatch-*.tar.gz): $((SECONDS - t0)) s" &&
	(cd / && "$python" -c 'import sys, svmbatch, svmbatch.torch
print(svmbatch.__file__, svmbatch.__version__)
sys.exit(not svmbatch.__file__.startswith(sys.prefix))')
}
if want torch || want torchbench || want loaders || want pool || want distributed; then
	pypath=
	"$python" -c 'import pytest' 2>/dev/null || pypath=$deps/pytest
	step python-install python_install >"$OUT/python-install.log" 2>&1
	tail -5 "$OUT/python-install.log"
fi
if want torch; then
	step python-tests pytest_planned python-tests env PYTHONPATH="$pypath" \
		"$python" -m pytest -p no:cacheprovider libsvmbatch/python/tests
	grep -E '^not ok|# SKIP' "$OUT/python-tests.log" | head -40
	torch_cpp() {
		cmake -S libsvmbatch -B "$work/torch-build" "${generator[@]}" \
			-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSVMBATCH_CLI=OFF -DSVMBATCH_EXAMPLES=OFF \
			-DCMAKE_PREFIX_PATH="$deps;$work/gtest;$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')" &&
		cmake --build "$work/torch-build" -j "$(nproc)" --target svmbatch_torch_tests &&
		gtest_all_ran "$work/torch-build/tests/svmbatch_torch_tests"
	}
	step torch-cpp-tests torch_cpp >"$OUT/torch-cpp-tests.log" 2>&1
	tail -8 "$OUT/torch-cpp-tests.log"
fi
# Cold loads on the root disk with the page cache dropped before each
# load (the benchmark records none where it cannot drop it).
if want torch || want torchbench; then
	step torch-bench env PYTHONPATH="$pypath" "$python" bench/torch_bench.py \
		--dir /dev/shm --gib 4,16 --cold-dir /var/tmp --reps 5 --cold-reps 5 \
		>"$OUT/torch-bench.json" 2>"$OUT/torch-bench.log"
	cat "$OUT/torch-bench.log"
fi
# Every safetensors loader a serving engine offers, each documented mode a
# row, on the same files (the peers' wheels carried in
# build/device-deps/peers).  SVMBATCH_LOADERS_CELLS picks the cells (all
# by default), so that the hot cells and the cold ones can run in
# separate calls; SVMBATCH_LOADERS_TAG names the output
# (loaders-bench-TAG.json and .log, default "all").
if want loaders; then
	step peers-install "$python" -m pip install --disable-pip-version-check --no-index \
		--find-links "$deps/peers" instanttensor fastsafetensors runai-model-streamer \
		>"$OUT/peers-install.log" 2>&1
	tail -3 "$OUT/peers-install.log"
	read -ra loaders_args <<<"${SVMBATCH_LOADERS_ARGS:-}"
	loaders_tag=${SVMBATCH_LOADERS_TAG:-all}
	[[ -n ${SVMBATCH_LOADERS_CELLS:-} ]] && loaders_args=(--cells "$SVMBATCH_LOADERS_CELLS" "${loaders_args[@]}")
	step loaders-bench env PYTHONPATH="$pypath" "$python" bench/loaders_bench.py \
		--out "$OUT/loaders-bench-$loaders_tag.json" "${loaders_args[@]}" \
		>/dev/null 2>"$OUT/loaders-bench-$loaders_tag.log"
	cat "$OUT/loaders-bench-$loaders_tag.log"
fi
# Pinned pools, each way in a fresh process, on the first GPU.
if want pool; then
	read -ra pool_args <<<"${SVMBATCH_POOL_ARGS:-}"
	step pool-bench env PYTHONPATH="$pypath" CUDA_VISIBLE_DEVICES=0 "$python" bench/pool_bench.py \
		--out "$OUT/pool-bench.json" "${pool_args[@]}" \
		>/dev/null 2>"$OUT/pool-bench.log"
	cat "$OUT/pool-bench.log"
fi
# One rank per GPU: the NCCL tests, then the distributed load against
# each rank loading alone and the peers' distributed modes.
if want distributed; then
	if ! want loaders; then
		step peers-install "$python" -m pip install --disable-pip-version-check --no-index \
			--find-links "$deps/peers" instanttensor fastsafetensors \
			>"$OUT/peers-install.log" 2>&1
		tail -3 "$OUT/peers-install.log"
	fi
	nvidia-smi topo -m >"$OUT/topology.txt" 2>&1
	cat "$OUT/topology.txt"
	step distributed-tests pytest_planned distributed-tests env PYTHONPATH="$pypath" \
		"$python" -m pytest -p no:cacheprovider -k nccl \
		libsvmbatch/python/tests/test_distributed.py
	grep -E '^not ok|# SKIP' "$OUT/distributed-tests.log" | head -20
	read -ra dist_args <<<"${SVMBATCH_DISTRIBUTED_ARGS:-}"
	step distributed-bench env PYTHONPATH="$pypath" "$python" -m torch.distributed.run \
		--nproc-per-node "$(nvidia-smi -L | wc -l)" bench/distributed_bench.py \
		--out "$OUT/distributed-bench.json" "${dist_args[@]}" \
		>"$OUT/distributed-bench.log" 2>&1
	tail -40 "$OUT/distributed-bench.log"
fi
echo "device run: $passed passed, $failed failed"
[[ $failed == 0 ]]
