"""Issue 23: compare / release / labels on many labelled intervals (one declared attribute).

Times each stage for m random intervals over a 4,096-cell integer attribute with negative
values (dep_delay -60 … 4035): the spec's labels, `compare` (fixed candidates + SVD bound),
a release (hierarchical) and its table. Run from the repository root:

    PYTHONPATH=. OPENBLAS_NUM_THREADS=1 python benchmarks/labelled_intervals.py [m ...]

Prints a table and saves benchmarks/results/labelled_intervals.json.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np


def stages(m: int) -> dict:
    import matmech as mm
    from matmech.advisor.compare import compare
    from matmech.io.domain import Domain, integer_range
    from matmech.release import release_table

    rng = np.random.default_rng(0)
    lo = rng.integers(0, 4096, m)
    hi = np.minimum(lo + rng.integers(0, 200, m), 4095)
    dom = Domain((integer_range("dep_delay", -60, 4035),))
    out = {}
    t = time.perf_counter()
    W = mm.workloads.ranges(4096, np.column_stack([lo, hi]))
    out["workload"] = time.perf_counter() - t
    t = time.perf_counter()
    labels = interval_labels(dom, lo, hi)
    out["labels"] = time.perf_counter() - t
    t = time.perf_counter()
    compare(W, 1.0)
    out["compare"] = time.perf_counter() - t
    x = rng.integers(0, 50, 4096)
    t = time.perf_counter()
    rel = mm.release(x, W, 1.0, strategy="hierarchical", domain=dom)
    out["release"] = time.perf_counter() - t
    t = time.perf_counter()
    release_table(rel, labels)
    out["release_table"] = time.perf_counter() - t
    return out


def interval_labels(dom, lo, hi):
    if hasattr(dom, "interval_labels"):
        return dom.interval_labels(lo, hi)
    return [dom.interval_label(int(a), int(b)) for a, b in zip(lo, hi)]


def main(argv):
    ms = [int(a) for a in argv] or [200_000, 2_000_000]
    rows = []
    for m in ms:
        r = stages(m)
        rows.append({"m": m, **r})
        print(f"m = {m:>10,}  " + "  ".join(f"{k} {v:7.2f} s" for k, v in r.items()), flush=True)
    res = {"load_average": os.getloadavg(), "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"), "rows": rows}
    path = Path(__file__).parent / "results" / "labelled_intervals.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(res, indent=2))
    print(f"load average {os.getloadavg()}; saved {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
