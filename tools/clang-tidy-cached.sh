#!/bin/bash
# SPDX-License-Identifier: MIT
#
# clang-tidy over FILEs (make lib-tidy), skipping each one that passed
# before with the same input: a stamp named by a key of everything
# clang-tidy reads for it is written when it passes, and found the next
# time.  A unit that fails prints its diagnostics and fails every time.
#
# usage: tools/clang-tidy-cached.sh -p BUILD_DIR [--OPTION=VALUE...] FILE...
#
# The options are clang-tidy's, each in the --OPTION=VALUE form (a value
# apart would be taken for a FILE); with no -p, or a "--", clang-tidy
# runs as it is, without the cache.
#
# The key of a FILE, a SHA-256 of:
#   - this script, clang-tidy --version (less the host's CPU) and the size
#     and time of clang-tidy, clang and the LLVM libraries they load (a
#     rebuilt package);
#   - the OPTIONs, and every .clang-tidy of the tree and above it (and
#     --config-file's);
#   - for each of FILE's commands in BUILD_DIR/compile_commands.json (its
#     arguments and directory): the unit as clang-tidy's own clang
#     preprocesses it with that command and the OPTIONs' --extra-arg and
#     --extra-arg-before, and the raw content of every file it read
#     (clang -MD): so a comment (NOLINT), a macro never expanded, a
#     directive of a header changes the key too;
#   - which of those files each HeaderFilterRegex (of the .clang-tidy
#     files and the OPTIONs) matches, by their absolute paths.
# The top of the tree is @ROOT@ in all of it, so another checkout of the
# same files (CI's clean clones) finds the stamps.  Whatever cannot be
# keyed (no clang beside clang-tidy, a unit that does not preprocess, a
# path with a space) is checked, never skipped.  A stamp is written only
# when clang-tidy exits 0 and prints nothing but its "N warnings
# generated." lines, and the key is the same after the check as before
# (no file changed while clang-tidy read it).
#
# Environment:
#   SVMBATCH_TIDY_CACHE  the stamps' directory (default
#                        $SVMBATCH_CACHE/clang-tidy, SVMBATCH_CACHE
#                        defaulting to /var/cache/svmbatch); empty or "off",
#                        or a directory that cannot be written: no cache
#   SVMBATCH_TIDY_TALLY  a file that gets a line "cached FILE" or
#                        "checked FILE" for each FILE
# Stamps not used for 60 days are removed.  Exit status 1 when clang-tidy
# failed on any FILE.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root_phys=$(cd "$root" && pwd -P)
self=$root/tools/$(basename "${BASH_SOURCE[0]}")

tidy=$(command -v clang-tidy) || { echo "clang-tidy-cached: no clang-tidy" >&2; exit 127; }

build=
files=()
tidy_args=()	# every option but -p, for clang-tidy and the key
before=()	# --extra-arg-before's, --extra-arg's
after=()
for a in "$@"; do
	if [[ $a == -- ]]; then
		exec "$tidy" "$@"
	fi
done
while (($#)); do
	case $1 in
	-p | --p) build=${2-}; shift 2 || shift ;;
	-p=* | --p=*) build=${1#*=}; shift ;;
	-extra-arg=* | --extra-arg=*) after+=("${1#*=}"); tidy_args+=("$1"); shift ;;
	-extra-arg-before=* | --extra-arg-before=*) before+=("${1#*=}"); tidy_args+=("$1"); shift ;;
	-*) tidy_args+=("$1"); shift ;;
	*) files+=("$1"); shift ;;
	esac
done
[[ -n $build ]] || exec "$tidy" "${tidy_args[@]}" "${files[@]}"

cache=${SVMBATCH_TIDY_CACHE-${SVMBATCH_CACHE:-/var/cache/svmbatch}/clang-tidy}
if [[ -z $cache || $cache == off ]] || ! mkdir -p "$cache" 2>/dev/null || [[ ! -w $cache ]]; then
	cache=
