#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check that the benchmark results and every figure quoted from them hold.

  bench/check-results.py [REPO]

Results (bench/results/):
- a file is what its benchmark wrote: its "commit" (less "-dirty") is an
  ancestor of, or the commit that added the file (HEAD for a file not
  yet committed), and no commit after that one changed it, nor does the
  working tree (git history is required: without it, a problem);
- a device result (<bench>-<gpu>[x<n>]-<date>[-<x>].json) names its
  benchmark, commit, date, machine, mode and method; a latency (p50,
  p99...) is measured or absent, never 0; a load marked cold carries no
  figure of a load with the cache full;
- a summary, ratio or median that the file's own rows determine equals
  what they give (relative 1e-3, or the digits stored).

Figures (README.md, Documentation/*.rst but testing.rst): see
Documentation/testing.rst.  A measured figure is
:result:`TEXT <FILE[+FILE...]:MEMBER[*K|/K]>` and must equal that member
(the median over the files) at the digits TEXT shows; a figure that is
no measurement is :given:`TEXT`.  A number with a unit (GB/s, M/s, x,
s, ms, us, GiB) and a decimal in a table, outside both, outside literals
and code blocks, is a problem.  README.md and index.rst quote no
:result: (what changes with every run stays out of them).

Prints one line per problem (file:line where there is one), and a
summary line; exits 1 if there is any problem.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

UNITS = ("GB/s", "M/s", "×", "GiB", "ms", "µs", "s")
_UNIT_RE = "|".join(re.escape(u) for u in UNITS)
# A number, maybe a range (1.04–1.06×: both ends are figures), then a unit
# (× right after the number: "2000 × 64 KiB" is a product, not a ratio).
NUM_UNIT = re.compile(
    r"(?<![\w.,/])(\d[\d,]*(?:\.\d+)?)"
    r"(?:\s*[-–]\s*(\d[\d,]*(?:\.\d+)?))?"
    rf"(?:×|\s?(?:{_UNIT_RE.replace('×|', '')}))(?![\w/])")
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.]*\d)")
ROLE = re.compile(r":(result|given):`([^`]*)`")
ANY_ROLE = re.compile(r":[\w:+.-]+:`[^`]*`")
FIGURE_TEXT = re.compile(rf"([-−]?\d[\d,]*(?:\.\d+)?)(?:\s?({_UNIT_RE}))?")
RESULT_NAME = re.compile(r"[\w.+-]+-\d{4}-\d\d-\d\d[\w.-]*\.json")
DEVICE_NAME = re.compile(
    r"(?P<bench>[a-z][a-z-]*?)-(?P<gpu>[a-z]+\d+)(?:x(?P<n>\d+))?"
    r"-(?P<date>\d{4}-\d\d-\d\d)(?:-(?P<x>[a-z0-9]+))?\.json")
CODE_DIRECTIVES = {"code-block", "code", "sourcecode", "literalinclude",
                   "highlight", "raw", "math"}
TABLE_DIRECTIVES = {"list-table", "csv-table", "table"}
NO_RESULT_DOCS = {"README.md", "Documentation/index.rst"}


@dataclass
class Figure:
    """One role in a document."""

    doc: str
    line: int
    role: str  # "result" or "given"
    text: str
    ref: str | None
    start: int  # offset of the role in the document
    end: int


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    # benchmark -> member paths that were recomputed from the rows
    recomputed: dict[str, set[str]] = field(default_factory=dict)
    # (file, member path) of each stored figure compared with its rows
    compared: list[tuple[str, str]] = field(default_factory=list)

    def add(self, msg: str) -> None:
        self.problems.append(msg)


# --------------------------------------------------------------------------
# References into result files


class RefError(Exception):
    pass


_SEGMENT = re.compile(r"([^.\[\]]+)?((?:\[[^\]]*\])*)")


def _match(member: Any, want: str) -> bool:
    if isinstance(member, bool):
        return want.lower() == str(member).lower()
    if isinstance(member, (int, float)):
        try:
            return float(want) == member
        except ValueError:
            return False
    return str(member) == want


def resolve(doc: Any, member: str) -> Any:
    """The value at MEMBER (a.b[0].c[k=v,k2=v2]) of a JSON value."""
    if not member:
        raise RefError("no member")
    cur = doc
    for part in member.split("."):
        m = _SEGMENT.fullmatch(part)
        if not m or not (m.group(1) or m.group(2)):
            raise RefError(f"bad member segment {part!r}")
        key, brackets = m.group(1), m.group(2)
        if key is not None:
            if not isinstance(cur, dict) or key not in cur:
                raise RefError(f"no {key!r}")
            cur = cur[key]
        for sel in re.findall(r"\[([^\]]*)\]", brackets):
            if not isinstance(cur, list):
                raise RefError(f"[{sel}] of a non-list")
            if re.fullmatch(r"-?\d+", sel):
                i = int(sel)
                if not -len(cur) <= i < len(cur):
                    raise RefError(f"[{sel}] out of {len(cur)}")
                cur = cur[i]
                continue
            conds = []
            for c in sel.split(","):
                if "=" not in c:
                    raise RefError(f"bad selector [{sel}]")
                k, v = c.split("=", 1)
                conds.append((k.strip(), v.strip()))
            hits = [e for e in cur if isinstance(e, dict) and
                    all(k in e and _match(e[k], v) for k, v in conds)]
            if len(hits) != 1:
                raise RefError(f"[{sel}] matches {len(hits)} elements, not one")
            cur = hits[0]
    return cur


def ref_value(ref: str, results: dict[str, Any]) -> tuple[float, list[str], str]:
    """(value, files, member) of FILE[+FILE]:MEMBER[*K|/K]; the median over files."""
    if ":" not in ref:
        raise RefError("no FILE:MEMBER")
    files_part, member = ref.split(":", 1)
    scale = 1.0
    m = re.fullmatch(r"(.*?)([*/])(\d+(?:\.\d+)?(?:e[-+]?\d+)?)", member)
    if m:
        member = m.group(1)
        k = float(m.group(3))
        scale = k if m.group(2) == "*" else 1 / k
    files = [f.strip() for f in files_part.split("+")]
    values = []
    for f in files:
        if "/" in f:
            raise RefError(f"{f}: a file name in bench/results/, no directory")
        if f not in results:
            raise RefError(f"no bench/results/{f}")
        if results[f] is None:
            raise RefError(f"bench/results/{f} is not JSON")
        try:
            v = resolve(results[f], member)
        except RefError as e:
            raise RefError(f"{f}:{member}: {e}") from None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise RefError(f"{f}:{member} is {v!r}, not a number")
        values.append(float(v))
    return statistics.median(values) * scale, files, member


