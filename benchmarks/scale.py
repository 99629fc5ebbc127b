"""Smooth scale in 1-D (issue 15): time and peak memory of ``advise``, ``optimize`` and
``release(strategy="auto")`` on all ranges and prefixes at n = 10³ … 10⁶ cells, and the
error of the chosen strategy against the best fixed strategy (identity, every hierarchy
searched, Haar) and the identity, with the cells either side of the old 8192-cell limit.

Errors are the analytic per-query RMSE at ε = 1 (pure ε, Laplace): no data enters them.
Peak memory is ``tracemalloc``'s peak of Python and numpy allocations during the call.
Seconds are wall-clock on a shared machine; ``uptime`` is recorded before and after.

    python benchmarks/scale.py [--sizes 1000 8192 8193 10000 100000 1000000]

Writes benchmarks/results/scale.{json,md,png} (``--smoke``: n = 64 only, without tracemalloc
(it slows numpy-heavy calls tenfold), in a temporary directory; for CI).
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import platform
import subprocess
import tempfile
import time
import tracemalloc

import numpy as np

import matmech
from matmech import workloads as wl

OUT = pathlib.Path(__file__).resolve().parent / "results"
FIXED = ("identity", "hierarchical", "haar")
#: release() answers every query: all ranges only while the answers fit comfortably.
MAX_RELEASE_ROWS = 10_000_000


def _uptime():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


#: Whether peak memory is measured (tracemalloc); the smoke run does without.
TRACE = True


def _measured(fn):
    """(result or None, seconds, peak MiB, error message or None)."""
    if not TRACE:
        t0 = time.perf_counter()
        try:
            out, err = fn(), None
        except (ValueError, MemoryError) as exc:
            out, err = None, f"{type(exc).__name__}: {str(exc)[:160]}"
        return out, time.perf_counter() - t0, float("nan"), err
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        out, err = fn(), None
    except (ValueError, MemoryError) as exc:
        out, err = None, f"{type(exc).__name__}: {str(exc)[:160]}"
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return out, seconds, peak, err


def run(sizes):
    rows = []
    for kind, make in (("all_range", wl.all_range), ("prefix", wl.prefix)):
        for n in sizes:
            W = make(n)
            adv, t_adv, m_adv, e_adv = _measured(lambda: matmech.advise(W, 1.0))
            row = {
                "workload": kind,
                "n": n,
                "queries": W.shape[0],
                "advise": {"seconds": t_adv, "peak_mib": m_adv, "error": e_adv},
            }
            if adv is not None:
                fixed = [r for r in adv.rows if r.name.split(",")[0].split(" ")[0] in FIXED]
                ident = next(r for r in adv.rows if r.name == "identity")
                row["advise"].update(
                    best=adv.best_row.name,
                    rmse=adv.best_row.rmse,
                    best_fixed=min(fixed, key=lambda r: r.total).name,
                    best_fixed_rmse=min(r.rmse for r in fixed),
                    identity_rmse=ident.rmse,
                    lower_bound_rmse=adv.lower_bound_rmse,
                    skipped={r.name: r.skipped[:120] for r in adv.skipped},
                )
            opt, t_opt, m_opt, e_opt = _measured(lambda: matmech.optimize(W, 1.0, bound=False))
            row["optimize"] = {
                "seconds": t_opt,
                "peak_mib": m_opt,
                "error": e_opt,
                "rmse": None if opt is None else opt.rmse,
                "method": None if opt is None else opt.method,
            }
            if W.shape[0] <= MAX_RELEASE_ROWS:
                x = np.random.default_rng(n).poisson(5.0, size=n)
                rel, t_rel, m_rel, e_rel = _measured(
                    lambda: matmech.release(
                        x, W, 1.0, strategy="auto", rng=np.random.default_rng(0)
                    )
                )
                row["release"] = {
                    "seconds": t_rel,
                    "peak_mib": m_rel,
                    "error": e_rel,
                    "strategy": None if rel is None else rel.strategy_name,
                    "rmse": None if rel is None else math.sqrt(rel.expected_error / W.shape[0]),
                }
            else:
                row["release"] = {"skipped": f"{W.shape[0]:,} answers (> {MAX_RELEASE_ROWS:,})"}
            rows.append(row)
            print(json.dumps(row, default=str)[:400], flush=True)
    return rows


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def markdown(rows, meta):
    out = [
        "# Smooth scale in 1-D: advise / optimize / release at 10³ … 10⁶ cells (pure ε = 1)",
        "",
        f"`python benchmarks/scale.py` ({meta['machine']}; numpy {meta['numpy']}). Load before: `{meta['uptime_before']}`; "
        f"after: `{meta['uptime_after']}`. Seconds are wall-clock on shared cores; peak = tracemalloc peak (MiB).",
        "",
        "RMSE per query (counts). *best fixed*: the least-error of identity, every searched hierarchy (exact error on any n) "
        'and Haar; *advise*: the strategy `advise` / `release(strategy="auto")` choose.',
        "",
        "| workload | n | advise best | RMSE | best fixed RMSE | identity RMSE | lower bound | advise s | advise MiB | optimize RMSE | optimize s | optimize MiB | release s | release MiB |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        a, o, rel = r["advise"], r["optimize"], r["release"]
        out.append(
            f"| {r['workload']} | {r['n']:,} | {a.get('best', a.get('error'))} | {_fmt(a.get('rmse'), '.3f')} | "
            f"{_fmt(a.get('best_fixed_rmse'), '.3f')} | {_fmt(a.get('identity_rmse'), '.2f')} | {_fmt(a.get('lower_bound_rmse'), '.3f')} | "
            f"{a['seconds']:.1f} | {a['peak_mib']:.0f} | "
            f"{_fmt(o.get('rmse'), '.3f') if o.get('error') is None else 'refused'} | {o['seconds']:.1f} | {o['peak_mib']:.0f} | "
            f"{_fmt(rel.get('seconds'), '.1f')} | {_fmt(rel.get('peak_mib'), '.0f')} |"
        )
    notes = [
        f"- optimize {r['workload']} n={r['n']:,}: {r['optimize']['error']}"
        for r in rows
        if r["optimize"].get("error")
    ]
    notes += [
        f"- release {r['workload']} n={r['n']:,}: {r['release'].get('skipped') or r['release'].get('error')}"
        for r in rows
        if r["release"].get("skipped") or r["release"].get("error")
    ]
    if notes:
        out += ["", "Refused / skipped:", *notes]
    return "\n".join(out) + "\n"


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for kind, color in (("all_range", "tab:blue"), ("prefix", "tab:orange")):
        rs = [r for r in rows if r["workload"] == kind and r["advise"].get("rmse") is not None]
        n = [r["n"] for r in rs]
        axes[0].plot(
            n, [r["advise"]["rmse"] for r in rs], "o-", color=color, label=f"{kind}: advise / auto"
        )
        axes[0].plot(
            n,
            [r["advise"]["best_fixed_rmse"] for r in rs],
            "s--",
            color=color,
            alpha=0.6,
            label=f"{kind}: best fixed",
        )
        axes[0].plot(
            n,
            [r["advise"]["identity_rmse"] for r in rs],
            ":",
            color=color,
            alpha=0.5,
            label=f"{kind}: identity",
        )
        axes[1].plot(
            n, [r["advise"]["seconds"] for r in rs], "o-", color=color, label=f"{kind}: advise"
        )
        rr = [r for r in rs if r["release"].get("seconds") is not None]
        axes[1].plot(
            [r["n"] for r in rr],
            [r["release"]["seconds"] for r in rr],
            "^--",
            color=color,
            label=f"{kind}: release auto",
        )
    for ax in axes:
        ax.set_xscale("log")
        ax.axvline(8192, color="grey", lw=0.8, ls="--")
        ax.set_xlabel("cells n")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("RMSE per query (ε = 1)")
    axes[0].set_title("error: no cliff at 8192 (dashed)")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("seconds (shared machine)")
    axes[1].set_title("time")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes", type=int, nargs="+", default=[1000, 8192, 8193, 10_000, 100_000, 1_000_000]
    )
    ap.add_argument("--smoke", action="store_true", help="n = 64; temporary directory")
    args = ap.parse_args()
    out = OUT
    if args.smoke:
        global TRACE
        TRACE, args.sizes = False, [64]
        out = pathlib.Path(tempfile.mkdtemp(prefix="matmech-smoke-"))
    meta = {
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "numpy": np.__version__,
        "uptime_before": _uptime(),
    }
    t0 = time.perf_counter()
    rows = run(args.sizes)
    meta.update(uptime_after=_uptime(), total_seconds=time.perf_counter() - t0)
    out.mkdir(exist_ok=True)
    (out / "scale.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1, default=str) + "\n"
    )
    (out / "scale.md").write_text(markdown(rows, meta))
    plot(rows, out / "scale.png")
    print(markdown(rows, meta))


if __name__ == "__main__":
    main()