fi
tidy_real=$(readlink -f "$tidy")
clang=$(dirname "$tidy_real")/clang
[[ -x $clang ]] || cache=

tally() {
	if [[ -n ${SVMBATCH_TIDY_TALLY-} ]]; then
		echo "$1 $2" >>"$SVMBATCH_TIDY_TALLY"
	fi
}

# check FILE: clang-tidy over FILE, its output unless that is only the
# count of the warnings it did not show.  Returns clang-tidy's status;
# $clean is 1 when it passed without a word.
check() {
	local file=$1 out rc
	out=$("$tidy" -p "$build" "${tidy_args[@]}" "$file" 2>&1)
	rc=$?
	tally checked "$file"
	clean=0
	if ((rc == 0)) && ! grep -qvE '^([0-9]+ warnings? generated\.)?$' <<<"$out"; then
		clean=1
		return 0
	fi
	printf '%s\n' "$out"
	return "$rc"
}

if [[ -z $cache ]]; then
	status=0
	for f in "${files[@]}"; do
		check "$f" || status=1
	done
	exit $status
fi

find "$cache" -maxdepth 1 -type f -mtime +60 -delete 2>/dev/null
tmp=$(mktemp -d)
# shellcheck disable=SC2064 # $tmp is fixed now
trap "rm -rf '$tmp'" EXIT

# The top of the tree as @ROOT@ (both spellings of it, where a symlink
# makes two).
sed_root=()
for r in "$root" "$root_phys"; do
	# shellcheck disable=SC2001 # each of a set of characters escaped
	sed_root+=(-e "s|$(sed 's/[][\\.*^$|]/\\&/g' <<<"$r")/|@ROOT@/|g")
done
relative() {
	sed "${sed_root[@]}"
}

# Every .clang-tidy that can apply to a file of the tree, and those
# that --config-file names.
mapfile -t configs < <(
	find "$root" \( -path "$root/build" -o -name .git \) -prune -o \
		-name .clang-tidy -type f -print | LC_ALL=C sort
	d=$root
	while [[ $d != / ]]; do
		d=$(dirname "$d")
		[[ -f $d/.clang-tidy ]] && echo "$d/.clang-tidy"
	done
	for a in "${tidy_args[@]}"; do
		[[ $a == -config-file=* || $a == --config-file=* ]] && echo "${a#*=}"
	done
)
# The header filters, as grep -E patterns.
mapfile -t header_filters < <(
	sed -nE "s/^HeaderFilterRegex:[[:space:]]*//p" "${configs[@]}" 2>/dev/null |
		sed -E "s/^'(.*)'[[:space:]]*$/\1/; s/^\"(.*)\"[[:space:]]*$/\1/; s/''/'/g"
	for a in "${tidy_args[@]}"; do
		[[ $a == -header-filter=* || $a == --header-filter=* ]] && echo "${a#*=}"
	done
)

mapfile -t binaries < <(
	readlink -f "$tidy_real" "$clang"
	ldd "$tidy_real" "$clang" | awk '$3 ~ /lib(clang|LLVM)/ { print $3 }' | sort -u
)
global=$(
	echo "svmbatch clang-tidy cache 1"
	sha256sum <"$self"
	"$tidy" --version | grep -v 'Host CPU:'
	stat -L -c '%n %s %Y' "${binaries[@]}"
	printf 'arg %s\n' "${tidy_args[@]}" | relative
	for f in "${configs[@]}"; do
		echo "config $f" | relative
		cat "$f"
	done
	printf 'header-filter %s\n' "${header_filters[@]}"
) || exit 1

# commands FILE...: for the Nth FILE, N.K in $tmp for each of its
# commands in compile_commands.json: the directory, then the arguments,
# each ended by a NUL.
commands() {
	python3 - "$build/compile_commands.json" "$tmp" "$@" <<'EOF'
import json, os, shlex, sys
db, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]
want = {}
for i, f in enumerate(files):
    want.setdefault(os.path.normpath(os.path.abspath(f)), []).append(i)
