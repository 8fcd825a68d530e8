# SPDX-License-Identifier: MIT
#
# svmbatch top level.  The README's two commands:
#   make demo    install what is needed, boot a 6.12 guest, run the demo
#   make check   install what is needed, run every test (host + guests)
# Both need root on a fresh Debian 12 machine (apt-get); see README.md.

SHELL := /bin/bash
# Debian's kernel families (tools/lib.sh) and the debug kernel.
KERNELS ?= $(shell . ./tools/lib.sh && echo "$$SVMBATCH_KERNELS") debug
# Guest limits per kernel: the debug kernel (KASAN, lockdep, kmemleak) runs
# the same suite several times slower under TCG.  No acpi=off: it halves
# the boot but leaves one CPU, and an early interrupt then trips KASAN.
VMTEST_ARGS_6.1 := --timeout 1200 --test-timeout 400
VMTEST_ARGS_6.12 := $(VMTEST_ARGS_6.1)
VMTEST_ARGS_debug := --timeout 3600 --test-timeout 1800 --mem 3072
KERNEL ?= 6.12
BUILD := $(CURDIR)/build
KSRC_TAR ?= /usr/src/linux-source-6.12.tar.xz
KSRC := $(BUILD)/linux-source
KSFT_DIR := $(KSRC)/tools/testing/selftests
CHECKPATCH := $(KSRC)/scripts/checkpatch.pl
KERNEL_DOC := $(KSRC)/scripts/kernel-doc
SELFTESTS_OUT := $(BUILD)/selftests
# libsvmbatch: a release build (guest tests, demo, benchmarks) and an
# ASan + UBSan build for the host tests.  Through ccache where it is
# installed (svmbatch_ccache in tools/lib.sh: a new build directory only).
LIB_OUT := $(BUILD)/lib
LIB_ASAN_OUT := $(BUILD)/lib-asan
LIB_TSAN_OUT := $(BUILD)/lib-tsan
LIB_PREFIX := /usr/local
CMAKE_LIB = . tools/lib.sh && svmbatch_ccache && \
	cmake -S libsvmbatch -B $(1) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DCMAKE_INSTALL_PREFIX=$(LIB_PREFIX) $(2) >/dev/null && cmake --build $(1) -j$$(nproc)

# ABI (e.g. 6.12.117+deb12-amd64) of the kernel family $(KERNEL)
abi = $(shell tools/vmtest/kernels.sh abi $(1))
KMOD_OUT = $(BUILD)/kmod/$(call abi,$(KERNEL))

.PHONY: all check demo deps help clean ksrc
.PHONY: kmod kmod-one kmod-built sparse-one checkpatch kernel-doc uapi-check
.PHONY: selftests vmtest vmtest-one vmtest-boot bench-kmod
.PHONY: lib lib-asan lib-tsan lib-test lib-test-tsan lib-tidy cuda-programs install bench-lib
.PHONY: deb htmldocs man shellcheck format format-check python python-test wheel python-package-test

## all          the module for every kernel of KERNELS, the selftests, the library
all: kmod selftests lib

## lib          libsvmbatch, its examples, command and benchmarks (release) into build/lib
lib:
	$(call CMAKE_LIB,$(LIB_OUT),-DPython3_EXECUTABLE=$(PYTHON))

# The Python package is built by make lib where pybind11 and Python's
# headers are (SVMBATCH_PYTHON); make python insists on it.  Debian's
# interpreter, not a pyenv or venv one that sees none of Debian's modules.
PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)
PYTHON_PATH := $(LIB_OUT)/python:$(BUILD)/pydeps
# The venv of PyPI's torch 2.x (tools/python-deps.sh --torch2): the same
# interpreter, so the same extension (it is built against no torch).
TORCH2_PYTHON := $(BUILD)/venv-torch2/bin/python

## python       the Python package svmbatch into build/lib/python (pybind11)
python:
	$(call CMAKE_LIB,$(LIB_OUT),-DSVMBATCH_PYTHON=ON -DPython3_EXECUTABLE=$(PYTHON))

## python-test  the Python tests (pytest) on this host, userspace mode, with Debian's torch 1.13, then PyPI's torch 2.x (build/venv-torch2)
python-test: python
	tools/python-deps.sh $(PYTHON)
	PYTHONPATH=$(PYTHON_PATH) $(PYTHON) -m pytest -q libsvmbatch/python/tests
	tools/python-deps.sh --torch2 $(PYTHON)
	PYTHONPATH=$(LIB_OUT)/python $(TORCH2_PYTHON) -m pytest -q libsvmbatch/python/tests

## wheel        the Python package's sdist and wheel into build/dist, as pip builds them (pyproject.toml)
wheel:
	$(PYTHON) -m build --outdir $(BUILD)/dist .

## python-package-test  the wheel built from the sdist, installed into a fresh venv and tested there
python-package-test:
	tools/check-python-package.sh

