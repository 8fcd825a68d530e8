# SPDX-License-Identifier: MIT
# shellcheck shell=sh
#
# What the build and test scripts share, sourced by them (". tools/lib.sh"),
# by the Makefile (through $(shell)) and, shipped with run.sh --file, by the
# guest tests under busybox sh: so POSIX sh only, and nothing runs when it
# is sourced except these definitions.
#
#   SVMBATCH_KERNELS       Debian's kernel families the module supports
#   svmbatch_kernel_meta   the meta package of a family (its current ABI)
#   tap_plan, tap_ok,      TAP output and counting: the plan first (or,
#   tap_step, tap_skip,    without tap_plan, at the end), one line per
#   tap_done               test
#   svmbatch_guest_files   run.sh arguments for the command's and the udev
#                          rule's guest tests
#   svmbatch_source_files  the tree's source files (a checkout or a tarball)
#   svmbatch_ccache        compile CMake's new build directories through ccache
#   svmbatch_probe         is a tool or library that a test program needs there

# Debian's kernel families, oldest first.  The debug kernel (built from
# linux-source-6.12, tools/vmtest/kernels.sh) is named "debug" on top.
SVMBATCH_KERNELS="6.1 6.12"

# svmbatch_kernel_meta FAMILY: the meta package whose single linux-image-*
# dependency is the family's current ABI.
svmbatch_kernel_meta() {
	case $1 in
	6.1) echo linux-image-amd64 ;;
	6.12) echo linux-image-6.12-amd64 ;;
	*)
		echo "unknown kernel '$1' (expected one of: $SVMBATCH_KERNELS debug)" >&2
		return 1
		;;
	esac
}

# TAP counters of this script: the plan (empty: none stated), tests run,
# failed, skipped; the failed names.
TAP_PLAN=
TAP_N=0
TAP_FAILED=0
TAP_SKIPPED=0
TAP_FAILURES=

# tap_result STATUS DESCRIPTION: one TAP line, "ok" for STATUS 0.  The
# first word of DESCRIPTION names a failure in TAP_FAILURES.
tap_result() {
	TAP_N=$((TAP_N + 1))
	if [ "$1" = 0 ]; then
		echo "ok $TAP_N $2"
		return 0
	fi
	echo "not ok $TAP_N $2"
	TAP_FAILED=$((TAP_FAILED + 1))
	TAP_FAILURES="$TAP_FAILURES${TAP_FAILURES:+ }${2%% *}"
	return 1
}

# tap_ok DESCRIPTION [FILE]: one TAP line for the exit status of the
# command run just before; a failure shows the first lines of FILE.
tap_ok() {
	tap_result $? "$1" && return 0
	if [ -n "${2:-}" ] && [ -f "$2" ]; then
		head -n 25 "$2" | sed 's/^/#   /'
	fi
	return 0
}

# tap_skip DESCRIPTION REASON: one skipped test.
tap_skip() {
	TAP_N=$((TAP_N + 1))
	TAP_SKIPPED=$((TAP_SKIPPED + 1))
	echo "ok $TAP_N $1 # SKIP $2"
}

# tap_step NAME CMD...: run CMD with its output in $TAP_LOGDIR/NAME.log;
# one TAP line with the time it took, and on failure the log's last
# lines.  Returns CMD's success.
tap_step() {
	tap_name=$1
	shift
	tap_log=$TAP_LOGDIR/$tap_name.log
	tap_start=$(date +%s)
	"$@" >"$tap_log" 2>&1
	tap_rc=$?
	tap_secs=$(($(date +%s) - tap_start))
	if [ "$tap_rc" = 0 ]; then
		tap_result 0 "$tap_name ($tap_secs s)"
		return 0
	fi
	tap_result 1 "$tap_name ($tap_secs s, log: $tap_log)"
	tail -n 25 "$tap_log" | sed 's/^/#   /'
	return 1
}

