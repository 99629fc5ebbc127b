"""Issue 23: `compare` on m random labelled-style intervals over 4,096 cells.

The SVD lower bound (an n×n eigendecomposition, independent of m) is left out, so the time
is the per-query error figures of the 13 fixed candidates. Run once per source tree and tag:

    PYTHONPATH=/path/to/tree OPENBLAS_NUM_THREADS=1 python benchmarks/compare_intervals.py TAG [m]
    python benchmarks/compare_intervals.py --smoke     # m = 2,000, seconds (CI)

Appends {tag, m, seconds, best, rmse, load average} to benchmarks/results/compare_intervals.json
(``--smoke``: to a file in a temporary directory).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def main(argv=None):
    import matmech as mm
    import matmech.linalg.marginal_spectrum as S  # nuclear_norm, hence the SVD bound
    from matmech.advisor.compare import compare

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tag", nargs="?", default="run")
    ap.add_argument("m", nargs="?", type=int, default=2_000_000)
    ap.add_argument("--smoke", action="store_true", help="m = 2,000; file in a temporary directory")
    args = ap.parse_args(argv)
    tag, m = args.tag, (2_000 if args.smoke else args.m)
    S._singular_value_sum = lambda W, *_: 1.0  # the bound depends on n only; not timed here
    rng = np.random.default_rng(0)
    lo = rng.integers(0, 4096, m)
    hi = np.minimum(lo + rng.integers(0, 200, m), 4095)
    W = mm.workloads.ranges(4096, np.column_stack([lo, hi]))
    t = time.perf_counter()
    rows, _ = compare(W, 1.0)
    sec = time.perf_counter() - t
    row = {
        "tag": tag,
        "m": m,
        "seconds": sec,
        "best": rows[0].name,
        "rmse": rows[0].rmse,
        "load_average": os.getloadavg(),
    }
    print(
        f"{tag:>8}  m = {m:,}  compare {sec:.2f} s  best {rows[0].name} (RMSE {rows[0].rmse:.6g})  load {os.getloadavg()[0]:.1f}"
    )
    results = Path(tempfile.mkdtemp(prefix="matmech-smoke-")) if args.smoke else None
    path = (results or Path(__file__).parent / "results") / "compare_intervals.json"
    path.parent.mkdir(exist_ok=True)
    old = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps(old + [row], indent=2))
    print(f"saved {path}")


if __name__ == "__main__":
    main()
