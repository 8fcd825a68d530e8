#!/bin/bash
# SPDX-License-Identifier: MIT
#
# What the Python tests need from PyPI (Debian 12 lacks it): the pinned
# versions of libsvmbatch/python/tests/requirements.txt, installed into
# build/pydeps (pip --target: nothing outside the tree changes) without
# their dependencies, which come from Debian (tools/install-deps.sh): a
# numpy from PyPI would shadow the one Debian's torch is built against.
# Does nothing when they are there already.
#
# usage: python-deps.sh [PYTHON]
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${1:-/usr/bin/python3}
REQ=libsvmbatch/python/tests/requirements.txt
DEST=build/pydeps
STAMP=$DEST/.requirements

if [[ -f $STAMP ]] && cmp -s "$REQ" "$STAMP"; then
	exit 0
fi
rm -rf "$DEST"
mkdir -p "$DEST"
"$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps \
	--root-user-action=ignore --target "$DEST" -r "$REQ"
cp "$REQ" "$STAMP"
