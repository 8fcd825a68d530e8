#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The Python package as pip users get it (pyproject.toml): build the sdist
# and, from it, the wheel (python3 -m build; its isolated build environment
# takes the pinned scikit-build-core and pybind11 from PyPI), then install
# the wheel into a fresh venv that sees Debian's torch, numpy and pytest
# (--system-site-packages) and run the Python tests against the installed
# package, not the build tree, counted as make check counts the suite.
# The sdist is not installed and tested
# apart: `pip install` of it runs the same PEP 517 build in the same
# isolated environment that made the wheel from it, so it would only
# compile and test the same package twice (about 200 s of make check).
# SVMBATCH_PYTHON_PACKAGE_DIR replaces build/python-package.  Prints TAP.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/lib.sh
. tools/lib.sh
# tap_program: the planned runner of make check
# shellcheck source=tools/tap-runner.sh
. tools/tap-runner.sh
svmbatch_ccache
top=$PWD
work=${SVMBATCH_PYTHON_PACKAGE_DIR:-$top/build/python-package}
TAP_LOGDIR=$work
dist=$work/dist
PYTHON=/usr/bin/python3
REQ=$top/libsvmbatch/python/tests/requirements.txt

# The wheel's CMake build goes to build/wheel of the sdist's temporary
# tree, not to a temporary directory of its own: the sources' paths
# relative to it are then the same in every run, and ccache
# (svmbatch_ccache) finds the objects of an earlier run.  Not those of
# the Python binding: pybind11's headers are in the isolated build
# environment, a new temporary directory every time.
build_dists() {
	"$PYTHON" -m build -C build-dir=build/wheel --outdir "$dist" "$top" &&
		ls "$dist"/svmbatch-*.tar.gz "$dist"/svmbatch-*.whl
}

# The wheel holds the package and nothing else, and its extension needs no
# shared library of ours or liburing's (both are linked in).
wheel_contents() {
	local whl unpacked=$work/wheel-contents
	whl=$(ls "$dist"/svmbatch-*.whl) || return 1
	rm -rf "$unpacked" && mkdir -p "$unpacked" &&
		(cd "$unpacked" && "$PYTHON" -m zipfile -e "$whl" .) || return 1
	find "$unpacked" -type f | sed "s|^$unpacked/||" | sort
	! find "$unpacked" -type f | grep -v -e '^'"$unpacked"'/svmbatch/' \
		-e '^'"$unpacked"'/svmbatch-[^/]*\.dist-info/' &&
		ldd "$unpacked"/svmbatch/_svmbatch*.so &&
		! ldd "$unpacked"/svmbatch/_svmbatch*.so | grep -e libsvmbatch -e liburing &&
		[[ $(nm -D --defined-only "$unpacked"/svmbatch/_svmbatch*.so |
			grep -c -w -e T -e W | tr -d ' ') == 1 ]]
}

# install KIND FILE: a fresh venv with FILE installed, and the tests'
# pinned PyPI requirements.
install_into_venv() {
	local venv=$work/venv-$1 start
	rm -rf "$venv"
	"$PYTHON" -m venv --system-site-packages "$venv" || return 1
	start=$(date +%s)
	"$venv/bin/python" -m pip install --disable-pip-version-check --no-cache-dir "$2" ||
		return 1
	echo "pip install $(basename "$2"): $(($(date +%s) - start)) s"
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQ"
}

# tests KIND: the suite against the venv's package (the import must come
# from the venv, never from the build tree or the source tree), with the
# planned runner of make check (tools/tap-runner.sh): the suite's TAP plan
# (conftest.py) must equal what pytest --collect-only finds, and every
# planned test must report; a collection error fails.
run_tests() {
	local venv=$work/venv-$1 tests=$top/libsvmbatch/python/tests collected
	(
		cd "$work" || exit 1
		"$venv/bin/python" -c 'import sys, svmbatch, svmbatch.torch
print(svmbatch.__file__, svmbatch.__version__)
sys.exit(not svmbatch.__file__.startswith(sys.prefix))' || exit 1
		env -u PYTHONPATH "$venv/bin/python" -m pytest -p no:cacheprovider --collect-only -q \
			"$tests" >"$work/pytest-collect-$1.log" 2>&1 || {
			tail -n 25 "$work/pytest-collect-$1.log"
			exit 1
		}
		collected=$(grep -cE '^[^ ]+\.py::' "$work/pytest-collect-$1.log")
		echo "pytest --collect-only: $collected tests"
		TAP_EXPECT_PLAN=$collected tap_program "pytest-$1" \
			env -u PYTHONPATH "$venv/bin/python" -m pytest -p no:cacheprovider -p no:terminal "$tests"
	)
}

rm -rf "$work"
mkdir -p "$work"
tap_plan 4
tap_step build build_dists
tap_step wheel-contents wheel_contents
tap_step install-wheel install_into_venv wheel "$(ls "$dist"/svmbatch-*.whl 2>/dev/null)"
tap_step tests-wheel run_tests wheel
tap_done check-python-package
