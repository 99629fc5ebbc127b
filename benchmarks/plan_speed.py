"""Planning time of issue 24's twelve (ε, δ) rows, this checkout against an earlier one.

Each run is ``benchmarks/rpplus.py --child DATASET K`` of one checkout in its own subprocess
(one BLAS thread): ``matmech.optimize(W, eps=1, delta=1e-6, bound=False)``, method "auto".
The two versions alternate (before, after, then after, before on the next repetition, …), so
both see the same machine load; the table gives the median over the runs of the process's CPU
seconds inside ``optimize`` (``cpu``, the figure least sensitive to other processes) and of
``OptimizeResult.seconds`` (wall time of the families' fits), the per-family wall seconds of
the after version, and whether the two RMSEs are equal (relative difference).

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/plan_speed.py --before DIR [--runs 3] [--only CPS]
DIR is a checkout of the earlier version, e.g. ``git archive <commit> | tar -x -C DIR``.
Writes benchmarks/results/plan_speed.{json,md}. ``--smoke`` (CI): this checkout against itself
on the 1-way row of rpplus's small smoke union, once, the files in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rpplus  # noqa: E402  (the rows, the child and the subprocess runner)

ROOT = Path(__file__).resolve().parent.parent


def _child(tree, dataset, order, cap):
    script = Path(tree) / "benchmarks" / "rpplus.py"
    return rpplus._run(
        [sys.executable, str(script), "--child", dataset, order], cap, root=str(tree)
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="a checkout of the earlier version (required)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", help="comma-separated dataset names")
    ap.add_argument("--cap", type=float, default=900.0)
    ap.add_argument("--out", default=str(rpplus.RESULTS))
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="this checkout twice, a small union; temporary directory",
    )
    args = ap.parse_args(argv)
    if args.smoke:
        args.before, args.runs = str(ROOT), 1
        args.out = tempfile.mkdtemp(prefix="matmech-smoke-")
    if not args.before:
        ap.error("--before DIR is required (a checkout of the earlier version)")
    trees = {"before": Path(args.before).resolve(), "after": ROOT}
    names = args.only.split(",") if args.only else list(rpplus.DATASETS)
    rows = [(d, k) for d in names for k in rpplus.ORDERS]
    if args.smoke:
        rows = [("tiny", "1")]
    loads = [os.getloadavg()]
    runs = []
    for rep in range(args.runs):
        for d, k in rows:
            for ver in ("before", "after") if rep % 2 == 0 else ("after", "before"):
                r = _child(trees[ver], d, k, args.cap)
                if r.get("status") != "ok":
                    raise SystemExit(f"{ver} {d} {k}: {r.get('status')} {r.get('message', '')}")
                runs.append({"version": ver, "dataset": d, "k": k, "rep": rep, **r})
                print(
                    f"{ver:6s} {d:6s} k={k:4s} run {rep + 1}: cpu {r['cpu']:.2f} s, "
                    f"seconds {r['seconds']:.2f}, rmse {r['rmse']!r}",
                    flush=True,
                )
        loads.append(os.getloadavg())
    table = []
    for d, k in rows:
        mine = {
            v: [r for r in runs if r["version"] == v and (r["dataset"], r["k"]) == (d, k)]
            for v in trees
        }
        b, a = mine["before"], mine["after"]
        rb, ra = b[0]["rmse"], a[0]["rmse"]
        table.append(
            {
                "dataset": d,
                "k": k,
                "rmse_before": rb,
                "rmse_after": ra,
                "rmse_rel_change": (ra - rb) / rb,
                "cpu_before": statistics.median(r["cpu"] for r in b),
                "cpu_after": statistics.median(r["cpu"] for r in a),
                "seconds_before": statistics.median(r["seconds"] for r in b),
                "seconds_after": statistics.median(r["seconds"] for r in a),
                "families_after": {
                    f: statistics.median(r["tried_seconds"][f] for r in a)
                    for f in a[0]["tried_seconds"]
                },
                "method_after": a[0]["method"],
            }
        )
    meta = {
        **rpplus.stamp(),
        "before": str(trees["before"]),
        "runs": args.runs,
        "load": loads,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan_speed.json").write_text(
        json.dumps({"meta": meta, "rows": table, "runs": runs}, indent=1)
    )
    (out / "plan_speed.md").write_text(markdown(table, meta))
    print(markdown(table, meta))


def markdown(table, meta):
    lo = min(x[0] for x in meta["load"])
    hi = max(x[0] for x in meta["load"])
    lines = [
        "# Planning time of issue 24's rows, before and after",
        "",
        (
            f"{meta['date']}, {meta['machine']}, OPENBLAS_NUM_THREADS=1, 1-min load {lo:.2f}-{hi:.2f} "
            f"during the runs (other agents share the machine). Median of {meta['runs']} runs per "
            "version, one subprocess each, the versions alternating. cpu = the process's CPU seconds "
            "inside optimize(W, eps=1, delta=1e-6, bound=False); seconds = OptimizeResult.seconds "
            "(wall time of the families' fits); families = the after version's wall seconds per family."
        ),
        "",
        "| dataset | k | RMSE before | RMSE after | rel. change | cpu before | cpu after | after/before | seconds before | seconds after | families after (kron / gmarginals / unions / kronstack) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        fam = " / ".join(f"{v:.2f}" for v in r["families_after"].values())
        lines.append(
            f"| {r['dataset']} | {r['k']} | {r['rmse_before']:.6f} | {r['rmse_after']:.6f} | "
            f"{r['rmse_rel_change']:.1e} | {r['cpu_before']:.2f} | {r['cpu_after']:.2f} | "
            f"{r['cpu_after'] / r['cpu_before']:.2f} | {r['seconds_before']:.2f} | "
            f"{r['seconds_after']:.2f} | {fam} |"
        )
    cb = sum(r["cpu_before"] for r in table)
    ca = sum(r["cpu_after"] for r in table)
    lines += ["", f"Sum of the medians: cpu {cb:.1f} s before, {ca:.1f} s after ({ca / cb:.2f}×)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