# Without the CUDA programs: nothing runs them here, make lib compiles
# them (cuda-programs) and lib-tidy reads make python's build.
## lib-asan     the same with ASan + UBSan into build/lib-asan, with the library tests
lib-asan:
	$(call CMAKE_LIB,$(LIB_ASAN_OUT),-DSVMBATCH_SANITIZE=ON -DSVMBATCH_CUDA_PROGRAMS=OFF)

## lib-tsan     the library and its tests with ThreadSanitizer into build/lib-tsan
lib-tsan:
	$(call CMAKE_LIB,$(LIB_TSAN_OUT),-DSVMBATCH_TSAN=ON -DSVMBATCH_EXAMPLES=OFF -DSVMBATCH_CLI=OFF)

# GCC 12's TSan runtime aborts ("unexpected memory mapping") under the
# mmap randomisation of recent kernels: the tests run with ASLR off
# (setarch -R).  A race fails the run (halt_on_error).
TSAN_RUN = TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 setarch $$(uname -m) -R

# Every C++ translation unit that CMake compiled in the release build with
# the Python package (make python, the build with every program): the
# library, its tests, the command, the examples, the benchmarks, the host
# side of the CUDA programs and the Python extension, read from
# compile_commands.json so that a new file is covered without being listed
# here (nvcc's .cu files are not C++ to clang-tidy).  CUDA_INC finds
# cuda_runtime.h for the CUDA programs.  Not the libtorch test
# (tests/torch_test.cpp, in make lib where CMake finds Torch): clang 14
# cannot compile Debian's libtorch headers (c10::IValue), and g++ builds
# and runs it (torch-cpp-tests).
CUDA_INC ?= /usr/local/cuda/include
CXX_UNITS = $$(jq -r '.[].file | select(endswith(".cpp")) | select(startswith("$(BUILD)/") | not) | \
	select(endswith("/libsvmbatch/tests/torch_test.cpp") | not)' \
	$(LIB_OUT)/compile_commands.json | sort -u)

# A file that passed is not checked again while nothing clang-tidy reads
# for it has changed (tools/clang-tidy-cached.sh: its stamps are in
# /var/cache/svmbatch/clang-tidy where that can be written).
## lib-tidy     clang-tidy (.clang-tidy files) over every C++ file of make python's build
lib-tidy: python
	@units=$(CXX_UNITS); test -n "$$units"; \
	echo "clang-tidy: $$(wc -w <<<"$$units") files"; \
	tally=$$(mktemp); \
	SVMBATCH_TIDY_TALLY=$$tally xargs -n 4 -P $$(nproc) tools/clang-tidy-cached.sh \
		-p $(LIB_OUT) --quiet \
		$(if $(wildcard $(CUDA_INC)/cuda_runtime.h),--extra-arg=-isystem$(CUDA_INC)) \
		<<<"$$units"; rc=$$?; \
	echo "clang-tidy: $$(grep -c '^checked ' $$tally) checked," \
		"$$(grep -c '^cached ' $$tally) unchanged since they passed"; \
	rm -f $$tally; exit $$rc

# The CUDA programs (.cu files, and .cpp files that include cuda_runtime.h)
# that CMake compiled in the release build (compile_commands.json: the
# source, the build directory, the object after -o): each object must
# exist, and so must its target's program or library (CMakeFiles/T.dir/ in
# that directory builds T, libT.so or libT.a).
## cuda-programs  check that make lib compiled and linked every CUDA program (needs nvcc)
cuda-programs: lib
	@set -e; n=0; \
	while IFS=$$'\t' read -r src dir obj; do \
		case $$src in *.cu) ;; *) grep -q '^#include <cuda_runtime' "$$src" || continue ;; esac; \
		target=$${obj%%.dir/*}; target=$${target##*/}; \
		test -f "$$dir/$$obj" || { echo "cuda: $$src: no object $$dir/$$obj"; exit 1; }; \
		out=$$(ls -d "$$dir/$$target" "$$dir/lib$$target.so" "$$dir/lib$$target.a" 2>/dev/null | head -n 1); \
		test -n "$$out" || { echo "cuda: $$src: no program or library $$target in $$dir"; exit 1; }; \
		echo "cuda: $${src#$(CURDIR)/} -> $${out#$(CURDIR)/}"; n=$$((n + 1)); \
	done < <(jq -r '.[] | [.file, .directory, (.command | capture(" -o (?<o>[^ ]+)").o)] | @tsv' \
		$(LIB_OUT)/compile_commands.json); \
	test $$n -gt 0 || { echo "cuda: nvcc is here, but make lib compiled no CUDA program"; exit 1; }

