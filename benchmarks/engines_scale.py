"""Marginal releases computed where the data lives (issue 36): DuckDB on Parquet up to 10⁸ rows,
Spark local mode, the streamed 200-attribute release, against the engines' own speed.

Data: a Parquet table of N rows × 20 attributes a0 … a19 with values 0 … 9 (UTINYINT,
``hash(row, attribute) % 10``), written by DuckDB under ``--work`` (default
/work/scratch/engines; never committed). Cases, each in its own subprocess (peak RSS sampled
every 20 ms from /proc over the process and its children, so DuckDB's and Spark's memory
counts):

* ``release``: ``matmech.release(path, W, 1, 1e-6, domain=...)`` for W = all ≤ k-way
  marginals (k = 2, 3): wall time, peak RSS, and the scans of the data (calls of the
  engine's one-scan counter or GROUP BY);
* ``anchor``: DuckDB computing the same maximal tables as plain SQL, the faster of one
  ``GROUPING SETS`` query and one ``GROUP BY`` query per table (the engine's own speed);
* ``same``: on a 10⁶-row file, the release from DuckDB and from the in-memory code array
  with the same seed give identical answers;
* ``spark``: the same plan's tables through Spark local[2] (counted on the executors)
  vs a plain Spark job (``GROUPING SETS`` in Spark SQL) computing them;
* ``streamed``: ``release_marginals`` of all ≤3-way marginals of 200 attributes × 10
  values read from a DuckDB Parquet file, time and peak RSS vs ``max_memory``.

    nice -n 10 python benchmarks/engines_scale.py               # the full run (hours)
    python benchmarks/engines_scale.py --rows 1e6 1e7           # fewer sizes
    python benchmarks/engines_scale.py --smoke                  # seconds, temporary directory
    python benchmarks/engines_scale.py --parts duckdb --rows 1e8 --ways 2 3 \
        --max-3way-rows 1e8 --anchor grouping-sets             # 10⁸ rows, DuckDB's one query

Writes benchmarks/results/engines_scale.{json,md} (``--smoke``: in a temporary directory);
``--parts`` runs some cases and keeps the saved others (DuckDB and Spark rows by size).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
D, K = 20, 10


def write_parquet(path, rows, d=D, k=K):
    """``rows`` × ``d`` UTINYINT attributes, value hash(i·d + j) mod k, written by DuckDB."""
    import duckdb

    if Path(path).exists():
        return
    cols = ", ".join(f"CAST(hash(i * {d} + {j}) % {k} AS UTINYINT) AS a{j}" for j in range(d))
    con = duckdb.connect()
    con.execute("SET memory_limit = '1GB'")
    con.execute(
        f"COPY (SELECT {cols} FROM range({int(rows)}) t(i)) TO '{path}.tmp' "
        "(FORMAT parquet, ROW_GROUP_SIZE 1000000)"
    )
    con.close()
    os.replace(f"{path}.tmp", path)


def domain(d=D, k=K):
    from matmech.io.domain import Domain, integer_range

    return Domain([integer_range(f"a{j}", 0, k - 1) for j in range(d)])


def workload(d, k, way):
    from matmech.linalg.terms import marginal_workload

    subsets = [s for r in range(1, way + 1) for s in itertools.combinations(range(d), r)]
    return marginal_workload((k,) * d, subsets)


def _count_scans():
    """Wrap the DuckDB and Spark entries so every scan of the data is counted."""
    from matmech.sources import engines as E
    from matmech.sources.grouping import Engine

    scans = []
    for name in ("duckdb", "spark"):
        e = E.ENGINE_REGISTRY[name]

        def groups(*a, _e=e, **kw):
            scans.append(1)
            return _e.groups(*a, **kw)

        def tables(*a, _e=e, **kw):
            scans.append(1)
            return _e.tables(*a, **kw)

        E.register_engine(Engine(name, groups, e.check, tables), replace=True)
    return scans


# -- the cases (each in a subprocess) ---------------------------------------------------------


def case_release(path, d, way, seed=1):
    import matmech

    scans = _count_scans()
    W = workload(d, K, way)
    t = time.perf_counter()
    r = matmech.release(str(path), W, 1.0, 1e-6, domain=domain(d), rng=np.random.default_rng(seed))
    out = {"s": time.perf_counter() - t, "scans": len(scans), "answers": int(W.shape[0])}
    if hasattr(r, "answers"):
        out["checksum"] = float(np.asarray(r.answers, dtype=np.float64).sum())
    return out


def case_anchor(path, d, way, which="auto"):
    """DuckDB's own speed for the maximal tables: one GROUPING SETS query, and one GROUP BY per
    table. ``which``: "group-by" or "grouping-sets" (that query only, at any size), "both", or
    "auto" (GROUP BY each, and GROUPING SETS too when ``way`` ≤ 2 and the rows ≤ 10⁷ or the
    rows ≤ 10⁶)."""
    import duckdb

    sets = list(itertools.combinations(range(d), way))
    con = duckdb.connect()
    src = f"read_parquet('{path}')"
    out = {}
    if which in ("auto", "both", "group-by"):
        t = time.perf_counter()
        for s in sets:
            cols = ", ".join(f"a{j}" for j in s)
            con.execute(f"SELECT {cols}, count(*) FROM {src} GROUP BY {cols}").fetchnumpy()
        out["group_by_s"] = time.perf_counter() - t
    rows = con.execute(f"SELECT count(*) FROM {src}").fetchone()[0]
    small = rows <= 10**7 and (way <= 2 or rows <= 10**6)
    if which in ("both", "grouping-sets") or (which == "auto" and small):
        gs = ", ".join("(" + ", ".join(f"a{j}" for j in s) + ")" for s in sets)
        cols = ", ".join(f"a{j}" for j in range(d))
        t = time.perf_counter()
        con.execute(
            f"SELECT {cols}, count(*) FROM {src} GROUP BY GROUPING SETS ({gs})"
        ).fetchnumpy()
        out["grouping_sets_s"] = time.perf_counter() - t
    out["s"] = min(v for k, v in out.items() if k.endswith("_s"))
    return out


def case_same(path, d, way, seed=1):
    """The release from DuckDB and from the records in memory, same seed: identical answers."""
    import duckdb

    import matmech

    W = workload(d, K, way)
    a = matmech.release(str(path), W, 1.0, 1e-6, domain=domain(d), rng=np.random.default_rng(seed))
    codes = duckdb.connect().execute(f"SELECT * FROM read_parquet('{path}')").fetchnumpy()
    codes = np.column_stack([codes[f"a{j}"] for j in range(d)]).astype(np.int64)
    b = matmech.release(codes, W, 1.0, 1e-6, rng=np.random.default_rng(seed))
    same = bool(np.array_equal(a.answers, b.answers) and np.array_equal(a.std, b.std))
    return {"s": 0.0, "identical": same}


def _spark():
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )


def case_spark(path, d, way):
    from matmech.sources.engines import marginal_counts

    spark = _spark()
    df = spark.read.parquet(str(path))
    df.count()  # the JVM and the file listing warmed up, outside both timings
    sets = list(itertools.combinations(range(d), way))
    scans = _count_scans()
    t = time.perf_counter()
    tables = marginal_counts(df, domain(d), sets, engine="spark")
    ours = time.perf_counter() - t
    df.createOrReplaceTempView("t")
    gs = ", ".join("(" + ", ".join(f"a{j}" for j in s) + ")" for s in sets)
    cols = ", ".join(f"a{j}" for j in range(d))
    t = time.perf_counter()
    plain = spark.sql(
        f"SELECT {cols}, count(*) AS n FROM t GROUP BY GROUPING SETS ({gs})"
    ).toArrow()
    anchor = time.perf_counter() - t
    # the plain job's counts equal ours
    arr = {c: plain.column(c).to_numpy(zero_copy_only=False) for c in plain.column_names}
    ok = True
    for s in sets[:5]:
        rows = np.all([~np.isnan(arr[f"a{j}"].astype(float)) for j in s], axis=0)
        others = [j for j in range(d) if j not in s]
        rows &= np.all([np.isnan(arr[f"a{j}"].astype(float)) for j in others], axis=0)
        t2 = np.zeros((K,) * len(s), dtype=np.int64)
        idx = tuple(arr[f"a{j}"][rows].astype(int) for j in s)
        np.add.at(t2, idx, arr["n"][rows].astype(np.int64))
        ok &= bool(np.array_equal(t2, tables[s]))
    spark.stop()
    return {"s": ours, "anchor_s": anchor, "scans": len(scans), "identical": ok}


def case_streamed(path, d, max_memory):
    from matmech import release_marginals

    scans = _count_scans()
    W = workload(d, K, 3)
    t = time.perf_counter()
    rel = release_marginals(
        str(path),
        W,
        1.0,
        1e-6,
        domain=domain(d),
        rng=np.random.default_rng(1),
        max_memory=int(max_memory),
    )
    released = time.perf_counter() - t
    first = rel.marginal((0, 1, 2))[0]
    return {
        "s": released,
        "scans": len(scans),
        "answers": int(rel.rows),
        "first_cell": bool(np.isfinite(first).all()),
    }


CASES = {
    "release": case_release,
    "anchor": case_anchor,
    "same": case_same,
    "spark": case_spark,
    "streamed": case_streamed,
}


# -- the driver ------------------------------------------------------------------------------


def _tree_rss(pid):
    """RSS (bytes) of ``pid`` and its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def run_case(name, *args, timeout=None):
    """The case in a subprocess → its result, with ``peak_gib`` (the process tree's RSS)."""
    cmd = [sys.executable, __file__, "--case", json.dumps([name, *map(str, args)])]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, stop = [0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            time.sleep(0.02)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return {"case": name, "error": f"timeout after {timeout} s"}
    finally:
        stop.set()
        th.join()
    if proc.returncode:
        return {"case": name, "error": err[-800:]}
    res = json.loads(out.strip().splitlines()[-1])
    res.update(case=name, peak_gib=peak[0] / 2**30)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, temporary directory")
    ap.add_argument("--rows", nargs="*", type=float, default=[1e6, 1e7, 1e8])
    ap.add_argument("--ways", nargs="*", type=int, default=[2, 3])
    ap.add_argument("--work", default="/work/scratch/engines")
    ap.add_argument("--streamed-rows", type=float, default=1e5)
    ap.add_argument(
        "--streamed-max-memory",
        type=float,
        default=4,
        help="the streamed release's max_memory, GiB",
    )
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--max-3way-rows", type=float, default=1e7, help="≤3-way up to this size")
    ap.add_argument(
        "--anchor",
        choices=("auto", "both", "group-by", "grouping-sets"),
        default="auto",
        help="DuckDB's own queries timed: one GROUP BY per table, one GROUPING SETS query, both, "
        "or auto (GROUP BY each; GROUPING SETS too up to 10^7 rows ≤2-way, 10^6 ≤3-way)",
    )
    ap.add_argument(
        "--parts",
        nargs="*",
        default=["duckdb", "same", "spark", "streamed"],
        help="what to run; the others are kept from the saved results",
    )
    args = ap.parse_args()
    if args.case:
        name, *rest = json.loads(args.case)
        typed = [
            int(float(x)) if x.replace(".", "").replace("e", "").isdigit() else x for x in rest
        ]
        print(json.dumps(CASES[name](*typed)))
        return
    results_dir, work = RESULTS, Path(args.work)
    d, stream_d = D, 200
    if args.smoke:
        results_dir = work = Path(tempfile.mkdtemp(prefix="matmech-smoke-engines-scale-"))
        args.rows, args.ways, d, stream_d, args.streamed_rows = [2e3], [2], 5, 8, 500
        args.no_spark = True
    work.mkdir(parents=True, exist_ok=True)
    rows_all = []
    for n in sorted({int(r) for r in args.rows}) if "duckdb" in args.parts else []:
        path = work / f"rows_{n:.0e}_{d}.parquet".replace("+", "")
        write_parquet(path, n, d)
        for way in args.ways:
            if way == 3 and n > args.max_3way_rows:
                continue
            r = run_case("release", path, d, way)
            a = run_case("anchor", path, d, way, args.anchor)
            rows_all.append({"rows": n, "way": way, "release": r, "anchor": a})
            print(json.dumps(rows_all[-1]), flush=True)
    n_same = min(int(r) for r in args.rows)
    path = work / f"rows_{n_same:.0e}_{d}.parquet".replace("+", "")
    spark, same, streamed = [], [], {}
    if "same" in args.parts:
        write_parquet(path, n_same, d)
        same = [{"rows": n_same, "way": way, **run_case("same", path, d, way)} for way in args.ways]
    if "spark" in args.parts and not args.no_spark:
        for way in args.ways:  # ≤3-way GROUPING SETS expand every row 1140 times: fewer rows
            n_spark = n_same if way <= 2 else max(n_same // 10, 1000)
            spath = work / f"rows_{n_spark:.0e}_{d}.parquet".replace("+", "")
            write_parquet(spath, n_spark, d)
            spark.append({"rows": n_spark, "way": way, **run_case("spark", spath, d, way)})
            print(json.dumps(spark[-1]), flush=True)
    if "streamed" in args.parts:
        ns = int(args.streamed_rows)
        spath = work / f"rows_{ns:.0e}_{stream_d}.parquet".replace("+", "")
        write_parquet(spath, ns, stream_d)
        max_memory = int(args.streamed_max_memory * 2**30)
        streamed = {"rows": ns, "attributes": stream_d, "max_memory_gib": max_memory / 2**30}
        streamed.update(run_case("streamed", spath, stream_d, max_memory))
        print(json.dumps(streamed), flush=True)
    saved_path = results_dir / "engines_scale.json"  # read now: parts may run concurrently
    saved = json.loads(saved_path.read_text()) if saved_path.exists() else {}
    keep = {"duckdb": rows_all, "same": same, "spark": spark, "streamed": streamed}
    for part in keep:
        if part not in args.parts:
            keep[part] = saved.get(part, keep[part])
        elif part in ("duckdb", "spark"):  # a run of some sizes keeps the saved others
            new = {(r["rows"], r["way"]) for r in keep[part]}
            old = [r for r in saved.get(part, []) if (r["rows"], r["way"]) not in new]
            keep[part] = sorted(old + keep[part], key=lambda r: (r["rows"], r["way"]))
    rows_all, same, spark, streamed = keep["duckdb"], keep["same"], keep["spark"], keep["streamed"]
    meta = saved.get("meta", {}) | {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_after": os.getloadavg(),
        "smoke": args.smoke,
        f"load_after_{'_'.join(args.parts)}": os.getloadavg(),
    }
    out = {"meta": meta, "duckdb": rows_all, "same": same, "spark": spark, "streamed": streamed}
    (results_dir / "engines_scale.json").write_text(json.dumps(out, indent=2))
    md = [
        f"# Marginal releases where the data lives ({meta['date']}, {meta['machine']})",
        "",
        f"load after: {meta['load_after']}",
        "",
        "| rows | ≤k-way | answers | release s | scans | peak GiB | DuckDB plain SQL s "
        "(GROUP BY each / GROUPING SETS) | ratio |",
        "|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows_all:
        rel, anc = r["release"], r["anchor"]
        if "error" in rel:
            md.append(f"| {r['rows']:,} | {r['way']} | error: {rel['error'][:80]} |")
            continue
        if "error" in anc:
            md.append(
                f"| {r['rows']:,} | {r['way']} | {rel['answers']:,} | {rel['s']:.1f} | "
                f"{rel['scans']} | {rel['peak_gib']:.2f} | {anc['error'][:80]} | - |"
            )
            continue
        gs = anc.get("grouping_sets_s")
        gb = anc.get("group_by_s")
        md.append(
            f"| {r['rows']:,} | {r['way']} | {rel['answers']:,} | {rel['s']:.1f} | {rel['scans']} | "
            f"{rel['peak_gib']:.2f} | {'-' if gb is None else f'{gb:.1f}'} / "
            f"{'-' if gs is None else f'{gs:.1f}'} | {rel['s'] / anc['s']:.2f} |"
        )
    md += [
        "",
        "identical answers, DuckDB vs in-memory records, same seed: "
        + ", ".join(
            f"≤{s.get('way', '?')}-way at {s.get('rows', 1_000_000):,} rows "  # first run: 10⁶
            + str(s.get("identical", s.get("error")))
            for s in same
        ),
        "",
    ]
    for s in spark:
        if "error" in s:
            md.append(f"Spark ≤{s['way']}-way: error {s['error'][:200]}")
            continue
        md.append(
            f"Spark local[2], {s['rows']:,} rows, ≤{s['way']}-way tables: matmech {s['s']:.1f} s "
            f"({s['scans']} scan), plain Spark GROUPING SETS {s['anchor_s']:.1f} s, ratio "
            f"{s['s'] / s['anchor_s']:.2f}, peak {s.get('peak_gib', float('nan')):.2f} GiB, "
            f"tables equal: {s['identical']}"
        )
    st = streamed
    if st:
        md += [
            "",
            f"Streamed release, {st['attributes']} attributes × 10 values, all ≤3-way marginals, "
            f"{st['rows']:,} rows from DuckDB (Parquet): "
            + (
                f"{st['s']:.0f} s, {st['scans']} scans, peak {st['peak_gib']:.2f} GiB "
                f"(max_memory {st['max_memory_gib']:g} GiB), {st['answers']:,} answers"
                if "error" not in st
                else f"error {st['error'][:300]}"
            ),
        ]
    md += [
        "",
        "Release s: matmech.release from the Parquet path (plan + tables + measurement + "
        "reconstruction); scans: reads of the data; peak: RSS of the process tree (DuckDB "
        "and Spark's JVM included), sampled every 20 ms. Ratio: release / the faster plain "
        "DuckDB query for the same maximal tables.",
    ]
    (results_dir / "engines_scale.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
