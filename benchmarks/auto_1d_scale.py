"""Issue 32: 1-D ``strategy="auto"`` against ``"hierarchical"`` at scale, and the interval
laws of an optimised release, cached per strategy.

Part 1: ``release(x, W, ε = 1, strategy=S)`` for m random ranges (sorted pairs of uniform
cells) over 2^k cells, each in its own subprocess (one BLAS thread) so its peak resident
memory is its own: CPU seconds of the release call (user + system, ``getrusage``), the
process's peak RSS (``ru_maxrss``) and the exact expected RMSE per query (counts), with
``auto`` / ``hierarchical`` ratios side by side. The two strategies alternate (auto first on
odd repetitions), so both see the same machine load; medians over ``--runs``.

Part 2: ``interval_law(0.95)`` of ``release(strategy="optimize")`` on all ranges over n cells:
CPU seconds of the first law (computed), of a second release's law (the cached one) and of
the first law of the hierarchical release for comparison.

    OPENBLAS_NUM_THREADS=1 python benchmarks/auto_1d_scale.py [--log2n 20 22 24] [--m 1000000]
        [--runs 1] [--law-n 256]

Writes benchmarks/results/auto_1d_scale.{json,md}; ``--smoke`` (CI): 2^14 cells, 10⁴ ranges,
law n = 32, the files in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _describe(A):
    """The measured strategy in a few words (``strategy_name`` says only "auto")."""
    name = type(A).__name__
    b = getattr(A, "branching", None)
    if name == "Tree" and b is not None:
        lo, hi = A.bounds(0, 1)
        root = int(lo[0]) == 0 and int(hi[0]) == A.n - 1  # the first row is the whole domain
        return f"hierarchical b={b}" + ("" if root else ", no root")
    return name


def _child_release(log2n, m, strategy):
    import resource

    import numpy as np

    import matmech as mm

    n = 1 << log2n
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    W = mm.workloads.ranges(n, np.column_stack([np.minimum(a, b), np.maximum(a, b)]))
    x = rng.poisson(5.0, n)

    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    t0 = cpu()
    rel = mm.release(x, W, 1.0, strategy=strategy, rng=np.random.default_rng(1), domain=n)
    sec = cpu() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {
        "strategy": strategy,
        "chosen": _describe(rel.measurement.strategy),
        "cpu_s": sec,
        "peak_rss_gib": peak / 2**30,
        "rmse": float(np.sqrt(rel.expected_error / m)),
    }


def _child_law(n):
    import resource

    import numpy as np

    import matmech as mm

    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    W = mm.workloads.all_range(n)
    x = np.random.default_rng(0).poisson(5.0, n)
    out = {"n": n}
    for name in ("optimize", "hierarchical"):
        rel = mm.release(x, W, 1.0, strategy=name, rng=np.random.default_rng(1))
        t0 = cpu()
        law = rel.interval_law(0.95)
        out[f"{name}_first_s"] = cpu() - t0
        out[f"{name}_methods"] = law.counts()
        again = mm.release(x, W, 1.0, strategy=name, rng=np.random.default_rng(2))
        t0 = cpu()
        law2 = again.interval_law(0.95)
        out[f"{name}_second_s"] = cpu() - t0
        out[f"{name}_same_law"] = bool(
            np.array_equal(law.half, law2.half) and np.array_equal(law.coverage, law2.coverage)
        )
    return out


def _spawn(args):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, __file__, "--child", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _uptime():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


def run(sizes, m, runs, law_n):
    rows = []
    for k in sizes:
        got: dict = {"auto": [], "hierarchical": []}
        for r in range(runs):
            order = ("auto", "hierarchical") if r % 2 == 0 else ("hierarchical", "auto")
            for s in order:
                got[s].append(_spawn(["release", k, m, s]))
        med = {
            s: {
                "cpu_s": statistics.median(g["cpu_s"] for g in v),
                "peak_rss_gib": statistics.median(g["peak_rss_gib"] for g in v),
                "rmse": v[0]["rmse"],
                "chosen": v[0]["chosen"],
            }
            for s, v in got.items()
        }
        a, h = med["auto"], med["hierarchical"]
        row = {
            "log2n": k,
            "m": m,
            "auto": a,
            "hierarchical": h,
            "time_ratio": a["cpu_s"] / h["cpu_s"],
            "memory_ratio": a["peak_rss_gib"] / h["peak_rss_gib"],
            "rmse_ratio": a["rmse"] / h["rmse"],
            "runs": got,
        }
        rows.append(row)
        print(
            f"2^{k} cells, {m:,} ranges: auto {a['cpu_s']:.2f} CPU-s {a['peak_rss_gib']:.2f} GiB "
            f"RMSE {a['rmse']:.3f} ({a['chosen']}) | hierarchical {h['cpu_s']:.2f} CPU-s "
            f"{h['peak_rss_gib']:.2f} GiB RMSE {h['rmse']:.3f} | ratios time "
            f"{row['time_ratio']:.2f} memory {row['memory_ratio']:.2f} RMSE {row['rmse_ratio']:.3f}",
            flush=True,
        )
    law = _spawn(["law", law_n])
    print(
        f"interval law, all ranges n = {law_n}: optimised first {law['optimize_first_s']:.2f} CPU-s, "
        f"second release {law['optimize_second_s']:.4f} CPU-s (same law: {law['optimize_same_law']}); "
        f"hierarchical first {law['hierarchical_first_s']:.2f} CPU-s",
        flush=True,
    )
    return rows, law


def markdown(rows, law, meta):
    out = [
        "# 1-D `auto` against `hierarchical` at scale; interval laws cached per strategy (issue 32)",
        "",
        f"`python benchmarks/auto_1d_scale.py` ({meta['machine']}, one BLAS thread per process). "
        f"Load before: `{meta['uptime_before']}`; after: `{meta['uptime_after']}`.",
        "",
        "m random ranges over 2^k cells, `release(x, W, ε = 1, strategy=S)` in its own process: "
        "CPU seconds of the call (user + system), the process's peak RSS, the exact expected "
        f"RMSE per query (counts); medians over {meta['runs']} run(s), the two strategies alternating.",
        "",
        "| cells | ranges | auto CPU-s | hier. CPU-s | **time ratio** | auto GiB | hier. GiB "
        "| **memory ratio** | auto RMSE | hier. RMSE | RMSE ratio | auto chose |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        a, h = r["auto"], r["hierarchical"]
        out.append(
            f"| 2^{r['log2n']} | {r['m']:,} | {a['cpu_s']:.2f} | {h['cpu_s']:.2f} | "
            f"**{r['time_ratio']:.2f}** | {a['peak_rss_gib']:.2f} | {h['peak_rss_gib']:.2f} | "
            f"**{r['memory_ratio']:.2f}** | {a['rmse']:.3f} | {h['rmse']:.3f} | "
            f"{r['rmse_ratio']:.3f} | {a['chosen']} |"
        )
    out += [
        "",
        f"Interval law at 95% of the release on all ranges over n = {law['n']} cells (CPU seconds):",
        "",
        "| strategy | first law | a second release's law (cached) | same law | methods |",
        "|---|---:|---:|---|---|",
    ]
    for s in ("optimize", "hierarchical"):
        out.append(
            f"| {s} | {law[f'{s}_first_s']:.2f} | {law[f'{s}_second_s']:.4f} | "
            f"{law[f'{s}_same_law']} | {law[f'{s}_methods']} |"
        )
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, nargs="+", default=[20, 22, 24])
    ap.add_argument("--m", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--law-n", type=int, default=256)
    ap.add_argument("--smoke", action="store_true", help="2^14 cells, 10^4 ranges; temp files")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        if kind == "release":
            print(json.dumps(_child_release(int(rest[0]), int(rest[1]), rest[2])))
        else:
            print(json.dumps(_child_law(int(rest[0]))))
        return
    sizes, m, law_n = ([14], 10_000, 32) if args.smoke else (args.log2n, args.m, args.law_n)
    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "uptime_before": _uptime(),
        "runs": args.runs,
    }
    rows, law = run(sizes, m, args.runs, law_n)
    meta["uptime_after"] = _uptime()
    results = Path(tempfile.mkdtemp(prefix="matmech-smoke-")) if args.smoke else None
    folder = results or Path(__file__).resolve().parent / "results"
    folder.mkdir(exist_ok=True)
    (folder / "auto_1d_scale.json").write_text(
        json.dumps({"meta": meta, "rows": rows, "law": law}, indent=2)
    )
    (folder / "auto_1d_scale.md").write_text(markdown(rows, law, meta))
    print(f"saved {folder / 'auto_1d_scale.md'}")


if __name__ == "__main__":
    main()