# The HIP examples (examples/hip_programs.cmake): make lib compiled them
# with hipcc for every GPU the toolchain can target (hip_architectures.txt),
# and each program holds a code object for each: hip_scatter_read, and
# hip_gpu_io (<svmbatch/gpu_io/device.cuh> under hipcc).
HIP_EXAMPLE := $(LIB_OUT)/examples/hip_scatter_read
HIP_GPU_IO := $(LIB_OUT)/examples/hip_gpu_io
## hip-programs check that make lib compiled the HIP examples for its GPUs (needs hipcc)
hip-programs: lib
	@set -e; archs=$$(cat $(LIB_OUT)/examples/hip_architectures.txt); \
	for p in $(HIP_EXAMPLE) $(HIP_GPU_IO); do \
		test -x $$p || { echo "hip: hipcc is here, but make lib built no $$p"; exit 1; }; \
		for a in $$archs; do \
			grep -qa "amdgcn-amd-amdhsa--$$a" $$p || { echo "hip: no $$a code object in $$p"; exit 1; }; \
			echo "hip: $$p holds a $$a code object"; \
		done; \
	done

# On a machine with an AMD GPU (ROCm's /dev/kfd): the HIP example maps its
# registration through HipBackend and checksums it on the GPU, hip_gpu_io's
# kernel copies a file by itself through an IoLoop (svmbatch_read and
# svmbatch_write of the device header), and the real runtime's tests map
# scattered buffers.  A skip is a failure here.
## hip-device-test  the HIP examples and runtime tests on this machine's AMD GPU (needs /dev/kfd)
hip-device-test: lib
	@test -e /dev/kfd || { echo "hip-device-test: no /dev/kfd: this machine has no AMD GPU for ROCm"; exit 1; }
	@set -e; log=$(BUILD)/hip-device-test.log; : >$$log; \
	modes=userspace; test -w /dev/svmbatch && modes="$$modes kernel"; \
	for m in $$modes; do $(HIP_EXAMPLE) --mode $$m >>$$log 2>&1 || rc=1; done; \
	$(HIP_GPU_IO) >>$$log 2>&1 || rc=1; \
	$(LIB_OUT)/tests/svmbatch_hip_runtime_tests >>$$log 2>&1 || rc=1; \
	cat $$log; \
	if [ -n "$${rc-}" ] || grep -qE '^not ok|# SKIP|SKIPPED|FAILED' $$log; then \
		echo "hip-device-test: FAILED (a failure or a skip above)"; exit 1; fi; \
	echo "hip-device-test: PASS: the GPU checksummed every buffer ($$modes mode), copied a file through an IoLoop, HipBackend mapped through the real runtime"

# On a machine with an Intel GPU (a render node of i915 or xe, and Intel's
# Level Zero driver, compute-runtime): the Level Zero example maps its
# registration through ZeBackend (the dma-buf import in kernel mode, the
# host-pointer import in userspace mode) and the device's copy engine
# copies every buffer back for the CPU to compare, and the real loader's
# tests map scattered buffers.  A skip is a failure here.
ZE_EXAMPLE := $(LIB_OUT)/examples/ze_scatter_read
## ze-device-test  the Level Zero example and loader tests on this machine's Intel GPU
ze-device-test: lib
	@ls -l /sys/class/drm/renderD*/device/driver 2>/dev/null | grep -qE '/(i915|xe)$$' || \
		{ echo "ze-device-test: no render node of i915 or xe: this machine has no Intel GPU"; exit 1; }
	@set -e; log=$(BUILD)/ze-device-test.log; : >$$log; \
	modes=userspace; test -w /dev/svmbatch && modes="$$modes kernel"; \
	for m in $$modes; do $(ZE_EXAMPLE) --mode $$m >>$$log 2>&1 || rc=1; done; \
	$(LIB_OUT)/tests/svmbatch_ze_runtime_tests >>$$log 2>&1 || rc=1; \
	cat $$log; \
	if [ -n "$${rc-}" ] || grep -qE '^not ok|# SKIP|SKIPPED|FAILED' $$log; then \
		echo "ze-device-test: FAILED (a failure or a skip above)"; exit 1; fi; \
	echo "ze-device-test: PASS: the GPU copied every buffer back ($$modes mode), ZeBackend mapped through the real loader"

