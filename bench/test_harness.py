# SPDX-License-Identifier: MIT
"""Host tests (CPU, no torch needed) of bench/harness.py and of the
loaders benchmark's checkpoint writer:

    /usr/bin/python3 -m pytest -q bench/test_harness.py
"""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import loaders_bench  # noqa: E402


def rep(first, steady=(), exact=True, error=None):
    r = {"first_s": first, "steady_s": list(steady), "exact": exact}
    if error:
        r = {"error": error}
    return r


def cell_of(rows, nbytes=10**9, reps=5):
    return {"bytes": nbytes, "reps": reps, "ours": "svmbatch", "rows": rows}


def row(role, reps):
    r = harness.new_row(role, loader="x")
    r["reps"] = list(reps)
    return r


def good(first, steady, role="peer"):
    return row(role, [rep(first, [steady]) for _ in range(5)])


# --- order and medians ------------------------------------------------------

def test_schedule_is_reps_outside_rotated_loaders_inside():
    names = ["a", "b", "c"]
    order = harness.schedule(names, 6)
    assert [r for r, _ in order] == [r for r in range(6) for _ in names]
    per_rep = [[n for r, n in order if r == k] for k in range(6)]
    assert per_rep[0] == ["a", "b", "c"] and per_rep[1] == ["b", "c", "a"]
    # Each loader in each position equally often.
    for pos in range(3):
        assert sorted(p[pos] for p in per_rep) == ["a", "a", "b", "b", "c", "c"]


