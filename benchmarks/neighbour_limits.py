"""The neighbouring-limit table of issue 21: every selection method x path x workload, run on
the neighbours 2**k - 1 | 2**k records (one cell) at every limit k the code has, with the same
seeded rng and a fresh budget on each side (tests/privacy/neighbour_cases.py).

Prints, per case, the limits run, the outcome and the spend on each side and whether every
non-noise output was identical; writes that table to benchmarks/results/neighbour_limits.md
and every pair (method, path, workload, k, outcome and spend on each side) to
benchmarks/results/neighbour_limits.json. Also runs the issue's reproducers; with
``--before PATH`` (a checkout of the commit before the fix, e.g. ``git worktree add
/work/scratch/pc-before 43862af``) it runs them there too, in a subprocess, for the
before/after table.

    OPENBLAS_NUM_THREADS=1 python benchmarks/neighbour_limits.py [--before /work/scratch/pc-before]
    python benchmarks/neighbour_limits.py --smoke   # one case at two limits (CI)

``--smoke`` writes its files to a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"


def _setup(root: Path) -> None:
    sys.path.insert(0, str(root))
    sys.path.insert(0, str(ROOT / "tests" / "privacy"))


def reproducers() -> list[dict]:
    import neighbour_cases as nc

    out = []
    for fn in nc.REPRODUCERS:
        sides = [nc.run_reproducer(fn, 0)] + (
            [nc.run_reproducer(fn, 1)] if fn is not nc.repro_threshold else []
        )
        out.append(dict(case=fn.__doc__.strip(), sides=sides))
    return out


def sweep(smoke: bool = False) -> list[dict]:
    import neighbour_cases as nc

    rows = []
    for case in nc.cases()[:1] if smoke else nc.cases():
        for k in nc.ks(case)[:2] if smoke else nc.ks(case):
            left, right, diff = nc.compare(case, k, strategy="auto")
            rows.append(
                dict(
                    selection=case.name,
                    path=case.path,
                    workload=case.workload,
                    k=k,
                    max_records=nc.declaration(case, k),
                    old_limit=k in nc.old_limits(case),
                    left=_short(left),
                    right=_short(right),
                    left_spent=left["spent"][0],
                    right_spent=right["spent"][0],
                    identical=not diff,
                    differs=diff,
                )
            )
    return rows


def _short(side: dict) -> str:
    if side["outcome"] == "raises":
        return f"refused ({side['error'].split(':')[0]})"
    return f"{side.get('mechanism', '')}: {side['n_rows']} rows"


def _summary(rows: list[dict]) -> list[list[str]]:
    """One line per case: the limits run, outcomes and spends on each side, identical or not."""
    cases: dict = {}
    for r in rows:
        cases.setdefault((r["selection"], r["path"], r["workload"]), []).append(r)
    out = []
    for (sel, path, wl), rs in cases.items():
        outcomes = sorted({r[side].split(":")[0] for r in rs for side in ("left", "right")})
        spends = sorted({(r["left_spent"], r["right_spent"]) for r in rs})
        old = [r["k"] for r in rs if r["old_limit"]]
        out.append(
            [
                sel,
                path,
                wl,
                f"{len(rs)} (k={rs[0]['k']}..{rs[-1]['k']})",
                ",".join(map(str, old)) or "-",
                " / ".join(outcomes),
                " ".join(f"{a:g}|{b:g}" for a, b in spends),
                "yes" if all(r["identical"] for r in rs) else "NO",
            ]
        )
    return out


def _before(before_pairs: dict, key: list) -> str:
    """The pairs of this case that differed on the --before checkout, with their k."""
    rs = [r for (sel, path, wl, _), r in before_pairs.items() if [sel, path, wl] == key]
    if not rs:
        return "-"
    bad = [r for r in rs if not r["identical"]]
    if not bad:
        return f"0 of {len(rs)}"
    eg = bad[0]
    return (
        f"{len(bad)} of {len(rs)} (k={','.join(str(r['k']) for r in bad)}; e.g. k={eg['k']}: "
        f"{eg['left']} | {eg['right']}, spent {eg['left_spent']:g}|{eg['right_spent']:g})"
    )


def _table(head: list[str], rows: list[list[str]]) -> str:
    head = [str(x).replace("|", "\\|") for x in head]
    rows = [
        [str(x).replace("|", "\\|") for x in r] for r in rows
    ]  # a cell's "|" (e.g. |x|) stays in its cell
    w = [max(len(str(x)) for x in col) for col in zip(head, *rows)]

    def line(r):
        return "| " + " | ".join(str(x).ljust(n) for x, n in zip(r, w)) + " |"

    return "\n".join(
        [line(head), "|" + "|".join("-" * (n + 2) for n in w) + "|"] + [line(r) for r in rows]
    )


def main() -> None:
    global OUT
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--before",
        type=Path,
        help="a checkout of the commit before the fix: run the reproducers there",
    )
    ap.add_argument(
        "--reproducers-json", action="store_true", help=argparse.SUPPRESS
    )  # the --before subprocess
    ap.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="one case at two limits; files to a temporary directory",
    )
    args = ap.parse_args()
    if args.smoke:
        OUT = Path(tempfile.mkdtemp(prefix="matmech-smoke-"))
    _setup(args.root)
    if args.reproducers_json:  # the run on the --before checkout: reproducers and the same sweep
        print(json.dumps(dict(reproducers=reproducers(), pairs=sweep()), default=str))
        return
    before, before_pairs = None, {}
    if args.before:
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        res = subprocess.run(
            [sys.executable, __file__, "--reproducers-json", "--root", str(args.before)],
            capture_output=True,
            text=True,
            check=True,
            env=env,
            cwd=str(args.before),
        )
        before = json.loads(res.stdout)
        before_pairs = {
            (r["selection"], r["path"], r["workload"], r["k"]): r for r in before["pairs"]
        }
        before = before["reproducers"]
    t0 = time.perf_counter()
    after = reproducers()
    rows = sweep(args.smoke)
    seconds = time.perf_counter() - t0
    load = os.getloadavg()[0]
    rep = []
    for i, a in enumerate(after):
        for label, data in (("before", before[i] if before else None), ("after", a)):
            if data is None:
                continue
            cells = [
                (
                    s["outcome"]
                    + (
                        f" rows {s['rows']}"
                        if s["outcome"] == "returns"
                        else ": " + s["error"][:90]
                    ),
                    s["spent"],
                )
                for s in data["sides"]
            ]
            rep.append(
                [a["case"], label]
                + [f"{c} (spent {sp:g})" for c, sp in cells]
                + ([""] if len(cells) == 1 else [])
            )
    text = [
        "## Reproducers (issue 21), each side with a fresh budget of 10",
        _table(["case", "", "2**k - 1 (or the one dataset)", "2**k"], rep),
        "",
        "## Neighbouring-limit table: method x path x workload, pairs 2**k - 1 | 2**k at every limit k",
        _table(
            [
                "selection",
                "path",
                "workload",
                "pairs",
                "old overflow k",
                "outcome (both sides)",
                "spend left|right",
                "identical",
                "before the fix: pairs that differ",
            ],
            [r + [_before(before_pairs, r[:3])] for r in _summary(rows)],
        ),
        "",
        (
            f"{len(rows)} pairs, {sum(not r['identical'] for r in rows)} with a difference; "
            f"{seconds:.0f} s, load average {load:.2f}"
        ),
    ]
    print("\n".join(text))
    OUT.mkdir(exist_ok=True)
    (OUT / "neighbour_limits.md").write_text("\n".join(text) + "\n")
    cols = [
        "selection",
        "path",
        "workload",
        "k",
        "max_records",
        "old_limit",
        "left",
        "right",
        "left_spent",
        "right_spent",
        "identical",
    ]
    (OUT / "neighbour_limits.json").write_text(
        json.dumps(
            dict(
                reproducers_before=before,
                reproducers_after=after,
                pair_columns=cols,
                pairs=[[r[c] for c in cols] for r in rows],
                pairs_before=[[r[c] for c in cols] for r in before_pairs.values()],
                seconds=round(seconds, 1),
                load_average=round(load, 2),
            ),
            separators=(",", ":"),
            default=str,
        )
    )


if __name__ == "__main__":
    main()