# The Debian packages (svmbatch-dkms, libsvmbatch1, libsvmbatch-dev,
# svmbatch-tools) into build/deb/, built from a copy of the sources
# (svmbatch_source_files in tools/lib.sh: git's files in a checkout, every
# file but build/ in a release tarball).
## deb          the Debian packages into build/deb (DKMS, library, -dev, tools)
deb:
	rm -rf $(BUILD)/deb && mkdir -p $(BUILD)/deb/src
	. tools/lib.sh && svmbatch_source_files | tar --verbatim-files-from -T - -c | \
		tar -x -C $(BUILD)/deb/src
	cd $(BUILD)/deb/src && dpkg-buildpackage -us -uc -b -j$$(nproc) >../build.log 2>&1 || \
		{ tail -n 40 ../build.log; exit 1; }
	ls $(BUILD)/deb/*.deb

# uapi.rst includes the header's kernel-doc, extracted here.
## htmldocs     Documentation/ as HTML into build/htmldocs (Sphinx, warnings are errors)
htmldocs: ksrc
	mkdir -p $(BUILD)/htmldocs-gen
	perl $(KERNEL_DOC) -rst uapi/linux/svmbatch.h >$(BUILD)/htmldocs-gen/svmbatch-h.rst
	sphinx-build -W --keep-going -q -b html Documentation $(BUILD)/htmldocs

# The manual pages, from the same sources as the HTML (Documentation/conf.py
# says how): svmbatch(1) from cli.rst, and Documentation/man/'s pages of the
# C API.  Fails, naming it, on a function of capi.h without a page, and on
# a page of a function capi.h does not declare (libsvmbatch(3) aside).
## man          the manual pages (svmbatch(1), the C API's man3) into build/man
man:
	rm -rf $(BUILD)/man
	sphinx-build -W --keep-going -q -t man -b man -d $(BUILD)/man-doctrees \
		Documentation $(BUILD)/man
	@funcs=$$(sed -nE 's/^(SVMBATCH_API .*|int|void|int64_t|const char \*) \**(svmbatch_[a-z0-9_]+)\(.*/\2/p' \
		libsvmbatch/include/svmbatch/capi.h); \
	pages=$$(cd $(BUILD)/man/man3 && ls *.3 | sed 's/\.3$$//' | grep -vx libsvmbatch); \
	missing=$$(echo "$$funcs" | grep -vxF "$$pages"); \
	stale=$$(echo "$$pages" | grep -vxF "$$funcs"); \
	[ -z "$$missing" ] || echo "man: no page in Documentation/man/ for:" $$missing; \
	[ -z "$$stale" ] || echo "man: pages of functions capi.h does not declare:" $$stale; \
	[ -z "$$missing$$stale" ]

