"""Coverage of the 95% intervals per strategy (issue 23).

Table 1 (strategies): all ranges over n = 16 cells (136 answers: single cells to the total),
strategies identity, hierarchical and optimized (``matmech.optimize``, on n = 32: 528 answers,
a p-Identity strategy on a power-of-two grid; at n = 16 it returns the identity), ε from 0.1 to 10, pure
ε and δ = 1e-6. The interval law of each configuration is the one ``mm.release`` attaches (its
half-widths are data-independent: one release gives them); the N replicate releases then run
the release's own measurement plan (``plan_measurement`` → exact noise → ``inference.solve``,
all N at once). Coverage = share of (release, answer) pairs whose interval holds the truth;
SE = the binomial SE of N·m pairs (an underestimate where answers are correlated).
``exact``: the mean of the exact coverage the release reports (rows with method "exact" or
"convolution", the latter a lower bound): Monte Carlo should agree within ~4 SE.

The selection's bias and coverage (issue 23's winner's curse, issue 31): benchmarks/selection_bias.py.

Run:  python benchmarks/coverage.py [--n-rel 2000]
Writes benchmarks/results/coverage.{json,md}. ``--smoke``: one configuration with a few
replicates, the files in a temporary directory (seconds, for CI).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matmech as mm
from matmech import workloads as wl
from matmech.estimators.gls import solve
from matmech.privacy import noise
from matmech.privacy.measure import plan_measurement

RESULTS = Path(__file__).resolve().parent / "results"
EPS = (0.1, 0.5, 1.0, 2.3, 5.0, 10.0)
DELTAS = (0.0, 1e-6)
STRATEGIES = ("identity", "hierarchical", "optimized")


def _strategy(name, W, eps, delta):
    if name == "optimized":
        return mm.optimize(W, eps, delta).strategy
    return name


def coverage_cell(strategy, eps, delta, n_rel, rng):
    n = 32 if strategy == "optimized" else 16  # at n = 16 optimize returns the identity
    W = wl.all_range(n)
    x = np.random.default_rng(7).poisson(30, n)
    truth = W.matvec(x.astype(float))
    r = mm.release(x, W, eps, delta, strategy=_strategy(strategy, W, eps, delta), rng=rng)
    law = r.interval_law()
    plan = plan_measurement(
        r.strategy, eps, delta
    )  # the release's own plan (same strategy, same noise)
    assert plan.scale == r.measurement.scale and plan.grid == r.measurement.grid
    p = r.strategy.shape[0]
    Ax = r.strategy.matvec(x.astype(float))
    hits, done = 0.0, 0
    for start in range(0, n_rel, 500):
        k = min(500, n_rel - start)
        if plan.grid == 1.0:
            draw = (
                noise.discrete_laplace
                if plan.noise == "discrete_laplace"
                else noise.discrete_gaussian
            )
            Z = draw(plan.scale, (p, k), rng=rng).astype(float)
        else:
            draw = noise.laplace if plan.noise == "discrete_laplace" else noise.gaussian
            Z = draw(plan.scale, (p, k), grid=plan.grid, rng=rng)
        ans = W.matmat(solve(plan.strategy, Ax[:, None] + Z))
        hits += float((np.abs(ans - truth[:, None]) <= law.half[:, None] * (1 + 1e-12)).sum())
        done += k
    pairs = done * truth.size
    cov = hits / pairs
    ex = law.coverage[np.isfinite(law.coverage)]
    return {
        "strategy": strategy,
        "eps": eps,
        "delta": delta,
        "N": done,
        "answers": int(truth.size),
        "coverage": cov,
        "se": math.sqrt(cov * (1 - cov) / pairs),
        "methods": law.counts(),
        "exact_mean": float(ex.mean()) if ex.size else None,
        "half_over_normal": float(np.mean(law.half / (1.959963984540054 * r.std))),
    }


def markdown(cov_rows, meta):
    out = [
        f"load average {meta['load_before'][0]:.1f} → {meta['load_after'][0]:.1f}; {meta['date']}; "
        f"{meta['seconds']:.0f} s",
        "",
        "## Coverage of the 95% interval (all ranges, n = 16; optimized n = 32)",
        "",
        "| strategy | ε | δ | N | coverage | SE | exact (reported) | half / 1.96σ | methods |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in cov_rows:
        ex = "-" if r["exact_mean"] is None else f"{100 * r['exact_mean']:.2f}%"
        out.append(
            f"| {r['strategy']} | {r['eps']:g} | {r['delta']:g} | {r['N']} | {100 * r['coverage']:.2f}% | "
            f"{100 * r['se']:.2f} | {ex} | {r['half_over_normal']:.3f} | "
            f"{', '.join(f'{k} {v}' for k, v in r['methods'].items())} |"
        )
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-rel", type=int, default=2000)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--smoke", action="store_true", help="a few replicates of one configuration")
    a = ap.parse_args(argv)
    if a.smoke:
        a.n_rel, a.out = 20, tempfile.mkdtemp(prefix="matmech-smoke-")

    def pick(options):
        return options[:1] if a.smoke else options

    rng = np.random.default_rng(2026)
    t0, load0 = time.time(), os.getloadavg()
    cov_rows = []
    for s in pick(STRATEGIES):
        for d in pick(DELTAS):
            for e in pick(EPS):
                row = coverage_cell(s, e, d, a.n_rel, rng)
                cov_rows.append(row)
                print(json.dumps(row), flush=True)
    meta = {
        "load_before": load0,
        "load_after": os.getloadavg(),
        "seconds": time.time() - t0,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "n_rel": a.n_rel,
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "coverage.json").write_text(json.dumps({"meta": meta, "coverage": cov_rows}, indent=1))
    md = markdown(cov_rows, meta)
    (out / "coverage.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
