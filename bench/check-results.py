#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check that the benchmark results and the figures quoted from them hold.

  bench/check-results.py [REPO]

Results (bench/results/*-h100-*.json and *-h100x<N>-*.json, the device
benchmarks' output):
- each names its benchmark, commit, date, machine, mode (kernel or
  userspace) and method, written by the benchmark itself;
- a latency (a p50/p99 member) is a measurement or absent (null or left
  out), never 0;
- a load marked cold carries no figure of a load with the cache full
  (first_load), and the torch benchmark's headline Arena speedup includes
  the Arena's creation;
- the pipeline's headline ratios are its own figures divided (like with
  like).

Figures (README.md, Documentation/*.rst but testing.rst): every file of
bench/results/ named exists, and in a section (README: a paragraph; rst:
between headings) that names result files, every decimal number and
every number with a unit (GB/s, M/s, x, us, ms), and every decimal number
in a table, is one of those files' numbers as shown (rounded to the
digits shown, in the unit shown).

Prints one line per problem and exits 1 if there is any.
"""

import json
import math
import os
import re
import sys

UNITS = {"GB/s": [1], "M/s": [1e-6], "×": [1], "µs": [1, 1e-3], "ms": [1, 1e3, 1e-3]}
NUM = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))?(?![\w.]*\d)\s*(GB/s|M/s|×|µs|ms)?")
RESULT_REF = re.compile(r"bench/results/([\w.-]+\.json)|``([\w.-]+-\d{4}-\d\d-\d\d[\w.-]*\.json)``")


def leaves(x):
    """Every number in a JSON value, strings' numbers included."""
    if isinstance(x, bool) or x is None:
        return
    if isinstance(x, (int, float)):
        yield float(x)
    elif isinstance(x, str):
        for m in re.findall(r"\d+(?:\.\d+)?", x):
            yield float(m)
    elif isinstance(x, dict):
        for v in x.values():
            yield from leaves(v)
    elif isinstance(x, list):
        for v in x:
            yield from leaves(v)


def members(x, path=""):
    """(path, key, value) of every member of every object in x."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield path, k, v
            yield from members(v, f"{path}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from members(v, f"{path}[{i}]")


def close(a, b, rel=1e-3):
    return a is not None and b is not None and math.isclose(a, b, rel_tol=rel, abs_tol=1e-3)


def check_result(name, r, problems):
    def bad(msg):
        problems.append(f"bench/results/{name}: {msg}")

    for key in ("benchmark", "commit", "date", "machine", "mode", "method"):
        if key not in r:
            bad(f"no {key!r}: results name what measured them, written by the benchmark")
    if "commit" in r and not re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?", str(r["commit"])):
        bad(f"commit {r['commit']!r} is not a commit")
    if "mode" in r and r["mode"] not in ("kernel", "userspace"):
        bad(f"mode {r['mode']!r} is neither kernel nor userspace")
    for path, key, value in members(r):
        if re.match(r"p\d+(_|$)", key) and value is not None and value == 0:
            bad(f"{path}.{key} is 0: a latency is measured or absent, never 0")
        if isinstance(value, dict) and value.get("cold") is True:
            for k in value:
                if "first_load" in k:
                    bad(f"{path}.{key}.{k}: a load with the cache full under \"cold\": true")
    if r.get("benchmark") == "torch":
        a = r.get("arena", {})
        want = (a.get("pin_memory_true_ms") or 0) / (a.get("arena_create_and_alloc_ms") or math.inf)
        if not close(a.get("speedup"), want):
            bad("arena.speedup is not pin_memory_true_ms / arena_create_and_alloc_ms")
        if not close(r.get("summary", {}).get("arena_speedup_with_creation"), a.get("speedup")):
            bad("summary.arena_speedup_with_creation is not arena.speedup")
    if r.get("benchmark") == "pipeline":
        for ratio, x, y in (
                ("read_pipeline_over_preadv16_pipeline", "read_pipeline_GBps",
                 "preadv16_pipeline_GBps"),
                ("write_pipeline_over_pwrite16_pipeline", "write_pipeline_GBps",
                 "pwrite16_pipeline_GBps"),
                ("read_over_preadv16", "reads_alone_GBps", "preadv16_GBps")):
            if ratio not in r or not r.get(y) or not close(r[ratio], r[x] / r[y], 1e-2):
                bad(f"{ratio} is not {x} / {y}")


def shown_as(value, text):
    """value, rounded to the digits of text, is text."""
    digits = len(text.split(".")[1]) if "." in text else 0
    return f"{value:.{digits}f}" == text


def sections(path, text):
    if path.endswith(".md"):
        return re.split(r"\n\s*\n", text)
    # rst: a heading is a line followed by a line of one repeated mark.
    out, cur = [], []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and re.fullmatch(r"([=\-~^])\1{2,}", nxt.strip()) and \
                not re.fullmatch(r"([=\-~^])\1{2,}.*", line.strip()):
            out.append("\n".join(cur))
            cur = []
        cur.append(line)
    out.append("\n".join(cur))
    return out


def table_spans(text):
    """(start, end) offsets of the rst simple tables in text."""
    spans = []
    border = re.compile(r"^=+( +=+)+ *$", re.M)
    marks = [m for m in border.finditer(text)]
    # A simple table has three borders: top, under the header, bottom.
    for i in range(0, len(marks) - 2, 3):
        spans.append((marks[i].start(), marks[i + 2].end()))
    return spans


def check_docs(root, results, problems):
    docs = [os.path.join(root, "README.md")] + sorted(
        os.path.join(root, "Documentation", f)
        for f in os.listdir(os.path.join(root, "Documentation"))
        if f.endswith(".rst") and f != "testing.rst")
    for doc in docs:
        rel = os.path.relpath(doc, root)
        for sec in sections(doc, open(doc, encoding="utf-8").read()):
            cited = {a or b for a, b in RESULT_REF.findall(sec)}
            for f in sorted(cited - set(results)):
                problems.append(f"{rel}: names bench/results/{f}, which does not exist")
            cited &= set(results)
            if not cited:
                continue
            values = [v for f in cited for v in results[f][1]]
            # Figures only: file names, dates and commits are not.
            body = re.sub(r"[\w./-]*\.json|\d{4}-\d\d-\d\d|``[^`]*``|`[^`]*`", " ", sec)
            tables = table_spans(body)
            for m in NUM.finditer(body):
                lo, hi, unit = m.group(1), m.group(2), m.group(3)
                # A number without a unit is a figure in a table's cell;
                # in prose it may be a version (6.12) or a count.
                if unit is None and ("." not in lo or
                                     not any(a <= m.start() < b for a, b in tables)):
                    continue
                for shown in [lo] + ([hi] if hi else []):
                    scales = UNITS.get(unit, [1])
                    if not any(shown_as(v * s, shown) for v in values for s in scales):
                        where = sec.strip().split("\n")[0][:50]
                        problems.append(
                            f"{rel}: {shown}{' ' + unit if unit else ''} (in \"{where}\") "
                            f"is in none of {', '.join(sorted(cited))}")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    rdir = os.path.join(root, "bench", "results")
    problems, results = [], {}
    for name in sorted(os.listdir(rdir)):
        if not name.endswith(".json"):
            continue
        try:
            r = json.load(open(os.path.join(rdir, name), encoding="utf-8"))
        except ValueError as e:
            problems.append(f"bench/results/{name}: not JSON: {e}")
            continue
        results[name] = (r, list(leaves(r)))
        if re.search(r"-h100(x\d+)?-", name):
            check_result(name, r, problems)
    check_docs(root, results, problems)
    for p in problems:
        print(p)
    print(f"check-results: {len(results)} result files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