## install      install the library and the manual pages (DESTDIR honoured)
install: lib man
	cmake --install $(LIB_OUT)
	install -d $(DESTDIR)$(LIB_PREFIX)/share/man/man1 $(DESTDIR)$(LIB_PREFIX)/share/man/man3
	install -m 0644 $(BUILD)/man/man1/*.1 $(DESTDIR)$(LIB_PREFIX)/share/man/man1/
	install -m 0644 $(BUILD)/man/man3/*.3 $(DESTDIR)$(LIB_PREFIX)/share/man/man3/

## lib-test     the library tests on this host: userspace mode, ASan + UBSan
lib-test: lib-asan
	$(LIB_ASAN_OUT)/tests/svmbatch_lib_tests

## lib-test-tsan  the library tests on this host under ThreadSanitizer
lib-test-tsan: lib-tsan
	$(TSAN_RUN) $(LIB_TSAN_OUT)/tests/svmbatch_lib_tests

# Every .PHONY target has one "## NAME  text" line, usually right above
# its rule; help prints them and fails, naming it, on a target without one.
## help         this list
help:
	@awk '/^\.PHONY:/ { for (i = 2; i <= NF; i++) phony[$$i] = 1 } \
		/^## / { t = $$2; sub(/^## [^ ]+ +/, ""); printf "make %-14s %s\n", t, $$0; doc[t] = 1 } \
		END { for (t in phony) if (!(t in doc)) { print "help: no ## line for " t; bad = 1 } \
			exit bad }' $(firstword $(MAKEFILE_LIST))
	@echo "KERNELS=\"$(KERNELS)\" KERNEL=$(KERNEL) BENCH_KERNEL=$(BENCH_KERNEL)"

## check        every test: host checks, module builds, packages, guests (tools/check.sh)
check:
	@tools/check.sh

## deps         install the Debian packages the build and the tests need (as root)
deps:
	@tools/install-deps.sh

# Pieces of Debian's linux-source-6.12 that the headers packages lack:
# checkpatch and the kselftest harness.  Extracted once, never committed.
# The stamp's name changes with the list of files (a new name extracts again).
## ksrc         extract checkpatch, kernel-doc and the kselftest harness of linux-source
ksrc: $(KSRC)/.stamp-kernel-doc
$(KSRC)/.stamp-kernel-doc: $(KSRC_TAR)
	rm -rf $(KSRC) && mkdir -p $(KSRC)
	tar -xJf $(KSRC_TAR) -C $(KSRC) --strip-components=1 --wildcards \
		'linux-source-6.12/scripts/checkpatch.pl' \
		'linux-source-6.12/scripts/kernel-doc' \
		'linux-source-6.12/scripts/spelling.txt' \
		'linux-source-6.12/scripts/const_structs.checkpatch' \
		'linux-source-6.12/tools/testing/selftests/kselftest*' \
		'linux-source-6.12/tools/testing/selftests/lib.mk'
	touch $@

# The module for one kernel family, twice: the product build and the test
# build with CONFIG_SVMBATCH_FAULT_INJECTION.  Any W=1 warning fails.  The
# stamp .built holds the headers' directory; taken before the build, so a
# source changed while it runs is newer than the stamp (see kmod-built).
## kmod-one     the module for KERNEL, product and fault-injection builds, W=1
kmod-one:
	@set -e; abi=$(call abi,$(KERNEL)); test -n "$$abi"; \
	kdir=$$(tools/vmtest/kernels.sh headers $(KERNEL)); \
	mkdir -p $(BUILD)/kmod/$$abi; rm -f $(BUILD)/kmod/$$abi/.built; \
	echo "$$kdir" >$(BUILD)/kmod/$$abi/.building; \
	for variant in release test; do \
		out=$(BUILD)/kmod/$$abi/$$variant; \
		fi=n; [ $$variant = test ] && fi=y; \
		rm -rf $$out && mkdir -p $$out && cp -r kmod/. $$out/; \
		$(MAKE) --no-print-directory -C $$out KDIR=$$kdir \
			FAULT_INJECTION=$$fi SVMBATCH_UAPI=$(CURDIR)/uapi W=1 \
			2>&1 | tee $$out/build.log; \
		test -f $$out/svmbatch.ko; \
		if grep -iE "warning:|error:" $$out/build.log; then \
			echo "kmod $$abi $$variant: warnings"; exit 1; fi; \
		echo "kmod $$abi $$variant: $$out/svmbatch.ko"; \
	done; \
	mv $(BUILD)/kmod/$$abi/.building $(BUILD)/kmod/$$abi/.built

# What the guests, sparse and the benchmarks use: kmod-one, unless its
# builds for KERNEL are newer than every source (kmod/, uapi/, this
# Makefile) and used the same headers, so make check builds each module
# once.
## kmod-built   kmod-one for KERNEL unless its builds are up to date
kmod-built:
	@set -e; abi=$(call abi,$(KERNEL)); test -n "$$abi"; \
	kdir=$$(tools/vmtest/kernels.sh headers $(KERNEL)); stamp=$(BUILD)/kmod/$$abi/.built; \
	if [ -f $$stamp ] && [ "$$(cat $$stamp)" = "$$kdir" ] && \
		[ -z "$$(find kmod uapi Makefile -newer $$stamp -print -quit)" ]; then \
		echo "kmod $$abi: up to date in $(BUILD)/kmod/$$abi"; \
	else \
		$(MAKE) --no-print-directory kmod-one KERNEL=$(KERNEL); \
	fi

# sparse (C=2: every file, compiled or not) over the fault-injection build.
# The arguments are kmod-one's, so kbuild finds nothing to compile again.
## sparse-one   sparse over the module for KERNEL (its fault-injection build)
sparse-one: kmod-built
	@set -e; abi=$(call abi,$(KERNEL)); out=$(BUILD)/kmod/$$abi/test; \
	kdir=$$(tools/vmtest/kernels.sh headers $(KERNEL)); \
	$(MAKE) --no-print-directory -C $$out KDIR=$$kdir FAULT_INJECTION=y \
		SVMBATCH_UAPI=$(CURDIR)/uapi W=1 C=2 2>&1 | tee $$out/sparse.log; \
	if grep -E "warning:|error:" $$out/sparse.log; then \
		echo "sparse $$abi: warnings"; exit 1; fi; \
	echo "sparse $$abi: clean"

## kmod         kmod-one for every kernel of KERNELS
kmod:
	@for k in $(KERNELS); do $(MAKE) --no-print-directory kmod-one KERNEL=$$k || exit 1; done

## uapi-check   the uapi header alone as C99 and C++17, with its struct layouts
uapi-check:
	@mkdir -p $(BUILD)/uapi-check
	gcc -std=c99 -Wall -Wextra -Werror -pedantic -Iuapi tools/uapi-check/uapi_check.c -o $(BUILD)/uapi-check/c99
	g++ -std=c++17 -Wall -Wextra -Werror -pedantic -Iuapi -x c++ tools/uapi-check/uapi_check.c -o $(BUILD)/uapi-check/cxx17
	$(BUILD)/uapi-check/c99 && $(BUILD)/uapi-check/cxx17

# The selftests get the same check minus three rules that are wrong for
# kselftest code: the test_cmd_* wrapper macros return and reuse their
# arguments on purpose (as the kernel's iommufd_utils.h does), and ENOSYS is
# checked for, not returned (io_uring may be compiled out).
## checkpatch   checkpatch.pl --strict over the module, the header, the tools, the selftests
checkpatch: ksrc
	perl $(CHECKPATCH) --strict --no-tree --terse --show-types -f \
		$(filter-out kmod/compat.h,$(wildcard kmod/*.c kmod/*.h kmod/probes/*.c)) \
		uapi/linux/svmbatch.h tools/uapi-check/*.c
	@# A userspace program: stdint types, as checkpatch allows under tools/.
	perl $(CHECKPATCH) --strict --no-tree --terse --show-types \
		--ignore PREFER_KERNEL_TYPES -f bench/kmod_bench.c
	@# compat.h is the one place that may test the kernel version.
	perl $(CHECKPATCH) --strict --no-tree --terse --show-types \
		--ignore LINUX_VERSION_CODE -f kmod/compat.h
	perl $(CHECKPATCH) --strict --no-tree --terse --show-types \
		--ignore MACRO_WITH_FLOW_CONTROL,MACRO_ARG_REUSE,ENOSYS -f \
		selftests/svmbatch/*.c selftests/svmbatch/*.h

# The kernel-doc comments of the module and the uapi header: complete
# (every parameter, member and return value), no warning.
## kernel-doc   kernel-doc -Wall over the module and the uapi header
kernel-doc: ksrc
	@out=$$(perl $(KERNEL_DOC) -none -Wall uapi/linux/svmbatch.h kmod/*.c kmod/*.h 2>&1); \
	if [ -n "$$out" ]; then echo "$$out"; exit 1; fi; \
	echo "kernel-doc: no warnings in uapi/linux/svmbatch.h kmod/*.[ch]"

## selftests    the kselftests into build/selftests
selftests: ksrc
	$(MAKE) --no-print-directory -C selftests/svmbatch KSFT_DIR=$(KSFT_DIR) \
		OUTPUT=$(SELFTESTS_OUT) UAPI_DIR=$(CURDIR)/uapi

# The kernel benchmark (not a test): in a guest of BENCH_KERNEL (debug has
# gup_test for the pinning floor), results in bench/results/.
BENCH_KERNEL ?= debug
## bench-kmod   the kernel benchmark in a guest of BENCH_KERNEL, into bench/results/
bench-kmod: ksrc
	@$(MAKE) --no-print-directory kmod-built KERNEL=$(BENCH_KERNEL)
	@mkdir -p $(BUILD)/bench
	gcc -std=gnu11 -O2 -Wall -Wextra -Werror -Iuapi bench/kmod_bench.c \
		-o $(BUILD)/bench/kmod_bench $(firstword $(wildcard /usr/lib/*/liburing.a) -luring)
	bench/run-kmod-bench.sh $(BENCH_KERNEL) \
		$(BUILD)/kmod/$(call abi,$(BENCH_KERNEL))/release/svmbatch.ko $(BUILD)/bench/kmod_bench

