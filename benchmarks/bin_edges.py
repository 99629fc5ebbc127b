"""Values on a bin edge, counted by every engine against an exact reference (issue 31).

The ``diamonds`` table (53,940 rows; its ``carat`` column has two decimals) binned by
``numeric_bins("carat", lo=0, hi=5, width=0.1, policy="clip")``: 50 bins. The reference
count of bin i reads each carat as the exact decimal it is written as (``Fraction("0.30")``)
and puts it in [i/10, (i+1)/10) (the last bin also takes the values above 5, as "clip"
does). Every engine that is installed counts the same column: numpy (pandas, Polars, Arrow
and a dict of arrays), DuckDB (pandas, Polars, Arrow, the CSV file) and Spark (local[1],
``--spark``). The script prints the number of bins whose count differs from the reference,
the [0.2, 0.3) bin, and the median time of a count, and saves the per-bin counts.

    python benchmarks/bin_edges.py --data /path/to/diamonds.csv [--spark] [--label after]
    python benchmarks/bin_edges.py --smoke   # no data file: generated values on every edge

``--smoke`` writes the text of a value on every edge of the same 50 bins, one just below
(the previous float) and one just above, three copies each, and counts those instead.
Writes benchmarks/results/bin_edges_<label>.json (``--smoke``: a temporary directory unless ``--results``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
LO, HI, WIDTH, K = 0, 5, Fraction(1, 10), 50


def smoke_texts() -> list[str]:
    """Every edge i/10 of the 50 bins, the float just below it and the one just above."""
    out = []
    for i in range(K + 1):
        e = float(Fraction(i, 10))
        for v in (math.nextafter(e, -math.inf), e, math.nextafter(e, math.inf)):
            if v >= 0:
                out += [repr(v)] * 3
    return out


def reference(texts: list[str]) -> np.ndarray:
    """Counts per bin with exact arithmetic on the written decimals (clip at both ends)."""
    ref = np.zeros(K, dtype=np.int64)
    for t in texts:
        i = math.floor((Fraction(t) - LO) / WIDTH)
        ref[min(max(i, 0), K - 1)] += 1
    return ref


def sources(path: Path, texts: list[str], spark: bool):
    """(label, engine, source factory) for every engine and source kind installed."""
    import pandas as pd

    values = np.array([float(t) for t in texts])
    frame = pd.DataFrame({"carat": values})
    out = [
        ("numpy: dict of arrays", "numpy", lambda: {"carat": values}),
        ("numpy: pandas", "numpy", lambda: frame),
        ("duckdb: pandas", "duckdb", lambda: frame),
        ("duckdb: CSV file", "duckdb", lambda: str(path)),
    ]
    try:
        import polars as pl

        out += [
            ("numpy: polars", "numpy", lambda: pl.from_pandas(frame)),
            ("duckdb: polars", "duckdb", lambda: pl.from_pandas(frame)),
        ]
    except ImportError:
        pass
    try:
        import pyarrow as pa

        out += [
            ("numpy: arrow", "numpy", lambda: pa.Table.from_pandas(frame)),
            ("duckdb: arrow", "duckdb", lambda: pa.Table.from_pandas(frame)),
        ]
    except ImportError:
        pass
    if spark:
        from pyspark.sql import SparkSession

        session = (
            SparkSession.builder.master("local[1]")
            .appName("matmech-bin-edges")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "1")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        sdf = session.createDataFrame([(float(v),) for v in values], ["carat"]).cache()
        sdf.count()
        out.append(("spark: DataFrame", "spark", lambda: sdf))
    return out


def per_bin(before: dict, after: dict) -> str:
    """A Markdown table of the per-bin counts: the reference and the distinct counts every
    engine gave in each run (one column when the engines agree)."""

    def column(run):
        counts = {tuple(r["counts"]) for r in run["engines"]}
        return counts.pop() if len(counts) == 1 else None

    b, a = column(before), column(after)
    head = f"| bin | exact | {before['label']} | {after['label']} |\n|---|---:|---:|---:|\n"
    lines = []
    for i, label in enumerate(after["bins"]):
        ref = after["reference"][i]
        cb = "engines differ" if b is None else f"{b[i]:,}" + (" ✗" if b[i] != ref else "")
        ca = "engines differ" if a is None else f"{a[i]:,}" + (" ✗" if a[i] != ref else "")
        lines.append(f"| {label} | {ref:,} | {cb} | {ca} |")
    engines = ", ".join(r["engine"] for r in after["engines"])
    return (
        f"Per-bin counts of carat (lo=0, hi=5, width=0.1, clip), {after['values']:,} values; "
        f"every engine gave the same column ({engines}); ✗: differs from exact decimal arithmetic.\n\n"
        + head
        + "\n".join(lines)
        + "\n"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("/work/scratch/data/diamonds.csv"))
    ap.add_argument("--smoke", action="store_true", help="generated edge values, no data file")
    ap.add_argument("--spark", action="store_true", help="also count with Spark local[1]")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--label", default="this", help="a name for this checkout in the output")
    ap.add_argument(
        "--results", type=Path, default=None, help="where the JSON goes (--smoke: a temporary dir)"
    )
    ap.add_argument(
        "--compare",
        type=Path,
        help="a JSON of another checkout's run: print both per-bin counts (bin_edges_<label>.md)",
    )
    args = ap.parse_args(argv)

    from matmech.io.domain import Domain, numeric_bins
    from matmech.sources.engines import histogram

    with tempfile.TemporaryDirectory() as tmp:
        if args.smoke:
            texts = smoke_texts()
            path = Path(tmp) / "edges.csv"
            path.write_text("carat\n" + "\n".join(texts) + "\n")
            repeats = 1
        else:
            with open(args.data, newline="") as f:
                texts = [row["carat"] for row in csv.DictReader(f)]
            path, repeats = args.data, args.repeats
        dom = Domain((numeric_bins("carat", lo=LO, hi=HI, width=0.1, policy="clip"),))
        labels = [dom.attributes[0].value_label(i) for i in range(K)]
        ref = reference(texts)
        rows = []
        print(f"{len(texts):,} values, {K} bins; reference [0.2, 0.3) = {ref[2]:,}")
        print(f"{'engine: source':<24} {'wrong bins':>10} {'[0.2, 0.3)':>11} {'median s':>9}")
        for label, engine, make in sources(path, texts, args.spark):
            src = make()
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                got = histogram(src, dom, engine=engine)
                times.append(time.perf_counter() - t0)
            wrong = int(np.sum(got != ref))
            rows.append(
                {
                    "engine": label,
                    "wrong_bins": wrong,
                    "counts": got.tolist(),
                    "median_s": statistics.median(times),
                }
            )
            print(f"{label:<24} {wrong:>10} {int(got[2]):>11,} {statistics.median(times):>9.4f}")
    out = {
        "label": args.label,
        "smoke": args.smoke,
        "values": len(texts),
        "bins": labels,
        "reference": ref.tolist(),
        "engines": rows,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "load": os.getloadavg()[0],
    }
    if args.results is None:  # a smoke run never writes into benchmarks/results
        args.results = Path(tempfile.mkdtemp(prefix="matmech-smoke-")) if args.smoke else RESULTS
    args.results.mkdir(parents=True, exist_ok=True)
    name = f"bin_edges{'_smoke' if args.smoke else ''}_{args.label}.json"
    (args.results / name).write_text(json.dumps(out, indent=1) + "\n")
    if args.compare is not None:
        (args.results / f"bin_edges_{args.label}.md").write_text(
            per_bin(json.loads(args.compare.read_text()), out)
        )
    bad = [r["engine"] for r in rows if r["wrong_bins"]]
    print("every engine matches the reference" if not bad else f"wrong: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
