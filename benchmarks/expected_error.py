"""Time and peak memory of expected_error on all ranges (issue #2 targets).

Targets on a 2-core machine: n = 4096 in <= 1 s for each strategy; n = 65536 in <= 30 s
and <= 4 GB. Prints a markdown table and saves benchmarks/results/expected_error.json.
Peak memory is the tracemalloc peak of numpy/python allocations during the call.
Run: python benchmarks/expected_error.py [--repeats 5] [--smoke]
(``--smoke``: n = 256 and 1024 once each, the JSON in a temporary directory; seconds, for CI.)
"""

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from matmech import strategies as S
from matmech import workloads as W
from matmech.error import expected_error

STRATEGIES = {
    "identity": S.identity,
    "hierarchical b=16": lambda n: S.hierarchical(n, 16),
    "haar": S.haar,
}


def measure(n, make, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        rmse = expected_error(W.all_range(n), make(n), measure="rmse")
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    expected_error(W.all_range(n), make(n), measure="rmse")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return rmse, statistics.median(times), peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--smoke", action="store_true", help="small n, once; JSON to a temporary directory"
    )
    args = ap.parse_args()
    if args.smoke:
        args.repeats = 1
    rows = []
    print("| n | strategy | RMSE/query (eps=1) | median seconds (incl. building A) | peak MB |")
    print("|---|---|---|---|---|")
    for n in (256, 1024) if args.smoke else (1024, 4096, 16384, 65536):
        for name, make in STRATEGIES.items():
            rmse, sec, peak = measure(n, make, args.repeats)
            rows.append(dict(n=n, strategy=name, rmse=rmse, seconds=sec, peak_mb=peak / 2**20))
            print(f"| {n} | {name} | {rmse:.3f} | {sec:.4f} | {peak / 2**20:.1f} |")
    out = dict(
        machine=dict(
            platform=platform.platform(), processor=platform.processor(), cpus=os.cpu_count()
        ),
        repeats=args.repeats,
        rows=rows,
    )
    results = Path(tempfile.mkdtemp(prefix="matmech-smoke-")) if args.smoke else None
    path = (results or Path(__file__).parent / "results") / "expected_error.json"
    path.write_text(json.dumps(out, indent=2))
    print(f"saved {path}")


if __name__ == "__main__":
    main()