# The files of the svmbatch command's guest tests (cli/cli_guest_test.sh,
# packaging/udev_rule_test.sh; svmbatch_guest_files in tools/lib.sh): the
# command (VMTEST_LIB's build), its test helper, examples/quickstart.cpp, two
# selftests where the command looks for them, the udev rule, and the two
# scripts.
VMTEST_GUEST_FILES = $$(. tools/lib.sh && svmbatch_guest_files \
	$(VMTEST_LIB)/cli/svmbatch $(VMTEST_LIB)/cli/hold_registration \
	$(VMTEST_LIB)/examples/quickstart $(SELFTESTS_OUT) \
	$(LIB_PREFIX)/libexec/svmbatch/selftests packaging/60-svmbatch.rules)

# The Python binding's guest test (libsvmbatch/python/tests/guest_binding_test.py):
# the interpreter, the stdlib files the test imports (its --list-files),
# and the package of make python where python3-svmbatch puts it.
GUEST_PY_PKG := /usr/lib/python3/dist-packages/svmbatch
GUEST_PY_TEST := libsvmbatch/python/tests/guest_binding_test.py
VMTEST_PYTHON_FILES = $$(printf -- '--file\n%s\n' "$(PYTHON):/usr/bin/python3"; \
	for f in $$($(PYTHON) -IS $(GUEST_PY_TEST) --package $(LIB_OUT)/python --list-files); do \
		printf -- '--file\n%s\n' "$$f:$$f"; done; \
	for f in $(LIB_OUT)/python/svmbatch/*.py $(LIB_OUT)/python/svmbatch/*.so; do \
		printf -- '--file\n%s\n' "$$f:$(GUEST_PY_PKG)/$${f\#\#*/}"; done; \
	echo $(GUEST_PY_TEST))

# HIP in the guest: the example (the ioctl, io_uring, the byte check; the
# GPU step reports that no AMD GPU is there) and Debian's HIP runtime on its
# no-device path.  The example links libamdhip64 (and through it
# libhsa-runtime64), so the guest gets them and is built to have hip and
# hsa.  The programs are named, never globbed: one the build should have
# made and did not fails run.sh.  The example is built where the hip probe
# (tools/lib.sh) finds hipcc; where it does not, make check says so
# (vmtest-hip-example) and the runtime tests skip, naming what is missing.
VMTEST_HIP = $(shell . tools/lib.sh && svmbatch_probe hip >/dev/null && echo yes)
VMTEST_HIP_ARGS = $(VMTEST_LIB)/tests/svmbatch_hip_runtime_tests \
	$(if $(VMTEST_HIP),$(VMTEST_LIB)/examples/hip_scatter_read --expect hip --expect hsa)

