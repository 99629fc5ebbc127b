"""Histogram building per engine: rows/s and peak memory at 10⁶, 10⁷ and 10⁸ records.

The domain is two declared integer attributes a, b ∈ 0..999 (policy clip, missing drop):
10⁶ cells. Records are uniform (a, b) pairs written in chunks with pyarrow to Parquet (and
CSV up to 10⁷) under /tmp, deleted afterwards. Every case runs in its own subprocess; its
memory is sampled every 20 ms from /proc (the process and its children, so Spark's JVM
counts) during the count only, and reported as peak RSS and as the peak above the RSS just
before counting (for in-memory sources the data itself is in the baseline).

    python benchmarks/engines.py                # everything (10⁸ Parquet via DuckDB included)
    python benchmarks/engines.py --max-rows 1e7 # quicker
    python benchmarks/engines.py --smoke        # 10⁴ rows, no Spark, in this process (CI)

Writes benchmarks/results/engines.json and engines.md (``--smoke``: in a temporary directory).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
WORK = Path("/tmp/matmech_bench_engines")
SIDE = 1000  # 1000 x 1000 = 10^6 cells
CHUNK = 5_000_000

#: (engine label, source kind, sizes) — what runs at which number of rows.
CASES = [
    ("numpy (dict of arrays)", "columns", [10**6, 10**7]),
    ("duckdb: pandas", "pandas", [10**6, 10**7]),
    ("duckdb: polars", "polars", [10**6, 10**7]),
    ("duckdb: arrow", "arrow", [10**6, 10**7]),
    ("duckdb: CSV file", "csv", [10**6, 10**7]),
    ("duckdb: Parquet file", "parquet", [10**6, 10**7, 10**8]),
    ("spark local[2]: Parquet", "spark", [10**6, 10**7]),
]


def _domain():
    from matmech.io.domain import Domain, integer_range

    return Domain(
        (
            integer_range("a", 0, SIDE - 1, policy="clip", missing="drop"),
            integer_range("b", 0, SIDE - 1, policy="clip", missing="drop"),
        )
    )


def _paths(rows):
    return WORK / f"ab_{rows}.parquet", WORK / f"ab_{rows}.csv"


def make_data(rows, *, csv):
    """Uniform (a, b) in chunks: Parquet always, CSV when asked. Returns the true histogram's
    checksum (sum of cell index x count) to check every engine against."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    WORK.mkdir(parents=True, exist_ok=True)
    pq_path, csv_path = _paths(rows)
    rng = np.random.default_rng(rows)  # benchmark data, not library code
    schema = pa.schema([("a", pa.int32()), ("b", pa.int32())])
    counts = np.zeros(SIDE * SIDE, dtype=np.int64)
    with pq.ParquetWriter(pq_path, schema) as writer:
        csv_writer = pacsv.CSVWriter(str(csv_path), schema) if csv else None
        done = 0
        while done < rows:
            k = min(CHUNK, rows - done)
            a = rng.integers(0, SIDE, k, dtype=np.int32)
            b = rng.integers(0, SIDE, k, dtype=np.int32)
            table = pa.table({"a": a, "b": b}, schema=schema)
            writer.write_table(table, row_group_size=1_000_000)
            if csv_writer is not None:
                csv_writer.write_table(table)
            counts += np.bincount(a.astype(np.int64) * SIDE + b, minlength=SIDE * SIDE)
            done += k
        if csv_writer is not None:
            csv_writer.close()
    return counts


# -- one case, in a subprocess ---------------------------------------------------------------


