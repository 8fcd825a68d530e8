#!/bin/bash
# SPDX-License-Identifier: MIT
#
# checkpatch --strict for the kselftests, minus four reports that are wrong
# for kselftest code:
#  - MACRO_WITH_FLOW_CONTROL, MACRO_ARG_REUSE: the test_cmd_* wrappers return
#    and reuse arguments on purpose, as the kernel's iommufd_utils.h does;
#  - SPACING on "FIXTURE_DATA(x) *self": checkpatch reads the harness's type
#    macro as a multiplication (the harness itself writes it this way).
#  - ENOSYS: the rule is for kernel code returning it; a test checks for it
#    from a syscall that may be compiled out (io_uring).
# Everything else fails.  usage: checkpatch-selftests.sh CHECKPATCH FILE...
set -euo pipefail

checkpatch=$1
shift
out=$(perl "$checkpatch" --strict --no-tree --terse --show-types \
	--ignore MACRO_WITH_FLOW_CONTROL,MACRO_ARG_REUSE,ENOSYS -f "$@" | grep -v '^total:' || true)
bad=0
while IFS= read -r report; do
	[[ -z $report ]] && continue
	if [[ $report == *CHECK:SPACING:* ]]; then
		file=${report%%:*}
		line=${report#*:}
		line=${line%%:*}
		if sed -n "${line}p" "$file" | grep -qE 'FIXTURE_(DATA|VARIANT)\([a-z_0-9]+\) \*'; then
			continue
		fi
	fi
	echo "$report"
	bad=1
done <<<"$out"
exit "$bad"