# Level Zero in the guest: the example (kernel mode: the module, io_uring,
# the byte check; the GPU step reports that no Intel GPU is there) and
# Debian's loader on its no-driver path.  The example links the loader, so
# the guest gets it; without the example it is shipped by path, where the
# test's probe and the dynamic loader look for it (ZeBackend loads it at
# run time).  Either way the guest is built to have ze.  The example is
# built where the ze probe (tools/lib.sh) finds ze_api.h and the loader,
# and then named (a missing one fails run.sh); the runtime tests always.
ZE_LOADER = $(firstword $(wildcard /usr/lib/$(MULTIARCH)/libze_loader.so.1))
VMTEST_ZE = $(shell . tools/lib.sh && svmbatch_probe ze >/dev/null && echo yes)
VMTEST_ZE_ARGS = $(VMTEST_LIB)/tests/svmbatch_ze_runtime_tests \
	$(if $(VMTEST_ZE),$(VMTEST_LIB)/examples/ze_scatter_read --expect ze, \
		$(if $(ZE_LOADER),--file $(ZE_LOADER):$(ZE_LOADER) --expect ze))

# The RDMA tests' guest side (libsvmbatch/tests/rdma_rxe_test.cpp): soft-RoCE
# (rdma_rxe) on a dummy netdev, made by the test with iproute2's ip and
# rdma (busybox's ip cannot add links), and rxe's libibverbs provider,
# which libibverbs loads by name from its driver file.  rxe computes its
# ICRC with the "crc32" shash, which the guest cannot modprobe on demand.
# rdma_ucm (/dev/infiniband/rdma_cm) connects UCX's client-server mode.
# Every kernel here has rxe, dummy and rdma_ucm (modules of Debian's, built
# into the debug kernel): the guest is built to have rxe (--expect rxe), so
# its tests fail rather than skip where it is missing.  crc32_generic is
# optional: newer kernels compute crc32 in lib/ instead.
MULTIARCH := $(shell dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null)
RXE_PROVIDER := $(firstword $(wildcard /usr/lib/$(MULTIARCH)/libibverbs/librxe-rdmav*.so))
VMTEST_RDMA_ARGS = --optional-kmod crc32_generic --kmod rdma_rxe \
	--kmod dummy --kmod rdma_ucm --expect rxe \
	--file /usr/sbin/ip:/usr/libexec/svmbatch/ip --file /usr/bin/rdma:/usr/libexec/svmbatch/rdma \
	--file /etc/libibverbs.d/rxe.driver:/etc/libibverbs.d/rxe.driver \
	--file $(RXE_PROVIDER):$(RXE_PROVIDER) $(VMTEST_LIB)/tests/svmbatch_rdma_tests \
	$(VMTEST_UCX_ARGS)

# UCX over a registration in the guest (libsvmbatch/tests/ucx_guest_test.sh):
# examples/ucx_put_get and UCX's transport modules, which UCX loads from
# its module directory.
VMTEST_UCX_ARGS = $(foreach m,$(wildcard /usr/lib/$(MULTIARCH)/ucx/libuct_*.so.0),--file $(m):$(m)) \
	--file $(VMTEST_LIB)/examples/ucx_put_get:/usr/libexec/svmbatch/ucx_put_get \
	libsvmbatch/tests/ucx_guest_test.sh

# The guests' programs: the ASan build's, but in the debug kernel's guest
# the release build's.  That guest is there for KASAN, lockdep and
# kmemleak on the module's side; ASan's shadow memory under them doubled
# its library tests' time, and the 6.1 and 6.12 guests run the same
# programs under ASan.
VMTEST_LIB = $(if $(filter debug,$(KERNEL)),$(LIB_OUT),$(LIB_ASAN_OUT))

# The library's tests of userspace concurrency whose outcome no kernel
# decides run on the host only, under ASan + UBSan and TSan: the ring's
# steps (CPU threads standing in for a GPU's warps), the many-producer
# stress tests and the device reads' stop race (a CPU thread stands in for
# the copy engine).  Their busy-polling threads, emulated by TCG, took 215
# of the debug guest's 350 s of library tests.  Every other test, the
# loops' reads and writes into module-pinned buffers included, runs in
# every guest.
VMTEST_GTEST_FILTER := -IoRingSteps.*:*.ManyProducers*:IoLoopDeviceTest.StopWithCopiesInFlight*

# One guest: the fault-injection build of the module (--expect faultinject:
# its tests fail where its files are missing) and every selftest.
# The library's googletest binary (VMTEST_LIB's) runs there too,
# in kernel mode, less VMTEST_GTEST_FILTER's tests, and so do the RDMA
# tests over soft-RoCE, the Python binding's, the svmbatch command's and
# the udev rule's tests.
## vmtest-one   the guest tests in a guest of KERNEL (6.1, 6.12 or debug)
vmtest-one: kmod-built selftests lib-asan python
	@$(MAKE) --no-print-directory vmtest-boot KERNEL=$(KERNEL)

