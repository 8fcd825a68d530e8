# SPDX-License-Identifier: MIT
#
# svmbatch top level.  The README's two commands:
#   make demo    install what is needed, boot a 6.12 guest, run the demo
#   make check   install what is needed, run every test (host + guests)
# Both need root on a fresh Debian 12 machine (apt-get); see README.md.

SHELL := /bin/bash
KERNELS ?= 6.1 6.12 debug
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
# ASan + UBSan build for the host tests.
LIB_OUT := $(BUILD)/lib
LIB_ASAN_OUT := $(BUILD)/lib-asan
LIB_PREFIX := /usr/local
CMAKE_LIB = cmake -S libsvmbatch -B $(1) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DCMAKE_INSTALL_PREFIX=$(LIB_PREFIX) $(2) >/dev/null && cmake --build $(1) -j$$(nproc)

# ABI (e.g. 6.12.117+deb12-amd64) of the kernel family $(KERNEL)
abi = $(shell tools/vmtest/kernels.sh abi $(1))
KMOD_OUT = $(BUILD)/kmod/$(call abi,$(KERNEL))

.PHONY: lib lib-asan lib-test lib-tidy install bench-lib htmldocs deb
.PHONY: all check demo deps kmod kmod-one sparse-one selftests vmtest bench-kmod kernel-doc \
	vmtest-one uapi-check checkpatch ksrc clean help

all: kmod selftests lib

lib:
	$(call CMAKE_LIB,$(LIB_OUT))

lib-asan:
	$(call CMAKE_LIB,$(LIB_ASAN_OUT),-DSVMBATCH_SANITIZE=ON)

