#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Plant drifts and edits, and require bench/check-results.py to see each.

  bench/check_results_test.py [REPO]

- every :result: of README.md and Documentation/*.rst (testing.rst
  aside), as the tree holds them: a copy of the documents with that one
  figure moved (its last digit +1 mod 10, then +37% at the digits shown)
  must give a problem naming that document, line and figure, and no other
  new problem;
- every figure with a unit, or in a table, with its role removed (the
  bare figure left) must give a problem on its line;
- every stored member the checker recomputes from a result's rows (a
  median, a ratio, a summary, a best peer), moved by +37% (a name
  changed), must give a problem naming it;
- in a scratch git repository: a committed result edited by a later
  commit, one edited in the work tree, one whose commit is not an
  ancestor of the commit that added it, an untracked one naming a commit
  not in HEAD's history, and a tree with no git at all must each give
  the history problem, and an honest file none.

Prints TAP (one line per planted case, failures first in full), and
fails if a case goes unseen or no figure was planted.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))


def load_checker() -> Any:
    sys.dont_write_bytecode = True  # no __pycache__ in bench/
    spec = importlib.util.spec_from_file_location(
        "check_results", os.path.join(HERE, "check-results.py"))
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["check_results"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


cr = load_checker()
_ref_value = cr.ref_value
_resolved: dict[str, Any] = {}


def _cached_ref_value(ref: str, results: dict[str, Any]) -> Any:
    # The results never change between plants; a planted figure's
    # reference is one of the tree's, so each is resolved once.
    if ref not in _resolved:
        try:
            _resolved[ref] = _ref_value(ref, results)
        except cr.RefError as e:
            _resolved[ref] = e
    got = _resolved[ref]
    if isinstance(got, cr.RefError):
        raise got
    return got


cr.ref_value = _cached_ref_value


class Tap:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.failed = 0

    def case(self, ok: bool, name: str, why: str = "") -> None:
        n = len(self.lines) + 1
        self.lines.append(f"{'ok' if ok else 'not ok'} {n} - {name}"
                          + ("" if ok else f"\n# {why}"))
        self.failed += not ok

    def finish(self) -> int:
        print(f"1..{len(self.lines)}")
        print("\n".join(self.lines))
        print(f"# {len(self.lines) - self.failed} passed, {self.failed} failed")
        return 1 if self.failed else 0


def doc_problems(rel: str, text: str, results: dict[str, Any]) -> tuple[set[str], list[Any]]:
    """The checker's problems with one document, and its figures."""
    report = cr.Report()
    cr.check_doc(rel, text, results, report)
    return set(report.problems), report.figures


def drifts(shown: str) -> list[str]:
    """shown moved: its last digit +1 mod 10, and +37% at its digits."""
    out = []
    digits = [i for i, c in enumerate(shown) if c.isdigit()]
    i = digits[-1]
    out.append(shown[:i] + str((int(shown[i]) + 1) % 10) + shown[i + 1:])
    plain = shown.replace(",", "")
    d = len(plain.split(".")[1]) if "." in plain else 0
    moved = f"{float(plain) * 1.37:.{d}f}"
    if moved != plain:
        out.append(moved)
    return [x for x in dict.fromkeys(out) if x != shown]


def plant_figures(root: str, tap: Tap) -> int:
    """Each :result: moved, each role unrolled; the number planted."""
    report = cr.Report()
    _, results = cr.load_results(root, report)
    planted = 0
    # The tree's documents are read once; each plant is checked on a copy
    # of one document's text, the checker's own per-document check.
    for rel in cr.doc_paths(root):
        src = os.path.join(root, rel)
        if not os.path.exists(src):
            continue
        with open(src, encoding="utf-8") as f:
            text = f.read()
        base, figures = doc_problems(rel, text, results)
        _, table = (cr.md_regions if rel.endswith(".md") else cr.rst_regions)(text)
        for fig in figures:
            role = text[fig.start:fig.end]
            num = cr.FIGURE_TEXT.match(fig.text)
            if fig.role == "result" and num:
                shown = num.group(1)
                for moved in drifts(shown):
                    new_text = fig.text.replace(shown, moved, 1)
                    new_role = role.replace(f"`{fig.text}", f"`{new_text}", 1)
                    planted_text = text[:fig.start] + new_role + text[fig.end:]
                    got, _ = doc_problems(rel, planted_text, results)
                    new = got - base
                    where = f"{rel}:{fig.line}:"
                    ok = (any(p.startswith(where) and f"{new_text!r} is not " in p
                              for p in new)
                          and all(p.startswith(where) for p in new))
                    tap.case(ok, f"{rel}:{fig.line} {fig.text} -> {new_text} "
                             f"({fig.ref})", f"new problems: {sorted(new) or 'none'}")
                    planted += 1
            # Unrolled: the bare figure is a problem where it is one.
            bare = fig.text
            in_table = table[fig.line - 1]
            looks = cr.NUM_UNIT.search(bare) or (in_table and cr.DECIMAL.search(bare))
            if not looks:
                continue
            planted_text = text[:fig.start] + bare + text[fig.end:]
            got, _ = doc_problems(rel, planted_text, results)
            new = got - base
            ok = any(p.startswith(f"{rel}:{fig.line}:") and "outside" in p for p in new)
            tap.case(ok, f"{rel}:{fig.line} {fig.text} without :{fig.role}:",
                     f"new problems: {sorted(new) or 'none'}")
    return planted


def planted_value(old: object) -> object:
    """old, changed the way a hand edit would change it, whatever its type."""
    if isinstance(old, bool):
        return not old
    if isinstance(old, str):
        return f"{old}-planted"
    if isinstance(old, list):
        return old + ["planted"]
    if isinstance(old, dict):
        return {**old, "planted": 1}
    return old * 1.37 if old else 1


def plant_rows(root: str, tap: Tap) -> int:
    """Each stored figure the checker recomputes, moved: a problem names it."""
    report = cr.Report()
    _, results = cr.load_results(root, report)
    for name, r in results.items():
        if r is not None:
            cr.check_result(name, r, report)
    base = set(report.problems)
    planted = 0
    for name, path in dict.fromkeys(report.compared):
        r = copy.deepcopy(results[name])
        parent, key = path.rsplit(".", 1) if "." in path else ("", path)
        holder = cr.resolve(r, parent) if parent else r
        if not isinstance(holder, dict) or holder.get(key) is None:
            continue  # absent where its rows give nothing either
        old = holder[key]
        holder[key] = planted_value(old)
        got = cr.Report()
        cr.check_result(name, r, got)
        new = set(got.problems) - base
        tap.case(any(f" {path} is " in p for p in new),
                 f"bench/results/{name}: {path} {old!r} -> {holder[key]!r}",
                 f"new problems: {sorted(new) or 'none'}")
        planted += 1
    return planted


def git(root: str, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", "-C", root, *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def plant_history(tap: Tap) -> None:
    """Edits of committed results, and commits that did not write them."""
    def result(commit: str, figure: float = 1.0) -> str:
        return json.dumps({"benchmark": "lib", "commit": commit, "results": [
            {"library_fixed_us": figure, "raw_io_uring_us": 1.0, "library_over_raw": figure}]})

    def problems(root: str) -> list[str]:
        return cr.check(root).problems

    def expect(root: str, name: str, what: str, pred: Callable[[str], bool]) -> None:
        got = [p for p in problems(root) if p.startswith(f"bench/results/{name}:")]
        tap.case(any(pred(p) for p in got), what, f"problems: {got or 'none'}")

    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "bench", "results"))
        os.makedirs(os.path.join(root, "Documentation"))
        res = os.path.join(root, "bench", "results")

        def write(name: str, body: str) -> None:
            with open(os.path.join(res, name), "w", encoding="utf-8") as f:
                f.write(body)

        git(root, "init", "-q", "-b", "main")
        with open(os.path.join(root, "README.md"), "w", encoding="utf-8") as f:
            f.write("nothing measured\n")
        git(root, "add", "README.md")
        git(root, "commit", "-q", "-m", "tree")
        tree = git(root, "rev-parse", "HEAD")
        write("lib-host-2026-01-01.json", result(tree))
        write("lib-host-2026-01-02.json", result(tree + "-dirty"))
        git(root, "add", "bench/results")
        git(root, "commit", "-q", "-m", "results")
        tap.case(not problems(root), "honest committed results: no problem",
                 f"problems: {problems(root)}")
        # A later commit edits one: the history says so.
        write("lib-host-2026-01-01.json", result(tree, 1.5))
        git(root, "commit", "-q", "-am", "edit")
        expect(root, "lib-host-2026-01-01.json", "a committed result edited by a commit",
               lambda p: "changed after" in p)
        # The work tree edits another.
        write("lib-host-2026-01-02.json", result(tree + "-dirty", 1.0).replace("1.0", "1.00"))
        expect(root, "lib-host-2026-01-02.json", "a committed result edited in the work tree",
               lambda p: "work tree" in p)
        git(root, "checkout", "-q", "--", "bench/results/lib-host-2026-01-02.json")
        # A commit on another branch is not the tree the adding commit had.
        git(root, "checkout", "-q", "-b", "side")
        git(root, "commit", "-q", "--allow-empty", "-m", "side")
        side = git(root, "rev-parse", "HEAD")
        git(root, "checkout", "-q", "main")
        write("lib-host-2026-01-03.json", result(side))
        git(root, "add", "bench/results")
        git(root, "commit", "-q", "-m", "a result of a commit not its ancestor")
        expect(root, "lib-host-2026-01-03.json",
               "a result whose commit is not an ancestor of the commit that added it",
               lambda p: "not an ancestor" in p)
        # Not committed yet: held to HEAD.
        write("lib-host-2026-01-04.json", result(side))
        expect(root, "lib-host-2026-01-04.json",
               "an uncommitted result whose commit is not in HEAD's history",
               lambda p: "not an ancestor" in p and "HEAD" in p)
        write("lib-host-2026-01-05.json", result("0123456"))
        expect(root, "lib-host-2026-01-05.json", "a result naming an unknown commit",
               lambda p: "in no history" in p)
        write("lib-host-2026-01-06.json", result(tree))
        got = [p for p in problems(root) if "2026-01-06" in p]
        tap.case(not got, "an uncommitted result of an ancestor of HEAD: no problem",
                 f"problems: {got}")
        # No history at all is a problem, not a pass.
        shutil.rmtree(os.path.join(root, ".git"))
        got = [p for p in problems(root) if "git" in p]
        tap.case(bool(got), "results without git history", "no problem reported")


def main(argv: list[str]) -> int:
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(HERE, ".."))
    tap = Tap()
    planted = plant_figures(root, tap)
    rows = plant_rows(root, tap)
    plant_history(tap)
    tap.case(planted > 0, f"{planted} figures planted", "no :result: figure to plant")
    tap.case(rows > 0, f"{rows} recomputed members planted", "no member to plant")
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
