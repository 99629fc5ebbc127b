"""The oracle table (issue 22): every release path × privacy model × selection method against an
independent dense GLS of the release's own measurement records.

For each (path, model, method): ``--problems`` random small problems (tests/oracle_problems.py:
≤ 200 cells, 1-4 attributes, weighted unions with duplicate and dependent rows, prefix / range /
custom 0-1 / identity / total factors), both neighbour relations alternating, → max |answer −
oracle| / max(1, |oracle|) and max |variance − oracle variance| / max oracle variance; and for
the selection-free row of each path, plus two selection rows, the Monte Carlo coverage of the
95% intervals over ``--trials`` releases (pooled answers; binomial SE by releases).

    OPENBLAS_NUM_THREADS=1 python benchmarks/oracle_table.py [--problems 6] [--trials 200]

Prints the table and writes benchmarks/results/oracle_table.json and oracle_table.md
(``--smoke``: one problem per cell, no selection method but svt, two coverage trials of one
cell, the files in a temporary directory).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import oracle_problems as op  # noqa: E402

COVERED = {
    ("histogram", "pure", "none"),
    ("histogram", "approx", "none"),
    ("records", "pure", "none"),
    ("records", "approx", "none"),
    ("residual", "pure", "none"),
    ("residual", "approx", "none"),
    ("gmarginal", "pure", "none"),
    ("gmarginal", "approx", "none"),
    ("records", "pure", "svt-gap"),
    ("histogram", "approx", "topc-gap"),
}


def coverage(path, model, method, trials, seed=5):
    hit = tot = 0
    for t in range(trials):
        rel, W, x = op.run(path, model, method, seed, rng=np.random.default_rng(1000 + t))
        truth = (W.dense() @ x)[rel.answered]
        lo, hi = rel.interval(0.95)
        hit += int(np.sum((lo <= truth) & (truth <= hi)))
        tot += truth.size
    return hit / tot if tot else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=6)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument(
        "--smoke", action="store_true", help="1 problem, 2 methods; temporary directory"
    )
    args = ap.parse_args(argv)
    methods, covered = op.METHODS, COVERED
    if args.smoke:
        args.problems, args.trials = 1, 2
        methods, covered = ("none", "svt"), {("histogram", "pure", "none")}
    rows = []
    t0 = time.perf_counter()
    for path in op.PATHS:
        for model in op.MODELS:
            for method in methods if path not in op.NO_SELECTION else ("none",):
                da = dv = 0.0
                for seed in range(args.problems):
                    rel, W, _ = op.run(path, model, method, seed, neighbors=op.NEIGHBORS[seed % 2])
                    a, v = op.compare(rel, W)
                    da, dv = max(da, a), max(dv, v)
                cov = (
                    coverage(path, model, method, args.trials)
                    if (path, model, method) in covered
                    else None
                )
                rows.append(
                    {
                        "path": path,
                        "model": model,
                        "method": method,
                        "max_answer_rel": da,
                        "max_variance_rel": dv,
                        "coverage95": cov,
                    }
                )
                print(
                    f"{path:10s} {model:6s} {method:13s} {da:9.2e} {dv:9.2e} "
                    f"{'' if cov is None else f'{cov:.3f}'}",
                    flush=True,
                )
    load = os.getloadavg()[0]
    se = math.sqrt(0.95 * 0.05 / args.trials)
    head = (
        f"problems per cell {args.problems}, coverage trials {args.trials} (4 SE = {4 * se:.3f}), "
        f"load average {load:.2f}, {time.perf_counter() - t0:.0f} s"
    )
    md = [
        head,
        "",
        "| path | model | method | max rel. answer diff | max rel. variance diff | 95% coverage |",
        "|---|---|---|---|---|---|",
    ]
    md += [
        f"| {r['path']} | {r['model']} | {r['method']} | {r['max_answer_rel']:.2e} | {r['max_variance_rel']:.2e} | "
        f"{'' if r['coverage95'] is None else format(r['coverage95'], '.3f')} |"
        for r in rows
    ]
    print(head)
    out = (
        Path(tempfile.mkdtemp(prefix="matmech-smoke-"))
        if args.smoke
        else ROOT / "benchmarks" / "results"
    )
    (out / "oracle_table.md").write_text("\n".join(md) + "\n")
    (out / "oracle_table.json").write_text(
        json.dumps(
            {"problems": args.problems, "trials": args.trials, "load_average": load, "rows": rows},
            indent=2,
        )
        + "\n"
    )
    return rows


if __name__ == "__main__":
    main()