def _rss_tree(root_pid):
    """RSS (bytes) of root_pid and all its descendants, from /proc."""
    children, rss = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(parts[1]), []).append(int(d))
            rss[int(d)] = int(parts[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, stack = 0, [root_pid]
    while stack:
        p = stack.pop()
        total += rss.get(p, 0)
        stack.extend(children.get(p, []))
    return total


class _Sampler:
    def __init__(self):
        self.peak, self.running = 0, False

    def __enter__(self):
        self.running = True
        self.base = _rss_tree(os.getpid())
        self.peak = self.base
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        while self.running:
            self.peak = max(self.peak, _rss_tree(os.getpid()))
            time.sleep(0.02)

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, _rss_tree(os.getpid()))


def run_case(kind, rows, repeats):
    from matmech.sources.engines import histogram

    domain = _domain()
    pq_path, csv_path = _paths(rows)
    spark = None
    if kind == "csv":
        source = str(csv_path)
    elif kind == "parquet":
        source = str(pq_path)
    elif kind == "spark":
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master("local[2]")
            .appName("matmech-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "4g")
            .config("spark.sql.shuffle.partitions", "8")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        source = spark.read.parquet(str(pq_path))
    else:
        import pyarrow.parquet as pq

        table = pq.read_table(pq_path)
        if kind == "arrow":
            source = table
        elif kind == "pandas":
            source = table.to_pandas()
        elif kind == "polars":
            import polars as pl

            source = pl.from_arrow(table)
        else:
            source = {c: table.column(c).to_numpy() for c in table.column_names}
        del table
    times, peaks, extra, x = [], [], [], None
    for _ in range(repeats):
        with _Sampler() as s:
            t = time.perf_counter()
            x = histogram(source, domain)
            times.append(time.perf_counter() - t)
        peaks.append(s.peak)
        extra.append(s.peak - s.base)
    if spark is not None:
        spark.stop()
    checksum = int(np.dot(np.arange(x.size, dtype=np.int64), x))
    return {
        "seconds": times,
        "peak_rss": max(peaks),
        "peak_above_baseline": max(extra),
        "checksum": checksum,
        "total": int(x.sum()),
    }


def main():
    global WORK, RESULTS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-rows", type=float, default=1e8)
    ap.add_argument("--case", nargs=3, metavar=("KIND", "ROWS", "REPEATS"), help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help="10⁴ rows, no Spark, in this process (CI)")
    args = ap.parse_args()
    if args.case:
        kind, rows, repeats = args.case[0], int(args.case[1]), int(args.case[2])
        print(json.dumps(run_case(kind, rows, repeats)))
        return
    cases = CASES
    sizes = sorted({n for _, _, ns in CASES for n in ns if n <= args.max_rows})
    if args.smoke:  # the data, the results and every engine but Spark (a JVM start) at 10⁴ rows
        RESULTS = WORK = Path(tempfile.mkdtemp(prefix="matmech-smoke-engines-"))
        cases = [(label, kind, [10**4]) for label, kind, _ in CASES if kind != "spark"]
        sizes = [10**4]
    results, load = [], os.getloadavg()
    try:
        for rows in sizes:
            t = time.perf_counter()
            truth = make_data(rows, csv=rows <= 10**7)
            gen = time.perf_counter() - t
            want = int(np.dot(np.arange(truth.size, dtype=np.int64), truth))
            print(f"{rows:,} rows: data written in {gen:.1f} s", flush=True)
            for label, kind, ns in cases:
                if rows not in ns:
                    continue
                repeats = 3 if rows <= 10**7 and kind != "spark" else (2 if kind == "spark" else 1)
                if args.smoke:
                    r = run_case(kind, rows, 1)
                    ok = r["checksum"] == want and r["total"] == rows
                    print(f"  {label:<26} {r['seconds'][0]:.3f} s  correct={ok}", flush=True)
                    results.append({"engine": label, "kind": kind, "rows": rows, "correct": ok})
                    if not ok:
                        raise SystemExit(f"{label}: a wrong histogram")
                    continue
                out = subprocess.run(
                    [sys.executable, __file__, "--case", kind, str(rows), str(repeats)],
                    capture_output=True,
                    text=True,
                    timeout=3600,
                )
                if out.returncode != 0:
                    print(f"  {label}: FAILED\n{out.stderr[-2000:]}", flush=True)
                    results.append({"engine": label, "rows": rows, "error": out.stderr[-500:]})
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                med = statistics.median(r["seconds"])
                row = {
                    "engine": label,
                    "kind": kind,
                    "rows": rows,
                    "seconds": r["seconds"],
                    "median_s": med,
                    "rows_per_s": rows / med,
                    "peak_rss_mib": r["peak_rss"] / 2**20,
                    "peak_above_baseline_mib": r["peak_above_baseline"] / 2**20,
                    "correct": r["checksum"] == want and r["total"] == rows,
                }
                results.append(row)
                print(
                    f"  {label:<26} {med:8.2f} s  {rows / med / 1e6:8.2f} M rows/s  peak {row['peak_rss_mib']:7.0f} MiB "
                    f"(+{row['peak_above_baseline_mib']:.0f})  correct={row['correct']}",
                    flush=True,
                )
            for p in _paths(rows):
                p.unlink(missing_ok=True)
    finally:
        if not args.smoke:  # the smoke run's data go with its temporary directory's owner
            shutil.rmtree(WORK, ignore_errors=True)
    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "load_before": load,
        "load_after": os.getloadavg(),
        "cells": SIDE * SIDE,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    try:
        import duckdb
        import pyspark

        meta.update(duckdb=duckdb.__version__, pyspark=pyspark.__version__)
    except ImportError:
        pass
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "engines.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    lines = [
        "# Histogram building per engine (10⁶ cells)\n",
        f"{meta['machine']}, load average {load[0]:.1f} before / {meta['load_after'][0]:.1f} after "
        f"(other jobs share the machine); {meta['date']}. Median of 3 runs (10⁸ rows and Spark: fewer).\n",
        "| engine | rows | median s | M rows/s | peak RSS MiB | peak above baseline MiB | correct |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        if args.smoke:
            lines.append(f"| {r['engine']} | {r['rows']:,} | | | | | {r['correct']} |")
            continue
        if "error" in r:
            lines.append(f"| {r['engine']} | {r['rows']:,} | failed | | | | |")
            continue
        lines.append(
            f"| {r['engine']} | {r['rows']:,} | {r['median_s']:.2f} | {r['rows_per_s'] / 1e6:.2f} | "
            f"{r['peak_rss_mib']:.0f} | {r['peak_above_baseline_mib']:.0f} | {r['correct']} |"
        )
    (RESULTS / "engines.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
