# SPDX-License-Identifier: MIT
"""Fixtures of the Python tests.  They run with the package of the build
tree on PYTHONPATH (make python-test), on this host in userspace mode with
Debian's torch 1.13 and again with PyPI's torch 2.11 (the venv of
tools/python-deps.sh --torch2), in a guest in kernel mode
(guest_binding_test.py), and on the GPU machine with its venv's torch
and CUDA."""

import gc
import mmap
import os
import sys

import pytest

import svmbatch


# A script the guests run (it prints its own TAP), not a pytest module:
# importing it would put /usr/lib/python3/dist-packages first on sys.path,
# ahead of PYTHONPATH's build tree and pinned dependencies.
collect_ignore = ["guest_binding_test.py"]


def open_fds():
    return sorted(os.listdir("/proc/self/fd"))


class Baseline:
    """What must be back where it was after a test: this process's VmPin
    and open fds (and the module's gauges in kernel mode)."""

    def __init__(self):
        cuda_up()
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


def cuda_up():
    """CUDA (and svmbatch's CUDA backend) up before a baseline is taken:
    the driver's own fds live as long as the process, and the first test
    to touch CUDA (in whatever order the tests run) must not be blamed
    for them."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.empty(1, device="cuda")  # the primary context, and its fds
        from svmbatch import _torch_common
        _torch_common.cuda_backend()  # kept for the process's life


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


def resident_pages(address, length):
    """How many pages of [address, address + length) are in memory (mincore)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    pages = -(-length // mmap.PAGESIZE)
    vec = (ctypes.c_ubyte * pages)()
    if libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(length), vec):
        raise OSError(ctypes.get_errno(), "mincore")
    return sum(v & 1 for v in vec)


def page_ranges(spans, page=mmap.PAGESIZE):
    """The ranges (address, length) that buffers (address, length) must
    become: rounded out to pages, sorted, merged where their pages touch or
    overlap (libsvmbatch/src/core/range_plan.hpp; the tests' buffers are
    far below max_range_bytes, so no range is cut)."""
    merged = []
    for begin, end in sorted((a - a % page, -(-(a + n) // page) * page) for a, n in spans):
        if merged and begin <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    return [(begin, end - begin) for begin, end in merged]


def keeps_pages(path):
    """Whether path is on tmpfs or ramfs, which hold a file's only copy in
    the page cache (DONTNEED drops nothing)."""
    with open("/proc/self/mounts") as f:
        mounts = [line.split() for line in f]
    real = os.path.realpath(path)
    best = max((m for m in mounts if real == m[1] or real.startswith(m[1].rstrip("/") + "/")),
               key=lambda m: len(m[1]), default=None)
    return best is not None and best[2] in ("tmpfs", "ramfs")


def drop_pages(fd):
    """Write back and drop an open file's pages: the next read is cold
    (on tmpfs and ramfs nothing drops: keeps_pages)."""
    os.fdatasync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def drop_cache(*paths):
    """drop_pages() of each file, by path."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            drop_pages(fd)
        finally:
            os.close(fd)


def registered_ranges(reg):
    """A registration's ranges as (address, length)."""
    return [(r[0], r[1]) for r in reg.ranges]


def has_cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


needs_cuda = pytest.mark.skipif(not has_cuda(), reason="no CUDA device (torch.cuda.is_available() "
                                 "is False): the GPU path runs on the H100 (tools/device)")


# With SVMBATCH_TAP=1 (make check, the guests) the results are printed as
# TAP for tools/check.sh to count; run pytest with -p no:terminal then.
# The plan comes before the first test runs: every collected test, plus one
# line for each file or directory whose collection failed (not ok) or was
# skipped (ok # SKIP), those lines first.  A collection error stops pytest
# before any test runs, so the results fall short of the plan and
# tools/check.sh fails the run (besides pytest's exit status 2).
_tap = {"n": 0, "failed": 0, "skipped": 0, "plan": None}
_collect_problems = []


def _tap_line(text):
    os.write(1, (text + "\n").encode())


def _tapping():
    return bool(os.environ.get("SVMBATCH_TAP"))


def _skip_reason(report):
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else "skipped"
    return reason.removeprefix("Skipped: ")


def _tap_result(name, outcome, details):
    """One TAP line: outcome "passed", "failed" or "skipped"; details are
    the failure's lines or the skip's reason."""
    _tap["n"] += 1
    n = _tap["n"]
    if outcome == "skipped":
        _tap["skipped"] += 1
        _tap_line(f"ok {n} {name} # SKIP {details}")
    elif outcome == "failed":
        _tap["failed"] += 1
        _tap_line(f"not ok {n} {name}")
        for line in details.splitlines()[-30:]:
            _tap_line(f"# {line}")
    else:
        _tap_line(f"ok {n} {name}")


def _outcome(report):
    if report.failed:
        return "failed", str(report.longrepr)
    if report.skipped:
        return "skipped", _skip_reason(report)
    return "passed", ""


def pytest_collectreport(report):
    if _tapping() and (report.failed or report.skipped):
        _collect_problems.append(report)


def pytest_collection_finish(session):
    if not _tapping():
        return
    _tap["plan"] = len(session.items) + len(_collect_problems)
    _tap_line(f"1..{_tap['plan']}")
    for report in _collect_problems:
        _tap_result(f"collect {report.nodeid or '.'}", *_outcome(report))


# One line per test, written after its teardown: the worst of its setup,
# call and teardown (a failure in any of them fails it).
_running = {}


def pytest_runtest_logreport(report):
    if not _tapping():
        return
    outcome, details = _outcome(report)
    worst = _running.setdefault(report.nodeid, ["passed", ""])
    if outcome == "failed":
        worst[0] = "failed"
        worst[1] += f"{report.when}: {details}\n"
    elif outcome == "skipped" and worst[0] == "passed":
        worst[:] = [outcome, details]
    if report.when == "teardown":
        _tap_result(report.nodeid.split("::", 1)[-1], *_running.pop(report.nodeid))


def pytest_sessionfinish(session):
    if not _tapping():
        return
    t = _tap
    if t["plan"] is None:  # collection itself broke: no plan was printed
        _tap_line("# python: pytest ended before its collection finished")
    elif t["n"] != t["plan"]:
        _tap_line(f"# python: planned {t['plan']}, ran {t['n']} (a collection error stops "
                  "the run)")
    _tap_line(f"# python: {t['n'] - t['failed'] - t['skipped']} passed, {t['failed']} failed, "
              f"{t['skipped']} skipped")
