#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Boot a stock Debian kernel under QEMU with svmbatch.ko and run tests in it.
#
# usage: run.sh --kernel KERNEL --module PATH|none [--timeout S]
#               [--test-timeout S] [--log FILE] [--mem MB] [--cmdline EXTRA]
#               [--kmod NAME]... [--optional-kmod NAME]... [--file SRC:DST]...
#               [--expect NAME]... [--gtest-filter FILTER] [--verbose]
#               TEST_EXECUTABLE...
#
#   --kernel        a kernel family of tools/lib.sh, or debug (kernels.sh)
#   --module        svmbatch.ko built for that kernel; "none" skips insmod and
#                   rmmod (runner self-tests only)
#   --timeout       whole guest, boot to power-off (default 1500)
#   --test-timeout  per test executable inside the guest (default 900)
#   --log           console log (default build/vmtest/<kernel>.log)
#   --mem           guest memory in MiB (default 2048)
#   --cmdline       appended to the kernel command line; svmbatch.X=Y is
#                   passed to insmod svmbatch as X=Y
#   --kmod          extra kernel module to ship and modprobe (repeatable)
#   --optional-kmod the same where the kernel has it (built in or a module);
#                   the tests that need it say why they skip where it lacks it
#   --file          also ship file SRC as DST in the guest, with its shared
#                   libraries (repeatable; for what tests call by path)
#   --expect        a feature this guest is built to have (repeatable):
#                   init exports SVMBATCH_EXPECT=vgem,NAME,..., and the
#                   tests that find it absent fail instead of skipping.
#                   What the kernel's configuration and BASE_CMDLINE
#                   provide is added by run.sh itself (kernel_expects)
#   --gtest-filter  init exports GTEST_FILTER=FILTER: the googletest
#                   binaries run only the tests it selects (their plans
#                   count only those)
#   --verbose       also stream the console to stderr while it runs
#
# Environment: SVMBATCH_ACCEL=tcg|kvm skips the KVM probe; SVMBATCH_CACHE
# (default /var/cache/svmbatch) holds kernels and the probe's result.
# Exit status 0 only if every test passed or skipped and the guest was clean.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=kernels.sh disable=SC1091
source "$HERE/kernels.sh"

# Console loglevel is left at the default so that WARNINGs reach ttyS0.
# hugepages and transparent_hugepage are what kernel_expects declares as
# hugetlb and thp: change them together.
# No panic_on_oops: we want the whole splat and the remaining tests; a
# panic reboots at once (panic=-1), which -no-reboot turns into QEMU exiting.
BASE_CMDLINE="console=ttyS0 panic=-1 hugepages=16 transparent_hugepage=madvise kfence.sample_interval=100 cryptomgr.notests"
KVM_PROBE_SECONDS=20
# A TCG boot reaches /init in 5-10 s; allow for a loaded host.
BOOT_TIMEOUT=${SVMBATCH_BOOT_TIMEOUT:-150}

usage() {
	sed -n '5,9s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
	echo "kernels: $SVMBATCH_KERNELS debug" >&2
	exit 2
}

die() {
	echo "run.sh: $*" >&2
	exit 2
}