def shown_as(value: float, shown: str) -> bool:
    """value, rounded to the digits shown, is what is shown."""
    shown = shown.replace("−", "-")
    digits = len(shown.split(".")[1]) if "." in shown else 0
    if "," in shown:
        return f"{value:,.{digits}f}" == shown
    return f"{value:.{digits}f}" == shown


# A member's unit, from its name, and the unit's size in its kind.
_MEMBER_UNITS = ((re.compile(r"(^|_)GBps$"), "GB/s"), (re.compile(r"(^|_)us$"), "µs"),
                 (re.compile(r"(^|_)ms$"), "ms"), (re.compile(r"(^|_)s$"), "s"))
_TIME = {"s": 1.0, "ms": 1e-3, "µs": 1e-6}


def unit_problem(member: str, unit: str | None, ref: str) -> str | None:
    """Why a figure in UNIT cannot be MEMBER as REF scales it, or None."""
    last = re.sub(r"\[[^\]]*\]", "", member.split(".")[-1])
    m_unit = next((u for r, u in _MEMBER_UNITS if r.search(last)), None)
    if m_unit is None or unit is None:
        return None
    sm = re.search(r"([*/])(\d+(?:\.\d+)?(?:e[-+]?\d+)?)$", ref)
    scale = 1.0 if not sm else (float(sm.group(2)) if sm.group(1) == "*"
                                else 1 / float(sm.group(2)))
    if m_unit in _TIME and unit in _TIME:
        want = _TIME[m_unit] / _TIME[unit]
        if not math.isclose(scale, want, rel_tol=1e-9):
            return f"{last} is in {m_unit}: shown in {unit} it needs a scale of {want:g}"
        return None
    if m_unit != unit:
        return f"{last} is in {m_unit}, not {unit}"
    return None


# --------------------------------------------------------------------------
# Documents


def _blank(s: str) -> str:
    return re.sub(r"[^\n]", " ", s)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block_end(lines: list[str], i: int, base: int) -> int:
    """The index after the block indented deeper than base after line i."""
    j = i + 1
    while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
        j += 1
    # Trailing blank lines belong to what follows.
    while j > i + 1 and not lines[j - 1].strip():
        j -= 1
    return j


def rst_regions(text: str) -> tuple[list[bool], list[bool]]:
    """(code, table) flags per line of an rst document."""
    lines = text.split("\n")
    code = [False] * len(lines)
    table = [False] * len(lines)
    i = 0
    while i < len(lines):
        line = lines[i]
        base = _indent(line)
        d = re.match(r"\s*\.\.\s+([\w:-]+)::", line)
        if d:
            name = d.group(1).split(":")[-1]
            end = _block_end(lines, i, base)
            if name in CODE_DIRECTIVES:
                for k in range(i, end):
                    code[k] = True
            elif name in TABLE_DIRECTIVES:
                for k in range(i, end):
                    table[k] = True
            i += 1
            continue
        if re.match(r"\s*\.\.(\s|$)", line):
            # A comment, a link target or a substitution: not shown as prose.
            end = _block_end(lines, i, base)
            for k in range(i, end):
                code[k] = True
            i = end
            continue
        if line.rstrip().endswith("::") and not code[i]:
            # The paragraph's literal block follows, indented.
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and _indent(lines[j]) > base:
                end = _block_end(lines, i, base)
                for k in range(i + 1, end):
                    code[k] = True
                i = end
                continue
        i += 1
    # Simple tables: a border of ='s (two columns or more) opens one, and
    # a border followed by a blank line (or the end) closes it.
    border = re.compile(r"\s*=+( +=+)+\s*$")
    i = 0
    while i < len(lines):
        if border.match(lines[i]) and not code[i]:
            j = i + 1
            while j < len(lines):
                if border.match(lines[j]) and (j + 1 == len(lines) or not lines[j + 1].strip()):
                    break
                j += 1
            for k in range(i, min(j + 1, len(lines))):
                table[k] = True
            i = j + 1
            continue
        i += 1
    # Grid tables: a block of lines that start with + or |, opened by +-.
    i = 0
    while i < len(lines):
        if re.match(r"\s*\+[-=]", lines[i]) and not code[i]:
            j = i
            while j < len(lines) and re.match(r"\s*[+|]", lines[j]):
                table[j] = True
                j += 1
            i = j
            continue
        i += 1
    return code, table


def md_regions(text: str) -> tuple[list[bool], list[bool]]:
    """(code, table) flags per line of a Markdown document."""
    lines = text.split("\n")
    code = [False] * len(lines)
    table = [False] * len(lines)
    fenced = False
    for i, line in enumerate(lines):
        if re.match(r"\s*(```|~~~)", line):
            code[i] = True
            fenced = not fenced
            continue
        code[i] = fenced or bool(re.match(r"( {4}|\t)", line) and i > 0 and
                                 (code[i - 1] or not lines[i - 1].strip()) and
                                 not re.match(r"\s*([-*+]|\d+\.)\s", line))
        table[i] = not fenced and line.lstrip().startswith("|")
    return code, table


_line_starts: tuple[str, list[int]] = ("", [])


def line_of(text: str, offset: int) -> int:
    global _line_starts
    if _line_starts[0] is not text:
        _line_starts = (text, [m.end() for m in re.finditer("\n", text)])
    return bisect.bisect_right(_line_starts[1], offset) + 1