def test_run_reps_records_the_rotated_order_and_every_result():
    cell = cell_of({"a": row("ours", []), "b": row("peer", [])}, reps=3)
    calls = []

    def runner(name, k):
        calls.append((k, name))
        return rep(1.0 + k, [0.5])
    harness.run_reps(cell, {"a": None, "b": None}, runner)
    assert calls == [(0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"), (2, "b")]
    assert cell["order"] == [["a", "b"], ["b", "a"], ["a", "b"]]
    assert [r["first_s"] for r in cell["rows"]["a"]["reps"]] == [1.0, 2.0, 3.0]


def test_row_figures_are_medians_of_the_raw_reps():
    r = row("peer", [rep(5.0, [5.0, 9.0, 2.0]), rep(1.0, [3.0]), rep(3.0, [4.0, 4.0]),
                     rep(2.0, [8.0]), rep(4.0, [0.5])])
    st = harness.row_stats(r, 2 * 10**9)
    assert st["first_s"] == 3.0          # median of 5, 1, 3, 2, 4
    assert st["steady_s"] == 4.0         # median of (5, 3, 4, 8, 0.5): medians of reps
    assert st["first_GBps"] == pytest.approx(2 / 3.0)


def test_fewer_than_five_reps_are_refused_unless_quick():
    with pytest.raises(SystemExit):
        harness.check_reps(4, quick=False)
    harness.check_reps(4, quick=True)
    harness.check_reps(5, quick=False)
    with pytest.raises(SystemExit):
        loaders_bench.parse_args(["--reps", "3"])
    assert loaders_bench.parse_args(["--reps", "3", "--quick"]).quick


# --- the summary ----------------------------------------------------------

def test_summary_is_a_pure_function_of_the_rows():
    rows = {"svmbatch": good(0.5, 0.25, "ours"), "p1": good(1.0, 0.5), "p2": good(0.8, 0.4)}
    cell = cell_of(rows)
    s = harness.finish_cell(cell)
    assert s["steady"] == {"ratio_steady": 0.4 / 0.25, "num": "svmbatch", "den": "p2",
                           "num_s": 0.25, "den_s": 0.4, "num_GBps": 4.0, "den_GBps": 2.5}
    assert s["first"]["ratio_first"] == 0.8 / 0.5
    # The figures written into the rows do not feed the summary: only the
    # raw reps do.
    cell["rows"]["p1"]["steady_s"] = 0.01
    assert harness.summarize_cell(cell) == s
    cell["rows"]["p1"]["reps"] = [rep(1.0, [0.1]) for _ in range(5)]
    assert harness.summarize_cell(cell)["steady"]["den"] == "p1"
    assert harness.recompute({"cells": {"c": cell}})["c"]["steady"]["ratio_steady"] == 0.1 / 0.25


def test_a_floor_or_a_diagnostic_is_never_the_best_peer():
    rows = {"svmbatch": good(0.5, 0.25, "ours"), "p": good(1.0, 0.5),
            "dd": row("floor", [rep(0.1, [], exact=None)] * 5),
            "diag": good(0.01, 0.01, "diagnostic")}
    s = harness.finish_cell(cell_of(rows))
    assert s["candidates"] == ["p"] and s["first"]["den"] == "p"


def test_a_failing_peer_is_recorded_and_excluded_visibly():
    bad = row("peer", [rep(0.1, [0.05])] * 4 + [rep(None, error="OSError: boom")])
    inexact = row("peer", [rep(0.1, [0.05], exact=False)] + [rep(0.1, [0.05])] * 4)
    rows = {"svmbatch": good(0.5, 0.25, "ours"), "bad": bad, "inexact": inexact,
            "p": good(1.0, 0.5)}
    cell = cell_of(rows)
    s = harness.finish_cell(cell)
    assert "OSError: boom" in s["excluded"]["bad"]
    assert "inexact" in s["excluded"]["inexact"]
    assert s["candidates"] == ["p"] and s["steady"]["den"] == "p"
    assert cell["rows"]["bad"]["errors"] == ["OSError: boom"]
    assert cell["rows"]["inexact"]["exact"] is False
    assert harness.exit_status({"cells": {"c": cell}}) == 0  # a peer's failure is not ours


def test_a_cold_cell_has_first_loads_only():
    rows = {"svmbatch": row("ours", [rep(2.0)] * 5), "p": row("peer", [rep(3.0)] * 5)}
    s = harness.finish_cell(cell_of(rows))
    assert "steady" not in s and s["first"]["ratio_first"] == 1.5


# --- the exit status ---------------------------------------------------------

@pytest.mark.parametrize("ours_reps, status", [
    ([rep(0.5, [0.25])] * 5, 0),
    ([rep(0.5, [0.25], exact=False)] + [rep(0.5, [0.25])] * 4, 1),
    ([rep(0.5, [0.25])] * 4 + [rep(None, error="RuntimeError: x")], 1),
    ([rep(0.5, [0.25], exact=None)] * 5, 1),
])
def test_an_inexact_or_failed_svmbatch_load_makes_the_exit_status_non_zero(ours_reps, status):
    cell = cell_of({"svmbatch": row("ours", ours_reps), "p": good(1.0, 0.5)})
    harness.finish_cell(cell)
    assert harness.exit_status({"cells": {"c": cell}}) == status
    if status:
        assert cell["summary"]["ours_status"] != "ok"
        assert cell["summary"]["steady"]["ratio_steady"] is None


# --- metadata -------------------------------------------------------------

def test_the_commit_comes_from_the_tree(tmp_path):
    assert harness.tree_commit(tmp_path) == {"commit": "unknown", "commit_source": "none"}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f").write_text("x")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["add", "f"], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    assert harness.tree_commit(tmp_path) == {"commit": head, "commit_source": "git"}
    # The device run's stamp, from prepare-deps.sh, wins.
    stamp = tmp_path / "build" / "device-deps" / "COMMIT"
    stamp.parent.mkdir(parents=True)
    stamp.write_text("abc123-dirty\n")
    assert harness.tree_commit(tmp_path) == {"commit": "abc123-dirty",
                                             "commit_source": "build/device-deps/COMMIT"}


def test_metadata_names_the_machine_not_the_host():
    doc = harness.metadata("t", "m", {"reps": 5}, quick=True, mode="userspace")
    assert doc["schema"] == harness.SCHEMA and doc["quick"] is True
    assert doc["commit"] == harness.tree_commit()["commit"]
    m = doc["machine"]
    assert m["cpus"] and m["kernel"] and "gpus" in m and "packages" in m
    host = os.uname().nodename

    def strings(v):
        if isinstance(v, dict):
            return [k for k in v] + [s for x in v.values() for s in strings(x)]
        if isinstance(v, list):
            return [s for x in v for s in strings(x)]
        return [v] if isinstance(v, str) else []
    assert not [s for s in strings(m) if host in s.split() or "host" in s.lower()]


def test_the_loaders_benchmark_has_no_commit_flag():
    with pytest.raises(SystemExit):
        loaders_bench.parse_args(["--commit", "deadbeef"])


# --- fresh processes ---------------------------------------------------------

def job_ok(spec):
    return {"pid": os.getpid(), "x": spec["x"]}


def job_raises(spec):
    raise OSError("no such loader")


def job_dies(spec):
    os._exit(3)


def test_each_job_runs_in_a_fresh_process_and_failures_are_results():
    run = harness.FreshProcesses(preload=(), paths=(os.path.dirname(__file__),))
    a = run.run("test_harness:job_ok", {"x": 1}, 60)
    b = run.run("test_harness:job_ok", {"x": 2}, 60)
    assert a["x"] == 1 and b["x"] == 2 and a["pid"] != b["pid"] != os.getpid()
    assert run.run("test_harness:job_raises", {}, 60) == {"error": "OSError: no such loader"}
    assert "exit code 3" in run.run("test_harness:job_dies", {}, 60)["error"]


# --- the checkpoints ----------------------------------------------------------

def header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return n, json.loads(f.read(n))


def test_the_moe_checkpoint_is_many_fp8_tensors_with_scales(tmp_path):
    path, files, tensors = loaders_bench.write_checkpoint(str(tmp_path), "moe", 0.5, 3, 16)
    assert len(files) == 3 and path.endswith("model.safetensors.index.json")
    index = json.load(open(path))
    seen = {}
    for f in files:
        n, h = header(f)
        assert n % 8 == 0
        h.pop("__metadata__")
        end = 0
        for name, e in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"]):
            assert e["data_offsets"][0] == end  # packed, as safetensors writes
            end = e["data_offsets"][1]
            seen[name] = e
            assert index["weight_map"][name] == os.path.basename(f)
        assert os.path.getsize(f) == 8 + n + end
    assert len(seen) == tensors
    fp8 = [k for k, e in seen.items() if e["dtype"] == "F8_E4M3"]
    assert fp8 and all(1 << 20 <= loaders_bench.nbytes_of((k, seen[k]["shape"], "F8_E4M3"))
                       <= 3 << 20 for k in fp8)
    for k in fp8:
        assert seen[k[:-len("weight")] + "weight_scale"]["dtype"] == "F32"
        assert seen[k[:-len("weight")] + "input_scale"]["dtype"] == "F32"
    assert any(e["dtype"] == "BF16" for e in seen.values())


def test_a_4_gib_moe_checkpoint_has_over_ten_thousand_tensors():
    specs = loaders_bench.moe_specs(4, 64)
    assert len(specs) > 10000
    assert sum(map(loaders_bench.nbytes_of, specs)) == pytest.approx(4 << 30, rel=0.05)


def test_the_same_arguments_write_the_same_bytes(tmp_path):
    a = loaders_bench.write_checkpoint(str(tmp_path / "a"), "single", 0.01)[0]
    b = loaders_bench.write_checkpoint(str(tmp_path / "b"), "single", 0.01)[0]
    assert open(a, "rb").read() == open(b, "rb").read()
