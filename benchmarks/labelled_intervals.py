"""Issue 23: labelled intervals at scale, the per-label loop against the vectorised path.

m random intervals over a 4,096-cell integer attribute with negative values (dep_delay -60 …
4035). In one process, alternating, median of ``--repeats``:

* labels: one ``Domain.interval_label`` call per interval (the old path of ``load_spec``)
  against ``Domain.interval_labels`` (one vectorised call);
* release_table: per-row numpy scalars (the old path) against ``.tolist()`` columns;
* the SVD bound asked twice (``matmech compare`` does), the second time kept on W.

Run from the repository root:

    PYTHONPATH=. OPENBLAS_NUM_THREADS=1 python benchmarks/labelled_intervals.py [m ...]
    python benchmarks/labelled_intervals.py --smoke     # m = 2,000 over 256 cells (CI)

Prints a table and saves benchmarks/results/labelled_intervals.json (with the load average;
``--smoke``: in a temporary directory).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def _time(fn, repeats):
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def stages(m: int, repeats: int, n: int = 4096) -> dict:
    import matmech as mm
    from matmech.error import lower_bound
    from matmech.linalg.marginal_spectrum import _singular_value_sum
    from matmech.io.domain import Domain, integer_range
    from matmech.results.release import release_table

    rng = np.random.default_rng(0)
    lo = rng.integers(0, n, m)
    hi = np.minimum(lo + rng.integers(0, 200, m), n - 1)
    dom = Domain((integer_range("dep_delay", -60, n - 61),))
    W = mm.workloads.ranges(n, np.column_stack([lo, hi]))
    out = {}
    out["labels_loop"] = _time(
        lambda: [dom.interval_label(int(a), int(b)) for a, b in zip(lo, hi)], repeats
    )
    out["labels_vectorised"] = _time(lambda: dom.interval_labels(lo, hi), repeats)
    labels = dom.interval_labels(lo, hi)
    rel = mm.release(rng.integers(0, 50, n), W, 1.0, strategy="hierarchical", domain=dom)
    lower, upper = rel.interval()

    def old_table():
        return [
            {
                "query": str(q),
                "answer": float(a),
                "std": float(s),
                "lower": float(x),
                "upper": float(y),
            }
            for q, a, s, x, y in zip(labels, rel.answers, rel.std, lower, upper)
        ]

    out["table_scalars"] = _time(old_table, repeats)
    out["table_tolist"] = _time(lambda: release_table(rel, labels), repeats)
    W2 = mm.workloads.ranges(n, np.column_stack([lo[:1000], hi[:1000]]))
    out["svd_bound_uncached"] = _time(lambda: _singular_value_sum(W2), 1)
    lower_bound(W2, 1.0)
    out["svd_bound_kept"] = _time(lambda: lower_bound(W2, 1.0), 1)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "m", nargs="*", type=int, help="interval counts (default 200,000 and 2,000,000)"
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="m = 2,000 over 256 cells; file in a temporary directory",
    )
    args = ap.parse_args(argv)
    repeats = 1 if args.smoke else 3
    ms = [2_000] if args.smoke else (args.m or [200_000, 2_000_000])
    rows = []
    for m in ms:
        r = stages(m, repeats, 256 if args.smoke else 4096)
        rows.append({"m": m, **r})
        print(f"m = {m:>10,}  " + "  ".join(f"{k} {v:7.3f} s" for k, v in r.items()), flush=True)
    res = {
        "load_average": os.getloadavg(),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
        "repeats": repeats,
        "rows": rows,
    }
    results = Path(tempfile.mkdtemp(prefix="matmech-smoke-")) if args.smoke else None
    path = (results or Path(__file__).parent / "results") / "labelled_intervals.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(res, indent=2))
    print(f"load average {os.getloadavg()}; saved {path}")


if __name__ == "__main__":
    main()