# vmtest-one's guest, building nothing first: make check builds each thing
# once and then boots guests side by side, where make runs building the
# same trees at once would race.
## vmtest-boot  vmtest-one's guest of KERNEL, with the builds as they are
vmtest-boot:
	tools/vmtest/run.sh --kernel $(KERNEL) --module $(KMOD_OUT)/test/svmbatch.ko \
		--expect faultinject \
		$(VMTEST_ARGS_$(KERNEL)) --log $(BUILD)/vmtest/$(KERNEL).log \
		--gtest-filter '$(VMTEST_GTEST_FILTER)' \
		$$(find $(SELFTESTS_OUT) -maxdepth 1 -type f -executable | sort) \
		$(VMTEST_LIB)/tests/svmbatch_lib_tests $(VMTEST_HIP_ARGS) $(VMTEST_ZE_ARGS) \
		$(VMTEST_RDMA_ARGS) \
		$(VMTEST_PYTHON_FILES) $(VMTEST_GUEST_FILES)

## vmtest       vmtest-one for every kernel of KERNELS
vmtest:
	@rc=0; for k in $(KERNELS); do $(MAKE) --no-print-directory vmtest-one KERNEL=$$k || rc=1; done; exit $$rc

# The README's main job: scatter_read in a guest with the module (kernel
# mode), then on this host (userspace mode).
## demo         scatter_read in a guest of KERNEL with the module, then on this host
demo: deps
	@$(MAKE) --no-print-directory kmod-built lib KERNEL=$(KERNEL)
	@rc=0; tools/vmtest/run.sh --kernel $(KERNEL) --module $(KMOD_OUT)/release/svmbatch.ko \
		--log $(BUILD)/vmtest/demo-$(KERNEL).log $(LIB_OUT)/examples/scatter_read || rc=$$?; \
	echo; echo "==== in a $(KERNEL) guest with svmbatch.ko (QEMU, software-emulated) ===="; \
	sed -n '/SVMBATCH-VMTEST-BEGIN scatter_read/,/SVMBATCH-VMTEST-END scatter_read/p' \
		$(BUILD)/vmtest/demo-$(KERNEL).log | grep -v -E '^(SVMBATCH-VMTEST|TAP version|1\.\.1|ok 1)'; \
	echo; echo "==== on this host, no module ===="; \
	$(LIB_OUT)/examples/scatter_read --mode userspace || rc=1; \
	exit $$rc

# The library benchmark: on this host (userspace mode) and in a 6.12 guest
# (both modes); JSON into bench/results/lib-<where>-<date>.json.
## bench-lib    the library benchmark on this host and in a 6.12 guest
bench-lib:
	@$(MAKE) --no-print-directory kmod-built lib KERNEL=6.12
	bench/run-lib-bench.sh $(BUILD)/kmod/$(call abi,6.12)/release/svmbatch.ko \
		$(LIB_OUT)/examples/lib_bench

# Every shell script of the tree: *.sh (tools/lib.sh is sourced, not run)
# and every file whose first line runs sh or bash (tools/vmtest/init,
# .ci/run, the package's maintainer scripts), from svmbatch_source_files.
SHELL_SCRIPTS = $$(. tools/lib.sh && svmbatch_source_files | while IFS= read -r f; do \
	case $$f in *.sh) echo "$$f"; continue ;; esac; \
	head -n 1 "$$f" | grep -qE '^\#! ?(/usr)?/bin/(env +)?(ba|da)?sh' && echo "$$f"; done)

## shellcheck   shellcheck over every shell script of the tree
shellcheck:
	@scripts=$(SHELL_SCRIPTS); test -n "$$scripts"; \
	echo "shellcheck: $$(wc -w <<<"$$scripts") scripts"; shellcheck -x $$scripts

# clang-format 14 over the C and C++ files of the tree, in two styles: the
# kernel's (.clang-format) for the module, the uapi header and the
# kernel-side tools, and the library's (libsvmbatch/.clang-format) for
# everything else.  Not the selftests: clang-format 14 cannot express the
# kselftest harness (FIXTURE(f) {, ASSERT_EQ(a, b) { TH_LOG(...); },
# FIXTURE_VARIANT_ADD initializers, SKIP(return, ...)) and would rewrite
# them against the kernel's own selftest style; checkpatch --strict is
# their format check, as it is for the kernel's selftests.
CLANG_FORMAT ?= clang-format-14
KERNEL_STYLE_FILES := kmod/% uapi/% tools/uapi-check/% bench/kmod_bench.c
C_FILES = $(filter-out selftests/%,\
	$(shell . tools/lib.sh && svmbatch_source_files | grep -E '\.(c|h|cpp|hpp|cu|cuh)$$'))
format_with = $(CLANG_FORMAT) $(1) --style=file:.clang-format \
		$(filter $(KERNEL_STYLE_FILES),$(C_FILES)) && \
	$(CLANG_FORMAT) $(1) --style=file:libsvmbatch/.clang-format \
		$(filter-out $(KERNEL_STYLE_FILES),$(C_FILES))

## format       rewrite every C and C++ file with clang-format (.clang-format files)
format:
	@$(call format_with,-i)

## format-check clang-format --dry-run --Werror: which files format would change
format-check:
	@$(call format_with,--dry-run --Werror)

## clean        remove build/
clean:
	rm -rf $(BUILD)