# clang-tidy (libsvmbatch/.clang-tidy) over the library and the examples.
# The CUDA programs (cuda_*.cpp) need cuda_runtime.h, which only the GPU
# machine has; tools/device/run.sh builds them with -Wall -Wextra -Werror.
lib-tidy: lib-asan
	clang-tidy -p $(LIB_ASAN_OUT) --quiet libsvmbatch/src/*.cpp tools/cli/*.cpp \
		$(filter-out %/cuda_scatter_read.cpp %/cuda_bench.cpp,\
			$(wildcard examples/*.cpp tools/bench/*.cpp))

# The Debian packages (svmbatch-dkms, libsvmbatch1, libsvmbatch-dev,
# svmbatch-tools) into build/deb/, built from a copy of the tracked and
# untracked-but-not-ignored files.
DEB_VERSION := $(shell dpkg-parsechangelog -l debian/changelog -S Version 2>/dev/null)
deb:
	rm -rf $(BUILD)/deb && mkdir -p $(BUILD)/deb/src
	git ls-files -co --exclude-standard -z | xargs -0 tar -c | tar -x -C $(BUILD)/deb/src
	cd $(BUILD)/deb/src && dpkg-buildpackage -us -uc -b -j$$(nproc) >../build.log 2>&1 || \
		{ tail -n 40 ../build.log; exit 1; }
	ls $(BUILD)/deb/*.deb

# Documentation/ as HTML (Sphinx; warnings are errors).
# uapi.rst includes the header's kernel-doc, extracted here.
htmldocs: ksrc
	mkdir -p $(BUILD)/htmldocs-gen
	perl $(KERNEL_DOC) -rst uapi/linux/svmbatch.h >$(BUILD)/htmldocs-gen/svmbatch-h.rst
	sphinx-build -W --keep-going -q -b html Documentation $(BUILD)/htmldocs

# Install the library (DESTDIR=... honoured) from the release build.
install: lib
	cmake --install $(LIB_OUT)

# The library tests on the host: userspace mode, ASan + UBSan.
lib-test: lib-asan
	$(LIB_ASAN_OUT)/tests/svmbatch_lib_tests

help:
	@echo "make check     all tests (host checks, module builds, guest selftests)"
	@echo "make demo      boot a $(KERNEL) guest with the module and run the demo"
	@echo "make kmod      build the module for: $(KERNELS)"
	@echo "make lib       build libsvmbatch into build/lib (lib-test: host tests)"
	@echo "make selftests build the kselftests into build/selftests"
	@echo "make vmtest    run the selftests in guests of: $(KERNELS)"
	@echo "make bench-lib library benchmark (host and a 6.12 guest)"
	@echo "make bench-kmod kernel benchmark in a guest (BENCH_KERNEL=$(BENCH_KERNEL))"
	@echo "make deb      the Debian packages into build/deb (DKMS, library, -dev, tools)"
	@echo "make htmldocs Documentation/ as HTML into build/htmldocs (Sphinx, -W)"
	@echo "make kernel-doc  kernel-doc -Wall of the module and the uapi header"
	@echo "make clean"

check:
	@tools/check.sh

deps:
	@tools/install-deps.sh

# Pieces of Debian's linux-source-6.12 that the headers packages lack:
# checkpatch and the kselftest harness.  Extracted once, never committed.
# The stamp's name changes with the list of files (a new name extracts again).
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
# build with CONFIG_SVMBATCH_FAULT_INJECTION.  Any W=1 warning fails.
kmod-one:
	@set -e; abi=$(call abi,$(KERNEL)); test -n "$$abi"; \
	kdir=$$(tools/vmtest/kernels.sh headers $(KERNEL)); \
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
	done

sparse-one:
	@set -e; abi=$(call abi,$(KERNEL)); out=$(BUILD)/kmod/$$abi/sparse; \
	kdir=$$(tools/vmtest/kernels.sh headers $(KERNEL)); \
	rm -rf $$out && mkdir -p $$out && cp -r kmod/. $$out/; \
	$(MAKE) --no-print-directory -C $$out KDIR=$$kdir \
		FAULT_INJECTION=y SVMBATCH_UAPI=$(CURDIR)/uapi C=2 2>&1 | tee $$out/build.log; \
	if grep -E "warning:|error:" $$out/build.log; then \
		echo "sparse $$abi: warnings"; exit 1; fi; \
	echo "sparse $$abi: clean"

kmod:
	@for k in $(KERNELS); do $(MAKE) --no-print-directory kmod-one KERNEL=$$k || exit 1; done

# The uapi header stands alone as C99 and C++17, with fixed layouts.
uapi-check:
	@mkdir -p $(BUILD)/uapi-check
	gcc -std=c99 -Wall -Wextra -Werror -pedantic -Iuapi tools/uapi-check/uapi_check.c -o $(BUILD)/uapi-check/c99
	g++ -std=c++17 -Wall -Wextra -Werror -pedantic -Iuapi -x c++ tools/uapi-check/uapi_check.c -o $(BUILD)/uapi-check/cxx17
	$(BUILD)/uapi-check/c99 && $(BUILD)/uapi-check/cxx17

# The selftests get the same check minus three rules that are wrong for
# kselftest code: the test_cmd_* wrapper macros return and reuse their
# arguments on purpose (as the kernel's iommufd_utils.h does), and ENOSYS is
# checked for, not returned (io_uring may be compiled out).
checkpatch: ksrc
	perl $(CHECKPATCH) --strict --no-tree --terse --show-types -f \
		$(filter-out kmod/compat.h,$(wildcard kmod/*.c kmod/*.h)) \
		uapi/linux/svmbatch.h tools/uapi-check/*.c tools/bench/*.c
	@# compat.h is the one place that may test the kernel version.
	perl $(CHECKPATCH) --strict --no-tree --terse --show-types \
		--ignore LINUX_VERSION_CODE -f kmod/compat.h
	perl $(CHECKPATCH) --strict --no-tree --terse --show-types \
		--ignore MACRO_WITH_FLOW_CONTROL,MACRO_ARG_REUSE,ENOSYS -f \
		selftests/svmbatch/*.c selftests/svmbatch/*.h

# The kernel-doc comments of the module and the uapi header: complete
# (every parameter, member and return value), no warning.
kernel-doc: ksrc
	@out=$$(perl $(KERNEL_DOC) -none -Wall uapi/linux/svmbatch.h kmod/*.c kmod/*.h 2>&1); \
	if [ -n "$$out" ]; then echo "$$out"; exit 1; fi; \
	echo "kernel-doc: no warnings in uapi/linux/svmbatch.h kmod/*.[ch]"

selftests: ksrc
	$(MAKE) --no-print-directory -C selftests/svmbatch KSFT_DIR=$(KSFT_DIR) \
		OUTPUT=$(SELFTESTS_OUT) UAPI_DIR=$(CURDIR)/uapi

# The kernel benchmark (not a test): in a guest of BENCH_KERNEL (debug has
# gup_test for the pinning floor), results in bench/results/.
BENCH_KERNEL ?= debug
bench-kmod: ksrc
	@$(MAKE) --no-print-directory kmod-one KERNEL=$(BENCH_KERNEL)
	@mkdir -p $(BUILD)/bench
	gcc -std=gnu11 -O2 -Wall -Wextra -Werror -Iuapi tools/bench/kmod_bench.c \
		-o $(BUILD)/bench/kmod_bench $(firstword $(wildcard /usr/lib/*/liburing.a) -luring)
	tools/bench/run-kmod-bench.sh $(BENCH_KERNEL) \
		$(BUILD)/kmod/$(call abi,$(BENCH_KERNEL))/release/svmbatch.ko $(BUILD)/bench/kmod_bench

