# SPDX-License-Identifier: MIT
"""Fixtures of the Python tests.  They run with the package of the build
tree on PYTHONPATH (make python-test), on this host in userspace mode, in
a guest in kernel mode (guest_binding_test.py), and on the H100 with the
venv's torch 2.11 and CUDA."""

import gc
import os
import sys

import pytest

import svmbatch


def open_fds():
    return sorted(os.listdir("/proc/self/fd"))


class Baseline:
    """What must be back where it was after a test: this process's VmPin
    and open fds (and the module's gauges in kernel mode)."""

    def __init__(self):
        release_staging()
        gc.collect()
        self.vmpin = svmbatch.process_pinned_bytes()
        self.fds = open_fds()
        self.stats = module_gauges()

    def check(self):
        release_staging()
        gc.collect()
        assert svmbatch.process_pinned_bytes() == self.vmpin
        assert open_fds() == self.fds
        assert module_gauges() == self.stats


def release_staging():
    """load_safetensors keeps its staging ring (pinned) for the next load."""
    if "svmbatch.torch" in sys.modules:
        sys.modules["svmbatch.torch"].release_staging()


def module_gauges():
    try:
        stats = svmbatch.read_module_stats()
    except OSError:
        return None
    return {k: v for k, v in stats.items() if k in ("registrations", "pinned_pages")}


@pytest.fixture
def baseline():
    b = Baseline()
    yield b
    b.check()


@pytest.fixture(scope="session")
def ctx():
    return svmbatch.Context()


def has_cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


needs_cuda = pytest.mark.skipif(not has_cuda(), reason="no CUDA device (torch.cuda.is_available() "
                                 "is False): the GPU path runs on the H100 (tools/device)")


# With SVMBATCH_TAP=1 (make check, the guests) the results are printed as
# TAP, one line per test, for tools/check.sh to count; run pytest with
# -p no:terminal then.
_tap = {"n": 0, "failed": 0, "skipped": 0}


def _tap_line(text):
    os.write(1, (text + "\n").encode())


def pytest_runtest_logreport(report):
    if not os.environ.get("SVMBATCH_TAP"):
        return
    final = report.when == "call" or (report.when == "setup" and not report.passed) or \
        (report.when == "teardown" and report.failed)
    if not final:
        return
    _tap["n"] += 1
    n, name = _tap["n"], report.nodeid.split("::", 1)[-1]
    if report.skipped:
        _tap["skipped"] += 1
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else "skipped"
        _tap_line(f"ok {n} {name} # SKIP {reason.removeprefix('Skipped: ')}")
    elif report.failed:
        _tap["failed"] += 1
        _tap_line(f"not ok {n} {name}")
        for line in str(report.longrepr).splitlines()[-30:]:
            _tap_line(f"# {line}")
    else:
        _tap_line(f"ok {n} {name}")


def pytest_sessionfinish(session):
    if os.environ.get("SVMBATCH_TAP"):
        t = _tap
        _tap_line(f"1..{t['n']}")
        _tap_line(f"# python: {t['n'] - t['failed'] - t['skipped']} passed, {t['failed']} failed, "
                  f"{t['skipped']} skipped")
