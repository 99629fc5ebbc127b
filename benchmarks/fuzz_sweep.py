"""The public fuzz sweep's numbers (issue 31): calls, clean %, and each way a call is not clean,
for the entry points swept before issue 31 ("old") and those added since ("new"), on this
checkout and, with ``--old``, on an older one.

The sweep is the test's (``tests/test_public_fuzz.py``, ``tests/fuzz_support.py``): every
value of ``fuzz_support.POOL`` on every argument of every entry, deterministic. Here the
test module's entry list is loaded statement by statement (modules that moved since are
aliased, ``MOVED``), so that an older checkout whose API lacks a module or a name still gives
numbers: an entry that cannot be built, or whose
valid baseline call fails its own check on that checkout, is left out and counted
("entries run" / "left out"). The outcomes (clean, wrong kind, python text, accepted) are
``fuzz_support.classify``'s.

    python benchmarks/fuzz_sweep.py                          # this checkout
    python benchmarks/fuzz_sweep.py --old /path/to/checkout  # and an older one (before)
    python benchmarks/fuzz_sweep.py --smoke                  # CI: 6 entries per group

Writes benchmarks/results/fuzz_sweep.{json,md} (``--smoke``: a temporary directory).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TESTS = ROOT / "tests"
RESULTS = HERE / "results"
sys.path.insert(0, str(TESTS))  # fuzz_support, and the test module's own imports


#: Modules the test imports under a newer name (issue 32 moved them): on an older checkout the
#: older module stands in, so that the same entries are swept.
MOVED = {
    "matmech.linalg.terms": "matmech.factored.terms",
    # issue 34: the stage folders (sources, plans, run, results) replace factored/ and pipeline/
    "matmech.plans.residual": "matmech.factored.residual_plan",
    "matmech.plans.factored": "matmech.factored.release",
    "matmech.plans.strategy": "matmech.pipeline.strategy",
    "matmech.results.labels": "matmech.factored.labels",
    "matmech.sources.tables": "matmech.factored.tables",
    "matmech.sources.engines": "matmech.io.engines",
    "matmech.sources.periods": "matmech.stream.engine",
    "matmech.sources.source": "matmech.pipeline.source",
    "matmech.run.discover": "matmech.io.discover",
    "matmech.run.runner": "matmech.pipeline.run",
    "matmech.cli.stream": "matmech.stream.cli",
}


def _alias_moved() -> None:
    import importlib

    for new, old in MOVED.items():
        try:
            importlib.import_module(new)
        except ImportError:
            try:
                sys.modules[new] = importlib.import_module(old)
            except ImportError:
                pass


def load_entries():
    """(entries, problems): the test module's ENTRIES, built one statement and one list
    element at a time; ``problems`` names what could not be built on this checkout."""
    src = TESTS / "test_public_fuzz.py"
    tree = ast.parse(src.read_text(), filename=str(src))
    _alias_moved()
    ns: dict = {"__name__": "fuzz_entries", "__file__": str(src)}
    problems = []
    for node in tree.body:
        targets = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if targets in (["ENTRIES"], ["NEW_ENTRIES"]) and isinstance(node.value, ast.List):
            built = []
            for elt in node.value.elts:
                try:
                    built.append(eval(compile(ast.Expression(elt), str(src), "eval"), ns))
                except Exception as exc:  # noqa: BLE001 - an API this checkout lacks
                    name = elt.args[0].value if isinstance(elt, ast.Call) and elt.args else "?"
                    group = "new" if targets == ["NEW_ENTRIES"] else "old"
                    problems.append(f"{group} {name}: {type(exc).__name__}: {str(exc)[:100]}")
            ns[targets[0]] = built
            continue
        try:
            exec(compile(ast.Module([node], []), str(src), "exec"), ns)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"line {node.lineno}: {type(exc).__name__}: {str(exc)[:100]}")
        if targets == ["ENTRIES"] and "NEW_ENTRIES" in ns:
            break  # ENTRIES = ENTRIES + NEW_ENTRIES: the list is whole
    return ns.get("ENTRIES", []), problems


def _without_unknown_defaults(e):
    """``e`` without the arguments whose baseline is None (a default) that this checkout's
    function does not take (an option added since, e.g. a stream's ``key_file``)."""
    import dataclasses
    import re

    from fuzz_support import resolve

    while True:
        try:
            e.fn(**resolve(e.args))
            return e
        except TypeError as exc:
            m = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
            if not m or m.group(1) not in e.args or e.args[m.group(1)] is not None:
                return e
            args = {k: v for k, v in e.args.items() if k != m.group(1)}
            e = dataclasses.replace(e, args=args)
        except BaseException:  # noqa: BLE001 - judged by runnable()
            return e


def runnable(entries):
    """The entries whose valid baseline call returns a result that passes its check (the
    test's ``test_the_baseline_call_is_valid``; ``load_strategy``'s baseline is a missing
    file, refused naming it)."""
    from fuzz_support import resolve

    keep, left = [], []
    for e in entries:
        e = _without_unknown_defaults(e)
        try:
            if e.name == "load_strategy":
                try:
                    e.fn(**resolve(e.args))
                except OSError as exc:
                    if "missing.npz" in str(exc):
                        keep.append(e)
                        continue
                    raise
            e.check(e.fn(**resolve(e.args)))
            keep.append(e)
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: a checkout that differs
            left.append(f"{e.group} {e.name}: {type(exc).__name__}: {str(exc)[:100]}")
    return keep, left


def side(smoke: bool) -> dict:
    from fuzz_support import OUTCOMES, sweep

    t0 = time.perf_counter()
    entries, problems = load_entries()
    keep, left = runnable(entries)
    if smoke:  # a few entries of each group
        keep = [e for g in ("old", "new") for e in [x for x in keep if x.group == g][:6]]
    counts, bad = sweep(keep, seconds=20)
    groups = {}
    for g in ("old", "new"):
        c = counts.get(g, Counter())
        n = sum(c.values())
        groups[g] = {
            "entries": sum(e.group == g for e in keep),
            "left_out": sum(x.startswith(g + " ") for x in [*left, *problems]),
            "calls": n,
            "clean_pct": round(100 * c["clean"] / n, 2) if n else None,
            **{o: c[o] for o in OUTCOMES},
        }
    return {
        "groups": groups,
        "not_built": problems,
        "not_runnable": left,
        "findings": [" | ".join((g, o, w, d[:150])) for g, o, w, d in bad],
        "seconds": round(time.perf_counter() - t0, 1),
    }


def markdown(sides: dict) -> str:
    lines = [
        "| checkout | entry points | entries run (left out) | calls | clean % | wrong kind | "
        "python text | accepted |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, s in sides.items():
        for g in ("old", "new"):
            r = s["groups"][g]
            pct = "—" if r["clean_pct"] is None else f"{r['clean_pct']:.1f}"
            lines.append(
                f"| {label} ({s['commit']}) | {g} | {r['entries']} ({r['left_out']}) | "
                f"{r['calls']:,} | {pct} | {r['wrong kind']} | {r['python text']} | "
                f"{r['accepted']} |"
            )
    notes = []
    for label, s in sides.items():
        if s["not_built"]:
            notes.append(f"{label}: not built on this checkout: " + "; ".join(s["not_built"]))
    return (
        "The public fuzz sweep (`tests/test_public_fuzz.py`; every value of "
        "`fuzz_support.POOL` on every argument of every entry point), `benchmarks/fuzz_sweep.py`. "
        '"old": the entry points swept before issue 31; "new": those added since (streams, '
        "release_marginals, MarginalRelease, discover_categories, time_bins, run_plan, the unions "
        "planner, the declarations). Left out: entries whose valid baseline call does not run "
        "on that checkout (its API differs).\n\n" + "\n".join(lines) + "\n\n" + "\n".join(notes)
    )


def _commit(tree: Path) -> str:
    run = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return run.stdout.strip() or "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="6 entries per group (CI)")
    ap.add_argument("--old", type=Path, help="an older checkout: sweep it too (before)")
    ap.add_argument("--results", type=Path, default=RESULTS, help="where the JSON/MD go")
    ap.add_argument("--side", type=Path, help=argparse.SUPPRESS)  # a child's JSON
    args = ap.parse_args(argv)
    if args.side is not None:
        args.side.write_text(json.dumps(side(args.smoke), indent=1) + "\n")
        return 0
    sides = {}
    trees = [("after", ROOT)]
    if args.old is not None and not args.smoke:
        trees.insert(0, ("before", args.old))
    with tempfile.TemporaryDirectory(prefix="matmech-fuzz-") as tmp:
        for label, tree in trees:
            out = Path(tmp) / f"{label}.json"
            env = {**os.environ, "PYTHONPATH": str(tree), "OPENBLAS_NUM_THREADS": "1"}
            argv = [sys.executable, str(Path(__file__).resolve()), "--side", str(out)]
            subprocess.run(argv + (["--smoke"] if args.smoke else []), env=env, check=True, cwd=tmp)
            sides[label] = {"commit": _commit(tree), **json.loads(out.read_text())}
            print(f"{label}: {sides[label]['groups']} ({sides[label]['seconds']} s)", flush=True)
    results = Path(tempfile.mkdtemp(prefix="matmech-smoke-")) if args.smoke else args.results
    results.mkdir(parents=True, exist_ok=True)
    meta = {"smoke": args.smoke, "python": sys.version.split()[0], "machine": platform.machine()}
    meta["load"] = os.getloadavg()[0]
    (results / "fuzz_sweep.json").write_text(json.dumps({**meta, **sides}, indent=1) + "\n")
    md = markdown(sides)
    (results / "fuzz_sweep.md").write_text(md)
    print(md)
    low = [
        f"{label} {g}"
        for label, s in sides.items()
        for g, r in s["groups"].items()
        if label == "after" and r["calls"] and r["clean_pct"] < 99
    ]
    if low and not args.smoke:
        print("below 99% clean: " + ", ".join(low))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