# What the svmbatch command's guest tests (tools/cli/cli_guest_test.sh,
# packaging/udev_rule_test.sh) call by path: the command (ASan build), its
# test helper, examples/quickstart.cpp, two selftests where the command
# looks for them, the udev rule with the host's udev, and setpriv.
VMTEST_CLI_FILES := \
	--file $(LIB_ASAN_OUT)/cli/svmbatch:/usr/bin/svmbatch \
	--file $(LIB_ASAN_OUT)/cli/hold_registration:/usr/libexec/svmbatch/tests/hold_registration \
	--file $(LIB_ASAN_OUT)/examples/quickstart:/usr/libexec/svmbatch/tests/quickstart \
	--file $(SELFTESTS_OUT)/svmbatch_errno:$(LIB_PREFIX)/libexec/svmbatch/selftests/svmbatch_errno \
	--file $(SELFTESTS_OUT)/svmbatch_io_uring:$(LIB_PREFIX)/libexec/svmbatch/selftests/svmbatch_io_uring \
	--file packaging/60-svmbatch.rules:/usr/lib/udev/rules.d/60-svmbatch.rules \
	--file /lib/systemd/systemd-udevd:/lib/systemd/systemd-udevd \
	--file /usr/bin/udevadm:/usr/bin/udevadm \
	--file /usr/bin/setpriv:/usr/bin/setpriv

# One guest: the fault-injection build of the module and every selftest.
# The library's googletest binary (the host's ASan build) runs there too,
# in kernel mode, and so do the svmbatch command's and the udev rule's tests.
vmtest-one: kmod-one selftests lib-asan
	tools/vmtest/run.sh --kernel $(KERNEL) --module $(KMOD_OUT)/test/svmbatch.ko \
		$(VMTEST_ARGS_$(KERNEL)) --log $(BUILD)/vmtest/$(KERNEL).log $(VMTEST_CLI_FILES) \
		$$(find $(SELFTESTS_OUT) -maxdepth 1 -type f -executable | sort) \
		$(LIB_ASAN_OUT)/tests/svmbatch_lib_tests \
		tools/cli/cli_guest_test.sh packaging/udev_rule_test.sh

vmtest:
	@rc=0; for k in $(KERNELS); do $(MAKE) --no-print-directory vmtest-one KERNEL=$$k || rc=1; done; exit $$rc

# The README's main job: scatter_read in a guest with the module (kernel
# mode), then on this host (userspace mode).
demo: deps
	@$(MAKE) --no-print-directory kmod-one lib KERNEL=$(KERNEL)
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
bench-lib:
	@$(MAKE) --no-print-directory kmod-one lib KERNEL=6.12
	tools/bench/run-lib-bench.sh $(BUILD)/kmod/$(call abi,6.12)/release/svmbatch.ko \
		$(LIB_OUT)/examples/lib_bench

clean:
	rm -rf $(BUILD)
