"""Issue 23: `compare` on m random labelled-style intervals over 4,096 cells.

The SVD lower bound (an n×n eigendecomposition, independent of m) is left out, so the time
is the per-query error figures of the 13 fixed candidates. Run once per source tree and tag:

    PYTHONPATH=/path/to/tree OPENBLAS_NUM_THREADS=1 python benchmarks/compare_intervals.py TAG [m]

Appends {tag, m, seconds, best, rmse, load average} to benchmarks/results/compare_intervals.json.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np


def main(argv):
    import matmech as mm
    import matmech.linalg.marginal_spectrum as S  # nuclear_norm, hence the SVD bound
    from matmech.advisor.compare import compare

    tag = argv[0] if argv else "run"
    m = int(argv[1]) if len(argv) > 1 else 2_000_000
    S._singular_value_sum = lambda W: 1.0  # the bound depends on n only; not what is timed here
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
    path = Path(__file__).parent / "results" / "compare_intervals.json"
    path.parent.mkdir(exist_ok=True)
    old = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps(old + [row], indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