parse_args() {
	KERNEL='' MODULE='' TIMEOUT=1500 TEST_TIMEOUT=900 LOG='' MEM=2048
	EXTRA_CMDLINE='' VERBOSE=0 KMODS=() FILES=() EXPECTS=() TESTS=() GTEST_FILTER=()
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--kernel) KERNEL=$2; shift 2 ;;
		--module) MODULE=$2; shift 2 ;;
		--timeout) TIMEOUT=$2; shift 2 ;;
		--test-timeout) TEST_TIMEOUT=$2; shift 2 ;;
		--log) LOG=$2; shift 2 ;;
		--mem) MEM=$2; shift 2 ;;
		--cmdline) EXTRA_CMDLINE=$2; shift 2 ;;
		--kmod) KMODS+=(--kmod "$2"); shift 2 ;;
		--optional-kmod) KMODS+=(--optional-kmod "$2"); shift 2 ;;
		--file) FILES+=(--file "$2"); shift 2 ;;
		--expect) EXPECTS+=(--expect "$2"); shift 2 ;;
		--gtest-filter) GTEST_FILTER=(--gtest-filter "$2"); shift 2 ;;
		--verbose) VERBOSE=1; shift ;;
		--) shift; TESTS+=("$@"); break ;;
		-*) usage ;;
		*) TESTS+=("$1"); shift ;;
		esac
	done
	[[ -n $KERNEL && -n $MODULE && ${#TESTS[@]} -gt 0 ]] || usage
	[[ $TIMEOUT =~ ^[0-9]+$ && $TEST_TIMEOUT =~ ^[0-9]+$ && $MEM =~ ^[0-9]+$ ]] ||
		die "--timeout, --test-timeout and --mem take whole numbers"
	LOG=${LOG:-$REPO/build/vmtest/$KERNEL.log}
}

# /dev/kvm exists here and KVM_CREATE_VM succeeds, yet guests hang: only a
# guest that boots to the end proves KVM works. The answer is cached per host
# boot (boot_id), so it is paid once, not per run; any doubt means TCG.
kvm_probe() {
	local vmlinuz=$1 tmp out ok=0
	[[ -r /dev/kvm && -w /dev/kvm ]] || return 1
	tmp=$(mktemp -d)
	mkdir -p "$tmp/root/bin"
	cp /bin/busybox "$tmp/root/bin/busybox"
	ln -s busybox "$tmp/root/bin/sh"
	printf '#!/bin/sh\n/bin/busybox echo SVMBATCH-KVM-PROBE-OK\n/bin/busybox reboot -f\n' >"$tmp/root/init"
	chmod 755 "$tmp/root/init"
	(cd "$tmp/root" && find . | cpio -o -H newc --quiet) >"$tmp/initrd"
	out=$tmp/console
	# Same -cpu as the real run (here KVM rejects its MSRs and QEMU aborts at
	# once; with the default CPU the guest hangs until the timeout). -k: a
	# vCPU stuck in the kernel may ignore SIGTERM. The subshell keeps bash's
	# "Aborted" job message off the terminal.
	(timeout -k 2 "$KVM_PROBE_SECONDS" qemu-system-x86_64 -accel kvm -cpu max -m 256 \
		-nographic -no-reboot -kernel "$vmlinuz" -initrd "$tmp/initrd" \
		-append "console=ttyS0 panic=-1 quiet" </dev/null >"$out" 2>&1 || true) 2>/dev/null
	grep -q SVMBATCH-KVM-PROBE-OK "$out" && ok=1
	rm -rf "$tmp"
	[[ $ok == 1 ]]
}

choose_accel() {
	local vmlinuz=$1 cache boot_id
	if [[ -n ${SVMBATCH_ACCEL:-} ]]; then
		[[ $SVMBATCH_ACCEL == tcg || $SVMBATCH_ACCEL == kvm ]] || die "SVMBATCH_ACCEL must be tcg or kvm"
		ACCEL=$SVMBATCH_ACCEL
		return
	fi
	boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown)
	cache=$SVMBATCH_CACHE/kvm-probe.$boot_id
	if [[ -f $cache ]]; then
		ACCEL=$(cat "$cache")
	else
		echo "run.sh: probing KVM (up to ${KVM_PROBE_SECONDS} s)..." >&2
		if kvm_probe "$vmlinuz"; then ACCEL=kvm; else ACCEL=tcg; fi
		mkdir -p "$SVMBATCH_CACHE"
		echo "$ACCEL" >"$cache"
	fi
	# Later runs in this environment (e.g. the other kernel) reuse it.
	export SVMBATCH_ACCEL=$ACCEL
}

# kernel_expects KDIR: what this kernel provides to the tests, one name a
# line, for SVMBATCH_EXPECT (the names of SVMBATCH_SKIP_ABSENT in
# libsvmbatch/tests/test_util.hpp and skip_absent in the selftests): from
# its build configuration (Debian's boot/config-ABI, the debug kernel's
# src/.config), BASE_CMDLINE and its version.  A test that then finds one
# of these absent fails instead of skipping.
kernel_expects() {
	local kdir=$1 config major minor
	config=$kdir/boot/config-$ABI
	[[ -f $config ]] || config=$kdir/src/.config
	[[ -f $config ]] || die "no configuration of $ABI in $kdir (boot/config-$ABI, src/.config)"
	has() { grep -qx "CONFIG_$1=y" "$config"; }
	# transparent_hugepage=madvise: MADV_HUGEPAGE gets huge pages
	if has TRANSPARENT_HUGEPAGE; then echo thp; fi
	# hugepages=16: a pool of 2 MiB pages
	if has HUGETLBFS; then echo hugetlb; fi
	# mbind(2) (one node: the guests boot without -numa)
	if has NUMA; then echo numa; fi
	# the kernel's own fault injection (svmbatch_kfault)
	if has FAULT_INJECTION && has FAULT_INJECTION_DEBUG_FS && has FAILSLAB &&
		has FAIL_PAGE_ALLOC && has FAULT_INJECTION_USERCOPY; then
		echo kfault
	fi
	# PROCMAP_QUERY came with Linux 6.11
	IFS=. read -r major minor _ <<<"$ABI"
	if ((major > 6 || (major == 6 && minor >= 11))); then echo procmap_query; fi
}

# One QEMU run under the host's timeout; sets QEMU_RC.  A guest that does
# not reach /init within BOOT_TIMEOUT is killed and QEMU_RC is set to 125.
qemu_once() {
	local log=$1 pid waited=0
	shift
	if [[ $VERBOSE == 1 ]]; then
		("$@" </dev/null 2>&1 | tee "$log" >&2) &
	else
		"$@" </dev/null >"$log" 2>&1 &
	fi
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		if ((waited >= BOOT_TIMEOUT)) && ! grep -q SVMBATCH-VMTEST-BOOTED "$log"; then
			[[ -s $WORK/qemu.pid ]] && kill -KILL "$(cat "$WORK/qemu.pid")" 2>/dev/null
			kill -KILL "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
			QEMU_RC=125
			return
		fi
		sleep 1
		waited=$((waited + 1))
	done
	wait "$pid"
	QEMU_RC=$?
}

# Boot the guest; sets QEMU_RC and ELAPSED.  Emulated boots very rarely hang
# before /init (seen once: a vCPU spinning in the 6.1 crypto self-tests under
# multi-threaded TCG), so a boot that never reaches /init is retried once; the
# hung console is kept as LOG.boot-hang.  Hangs after /init are never retried.
boot_guest() {
	local vmlinuz=$1 initrd=$2 cmdline start attempt
	cmdline="$BASE_CMDLINE svmbatch.test_timeout=$TEST_TIMEOUT $EXTRA_CMDLINE"
	mkdir -p "$(dirname "$LOG")"
	local cmd=(timeout -k 10 "$TIMEOUT"
		qemu-system-x86_64 -accel "$ACCEL" -cpu max -smp 2 -m "$MEM"
		-nographic -nic none -no-reboot -kernel "$vmlinuz" -initrd "$initrd"
		-pidfile "$WORK/qemu.pid" -append "$cmdline")
	start=$SECONDS
	for attempt in 1 2; do
		echo "run.sh: booting $KERNEL ($ABI) with $ACCEL; console: $LOG" >&2
		set +e
		qemu_once "$LOG" "${cmd[@]}"
		set -e
		[[ $QEMU_RC != 125 ]] && break
		echo "run.sh: no /init after ${BOOT_TIMEOUT} s (attempt $attempt)" >&2
		if ((attempt == 1)); then
			mv "$LOG" "$LOG.boot-hang"
			echo "run.sh: hung console kept as $LOG.boot-hang; retrying" >&2
		fi
	done
	ELAPSED=$((SECONDS - start))
	echo "run.sh: QEMU exited rc=$QEMU_RC after ${ELAPSED} s" >&2
}

# splat_before_init LOG [print]: true when the console's first kernel splat
# comes before the guest's /init started (SVMBATCH-VMTEST-BOOTED), or the
# guest never got there; "print" shows that splat's line.
splat_before_init() {
	awk -v print_it="${2:-}" '
		/SVMBATCH-VMTEST-BOOTED/ { booted = 1 }
		/BUG:|WARNING:|Oops|general protection fault|KASAN:|UBSAN:|kernel BUG/ {
			if (!booted && !found) { found = 1; line = $0 }
		}
		END {
			if (found && print_it != "") print line
			exit found ? 0 : 1
		}' "$1"
}

# A run that fails before the log is judged (no kernel, bad module...) still
# ends with the summary line that callers look for.
JUDGED=0
on_exit() {
	local rc=$?
	rm -rf "${WORK:-}"
	if [[ $rc -ne 0 && $JUDGED == 0 && -n ${KERNEL:-} ]]; then
		echo "run.sh: setup failed before the guest ran (see above)"
		echo "vmtest $KERNEL: 0 passed, 1 failed, 0 skipped"
	fi
	exit "$rc"
}

main() {
	parse_args "$@"
	trap on_exit EXIT
	local kdir vmlinuz names=() t module_loaded=1 expects
	for t in "${TESTS[@]}"; do
		[[ -f $t && -x $t ]] || die "test $t is not an executable file"
		names+=("$(basename "$t")")
	done
	[[ $MODULE == none ]] && module_loaded=0

	ABI=$(kernel_abi "$KERNEL")
	kdir=$(kernel_fetch "$KERNEL")
	vmlinuz=$kdir/boot/vmlinuz-$ABI
	choose_accel "$vmlinuz"
	expects=$(kernel_expects "$kdir")
	for t in $expects; do
		EXPECTS+=(--expect "$t")
	done

	WORK=$(mktemp -d)
	"$HERE/mkinitramfs.sh" --kernel-dir "$kdir" --module "$MODULE" "${KMODS[@]}" "${FILES[@]}" \
		"${EXPECTS[@]}" "${GTEST_FILTER[@]}" \
		-o "$WORK/initramfs.gz" --tests "${TESTS[@]}"

	local attempt verdict rc
	for attempt in 1 2 3; do
		boot_guest "$vmlinuz" "$WORK/initramfs.gz"
		JUDGED=1
		verdict=$WORK/verdict
		rc=0
		"$HERE/parse-log.sh" --kernel "$KERNEL" --module-loaded "$module_loaded" \
			--qemu-rc "$QEMU_RC" --timeout "$TIMEOUT" --tests "${names[*]}" \
			"$LOG" >"$verdict" || rc=$?
		# A splat while the kernel boots, before /init ran and so before
		# svmbatch.ko was loaded, is the kernel's own (seen: an early
		# interrupt under TCG tripping KASAN at 0.004 s; /init then ends
		# the boot at once).  Boot again, up to three boots, keep that
		# console, and say so; a failure of the last boot fails.
		if ((rc != 0 && attempt < 3)) && splat_before_init "$LOG"; then
			mv "$LOG" "$LOG.boot-splat-$attempt"
			echo "run.sh: kernel splat during boot, before /init and svmbatch.ko:" \
				"$(splat_before_init "$LOG.boot-splat-$attempt" print)" >&2
			echo "run.sh: console kept as $LOG.boot-splat-$attempt; booting again" >&2
			continue
		fi
		cat "$verdict"
		return "$rc"
	done
}

main "$@"
