"""Seconds of the factored error analysis on domains no dense array could hold (the timings
that tests/linalg/test_factored.py used to assert; the tests now check memory only).

Cases: all 2-way marginals over (10,)*14 (1e14 cells), error of the workload as its own
strategy (total, max) and the lower bound, pure eps and (eps, delta); and the adult-like
14-attribute domain (6.4e17 cells): sensitivities, the lattice and Kronecker errors, the
lower bound. Median of ``--repeat`` runs each.

    OPENBLAS_NUM_THREADS=1 python benchmarks/factored_timing.py

Writes benchmarks/results/factored_timing.json (``--smoke``: each case once, the JSON in a
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ADULT = (85, 9, 100, 16, 7, 15, 6, 5, 2, 100, 100, 99, 42, 2)


def _cases():
    import matmech as mm
    from matmech import workloads
    from matmech.linalg.linop import Identity, Kron, VStack

    M = workloads.marginals((10,) * 14, 2)
    W = workloads.marginals(ADULT, 2)
    P = VStack(
        [
            Kron(
                *[
                    workloads.prefix(d) if i in s else workloads.total(d)
                    for i, d in enumerate(ADULT)
                ]
            )
            for s in [(0, 2), (2, 9), (9, 10), (10, 11)]
        ],
        weights=[1.0, 2.0, 0.5, 1.5],
    )
    A = Kron(*[Identity(d) for d in ADULT])

    def marg(delta):
        return lambda: (
            mm.expected_error(M, M, delta=delta),
            mm.expected_error(M, M, delta=delta, measure="max"),
            mm.lower_bound(M, delta=delta),
        )

    def adult():
        return (
            W.sensitivity_details(1),
            P.sensitivity_details(2),
            mm.expected_error(W, W, measure="max"),
            mm.expected_error(P, A),
            mm.lower_bound(W),
        )

    return {
        "2-way marginals (10,)*14, pure eps": marg(0.0),
        "2-way marginals (10,)*14, delta 1e-6": marg(1e-6),
        "adult-like 14 attributes": adult,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="once each; JSON to a temporary directory")
    args = ap.parse_args(argv)
    if args.smoke:
        args.repeat = 1
    rows = []
    for name, fn in _cases().items():
        ts = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        rows.append(
            {"case": name, "median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts)}
        )
    load = os.getloadavg()[0]
    print(f"load average {load:.2f}, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")
    print(f"{'case':45s} {'median s':>9s} {'min s':>8s} {'max s':>8s}")
    for r in rows:
        print(f"{r['case']:45s} {r['median_s']:9.3f} {r['min_s']:8.3f} {r['max_s']:8.3f}")
    results = Path(tempfile.mkdtemp(prefix="matmech-smoke-")) if args.smoke else None
    out = (results or ROOT / "benchmarks" / "results") / "factored_timing.json"
    out.write_text(
        json.dumps({"load_average": load, "repeat": args.repeat, "rows": rows}, indent=2) + "\n"
    )
    return rows


if __name__ == "__main__":
    main()