count = {}
for e in json.load(open(db)):
    d = e["directory"]
    f = os.path.normpath(os.path.join(d, e["file"]))
    argv = e["arguments"] if "arguments" in e else shlex.split(e["command"])
    for i in want.get(f, []):
        k = count.get(i, 0)
        count[i] = k + 1
        with open(os.path.join(out, "%d.%d" % (i, k)), "wb") as o:
            o.write(b"".join(s.encode() + b"\0" for s in [d] + argv))
EOF
}

# preprocess_args ARGV...: the command without its output, -c and
# dependency options (as clang-tidy drops them), with the --extra-arg
# options where clang-tidy puts them, and -E; fails on a "--".
preprocess_args() {
	local skip=0 a
	pre=("${before[@]}")
	for a in "$@"; do
		if ((skip)); then
			skip=0
			continue
		fi
		case $a in
		--) return 1 ;;
		-o | -MF | -MT | -MQ) skip=1 ;;
		-o* | -c | -M | -MM | -MD | -MMD | -MG | -MP | -MF* | -MT* | -MQ*) ;;
		*) pre+=("$a") ;;
		esac
	done
	pre+=("${after[@]}")
}

# key FILE N: the key of the Nth FILE (see the top)
key() {
	local file=$1 n=$2 cmd argv dir deps d re k=0
	[[ -e $tmp/$n.0 ]] || return 1
	{
		echo "$global"
		echo "file ${file#"$root"/}"
		for cmd in "$tmp/$n".*; do
			mapfile -d '' -t argv <"$cmd"
			dir=${argv[0]}
			preprocess_args "${argv[@]:2}" || return 1
			# clang in the mode the compiler's name gives (c++: g++), as
			# clang-tidy runs it; the output of -E and the files it read.
			(cd "$dir" && exec -a "${argv[1]}" "$clang" "${pre[@]}" -E \
				-MD -MF "$tmp/deps" -o "$tmp/pre.i") 2>/dev/null || return 1
			! grep -qE '\\[ #]|\$\$' "$tmp/deps" || return 1
			read -ra deps < <(sed -e '1s/^[^:]*://' -e 's/\\$//' "$tmp/deps" | tr '\n' ' ')
			((${#deps[@]})) || return 1
			for d in "${deps[@]}"; do
				[[ $d == /* ]] || d=$dir/$d
				[[ -f $d ]] || return 1
			done
			k=$((k + 1))
			printf 'command %d\n' "$k"
			printf '%s\0' "${argv[@]:1}" "$dir" "${pre[@]}" | relative
			relative <"$tmp/pre.i"
			(cd "$dir" && sha256sum -- "${deps[@]}") | relative
			for re in "${header_filters[@]}"; do
				echo "header-filter $re:"
				printf '%s\n' "${deps[@]}" | grep -nE -- "$re" | cut -d: -f1
				((PIPESTATUS[1] < 2)) || return 1
			done
		done
	} | sha256sum | cut -d' ' -f1
	((PIPESTATUS[0] == 0))
}

status=0
# Without the commands, every FILE is checked (key finds none).
commands "${files[@]}" 2>/dev/null
for n in "${!files[@]}"; do
	f=${files[$n]}
	[[ $f == /* ]] || f=$PWD/$f
	if ! k=$(key "$f" "$n"); then
		check "$f" || status=1
		continue
	fi
	if [[ -e $cache/$k ]]; then
		touch "$cache/$k"
		tally cached "$f"
		continue
	fi
	check "$f" || status=1
	if ((clean)) && k2=$(key "$f" "$n") && [[ $k2 == "$k" ]]; then
		printf '%s\n' "${f#"$root"/}" >"$cache/$k.$$" && mv -f "$cache/$k.$$" "$cache/$k"
	fi
done
exit $status
