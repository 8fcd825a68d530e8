#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The self-test of tools/clang-tidy-cached.sh, make lib-tidy's cache: on a
# unit of its own (a file with a NOLINT'd finding, including a header),
# a clean file is checked once and then skipped; a change to a comment of
# the header, a NOLINT taken out of the file, another option are each
# checked again; a file that fails fails every time (no stamp), and its
# diagnostics are printed; the stamp of content seen before is found
# again; with the cache off, every run checks.  Prints TAP.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/lib.sh
. tools/lib.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
TAP_LOGDIR=$work

tap_plan 9

src=$work/src
mkdir -p "$src" "$work/cache"
cat >"$src/h.hpp" <<'EOF'
#pragma once
// the value
inline int value() { return 1; }
EOF
with_nolint='int f(int x) { if (x) return value(); return 0; } // NOLINT(readability-braces-around-statements)'
cat >"$src/a.cpp" <<EOF
#include "h.hpp"
$with_nolint
EOF
cat >"$src/compile_commands.json" <<EOF
[{"directory": "$src", "command": "c++ -std=c++20 -c a.cpp -o a.o", "file": "a.cpp"}]
EOF

checks='--checks=-*,readability-braces-around-statements'
# tidy [OPTION...]: the cache over a.cpp; sets $rc and $tally (what the
# tally file says of it: "checked" or "cached"); its output in $work/out.
tidy() {
	rm -f "$work/tally"
	SVMBATCH_TIDY_CACHE=${cache-$work/cache} SVMBATCH_TIDY_TALLY=$work/tally \
		tools/clang-tidy-cached.sh -p "$src" --quiet --warnings-as-errors=* "$@" \
		"$src/a.cpp" >"$work/out" 2>&1
	rc=$?
	tally=$(cut -d' ' -f1 "$work/tally" 2>/dev/null)
	echo "rc=$rc tally=$tally" >>"$work/out"
}
stamps() {
	find "$work/cache" -maxdepth 1 -type f | wc -l
}

tidy "$checks"
[[ $rc == 0 && $tally == checked && $(stamps) == 1 ]]
tap_ok "a clean file is checked and stamped (rc=$rc, $tally, $(stamps) stamps)" "$work/out"
tidy "$checks"
[[ $rc == 0 && $tally == cached ]]
tap_ok "unchanged, it is not checked again (rc=$rc, $tally)" "$work/out"
sed -i 's|// the value|// the value, and a comment changed|' "$src/h.hpp"
tidy "$checks"
[[ $rc == 0 && $tally == checked && $(stamps) == 2 ]]
tap_ok "a comment changed in a header it includes: checked again (rc=$rc, $tally)" "$work/out"
tidy "$checks" '--header-filter=.*'
[[ $rc == 0 && $tally == checked ]]
tap_ok "another option: checked again (rc=$rc, $tally)" "$work/out"
sed -i 's| // NOLINT(readability-braces-around-statements)||' "$src/a.cpp"
tidy "$checks"
[[ $rc != 0 && $tally == checked ]] && grep -q 'readability-braces-around-statements' "$work/out"
tap_ok "its NOLINT taken out: checked again, fails, says why (rc=$rc, $tally)" "$work/out"
n=$(stamps)
tidy "$checks"
[[ $rc != 0 && $tally == checked && $(stamps) == "$n" ]]
tap_ok "a file that failed is checked again and not stamped (rc=$rc, $tally)" "$work/out"
printf '#include "h.hpp"\n%s\n' "$with_nolint" >"$src/a.cpp"
tidy "$checks"
[[ $rc == 0 && $tally == cached ]]
tap_ok "its NOLINT put back: the stamp of that content is found (rc=$rc, $tally)" "$work/out"
cache=off tidy "$checks"
[[ $rc == 0 && $tally == checked ]]
tap_ok "with the cache off, a clean file is checked (rc=$rc, $tally)" "$work/out"
cache=off tidy "$checks"
[[ $rc == 0 && $tally == checked ]]
tap_ok "and checked again the next time (rc=$rc, $tally)" "$work/out"

tap_done clang-tidy-cached-test
