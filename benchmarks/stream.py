"""Continual release (issue 25): error, state and time per step of every stream factorization.

For n = 2^10 … 2^20: mean and max variance of the running totals in σ² units at unit
sensitivity (the exact closed forms of matmech.stream) per factorization, the SVD bound
(mean) and the γ₂ bound (max); the factorization's own state per step (numbers kept by its
recurrence: BLT buffers, band width; n for the square root and the dense optimum); the
time of one step's arithmetic at t = n − 1 (the exact integer C_g[t]·x over the history,
noise and B_g[t]·y over the history, as benchmarks/stream_step.py; matmech's release keeps
the histories) and of a whole real step with its two SQLite commits (median of 40 early
steps). jax_privacy's optimised BLT losses, if present in
/work/scratch/stream/jp_results.json (run there, in a scratch venv, by run_jp*.py), are
printed beside ours.

    OPENBLAS_NUM_THREADS=1 python benchmarks/stream.py [--exponents 10 12 ...] [--dense-max 4096]

Writes benchmarks/results/stream.json and stream.md (``--smoke``: n = 2^6 only, in a
temporary directory; for CI).
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

from matmech.stream.bounds import gamma2_bound, svd_bound, tree_errors  # noqa: E402
from matmech.stream.factorizations import build  # noqa: E402
from matmech.stream.plan import StreamSpec  # noqa: E402
from matmech.stream.release import StreamRelease  # noqa: E402
from stream_step import step_times_ms  # noqa: E402  (benchmarks/ is the script's directory)

RESULTS = ROOT / "benchmarks" / "results"
JP = Path("/work/scratch/stream/jp_results.json")


def _step_compute_ms(f, reps=15):
    """Median ms of one step's arithmetic at t = n − 1 on full histories (one category):
    the exact integer measurement of benchmarks/stream_step.py."""
    return step_times_ms(f, StreamSpec(f.n, eps=1.0, delta=1e-6), 1, reps)[1]


def _real_step_ms(n, steps=40):
    with tempfile.TemporaryDirectory() as d:
        s = StreamRelease.create(
            Path(d) / "s.db", StreamSpec(n, eps=1.0, delta=1e-6, factorization="sqrt")
        )
        times = []
        for t in range(steps):
            t0 = time.perf_counter()
            s.step([t % 7])
            times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main():
    global RESULTS
    ap = argparse.ArgumentParser()
    ap.add_argument("--exponents", type=int, nargs="+", default=list(range(10, 21)))
    ap.add_argument("--dense-max", type=int, default=4096)
    ap.add_argument("--smoke", action="store_true", help="n = 2^6; temporary directory")
    args = ap.parse_args()
    if args.smoke:
        args.exponents = [6]
        RESULTS = Path(tempfile.mkdtemp(prefix="matmech-smoke-"))
    jp = json.loads(JP.read_text()) if JP.exists() else {}
    out = {"load_avg_start": os.getloadavg(), "rows": []}
    for e in args.exponents:
        n = 2**e
        bounds = {"svd_mean": svd_bound(n), "gamma2_max": gamma2_bound(n)}
        cands = [
            ("sqrt", "mean", {}),
            ("blt", "mean", {}),
            ("blt", "max", {}),
            ("banded", "mean", {}),
            ("banded", "max", {}),
        ]
        if n <= args.dense_max:
            cands.append(("dense", "mean", {}))
        for name, obj, opts in cands:
            t0 = time.perf_counter()
            f = build(name, n, objective=obj, **opts)
            build_s = time.perf_counter() - t0
            mean, mx = f.errors()
            row = {
                "n": n,
                "name": name,
                "objective": obj,
                "mean": mean,
                "max": mx,
                "state": f.memory_per_step(),
                "params": [list(map(str, p)) for p in f.params],
                "build_s": build_s,
                "step_ms": _step_compute_ms(f),
                **bounds,
            }
            ref = jp.get(f"{obj}_{n}") if name == "blt" else None
            if ref and "loss" in ref:
                row["jax_privacy"] = ref["loss"]
                row["jax_privacy_buffers"] = len(ref["theta"])
                row["vs_jax_privacy"] = (mean if obj == "mean" else mx) / ref["loss"] - 1.0
            out["rows"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "params"}), flush=True)
        tm, tx, levels = tree_errors(n)
        out["rows"].append(
            {
                "n": n,
                "name": "tree+ls",
                "objective": "-",
                "mean": tm,
                "max": tx,
                "state": levels,
                "build_s": 0.0,
                "step_ms": None,
                **bounds,
            }
        )
        out.setdefault("real_step_ms", {})[n] = _real_step_ms(n)
        out["load_avg_end"] = os.getloadavg()
        _write(out)  # after every n: a partial run keeps what it measured


def _write(out):
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "stream.json").write_text(json.dumps(out, indent=1))
    lines = [
        "| n | factorization | chosen for | mean σ² | max σ² | SVD bound (mean) | γ₂ bound (max) | state/step | "
        "step ms (t=n−1) | jax_privacy | ours vs jp |",
        "|" + "---|" * 11,
    ]
    for r in sorted(out["rows"], key=lambda r: r["n"]):
        jpv = f"{r['jax_privacy']:.4f}" if "jax_privacy" in r else ""
        rel = f"{100 * r['vs_jax_privacy']:+.2f}%" if "vs_jax_privacy" in r else ""
        ms = f"{r['step_ms']:.3f}" if r.get("step_ms") is not None else "—"
        lines.append(
            f"| 2^{int(np.log2(r['n']))} | {r['name']} | {r['objective']} | {r['mean']:.4f} | {r['max']:.4f} | "
            f"{r['svd_mean']:.4f} | {r['gamma2_max']:.4f} | {r['state']} | {ms} | {jpv} | {rel} |"
        )
    lines.append("")
    lines.append(
        "Real step (two SQLite commits, median of 40 early steps, ms): "
        + ", ".join(
            f"2^{int(np.log2(int(n)))}: {v:.2f}" for n, v in sorted(out["real_step_ms"].items())
        )
    )
    lines.append(f"Load average at start/end: {out['load_avg_start']} / {out['load_avg_end']}")
    (RESULTS / "stream.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