# tap_plan N: the plan, stated before the first test runs; tap_done then
# checks that exactly N tests ran.
tap_plan() {
	TAP_PLAN=$1
	echo "1..$1"
}

# tap_done NAME: the plan where tap_plan stated none, and a summary line;
# true when nothing failed and, with a plan, exactly the planned tests ran.
tap_done() {
	[ -n "$TAP_PLAN" ] || echo "1..$TAP_N"
	echo "# $1: $((TAP_N - TAP_FAILED - TAP_SKIPPED)) passed, $TAP_FAILED failed," \
		"$TAP_SKIPPED skipped"
	if [ -n "$TAP_PLAN" ] && [ "$TAP_PLAN" != "$TAP_N" ]; then
		echo "# $1: planned $TAP_PLAN tests, ran $TAP_N"
		return 1
	fi
	[ "$TAP_FAILED" = 0 ]
}

# Where the guest tests find this file.
SVMBATCH_GUEST_LIB=/usr/libexec/svmbatch/tests/lib.sh

# svmbatch_guest_files CLI HOLD QUICKSTART SELFTESTS GUEST_SELFTESTS RULE:
# the run.sh arguments (one a line) for cli/cli_guest_test.sh and
# packaging/udev_rule_test.sh.  CLI is the svmbatch command, HOLD
# cli/hold_registration.cpp built, QUICKSTART examples/quickstart.cpp
# built, SELFTESTS the host directory of svmbatch_errno and
# svmbatch_io_uring, GUEST_SELFTESTS the command's default --dir (where it
# looks for them in the guest), RULE 60-svmbatch.rules.  The two scripts
# come last, as tests: run them after the others.  Paths are relative to
# the top of the tree, the callers' working directory.
svmbatch_guest_files() {
	printf -- '--file\n%s\n' \
		"$1:/usr/bin/svmbatch" \
		"$2:/usr/libexec/svmbatch/tests/hold_registration" \
		"$3:/usr/libexec/svmbatch/tests/quickstart" \
		"$4/svmbatch_errno:$5/svmbatch_errno" \
		"$4/svmbatch_io_uring:$5/svmbatch_io_uring" \
		"$6:/usr/lib/udev/rules.d/60-svmbatch.rules" \
		"tools/lib.sh:$SVMBATCH_GUEST_LIB" \
		/lib/systemd/systemd-udevd:/lib/systemd/systemd-udevd \
		/usr/bin/udevadm:/usr/bin/udevadm \
		/usr/bin/setpriv:/usr/bin/setpriv
	echo cli/cli_guest_test.sh
	echo packaging/udev_rule_test.sh
}

# svmbatch_source_files: the tree's source files, one a line, relative to
# the top (the working directory).  In a git checkout, the files git tracks
# or would track (a tracked file deleted in the tree is left out); in a
# release tarball (no .git), every file but build/.
svmbatch_source_files() {
	if [ -e .git ]; then
		git ls-files -co --exclude-standard | while IFS= read -r f; do
			if [ -e "$f" ] || [ -L "$f" ]; then echo "$f"; fi
		done
	else
		find . -path ./build -prune -o \( -type f -o -type l \) -print | sed 's|^\./||'
	fi
}

