# SPDX-License-Identifier: MIT
"""What every Python benchmark of bench/ shares, so that none of them can
measure us and a peer differently:

- metadata the benchmark writes itself: the commit of the tree (never a
  flag), the date, the machine (no host name), the mode, the method;
- each loader in a fresh process (forked from a server that has imported
  torch, nothing more: CUDA, the loader's import and the digest's weights
  come before the clock in the child, the same for every loader);
- interleaved repetitions: the repetition loop outside, the loaders inside,
  their order rotated each repetition; at least MIN_REPS of them unless
  the run is marked quick;
- every load checked against a digest of safetensors' own load;
- rows (one per loader and mode) whose raw per-repetition values are kept,
  and a summary that is a pure function of the rows (summarize_cell), so
  that bench/check-results.py can recompute it.

A row's figures: first_s = median over repetitions of the first load in
a fresh process; steady_s = median over repetitions of the median of that
repetition's steady loads; GB/s = the cell's bytes / 1e9 / seconds.  A row
is a candidate for "best peer" only if it is a peer and every repetition
loaded, exactly; the others are listed in the summary's "excluded" with
the reason.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

SCHEMA = "svmbatch-bench/2"
HARNESS_VERSION = 1
MIN_REPS = 5
# Roles of a row: ours (svmbatch, the exit status depends on them), peer
# (candidates for best peer), floor (what the hardware does alone, never a
# peer), diagnostic (neither).
ROLES = ("ours", "peer", "floor", "diagnostic")
PEER_PACKAGES = ("svmbatch", "safetensors", "instanttensor", "fastsafetensors",
                 "runai-model-streamer", "numpy", "transformers")

ROOT = Path(__file__).resolve().parent.parent


# --- metadata ------------------------------------------------------------

def tree_commit(root: Path = ROOT) -> dict:
    """The commit measured: build/device-deps/COMMIT, which
    tools/device/prepare-deps.sh writes beside the sdist it builds (the
    package the device run installs), else `git rev-parse HEAD` of a
    checkout (-dirty when the sources differ), else "unknown"."""
    stamp = root / "build" / "device-deps" / "COMMIT"
    if stamp.is_file():
        text = stamp.read_text().strip()
        if text:
            return {"commit": text, "commit_source": "build/device-deps/COMMIT"}
    if (root / ".git").exists():
        try:
            head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True,
                                  capture_output=True, text=True).stdout.strip()
            clean = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD", "--",
                                    "libsvmbatch", "tools", "examples", "bench"],
                                   check=False).returncode == 0
            return {"commit": head + ("" if clean else "-dirty"), "commit_source": "git"}
        except (OSError, subprocess.CalledProcessError):
            pass
    return {"commit": "unknown", "commit_source": "none"}


def _first_line(path: str, prefix: str) -> Optional[str]:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def package_versions(names: Iterable[str] = PEER_PACKAGES) -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def gpus() -> list:
    """Each GPU's name, driver and memory (nvidia-smi), else torch's names."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True,
                           timeout=30, check=True)
        return [dict(zip(("name", "driver", "memory"), (v.strip() for v in ln.split(","))))
                for ln in r.stdout.splitlines() if ln.strip()]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import torch
        return [{"name": torch.cuda.get_device_name(i)}
                for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - no GPU is a fact to record, not an error
        return []


def machine() -> dict:
    """The machine without its host name."""
    m: dict[str, Any] = {
        "gpus": gpus(),
        "cpu": _first_line("/proc/cpuinfo", "model name") or platform.processor(),
        "cpus": os.cpu_count(),
        "memory": _first_line("/proc/meminfo", "MemTotal"),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "packages": package_versions(),
    }
    m["gpu_count"] = len(m["gpus"])
    try:
        import torch
        m["torch"] = torch.__version__
        m["torch_cuda"] = torch.version.cuda
    except ImportError:
        m["torch"] = None
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            m["thp"] = f.read().strip()
    except OSError:
        pass
    return m


def svmbatch_mode() -> str:
    """kernel or userspace: svmbatch's default Context."""
    try:
        import svmbatch
        import svmbatch.torch as sbt
        return svmbatch.mode_name(sbt.default_context().mode)
    except Exception as e:  # noqa: BLE001 - recorded: a benchmark without it says why
        return f"unknown: {type(e).__name__}: {e}"


def metadata(benchmark: str, method: Any, params: dict, quick: bool = False,
             mode: Optional[str] = None) -> dict:
    """The header every result file starts with."""
    doc = {"schema": SCHEMA, "harness": HARNESS_VERSION, "benchmark": benchmark}
    doc.update(tree_commit())
    doc.update({
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "mode": mode if mode is not None else svmbatch_mode(),
        "method": method,
        "quick": bool(quick),
        "params": params,
        "argv": sys.argv[1:],
    })
    return doc


def check_reps(reps: int, quick: bool, what: str = "--reps") -> None:
    """Medians of at least MIN_REPS, except for a run marked quick."""
    if reps < 1 or (reps < MIN_REPS and not quick):
        raise SystemExit(f"{what} {reps}: medians need at least {MIN_REPS} repetitions "
                         "(--quick for a smoke run, marked \"quick\": true)")


# --- repetitions -----------------------------------------------------------

def rotation(names: list, rep: int) -> list:
    """The order of the loaders in repetition rep: rotated by rep, so that
    each loader runs in each position as often as the others."""
    if not names:
        return []
    k = rep % len(names)
    return names[k:] + names[:k]


def schedule(names: list, reps: int) -> list:
    """(rep, name) in run order: the repetitions outside, the loaders inside."""
    return [(rep, name) for rep in range(reps) for name in rotation(list(names), rep)]


def median(values: Iterable[float]) -> Optional[float]:
    values = list(values)
    return statistics.median(values) if values else None


# --- rows and summaries ------------------------------------------------------

def new_row(role: str, **info: Any) -> dict:
    if role not in ROLES:
        raise ValueError(f"role {role!r} is none of {ROLES}")
    return dict(info, role=role, reps=[])


def row_stats(row: dict, nbytes: int) -> dict:
    """A row's figures, from its raw repetitions alone."""
    reps = row["reps"]
    errors = [r["error"] for r in reps if r.get("error")]
    ok = [r for r in reps if not r.get("error")]
    firsts = [r["first_s"] for r in ok if r.get("first_s") is not None]
    steadies = [median(r["steady_s"]) for r in ok if r.get("steady_s")]
    checks = [r.get("exact") for r in ok]
    if any(c is False for c in checks):
        exact: Optional[bool] = False
    elif checks and all(c is True for c in checks):
        exact = True
    else:
        exact = None  # not checked (a floor), or nothing ran
    first_s, steady_s = median(firsts), median(steadies)
    return {
        "first_s": first_s, "steady_s": steady_s,
        "first_GBps": nbytes / 1e9 / first_s if first_s else None,
        "steady_GBps": nbytes / 1e9 / steady_s if steady_s else None,
        "exact": exact, "errors": errors, "reps_ok": len(ok), "reps_run": len(reps),
    }


def exclusion(row: dict, stats: dict, reps_wanted: int) -> Optional[str]:
    """Why a row cannot stand for its loader (None: it can)."""
    if stats["errors"]:
        return f"failed in {len(stats['errors'])} of {stats['reps_run']} reps: " \
               f"{stats['errors'][0]}"
    if stats["exact"] is False:
        return "inexact: a load differed from safetensors' digest"
    if row["role"] in ("ours", "peer") and stats["exact"] is not True:
        return "unchecked: no load was compared with the digest"
    if stats["reps_ok"] < reps_wanted:
        return f"{stats['reps_ok']} of {reps_wanted} reps"
    return None


def summarize_cell(cell: dict) -> dict:
    """A cell's summary, a pure function of cell["bytes"], cell["reps"]
    and cell["rows"]: svmbatch's row against the best peer row, for the
    first load and (where the cell has steady loads) the steady load.  Each
    ratio names the rows it divides: ratio = den's median seconds / num's
    median seconds (= num's GB/s / den's GB/s)."""
    nbytes, want = cell["bytes"], cell["reps"]
    stats = {name: row_stats(row, nbytes) for name, row in cell["rows"].items()}
    excluded = {}
    for name, row in cell["rows"].items():
        why = exclusion(row, stats[name], want)
        if why and row["role"] in ("ours", "peer"):
            excluded[name] = why
    candidates = sorted(n for n, r in cell["rows"].items()
                        if r["role"] == "peer" and n not in excluded)
    ours = cell.get("ours", "svmbatch")
    out: dict[str, Any] = {"ours": ours, "ours_status": excluded.get(ours, "ok"),
                           "candidates": candidates, "excluded": excluded}
    for what in ("first", "steady"):
        key = f"{what}_s"
        timed = [n for n in candidates if stats[n][key] is not None]
        if not timed and stats.get(ours, {}).get(key) is None:
            continue
        best = min(timed, key=lambda n: (stats[n][key], n)) if timed else None
        mine = stats[ours][key] if ours in stats and ours not in excluded else None
        out[what] = {
            f"ratio_{what}": stats[best][key] / mine if best and mine else None,
            "num": ours, "den": best,
            "num_s": mine, "den_s": stats[best][key] if best else None,
            "num_GBps": nbytes / 1e9 / mine if mine else None,
            "den_GBps": stats[best][f"{what}_GBps"] if best else None,
        }
    return out


def finish_cell(cell: dict) -> dict:
    """Write each row's figures and the cell's summary into the cell."""
    for row in cell["rows"].values():
        row.update(row_stats(row, cell["bytes"]))
    cell["summary"] = summarize_cell(cell)
    return cell["summary"]


def recompute(doc: dict) -> dict:
    """Every cell's summary recomputed from its rows (for the checker)."""
    return {name: summarize_cell(cell) for name, cell in doc.get("cells", {}).items()}


def ours_failures(doc: dict) -> list:
    """Rows of ours that failed or loaded inexactly: each makes the
    benchmark's exit status non-zero."""
    bad = []
    for cname, cell in doc.get("cells", {}).items():
        for name, row in cell["rows"].items():
            if row["role"] != "ours":
                continue
            st = row_stats(row, cell["bytes"])
            if st["errors"] or st["exact"] is False or (st["reps_run"] and st["exact"] is None):
                bad.append(f"{cname}/{name}: " + (st["errors"][0] if st["errors"] else
                                                  "inexact" if st["exact"] is False
                                                  else "unchecked"))
    return bad


def exit_status(doc: dict) -> int:
    return 1 if ours_failures(doc) else 0


def write_json(doc: dict, path: Optional[str]) -> None:
    """Atomically (a reader never sees half a file)."""
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


# --- digests ------------------------------------------------------------

_WEIGHTS: dict = {}
DIGEST_ROW = 1 << 20


def digest(tensors: dict) -> str:
    """One string for a dict of tensors: names, dtypes, shapes, devices and
    every byte (a position-weighted sum per MiB, computed where the tensors
    are, one transfer to the host)."""
    import torch
    names = sorted(tensors)
    meta = [[n, str(tensors[n].dtype).replace("torch.", ""), list(tensors[n].shape),
             tensors[n].device.type] for n in names]
    flat = [tensors[n].detach().contiguous().reshape(-1).view(torch.uint8) for n in names]
    flat = [t for t in flat if t.numel()]
    sums: list = []
    total = sum(t.numel() for t in flat)
    if flat:
        dev = flat[0].device
        weights = _WEIGHTS.get(dev)
        if weights is None:
            weights = (torch.arange(DIGEST_ROW, device=dev, dtype=torch.int32) % 251 + 1)
            _WEIGHTS[dev] = weights
        whole = torch.cat(flat)
        del flat
        pad = -whole.numel() % DIGEST_ROW
        if pad:
            whole = torch.cat([whole, torch.zeros(pad, dtype=torch.uint8, device=whole.device)])
        rows = whole.view(-1, DIGEST_ROW)
        parts = []
        for i in range(0, rows.shape[0], 256):
            block = rows[i:i + 256].to(torch.int32)
            parts.append((block * weights).sum(dim=1, dtype=torch.int64))
        sums = torch.cat(parts).cpu().tolist()
        del whole, rows, parts
    h = hashlib.sha256(json.dumps([meta, total, sums]).encode())
    return f"sha256:{h.hexdigest()}:{len(names)}t:{total}B"


# --- fresh processes -------------------------------------------------------

def _child_entry(conn: Any, target: str, spec: dict) -> None:
    """In the child: run module:function(spec), send its result (a dict)
    or the exception as {"error": ...}."""
    try:
        module, func = target.split(":")
        result = getattr(importlib.import_module(module), func)(spec)
    except BaseException as e:  # noqa: BLE001 - every failure is a row's error
        result = {"error": f"{type(e).__name__}: {e}"[:600]}
    try:
        conn.send(result)
    finally:
        conn.close()


class FreshProcesses:
    """Runs each job in a fresh process, forked from a server that imported
    only the modules of preload (torch: the same for every loader, and not
    initialised: no CUDA context crosses the fork)."""

    def __init__(self, preload: Iterable[str] = ("torch",), paths: Iterable[str] = ()):
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(list(preload))
        for p in paths:  # the child imports target modules from here
            if p not in sys.path:
                sys.path.insert(0, p)

    def run(self, target: str, spec: dict, timeout: float = 900) -> dict:
        recv, send = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_child_entry, args=(send, target, spec))
        proc.start()
        send.close()
        result = None
        try:
            if recv.poll(timeout):
                result = recv.recv()
        except (EOFError, OSError):
            result = None
        finally:
            recv.close()
        proc.join(30 if result is not None else 1)
        if proc.is_alive():
            proc.kill()
            proc.join()
            if result is None:
                return {"error": f"timed out after {timeout:.0f} s"}
        if result is None:
            return {"error": f"the child died (exit code {proc.exitcode})"}
        return result


def run_reps(cell: dict, jobs: dict, runner: Callable[[str, int], dict],
             on_progress: Optional[Callable[[str, int, dict], None]] = None,
             before_each: Optional[Callable[[str], None]] = None) -> None:
    """The repetitions of one cell: for rep in range(cell["reps"]), every
    row of jobs in rotated order; runner(name, rep) returns the rep's raw
    result ({"first_s", "steady_s", "exact"} or {"error"}), appended to the
    row.  The order is kept in cell["order"]."""
    names = list(jobs)
    cell.setdefault("order", [])
    for rep in range(cell["reps"]):
        order = rotation(names, rep)
        cell["order"].append(order)
        for name in order:
            if before_each:
                before_each(name)
            t0 = time.perf_counter()
            result = runner(name, rep)
            result.setdefault("wall_s", time.perf_counter() - t0)
            cell["rows"][name]["reps"].append(result)
            if on_progress:
                on_progress(name, rep, result)
