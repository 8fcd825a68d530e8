#!/bin/bash
# SPDX-License-Identifier: MIT
#
# What the Python tests need from PyPI, for each of the two torches they
# run with.  Does nothing when it is there already.
#
# python-deps.sh [PYTHON]: Debian's torch 1.13.  The pinned versions of
# libsvmbatch/python/tests/requirements.txt (what Debian 12 lacks),
# installed into build/pydeps (pip --target: nothing outside the tree
# changes) without their dependencies, which come from Debian
# (tools/install-deps.sh): a numpy from PyPI would shadow the one Debian's
# torch is built against.
#
# python-deps.sh --torch2 [PYTHON]: PyPI's torch 2.x, the one users run.
# A venv of PYTHON holding exactly requirements-torch2.txt (pinned, each
# without its dependencies: the file is the whole closure), at
# build/venv-torch2.  The venv itself lives in $SVMBATCH_CACHE
# (default /var/cache/svmbatch, beside ccache's cache) where that can be
# written, build/venv-torch2 being a link to it: a fresh clone on a warm
# machine (CI) finds it there and downloads nothing, a fresh machine
# downloads it once (2.2 GB, bounded by TORCH2_INSTALL_SECONDS).
set -euo pipefail

cd "$(dirname "$0")/.."

# install_pydeps PYTHON: requirements.txt into build/pydeps.
install_pydeps() {
	local python=$1 req=libsvmbatch/python/tests/requirements.txt dest=build/pydeps
	local stamp=$dest/.requirements
	if [[ -f $stamp ]] && cmp -s "$req" "$stamp"; then
		return 0
	fi
	rm -rf "$dest"
	mkdir -p "$dest"
	"$python" -m pip install --quiet --disable-pip-version-check --no-deps \
		--root-user-action=ignore --target "$dest" -r "$req"
	cp "$req" "$stamp"
}

# The whole install (download included) may take this long; pip's own
# --timeout bounds each read, not the sum.  Measured: about 100 s from
# PyPI on a fresh machine.
TORCH2_INSTALL_SECONDS=${TORCH2_INSTALL_SECONDS:-1200}

# torch2_stamp PYTHON: what the venv was made from: the interpreter's
# version and the requirements.  A change of either rebuilds it.
torch2_stamp() {
	"$1" -c 'import sys; print("# python", sys.version.split()[0])'
	cat libsvmbatch/python/tests/requirements-torch2.txt
}

# install_torch2 PYTHON: requirements-torch2.txt into the venv of
# build/venv-torch2.
install_torch2() {
	local python=$1 req=libsvmbatch/python/tests/requirements-torch2.txt
	local link=build/venv-torch2 cache=${SVMBATCH_CACHE:-/var/cache/svmbatch} venv
	if mkdir -p "$cache" 2>/dev/null && [[ -w $cache ]]; then
		venv=$cache/venv-torch2
		# A venv of an earlier run in the tree gives way to the link.
		[[ -L $link || ! -e $link ]] || rm -rf "$link"
		mkdir -p build
		ln -sfn "$venv" "$link"
	else
		venv=$PWD/$link
		[[ ! -L $link ]] || rm -f "$link"
	fi
	# One install at a time (two checkouts of one machine share the cache).
	exec 9>"$venv.lock"
	flock 9
	if [[ -f $venv/.requirements ]] && cmp -s <(torch2_stamp "$python") "$venv/.requirements"; then
		return 0
	fi
	local start=$SECONDS
	rm -rf "$venv"
	"$python" -m venv "$venv"
	# --no-cache-dir: the venv is the cache; pip's would hold the 2.2 GB of
	# wheels a second time.  --only-binary: nothing is compiled here.
	timeout "$TORCH2_INSTALL_SECONDS" "$venv/bin/python" -m pip install --quiet \
		--disable-pip-version-check --no-cache-dir --progress-bar off --no-deps \
		--only-binary=:all: --timeout 60 --retries 3 -r "$req"
	# The list is the closure: pip check may find missing only what it
	# leaves out on purpose (a new dependency of a bumped pin fails here).
	local unmet
	unmet=$("$venv/bin/python" -m pip check --disable-pip-version-check |
		grep -v -E '^torch [^ ]+ requires (cuda-bindings|cuda-toolkit|triton), which is not installed\.$' |
		grep -v '^No broken requirements found\.$' || true)
	if [[ -n $unmet ]]; then
		echo "python-deps.sh: $req is not the whole closure:" >&2
		echo "$unmet" >&2
		return 1
	fi
	# torch loads every library it NEEDs at import: the venv is complete
	# only if these imports work (an nvidia-* wheel missing fails here).
	"$venv/bin/python" -c 'import numpy, pytest, safetensors.torch, torch, transformers
print("torch", torch.__version__, "transformers", transformers.__version__)'
	echo "venv-torch2: $venv installed in $((SECONDS - start)) s," \
		"$(du -sm "$venv" | cut -f1) MB"
	torch2_stamp "$python" >"$venv/.requirements"
}

if [[ ${1:-} == --torch2 ]]; then
	install_torch2 "${2:-/usr/bin/python3}"
else
	install_pydeps "${1:-/usr/bin/python3}"
fi