# svmbatch_ccache: where ccache is installed, export what makes every
# CMake build directory configured from now on compile through it:
# CMAKE_<LANG>_COMPILER_LAUNCHER (CMake 3.17 and later read them when a
# build directory is configured for the first time; one configured
# before keeps the launcher it has, or none).  The cache is ccache/ in
# $SVMBATCH_CACHE (default /var/cache/svmbatch, beside the kernels, so it
# outlives a checkout: CI's clean clones), at most 5G, where that can be
# written (as root), else ccache's own (~/.cache/ccache, its configuration
# untouched).  A checkout at another path, or pip's build of the sdist
# in a temporary directory, hits what an earlier one compiled: paths are
# hashed relative to the directory the compiler runs in (base_dir /) and
# that directory is not hashed (hash_dir false; the debug information of
# a hit then names the directory of the build that filled the cache).
# What the caller set already is kept (an empty launcher: no ccache;
# CCACHE_DISABLE=1 turns it off too); without ccache, nothing is set.
svmbatch_ccache() {
	command -v ccache >/dev/null 2>&1 || return 0
	: "${CMAKE_C_COMPILER_LAUNCHER=ccache}" "${CMAKE_CXX_COMPILER_LAUNCHER=ccache}" \
		"${CMAKE_CUDA_COMPILER_LAUNCHER=ccache}"
	export CMAKE_C_COMPILER_LAUNCHER CMAKE_CXX_COMPILER_LAUNCHER CMAKE_CUDA_COMPILER_LAUNCHER
	svmbatch_ccache_dir=${SVMBATCH_CACHE:-/var/cache/svmbatch}/ccache
	if [ -z "${CCACHE_DIR-}" ] && mkdir -p "$svmbatch_ccache_dir" 2>/dev/null &&
		[ -w "$svmbatch_ccache_dir" ]; then
		export CCACHE_DIR="$svmbatch_ccache_dir"
		export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
	fi
	export CCACHE_BASEDIR="${CCACHE_BASEDIR-/}"
	export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR-1}"
}

# svmbatch_probe NAME: true where the build must make the programs that
# need NAME, as CMake finds it; else false, printing what is missing (the
# reason of the skip that stands for them).  The probes mirror CMake's:
#   hip      hipcc and libamdhip64 (examples/CMakeLists.txt: hip_scatter_read,
#            hip_gpu_io; their guest run ships libamdhip64)
#   hip_api  hip/hip_runtime_api.h (libsvmbatch/tests: hip_abi_check)
#   ze       ze_api.h and libze_loader (examples: ze_scatter_read)
#   ze_api   level_zero/ze_api.h (libsvmbatch/tests: ze_abi_check)
#   ucx      pkg-config's ucx (examples: ucx_put_get)
#   torch    TorchConfig.cmake (libsvmbatch/tests: svmbatch_torch_tests)
svmbatch_probe() {
	case $1 in
	hip)
		if ! command -v hipcc >/dev/null 2>&1; then
			echo "command -v hipcc: no hipcc (Debian: hipcc)"
		elif ! ldconfig -p | grep -q '[[:space:]]libamdhip64\.so[[:space:]]'; then
			echo "ldconfig -p: no libamdhip64.so (Debian: libamdhip64-dev)"
		else
			return 0
		fi
		;;
	hip_api)
		[ -f /usr/include/hip/hip_runtime_api.h ] && return 0
		echo "no /usr/include/hip/hip_runtime_api.h (Debian: libamdhip64-dev)"
		;;
	ze)
		if ! svmbatch_probe ze_api >/dev/null; then
			svmbatch_probe ze_api
		elif ! ldconfig -p | grep -q '[[:space:]]libze_loader\.so[[:space:]]'; then
			echo "ldconfig -p: no libze_loader.so (Debian: libze-dev)"
		else
			return 0
		fi
		;;
	ze_api)
		[ -f /usr/include/level_zero/ze_api.h ] && return 0
		echo "no /usr/include/level_zero/ze_api.h (Debian: libze-dev)"
		;;
	ucx)
		pkg-config --exists ucx && return 0
		echo "pkg-config --exists ucx: no UCX (Debian: libucx-dev)"
		;;
	torch)
		for svmbatch_probe_f in /usr/lib/*/cmake/Torch/TorchConfig.cmake; do
			[ -f "$svmbatch_probe_f" ] && return 0
		done
		echo "no /usr/lib/*/cmake/Torch/TorchConfig.cmake (Debian: libtorch-dev)"
		;;
	*)
		echo "svmbatch_probe: unknown probe '$1'" >&2
		;;
	esac
	return 1
}