def scan_doc(rel: str, text: str, report: Report) -> None:
    """Collect the roles of one document and report its bare figures."""
    md = rel.endswith(".md")
    code, table = (md_regions if md else rst_regions)(text)
    # The text a reader sees as prose: code blocks and literals blanked.
    lines = text.split("\n")
    masked = "\n".join(_blank(l) if code[i] else l for i, l in enumerate(lines))
    if md:
        masked = re.sub(r"`[^`\n]*`", lambda m: _blank(m.group()), masked)
    else:
        masked = re.sub(r"``.+?``", lambda m: _blank(m.group()), masked, flags=re.S)
        for m in ROLE.finditer(masked):
            role, body = m.group(1), m.group(2)
            ref = None
            shown = body
            rm = re.fullmatch(r"(.*?)\s*<([^<>]*)>\s*", body, re.S)
            if rm:
                shown, ref = rm.group(1), rm.group(2).strip()
            report.figures.append(Figure(rel, line_of(text, m.start()), role,
                                         shown.strip(), ref, m.start(), m.end()))
        masked = ANY_ROLE.sub(lambda m: _blank(m.group()), masked)
        # A hyperlink's target is no figure.
        masked = re.sub(r"<[a-z]+://[^>]*>", lambda m: _blank(m.group()), masked)
    if ":result:`" in masked or ":given:`" in masked:
        i = max(masked.find(":result:`"), masked.find(":given:`"))
        report.add(f"{rel}:{line_of(text, i)}: a figure role that is not closed")
    for m in NUM_UNIT.finditer(masked):
        shown = m.group(0).strip()
        report.add(f"{rel}:{line_of(text, m.start())}: {shown!r} is a figure "
                   "outside :result: and :given:")
    for m in DECIMAL.finditer(masked):
        ln = line_of(text, m.start())
        if table[ln - 1] and not NUM_UNIT.match(masked, m.start()):
            report.add(f"{rel}:{ln}: {m.group()!r}, a decimal in a table, is outside "
                       ":result: and :given:")


def check_figure(fig: Figure, results: dict[str, Any], report: Report) -> None:
    where = f"{fig.doc}:{fig.line}"
    if fig.role == "given":
        if not fig.text:
            report.add(f"{where}: an empty :given:")
        return
    if fig.doc in NO_RESULT_DOCS:
        report.add(f"{where}: {fig.text!r}: {fig.doc} quotes no measured figure "
                   "(a figure of a run changes with every run)")
        return
    if fig.ref is None:
        report.add(f"{where}: :result:`{fig.text}` names no FILE:MEMBER")
        return
    m = FIGURE_TEXT.fullmatch(fig.text)
    if not m:
        report.add(f"{where}: :result: text {fig.text!r} is not a number and one of "
                   f"the units {', '.join(UNITS)}")
        return
    shown, unit = m.group(1), m.group(2)
    try:
        value, _, member = ref_value(fig.ref, results)
    except RefError as e:
        report.add(f"{where}: {fig.text!r}: {e}")
        return
    why = unit_problem(member, unit, fig.ref)
    if why:
        report.add(f"{where}: {fig.text!r}: {why}")
    if not shown_as(value, shown):
        digits = len(shown.split(".")[1]) if "." in shown else 0
        report.add(f"{where}: {fig.text!r} is not {fig.ref} "
                   f"({value:.{digits}f}, {value!r})")


def doc_paths(root: str) -> list[str]:
    docs = os.path.join(root, "Documentation")
    return ["README.md"] + sorted(
        f"Documentation/{f}" for f in os.listdir(docs)
        if f.endswith(".rst") and f != "testing.rst")


def check_doc(rel: str, text: str, results: dict[str, Any], report: Report) -> None:
    """One document's figures, and the result files it names."""
    first = len(report.figures)
    scan_doc(rel, text, report)
    for fig in report.figures[first:]:
        check_figure(fig, results, report)
    starts = [f.start for f in report.figures[first:]]
    ends = [f.end for f in report.figures[first:]]
    for m in RESULT_NAME.finditer(text):
        i = bisect.bisect_right(starts, m.start()) - 1
        if i >= 0 and m.start() < ends[i]:
            continue  # in a role: check_figure said so
        for name in m.group().split("+"):
            if name not in results and RESULT_NAME.fullmatch(name):
                report.add(f"{rel}:{line_of(text, m.start())}: names "
                           f"bench/results/{name}, which does not exist")


def check_docs(root: str, results: dict[str, Any], report: Report) -> None:
    for rel in doc_paths(root):
        path = os.path.join(root, rel)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                check_doc(rel, f.read(), results, report)


# --------------------------------------------------------------------------
# Result files: what a benchmark wrote, and what its rows give


