"""A stream step's arithmetic before and after exact integer steps, and the state it keeps.

For n = 2^16 and 2^20, sqrt (Gaussian, ε = 1, δ = 1e-6) and sqrt (Laplace, ε = 1), BLT
(mean-optimised, Gaussian) and k = 1 and 16 categories, at t = n − 1 on full histories:

* before: y_t = C_g[t]·x + z_t in float64 (exact only for totals ≤ max_records, so a step
  past the bound had to be refused after the charge), r_t = B_g[t]·y, both through reversed
  (negative-stride) views of the Toeplitz columns;
* after: the counts' int64 limbs, y_t in exact integers for any counts
  (:func:`matmech.stream.exact.exact_measurement`) and r_t = B_g[t]·y, through contiguous
  reversed copies of the columns;

each the median of ``--reps`` runs including the noise draw, with the limbs per cell and the
history bytes per cell (before: x, y, r as float64; after: the limbs, y, r).

    OPENBLAS_NUM_THREADS=1 python benchmarks/stream_step.py [--reps 15]

Writes benchmarks/results/stream_step.json and stream_step.md (``--smoke``: n = 2^8, two
runs, in a temporary directory; for CI).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from matmech.privacy import noise  # noqa: E402
from matmech.stream.exact import (  # noqa: E402
    exact_measurement,
    limb_layout,
    limbs_of,
)
from matmech.stream.factorizations import build  # noqa: E402
from matmech.stream.plan import StreamSpec, plan_stream  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def _draw(plan, k):
    sampler = noise.gaussian if plan.noise == "discrete_gaussian" else noise.laplace
    return sampler(plan.scale, k, grid=plan.grid)


def step_times_ms(f, spec, k, reps=15):
    """(before, after) median ms of one step's arithmetic at t = n − 1, and the limb layout."""
    n, t = f.n, f.n - 1
    plan = plan_stream(spec, f)
    fg = plan.factorization
    _ = fg.b  # B is computed once when the stream opens
    layout = limb_layout(fg, plan.grid, spec.max_records)
    krow = plan.k_row(t)  # K[t, 0..t] as the release reads it (Toeplitz or dense)
    x = np.random.default_rng(0).integers(0, 5, size=(n, k))
    xf = x.astype(np.float64)
    limbs = limbs_of(x, layout)
    y = np.random.default_rng(1).normal(size=(n, k))
    before, after = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        yt = fg.c_row(t) @ xf[: t + 1] + _draw(plan, k)  # the old code, with its reversed views
        y[t] = yt
        _ = fg.b[t::-1] @ y[: t + 1]
        before.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        z = _draw(plan, k)
        limbs[:, t] = limbs_of(x[t], layout)
        y[t] = exact_measurement(krow, limbs[:, : t + 1], z, plan.grid, layout)
        _ = fg.b_row(t) @ y[: t + 1]
        after.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(before), 1e3 * statistics.median(after), layout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exponents", type=int, nargs="+", default=[16, 20])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--smoke", action="store_true", help="n = 2^8, 2 runs; temporary directory")
    args = ap.parse_args()
    results = RESULTS
    if args.smoke:
        args.exponents, args.reps = [8], 2
        results = Path(tempfile.mkdtemp(prefix="matmech-smoke-"))
    out = {"load_avg_start": os.getloadavg(), "rows": []}
    for e in args.exponents:
        n = 2**e
        cands = [
            ("sqrt", dict(eps=1.0, delta=1e-6)),
            ("sqrt", dict(eps=1.0)),
            ("blt", dict(eps=1.0, delta=1e-6)),
        ]
        for name, priv in cands:
            f = build(name, n)
            for k in (1, 16):
                spec = StreamSpec(n, categories=k, factorization=name, **priv)
                b, a, lay = step_times_ms(f, spec, k, args.reps)
                row = {
                    "n": n,
                    "name": name,
                    "noise": "gaussian" if priv.get("delta") else "laplace",
                    "k": k,
                    "before_ms": b,
                    "after_ms": a,
                    "limbs": lay.limbs,
                    "width": lay.width,
                    "bytes_per_cell_before": 24,
                    "bytes_per_cell_after": 8 * (lay.limbs + 2),
                }
                out["rows"].append(row)
                print(json.dumps(row), flush=True)
    out["load_avg_end"] = os.getloadavg()
    results.mkdir(exist_ok=True)
    (results / "stream_step.json").write_text(json.dumps(out, indent=1))
    lines = [
        "| n | factorization | noise | k | step ms before (float, refused past max_records) | "
        "step ms after (exact integers) | limbs × bits | history bytes/cell before → after |",
        "|" + "---|" * 8,
    ]
    for r in out["rows"]:
        lines.append(
            f"| 2^{int(np.log2(r['n']))} | {r['name']} | {r['noise']} | {r['k']} | "
            f"{r['before_ms']:.3f} | {r['after_ms']:.3f} | {r['limbs']} × {r['width']} | "
            f"{r['bytes_per_cell_before']} → {r['bytes_per_cell_after']} |"
        )
    lines.append("")
    lines.append(
        f"max_records = 2^32 (the default). Load average at start/end: "
        f"{out['load_avg_start']} / {out['load_avg_end']}"
    )
    (results / "stream_step.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
