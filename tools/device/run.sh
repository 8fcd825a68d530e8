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
# bench/loaders_bench.py; SVMBATCH_LOADERS_ARGS passes it arguments), pool
# (bench/pool_bench.py: pinned pools and pin() against the floor;
# SVMBATCH_POOL_ARGS), distributed (the 2-GPU machine: the NCCL tests of
# test_distributed.py, then bench/distributed_bench.py under torchrun on
# every GPU; SVMBATCH_DISTRIBUTED_ARGS); the CMake build runs for the
# groups that need it.
# Each benchmark writes its JSON itself, with the commit measured
# (build/device-deps/COMMIT, from prepare-deps.sh), the machine, the mode
# and its method inside.  The builds under /tmp/svmbatch-device are kept,
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
# pytest with the venv's CUDA: no test may skip for want of CUDA, and some
# must pass (pytest_cuda_ran LOG CMD...).
pytest_cuda_ran() {
	local log=$1 rc
	shift
	"$@" >"$log" 2>&1
	rc=$?
	if ((rc == 0)) && grep -E '^SKIPPED' "$log" | grep -qiE 'no CUDA|without the CUDA'; then
		echo "device run: a Python test skipped for want of CUDA on a GPU machine" >>"$log"
		rc=1
	fi
	if ((rc == 0)) && ! grep -qE '[1-9][0-9]* passed' "$log"; then
		echo "device run: no Python test passed" >>"$log"
		rc=1
	fi
	return "$rc"
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
	step python-tests pytest_cuda_ran "$OUT/python-tests.log" env PYTHONPATH="$pypath" \
		"$python" -m pytest -p no:cacheprovider -rs libsvmbatch/python/tests
	tail -30 "$OUT/python-tests.log"
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
		--dir /dev/shm --gib 4,16 --cold-dir /var/tmp --reps 5 --cold-reps 3 \
		--commit "$commit" >"$OUT/torch-bench.json" 2>"$OUT/torch-bench.log"
	cat "$OUT/torch-bench.log"
fi
# Every safetensors loader a serving engine offers, on the same files, in
# one run (the peers' wheels carried in build/device-deps/peers).
if want loaders; then
	step peers-install "$python" -m pip install --disable-pip-version-check --no-index \
		--find-links "$deps/peers" instanttensor fastsafetensors runai-model-streamer \
		>"$OUT/peers-install.log" 2>&1
	tail -3 "$OUT/peers-install.log"
	read -ra loaders_args <<<"${SVMBATCH_LOADERS_ARGS:-}"
	step loaders-bench env PYTHONPATH="$pypath" "$python" bench/loaders_bench.py \
		--commit "$commit" --out "$OUT/loaders-bench.json" "${loaders_args[@]}" \
		>/dev/null 2>"$OUT/loaders-bench.log"
	cat "$OUT/loaders-bench.log"
fi
# Pinned pools, each way in a fresh process, on the first GPU.
if want pool; then
	read -ra pool_args <<<"${SVMBATCH_POOL_ARGS:-}"
	step pool-bench env PYTHONPATH="$pypath" CUDA_VISIBLE_DEVICES=0 "$python" bench/pool_bench.py \
		--commit "$commit" --out "$OUT/pool-bench.json" "${pool_args[@]}" \
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
	step distributed-tests pytest_cuda_ran "$OUT/distributed-tests.log" env PYTHONPATH="$pypath" \
		"$python" -m pytest -p no:cacheprovider -rs -k nccl \
		libsvmbatch/python/tests/test_distributed.py
	tail -15 "$OUT/distributed-tests.log"
	read -ra dist_args <<<"${SVMBATCH_DISTRIBUTED_ARGS:-}"
	step distributed-bench env PYTHONPATH="$pypath" "$python" -m torch.distributed.run \
		--nproc-per-node "$(nvidia-smi -L | wc -l)" bench/distributed_bench.py \
		--commit "$commit" --out "$OUT/distributed-bench.json" "${dist_args[@]}" \
		>"$OUT/distributed-bench.log" 2>&1
	tail -40 "$OUT/distributed-bench.log"
fi
echo "device run: $passed passed, $failed failed"
[[ $failed == 0 ]]