def members(x: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of every member of every object in x."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield path, k, v
            yield from members(v, f"{path}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from members(v, f"{path}[{i}]")


def _decimals(x: float) -> int | None:
    """The digits a stored number was rounded to, if it looks rounded."""
    if isinstance(x, int):
        return 0
    s = repr(float(x))
    if "e" in s:
        return None
    d = len(s.split(".")[1])
    return d if d <= 6 else None


class Recompute:
    """Compares a file's stored figures with what its rows give."""

    def __init__(self, name: str, bench: str, report: Report):
        self.name, self.bench, self.report = name, bench, report

    def same(self, path: str, got: Any, want: Any, rel: float = 1e-3) -> None:
        key = re.sub(r"\[[^\]]*\]", "[]", path)
        self.report.recomputed.setdefault(self.bench, set()).add(key)
        self.report.compared.append((self.name, path))
        if want is None and got is None:
            return
        if isinstance(want, str) or isinstance(got, str) or got is None or want is None:
            if got != want:
                self.report.add(f"bench/results/{self.name}: {path} is {got!r}, "
                                f"its rows give {want!r}")
            return
        tol = abs(want) * rel
        d = _decimals(got)
        if d is not None:
            tol = max(tol, 0.5 * 10 ** -d * (1 + 1e-9))
        if not abs(got - want) <= tol + 1e-12:
            self.report.add(f"bench/results/{self.name}: {path} is {got!r}, "
                            f"its rows give {want!r}")


def _med(xs: Iterable[float]) -> float:
    return statistics.median(list(xs))


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def recompute_loaders(r: dict, rc: Recompute) -> None:
    """Cells of loader rows: GB/s from seconds, medians, best peers, ratios.

    Two schemas: bench/harness.py's (a "harness" or "schema" member) and
    the first one (cells [{cell, bytes, loaders: {name: {first_s, steady_s}}}]).
    """
    if "harness" in r or "schema" in r:
        recompute_loaders_harness(r, rc)
        return
    for ci, cell in enumerate(r.get("cells", [])):
        where = f"cells[{ci}]"
        loaders = cell.get("loaders", {})
        size = cell.get("bytes")
        for name, row in loaders.items():
            if size and row.get("first_s"):
                rc.same(f"{where}.loaders.{name}.first_GBps", row.get("first_GBps"),
                        size / row["first_s"] / 1e9)
            if size and row.get("steady_s"):
                rc.same(f"{where}.loaders.{name}.steady_GBps", row.get("steady_GBps"),
                        size / _med(row["steady_s"]) / 1e9)
        summ = cell.get("summary", {})
        svm = loaders.get("svmbatch", {})
        peers = {n: row for n, row in loaders.items()
                 if not n.startswith("svmbatch") and row.get("exact") is not False}
        for kind in ("first", "steady"):
            rc.same(f"{where}.summary.svmbatch_{kind}_GBps",
                    summ.get(f"svmbatch_{kind}_GBps"), svm.get(f"{kind}_GBps"))
            rated = {n: row[f"{kind}_GBps"] for n, row in peers.items()
                     if row.get(f"{kind}_GBps") is not None}
            if not rated:
                continue
            best = max(rated, key=rated.get)
            rc.same(f"{where}.summary.best_peer_{kind}", summ.get(f"best_peer_{kind}"), best)
            rc.same(f"{where}.summary.best_peer_{kind}_GBps",
                    summ.get(f"best_peer_{kind}_GBps"), rated[best])
            rc.same(f"{where}.summary.ratio_{kind}", summ.get(f"ratio_{kind}"),
                    _ratio(svm.get(f"{kind}_GBps"), rated[best]))
        if cell.get("cell") and cell["cell"] in r.get("summary", {}):
            for k, v in summ.items():
                rc.same(f"summary.{cell['cell']}.{k}", r["summary"][cell["cell"]].get(k), v)
    cold = r.get("cold")
    if cold:
        size = cold.get("bytes")
        for name, row in cold.get("loaders", {}).items():
            if size and row.get("all_s"):
                rc.same(f"cold.loaders.{name}.GBps", row.get("GBps"),
                        size / _med(row["all_s"]) / 1e9)
        if size and cold.get("dd_direct_all_s"):
            rc.same("cold.dd_direct_GBps", cold.get("dd_direct_GBps"),
                    size / _med(cold["dd_direct_all_s"]) / 1e9)
        auto = cold.get("loaders", {}).get("svmbatch:io=auto", {}).get("GBps")
        rc.same("cold.svmbatch_auto_over_dd_direct", cold.get("svmbatch_auto_over_dd_direct"),
                _ratio(auto, cold.get("dd_direct_GBps")))
        s = r.get("summary", {}).get("cold")
        if s:
            rc.same("summary.cold.svmbatch_auto_GBps", s.get("svmbatch_auto_GBps"), auto)
            rc.same("summary.cold.dd_direct_GBps", s.get("dd_direct_GBps"),
                    cold.get("dd_direct_GBps"))
            rc.same("summary.cold.ratio", s.get("ratio"),
                    _ratio(auto, cold.get("dd_direct_GBps")))


def _same_tree(rc: Recompute, path: str, got: Any, want: Any) -> None:
    """Every leaf of want (a recomputed value) against got (the stored)."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            rc.same(path, got, "an object")
            return
        for k, v in want.items():
            _same_tree(rc, f"{path}.{k}" if path else k, got.get(k), v)
    elif isinstance(want, list):
        rc.same(path, json.dumps(got), json.dumps(want))
    else:
        rc.same(path, got, want)


def recompute_loaders_harness(r: dict, rc: Recompute) -> None:
    """A file of bench/harness.py (it has "schema" and "harness" members).

    Its rows keep every repetition, and each row's figures and each cell's
    summary are pure functions of them (harness.row_stats and
    harness.summarize_cell); they are recomputed with the harness beside
    this script and must equal what the file stores, in each cell and in
    the file's summary.  Assumed: cells is an object of cells, each with
    "bytes", "reps" and "rows" (an object of rows with "role" and "reps").
    """
    harness = _load_harness()
    for cname, cell in (r.get("cells") or {}).items():
        if not isinstance(cell, dict) or "rows" not in cell:
            continue  # a cell the run could not measure says why instead
        where = f"cells.{cname}"
        for rname, row in cell["rows"].items():
            stats = harness.row_stats(row, cell["bytes"])
            _same_tree(rc, f"{where}.rows.{rname}", row,
                       {k: v for k, v in stats.items() if k in row})
        if "summary" not in cell and any(len(row.get("reps", [])) < cell["reps"]
                                         for row in cell["rows"].values()):
            # The run ended inside this cell (killed at its time limit):
            # it has no summary, so nothing of it can be cited as one.
            continue
        summary = harness.summarize_cell(cell)
        _same_tree(rc, f"{where}.summary", cell.get("summary"), summary)
        if cname in (r.get("summary") or {}):
            _same_tree(rc, f"summary.{cname}", r["summary"][cname], summary)


_harness_module: Any = None


def _load_harness() -> Any:
    global _harness_module
    if _harness_module is None:
        import importlib.util
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "harness.py")
        spec = importlib.util.spec_from_file_location("svmbatch_bench_harness", path)
        if spec is None or spec.loader is None:
            raise ValueError(f"no {path}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        _harness_module = mod
    return _harness_module


def recompute_gpu_io(r: dict, rc: Recompute) -> None:
    """Medians of the reps, ratios to the host pipeline, the summary."""
    rows = r.get("results", [])
    for i, row in enumerate(rows):
        for variant, v in row.items():
            if not isinstance(v, dict):
                continue
            if isinstance(v.get("GBps"), list) and "median_GBps" in v:
                rc.same(f"results[{i}].{variant}.median_GBps", v["median_GBps"],
                        _med(v["GBps"]))
            if isinstance(v.get("requests_per_s"), list) and "median_requests_per_s" in v:
                rc.same(f"results[{i}].{variant}.median_requests_per_s",
                        v["median_requests_per_s"], _med(v["requests_per_s"]))
        for ratio, num, den in (("loop_over_host", "loop", "host_pipeline"),
                                ("loop_device_over_host", "loop_device", "host_pipeline"),
                                ("loop_over_host", "write_loop", "write_host_pipeline")):
            if ratio in row and num in row and den in row:
                rc.same(f"results[{i}].{ratio}", row[ratio],
                        _ratio(_med(row[num]["GBps"]), _med(row[den]["GBps"])))
    s = r.get("summary")
    if not s:
        return
    mib = [row for row in rows if row.get("request_bytes") == 1 << 20 and "host_pipeline" in row]
    if mib:
        row = mib[0]
        host = _med(row["host_pipeline"]["GBps"])
        rc.same("summary.host_pipeline_1MiB_GBps", s.get("host_pipeline_1MiB_GBps"), host)
        # Before loop_1MiB_path, the loop's figures were the warps' copy.
        device = "loop_device" in row and s.get("loop_1MiB_path") == "device reads"
        path = row["loop_device" if device else "loop"]
        if "loop_1MiB_GBps" in s:
            rc.same("summary.loop_1MiB_GBps", s["loop_1MiB_GBps"], _med(path["GBps"]))
        if "loop_over_host_1MiB" in s:
            rc.same("summary.loop_over_host_1MiB", s["loop_over_host_1MiB"],
                    _med(path["GBps"]) / host)
        if "loop_device" in row and s.get("loop_device_over_host_1MiB") is not None:
            rc.same("summary.loop_device_over_host_1MiB", s["loop_device_over_host_1MiB"],
                    _med(row["loop_device"]["GBps"]) / host)
        for key, variant in (("loop_warp_copy_over_host_1MiB", "loop"),
                             ("loop_no_copy_over_host_1MiB", "loop_no_copy")):
            if key in s and variant in row:
                rc.same(f"summary.{key}", s[key], _med(row[variant]["GBps"]) / host)
    writes = [row for row in rows if "write_loop" in row]
    if writes:
        rc.same("summary.write_1MiB_GBps", s.get("write_1MiB_GBps"),
                _med(writes[0]["write_loop"]["GBps"]))
        rc.same("summary.host_write_1MiB_GBps", s.get("host_write_1MiB_GBps"),
                _med(writes[0]["write_host_pipeline"]["GBps"]))
    one = [row for row in rows if "one_request_in_flight" in row]
    if one and "one_request_p50_us" in s:
        rc.same("summary.one_request_p50_us", s["one_request_p50_us"],
                one[-1]["one_request_in_flight"].get("p50_us"))
        rc.same("summary.one_request_p99_us", s.get("one_request_p99_us"),
                one[-1]["one_request_in_flight"].get("p99_us"))
        tmpfs = [row for row in one if row.get("file_system") == "tmpfs"]
        if tmpfs and "one_request_tmpfs_p50_us" in s:
            rc.same("summary.one_request_tmpfs_p50_us", s["one_request_tmpfs_p50_us"],
                    tmpfs[0]["one_request_in_flight"].get("p50_us"))
            rc.same("summary.one_request_tmpfs_p99_us", s.get("one_request_tmpfs_p99_us"),
                    tmpfs[0]["one_request_in_flight"].get("p99_us"))
    ce = r.get("copy_engine")
    if ce and "h2d_GBps_idle" in s:
        idle = [c for c in ce if c.get("blocks") == 0]
        if idle:
            rc.same("summary.h2d_GBps_idle", s["h2d_GBps_idle"], idle[0]["GBps"])
        busy = [c for c in ce if c.get("blocks") == r.get("sms") and
                c.get("warps") == r.get("warps_per_block") and c.get("polled_line", "own") == "own"]
        if busy:
            rc.same("summary.h2d_GBps_beside_the_kernel", s.get("h2d_GBps_beside_the_kernel"),
                    busy[0]["GBps"])
    if "pump_idle" in r and "pump_idle_cpu_percent" in s:
        rc.same("summary.pump_idle_cpu_percent", s["pump_idle_cpu_percent"],
                r["pump_idle"].get("cpu_percent_of_a_core"))
    if "errors" in s:
        errors = sum(v.get("errors", 0) for row in rows for v in row.values()
                     if isinstance(v, dict) and isinstance(v.get("errors"), int))
        rc.same("summary.errors", s["errors"], errors)


def recompute_distributed(r: dict, rc: Recompute) -> None:
    """Medians of the times, each layout's summary against its rows."""
    results = r.get("results", {})
    for layout, loaders in results.items():
        for name, row in loaders.items():
            if isinstance(row, dict) and row.get("times_s") and "median_s" in row:
                rc.same(f"results.{layout}.{name}.median_s", row["median_s"],
                        _med(row["times_s"]))
        s = r.get("summary", {}).get(layout)
        if not s:
            continue
        svm = loaders.get("svmbatch", {}).get("median_s")
        single = loaders.get("single", {}).get("median_s")
        rc.same(f"summary.{layout}.svmbatch_s", s.get("svmbatch_s"), svm)
        if "single_s" in s:
            rc.same(f"summary.{layout}.single_s", s["single_s"], single)
            rc.same(f"summary.{layout}.vs_single", s.get("vs_single"), _ratio(single, svm))
        peers = {n: row["median_s"] for n, row in loaders.items()
                 if not n.startswith("svmbatch") and n not in ("single", "share")
                 and isinstance(row, dict)
                 and row.get("median_s") is not None and row.get("exact") is not False}
        if peers and "best_peer" in s:
            best = min(peers, key=peers.get)
            rc.same(f"summary.{layout}.best_peer", s["best_peer"], best)
            rc.same(f"summary.{layout}.best_peer_s", s.get("best_peer_s"), peers[best])
            rc.same(f"summary.{layout}.vs_best_peer", s.get("vs_best_peer"),
                    _ratio(peers[best], svm))


def recompute_cuda(r: dict, rc: Recompute) -> None:
    """The mapping rows' per-buffer costs and speedups, the pipeline's ratio."""
    for i, row in enumerate(r.get("mapping", [])):
        if row.get("lib_us_per_buffer") and row.get("loop_us_per_buffer"):
            rc.same(f"mapping[{i}].speedup_loop_over_lib", row.get("speedup_loop_over_lib"),
                    row["loop_us_per_buffer"] / row["lib_us_per_buffer"])
        n = row.get("n")
        if n and row.get("loop_register_us") is not None and "loop_us_per_buffer" in row:
            rc.same(f"mapping[{i}].loop_us_per_buffer", row["loop_us_per_buffer"],
                    row["loop_register_us"] / n)
    p = r.get("pipeline")
    if p and p.get("pipeline_over_min") is not None:
        rc.same("pipeline.pipeline_over_min", p["pipeline_over_min"],
                p["pipeline_GBps"] / min(p["page_cache_read_GBps"], p["h2d_GBps"]))


def recompute_pipeline(r: dict, rc: Recompute) -> None:
    """The headline ratios, and each configuration's medians of its samples."""
    for ratio, x, y in (
            ("read_pipeline_over_preadv16_pipeline", "read_pipeline_GBps",
             "preadv16_pipeline_GBps"),
            ("write_pipeline_over_pwrite16_pipeline", "write_pipeline_GBps",
             "pwrite16_pipeline_GBps"),
            ("read_over_preadv16", "reads_alone_GBps", "preadv16_GBps")):
        if ratio in r:
            rc.same(ratio, r[ratio], _ratio(r.get(x), r.get(y)), rel=1e-2)
    for i, c in enumerate(r.get("configurations", [])):
        for key, val in c.items():
            m = re.fullmatch(r"(\w+)_samples", key)
            if m and val and f"{m.group(1)}_GBps" in c:
                rc.same(f"configurations[{i}].{m.group(1)}_GBps", c[f"{m.group(1)}_GBps"],
                        _med(val))


def recompute_torch(r: dict, rc: Recompute) -> None:
    """Pin and load medians, speedups, the Arena (creation included), summary."""
    for i, p in enumerate(r.get("pin", [])):
        a = p.get("all_ms", {})
        for key, run in (("svmbatch_pin_ms", "svmbatch"), ("cudaHostRegister_loop_ms", "loop"),
                         ("pin_memory_ms", "pin_memory")):
            if a.get(run) and key in p:
                rc.same(f"pin[{i}].{key}", p[key], _med(a[run]))
        if "speedup_vs_loop" in p:
            rc.same(f"pin[{i}].speedup_vs_loop", p["speedup_vs_loop"],
                    _ratio(p.get("cudaHostRegister_loop_ms"), p.get("svmbatch_pin_ms")))
        if "speedup_vs_pin_memory" in p:
            rc.same(f"pin[{i}].speedup_vs_pin_memory", p["speedup_vs_pin_memory"],
                    _ratio(p.get("pin_memory_ms"), p.get("svmbatch_pin_ms")))
    a = r.get("arena")
    if a:
        rc.same("arena.speedup", a.get("speedup"),
                _ratio(a.get("pin_memory_true_ms"), a.get("arena_create_and_alloc_ms")))
        if "speedup_alloc_only" in a:
            rc.same("arena.speedup_alloc_only", a["speedup_alloc_only"],
                    _ratio(a.get("pin_memory_true_ms"), a.get("arena_alloc_ms")))
        runs = a.get("all_ms", {})
        for key, run in (("arena_alloc_ms", "arena_alloc"), ("arena_create_ms", "arena_create"),
                         ("pin_memory_true_ms", "pin_memory_true")):
            if runs.get(run) and key in a:
                rc.same(f"arena.{key}", a[key], _med(runs[run]))
        if "summary" in r:
            rc.same("summary.arena_speedup_with_creation",
                    r["summary"].get("arena_speedup_with_creation"), a.get("speedup"))
    loads = list(enumerate(r.get("load", [])))
    for i, ld in loads + ([("cold", r["load_cold"])] if r.get("load_cold") else []):
        where = f"load[{i}]" if i != "cold" else "load_cold"
        runs = ld.get("all_GBps", {})
        for run in ("svmbatch", "safetensors_cuda", "cpu_load_then_to_cuda"):
            if runs.get(run) and f"{run}_GBps" in ld:
                rc.same(f"{where}.{run}_GBps", ld[f"{run}_GBps"], _med(runs[run]))
        if "speedup_vs_safetensors" in ld:
            rc.same(f"{where}.speedup_vs_safetensors", ld["speedup_vs_safetensors"],
                    _ratio(ld.get("svmbatch_GBps"), ld.get("safetensors_cuda_GBps")))
    s = r.get("summary", {})
    if loads and "load_GBps" in s:
        big = loads[0][1]  # the summary quotes the first checkpoint
        if big:
            rc.same("summary.load_GBps", s["load_GBps"], big.get("svmbatch_GBps"))
            rc.same("summary.safetensors_cuda_GBps", s.get("safetensors_cuda_GBps"),
                    big.get("safetensors_cuda_GBps"))
            rc.same("summary.load_speedup_vs_safetensors", s.get("load_speedup_vs_safetensors"),
                    big.get("speedup_vs_safetensors"))
            if "preadv16_GBps" in s:
                rc.same("summary.preadv16_GBps", s["preadv16_GBps"], big.get("preadv16_GBps"))
    if r.get("load_cold") and "cold_load_GBps" in s:
        rc.same("summary.cold_load_GBps", s["cold_load_GBps"], r["load_cold"].get("svmbatch_GBps"))
        rc.same("summary.cold_safetensors_cuda_GBps", s.get("cold_safetensors_cuda_GBps"),
                r["load_cold"].get("safetensors_cuda_GBps"))


def recompute_pool(r: dict, rc: Recompute) -> None:
    """Pin medians and floor, each way's medians over its runs, the summary."""
    for i, p in enumerate(r.get("pin", [])):
        if p.get("pin_all_ms"):
            rc.same(f"pin[{i}].pin_ms", p.get("pin_ms"), _med(p["pin_all_ms"]))
        if p.get("floor_all_ms"):
            rc.same(f"pin[{i}].floor_one_register_ms", p.get("floor_one_register_ms"),
                    _med(p["floor_all_ms"]))
        if "pin_over_floor" in p:
            rc.same(f"pin[{i}].pin_over_floor", p["pin_over_floor"],
                    _ratio(p.get("pin_ms"), p.get("floor_one_register_ms")))
    ways_by_gib = {}
    for i, pool in enumerate(r.get("pools", [])):
        ways_by_gib[pool.get("gib")] = pool.get("ways", {})
        for way, w in pool.get("ways", {}).items():
            runs = w.get("runs") or []
            for j, run in enumerate(runs):
                if run.get("h2d_all_GBps") and "h2d_GBps" in run:
                    rc.same(f"pools[{i}].ways.{way}.runs[{j}].h2d_GBps", run["h2d_GBps"],
                            _med(run["h2d_all_GBps"]))
            for key in ("ready_s", "h2d_GBps", "first_tensor_ms"):
                vals = [run[key] for run in runs if isinstance(run.get(key), (int, float))]
                if vals and key in w and len(vals) == len(runs):
                    rc.same(f"pools[{i}].ways.{way}.{key}", w[key], _med(vals))
    s = r.get("summary", {})

    def way(gib: int, name: str, key: str) -> float | None:
        return ways_by_gib.get(gib, {}).get(name, {}).get(key)

    for key, gib, name in (("arena_16_s", 16, "arena"), ("diy_16_s", 16, "diy"),
                           ("torch_16_s", 16, "torch"), ("arena_64_s", 64, "arena"),
                           ("diy_64_s", 64, "diy")):
        if key in s and way(gib, name, "ready_s") is not None:
            rc.same(f"summary.{key}", s[key], way(gib, name, "ready_s"))
    if "first_tensor_64_ms" in s and way(64, "arena_async", "first_tensor_ms") is not None:
        rc.same("summary.first_tensor_64_ms", s["first_tensor_64_ms"],
                way(64, "arena_async", "first_tensor_ms"))
    if "arena_over_diy_16" in s:
        rc.same("summary.arena_over_diy_16", s["arena_over_diy_16"],
                _ratio(way(16, "arena", "ready_s"), way(16, "diy", "ready_s")))
    if "arena_over_torch_16" in s:
        rc.same("summary.arena_over_torch_16", s["arena_over_torch_16"],
                _ratio(way(16, "arena", "ready_s"), way(16, "torch", "ready_s")))
    pins = r.get("pin", [])
    if pins and "pin_ms" in s:
        big = max(pins, key=lambda p: p.get("tensors", 0))
        rc.same("summary.pin_ms", s["pin_ms"], big.get("pin_ms"))
        rc.same("summary.pin_floor_ms", s.get("pin_floor_ms"), big.get("floor_one_register_ms"))
        rc.same("summary.pin_python_ms", s.get("pin_python_ms"), big.get("python_walk_ms"))


def recompute_kmod(r: dict, rc: Recompute) -> None:
    """Each row's ratios of its own times."""
    for i, row in enumerate(r.get("results", [])):
        for ratio, a, b in (("single_over_batch", "single_us", "batch_us"),
                            ("batch_over_io_uring", "batch_us", "io_uring_us"),
                            ("batch_over_floor", "batch_us", "gup_floor_us")):
            if ratio in row:
                rc.same(f"results[{i}].{ratio}", row[ratio], _ratio(row.get(a), row.get(b)))


def recompute_lib(r: dict, rc: Recompute) -> None:
    """Each row's library over raw io_uring."""
    for i, row in enumerate(r.get("results", [])):
        if "library_over_raw" in row:
            rc.same(f"results[{i}].library_over_raw", row["library_over_raw"],
                    _ratio(row.get("library_fixed_us"), row.get("raw_io_uring_us")))


RECOMPUTE: dict[str, Callable[[dict, Recompute], None]] = {
    "loaders": recompute_loaders, "gpu_io": recompute_gpu_io,
    "distributed": recompute_distributed, "cuda": recompute_cuda,
    "pipeline": recompute_pipeline, "torch": recompute_torch, "pool": recompute_pool,
    "kmod": recompute_kmod, "lib": recompute_lib,
}
# A file's benchmark when it names none the table knows: from its name.
BENCH_OF_PREFIX = {"gpu-io": "gpu_io", "multi-gpu": "distributed", "distributed": "distributed"}


def benchmark_of(name: str, r: dict) -> str:
    b = str(r.get("benchmark") or r.get("bench") or "")
    if b in RECOMPUTE:
        return b
    m = DEVICE_NAME.fullmatch(name)
    prefix = m.group("bench") if m else name.split("-")[0]
    return BENCH_OF_PREFIX.get(prefix, prefix)


def check_result(name: str, r: Any, report: Report) -> None:
    """The benchmark's own record: metadata, no 0 latency, cold loads, rows."""
    def bad(msg: str) -> None:
        report.add(f"bench/results/{name}: {msg}")

    if not isinstance(r, dict):
        bad("not a JSON object")
        return
    if DEVICE_NAME.fullmatch(name):
        for key in ("benchmark", "commit", "date", "machine", "mode", "method"):
            if key not in r:
                bad(f"no {key!r}: results name what measured them, written by the benchmark")
        if "mode" in r and r["mode"] not in ("kernel", "userspace"):
            bad(f"mode {r['mode']!r} is neither kernel nor userspace")
        for path, key, value in members(r):
            if re.match(r"p\d+(_|$)", key) and value is not None and value == 0:
                bad(f"{path}.{key} is 0: a latency is measured or absent, never 0")
            if isinstance(value, dict) and value.get("cold") is True:
                for k in value:
                    if "first_load" in k:
                        bad(f"{path}.{key}.{k}: a load with the cache full under \"cold\": true")
    bench = benchmark_of(name, r)
    fn = RECOMPUTE.get(bench)
    if ("harness" in r or "schema" in r) and isinstance(r.get("cells"), dict):
        fn = recompute_loaders_harness  # any benchmark of bench/harness.py
    if fn:
        try:
            fn(r, Recompute(name, bench, report))
        except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError,
                statistics.StatisticsError) as e:
            bad(f"its rows cannot be read as a {bench} result's: {type(e).__name__}: {e}")


# --------------------------------------------------------------------------
# History: a result is what its benchmark wrote


def _git(root: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True,
                          check=False)


def check_history(root: str, names: list[str], results: dict[str, Any],
                  report: Report) -> None:
    """Every file's commit precedes its adding; nothing changed it since."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top.returncode != 0 or not os.path.samefile(top.stdout.strip(), root):
        report.add(f"bench/results: {root} is not the top of a git work tree: "
                   "whether a result is what its benchmark wrote needs its history")
        return
    if _git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        report.add("bench/results: a shallow clone: whether a result is what its "
                   "benchmark wrote needs its whole history")
        return
    log = _git(root, "log", "--format=C %H", "--name-status", "--no-renames", "--",
               "bench/results")
    if log.returncode != 0:
        report.add(f"bench/results: git log failed: {log.stderr.strip()}")
        return
    touched: dict[str, list[tuple[str, str]]] = {}  # path -> [(status, commit)], newest first
    commit = ""
    for line in log.stdout.splitlines():
        if line.startswith("C "):
            commit = line[2:]
        elif line.strip():
            status, path = line.split("\t", 1)
            touched.setdefault(path, []).append((status[0], commit))
    status = _git(root, "status", "--porcelain", "--untracked-files=all", "--",
                  "bench/results")
    changed = {line[3:]: line[:2] for line in status.stdout.splitlines()}
    head = _git(root, "rev-parse", "HEAD").stdout.strip()
    for name in names:
        path = f"bench/results/{name}"
        hist = touched.get(path, [])
        adds = [c for s, c in hist if s == "A"]
        if hist and adds:
            added = adds[-1]  # the oldest add
            after = [c for s, c in hist[:hist.index(("A", added))]]
            if after:
                report.add(f"{path}: changed after {added[:12]} added it (in "
                           f"{', '.join(c[:12] for c in after)}): a result is what its "
                           "benchmark wrote, never edited")
        elif hist:
            report.add(f"{path}: its history has no commit that added it")
            continue
        else:
            added = head
        if path in changed and changed[path] != "??" and hist:
            report.add(f"{path}: changed in the work tree ({changed[path].strip()}): "
                       "a committed result is never edited")
        r = results.get(name)
        if not name.endswith(".json"):
            continue
        if not isinstance(r, dict) or "commit" not in r:
            report.add(f"{path}: no \"commit\": a result names the tree that made it")
            continue
        m = re.fullmatch(r"([0-9a-f]{7,40})(-dirty)?", str(r["commit"]))
        if not m:
            report.add(f"{path}: commit {r['commit']!r} is not a commit (hex, maybe -dirty)")
            continue
        c = _git(root, "rev-parse", "--verify", "--quiet", m.group(1) + "^{commit}")
        if c.returncode != 0:
            report.add(f"{path}: commit {m.group(1)} is in no history here")
            continue
        if _git(root, "merge-base", "--is-ancestor", c.stdout.strip(), added).returncode != 0:
            report.add(f"{path}: commit {m.group(1)} is not an ancestor of "
                       f"{added[:12]}, which {'added it' if hist else 'is HEAD'}: "
                       "the benchmark did not write it")


# --------------------------------------------------------------------------


def load_results(root: str, report: Report) -> tuple[list[str], dict[str, Any]]:
    rdir = os.path.join(root, "bench", "results")
    names = sorted(n for n in os.listdir(rdir) if os.path.isfile(os.path.join(rdir, n)))
    results: dict[str, Any] = {}
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(rdir, name), encoding="utf-8") as f:
                results[name] = json.load(f)
        except ValueError as e:
            report.add(f"bench/results/{name}: not JSON: {e}")
            results[name] = None
    return names, results


def check(root: str, history: bool = True) -> Report:
    report = Report()
    names, results = load_results(root, report)
    for name, r in results.items():
        if r is not None:
            check_result(name, r, report)
    if history:
        check_history(root, names, results, report)
    check_docs(root, results, report)
    return report


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if not a.startswith("--")]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    report = check(root)
    for p in report.problems:
        print(p)
    if "--recomputed" in argv:
        for bench, keys in sorted(report.recomputed.items()):
            print(f"recomputed {bench}: {', '.join(sorted(keys))}")
    results = sum(1 for f in report.figures if f.role == "result")
    print(f"check-results: {len(os.listdir(os.path.join(root, 'bench', 'results')))} result "
          f"files, {results} :result: and {len(report.figures) - results} :given: figures, "
          f"{len(report.problems)} problems")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
