"""Synthetic data on AIM's datasets: matmech's adaptive mechanism beside AIM, MST and OpenDP.

matmech's side of issue 35's benchmark. Everything about the comparison is
``benchmarks/synth_peers.py``'s (read its docstring): datasets nltcs, adult, titanic, salary
of ``ryan112358/hd-datasets`` (never committed), workload every 3-way marginal of at most
10,000 cells, ε ∈ {1, 0.1, 10}, δ = 1e-9, the same ρ for every method (``rho_for``: 1/(2σ²)
for matmech's Gaussian σ at (ε, δ)), AIM's metric (mean workload TV error of the synthetic
records, ``err_records``; of the model's tables, ``err_table``), one fresh process per run.

matmech's row: :func:`matmech.synthesize_adaptive` given ``PrivacyBudget.from_rho(ρ, δ)``
(one zCDP budget, spent exactly), the workload's marginals, secure randomness (the
library's default; no seed), then its records and tables. Its options are the library's
defaults unless ``--matmech-*`` say otherwise.

The peers' rows: the runs saved in ``benchmarks/results/synth_peers.json`` (made by
synth_peers.py on the same machine; shown with their own date and load), or run here with
``--methods aim mst opendp --peers-dir ...`` (slow: AIM takes 15-45 min a run on 2 cores).

    python benchmarks/synth.py --data-dir /path/to/hd-datasets/clean            # the grid
    python benchmarks/synth.py --data-dir ... --datasets titanic --eps 1 --trials 1
    python benchmarks/synth.py --smoke   # a small generated table, ε = 1, one trial, one pick

``--smoke`` needs no data: a generated 4-attribute table of 2,000 records stands in for the
datasets, and its JSON/MD go to a temporary directory. Without mbi (the ``synth`` extra) it
prints "skipped: <reason>" and exits 0. Writes benchmarks/results/synth.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import synth_peers as sp  # noqa: E402


def _prepare_matmech(*, cols, domain, cliques, rho, eps, delta, seed, peers, opts):
    """matmech.synthesize_adaptive under PrivacyBudget.from_rho(ρ, δ); secure randomness."""
    import matmech

    names = list(domain)
    X = np.column_stack([cols[a] for a in names])
    wl = [tuple(names.index(a) for a in c) for c in cliques]
    kw = {k[len("matmech_") :]: v for k, v in opts.items() if k.startswith("matmech_")}
    kw = {k: v for k, v in kw.items() if v is not None}

    def run() -> sp.Fit:
        budget = matmech.PrivacyBudget.from_rho(rho, delta)
        s = matmech.synthesize_adaptive(X, domain, budget=budget, workload=wl, **kw)
        spent = float(sum(e.zcdp() for e in s.events))
        return sp.Fit(
            table=lambda c: s.table(c),
            records={a: s.codes[:, i] for i, a in enumerate(names)},
            info={"picks": [list(p) for p in s.picks], "rho_spent": spent},
        )

    return run


MATMECH = sp.Method(
    "matmech",
    "matmech adaptive",
    None,
    (),
    _prepare_matmech,
    "this checkout; mbi from the package index (synth extra)",
)
sp.METHODS.setdefault("matmech", MATMECH)
ORDER = ("matmech", "aim", "mst", "opendp")


def _smoke_data(folder: Path) -> None:
    """A 4-attribute table of 2,000 correlated records, coded as hd-datasets' clean/ files."""
    rng = np.random.default_rng(0)
    n = 2000
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4
    c = (b * 2 + rng.integers(0, 3, n)) % 5
    d = (a + c + rng.integers(0, 2, n)) % 2
    for name in sp.DATASETS:
        (folder / f"{name}-domain.json").write_text(json.dumps({"a": 3, "b": 4, "c": 5, "d": 2}))
        lines = ["a,b,c,d"] + [f"{w},{x},{y},{z}" for w, x, y, z in zip(a, b, c, d)]
        (folder / f"{name}.csv").write_text("\n".join(lines) + "\n")


def _mean_sd(v):
    if not v:
        return "-"
    sd = f" ± {statistics.stdev(v):.3f}" if len(v) > 1 else ""
    return f"{statistics.mean(v):.3f}{sd} ({len(v)})"


def render(path: Path, peers_path: Path | None) -> str:
    """The side-by-side table: this run's rows, and the saved peers' rows where this run has none."""
    saved = json.loads(path.read_text())
    runs = list(saved["runs"])
    mine = {(r["method"], r["dataset"], r["eps"]) for r in runs}
    peer_meta = {}
    if peers_path is not None and peers_path.exists():
        peer = json.loads(peers_path.read_text())
        peer_meta = peer["meta"]
        runs += [r for r in peer["runs"] if (r["method"], r["dataset"], r["eps"]) not in mine]
    names = [m for m in ORDER if any(r["method"] == m for r in runs)]
    cells = sorted(
        {(r["dataset"], r["eps"]) for r in saved["runs"]},
        key=lambda k: (sp.EPSILONS.index(k[1]) if k[1] in sp.EPSILONS else 9, k[0]),
    )

    def sel(d, e, m):
        return [r for r in runs if (r["dataset"], r["eps"], r["method"]) == (d, e, m)]

    def err(rs, key="err_records"):
        return [r[key] for r in rs if r["status"] == "ok" and key in r]

    meta = saved["meta"]
    loads = [r[k] for r in saved["runs"] for k in ("load_before", "load_after")]
    lines = [
        "# Synthetic data on AIM's datasets: matmech beside AIM, MST and OpenDP (issue 35)",
        "",
        f"matmech rows: {meta['date']}, {meta['machine']}, load average {min(loads)}-{max(loads)} "
        f"(1 min, before/after each run); options {meta['opts']}. Peers' rows: "
        + (
            f"benchmarks/results/synth_peers.json ({peer_meta.get('date', '?')}; its .md has "
            "their loads and pins)"
            if peer_meta
            else "none saved"
        )
        + f". δ = {sp.DELTA:g}; workload every 3-way marginal of ≤ {sp.MAX_CELLS:,} cells; the "
        "same ρ for every method (ρ = 1/(2σ²), σ = matmech.gaussian_sigma(ε, δ, 1)). Error: mean "
        "over the workload of ½‖μ_true − μ_est‖₁ / N of the synthetic records (mean ± sd over "
        "trials, trials in brackets); seconds: median wall / CPU of the mechanism call (fit and "
        "records) in a fresh process, over the runs that finished; 'killed at' a run stopped "
        "at its cap.",
        "",
        "| dataset | ε | "
        + " | ".join(sp.METHODS[m].label for m in names)
        + " | matmech below AIM? |",
        "|---|---|" + "---|" * (len(names) + 1),
    ]
    for d, e in cells:
        row = [_mean_sd(err(sel(d, e, m))) for m in names]
        mm, aim = err(sel(d, e, "matmech")), err(sel(d, e, "aim"))
        verdict = (
            ("yes" if statistics.mean(mm) < statistics.mean(aim) else "no")
            if mm and aim
            else "AIM did not finish"
            if any(r["status"] == "timeout" for r in sel(d, e, "aim"))
            else "no AIM run"
        )
        lines.append(f"| {d} | {e:g} | " + " | ".join(row) + f" | {verdict} |")
    lines += [
        "",
        "| dataset | ε | method | error, model tables | wall s | CPU s |",
        "|---|---|---|---|---|---|",
    ]
    for d, e in cells:
        for m in names:
            rs = sel(d, e, m)
            if rs:
                lines.append(
                    f"| {d} | {e:g} | {sp.METHODS[m].label} | {_mean_sd(err(rs, 'err_table'))} | "
                    f"{sp._fmt_time(rs, 'wall_fit')} | {sp._fmt_time(rs, 'cpu_fit')} |"
                )
    text = "\n".join(lines) + "\n"
    path.with_suffix(".md").write_text(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.environ.get(sp.DATA_ENV))
    ap.add_argument("--peers-dir", default=os.environ.get(sp.PEERS_ENV))
    ap.add_argument("--methods", nargs="+", default=["matmech"], choices=list(ORDER))
    ap.add_argument("--datasets", nargs="+", default=list(sp.DATASETS), choices=list(sp.DATASETS))
    ap.add_argument("--eps", nargs="+", type=float, default=list(sp.EPSILONS))
    ap.add_argument("--trials", type=int, default=sp.TRIALS)
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    ap.add_argument("--resume", action="store_true", help="keep saved runs, run the rest")
    ap.add_argument("--smoke", action="store_true", help="generated data, ε = 1, one trial")
    ap.add_argument("--matmech-rounds", type=int, help="synthesize_adaptive's rounds")
    ap.add_argument("--matmech-picks", type=int, help="marginals picked per round")
    ap.add_argument("--matmech-iters", type=int, help="mbi iterations per fit")
    ap.add_argument("--aim-max-iters", type=int, default=1000)
    ap.add_argument("--aim-max-model-size", type=float, default=80.0)
    ap.add_argument("--render", action="store_true", help="only rewrite the .md from the JSON")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        sp.child(json.loads(args.child))
        return 0
    try:
        from matmech.estimators.graphical import load_mbi

        load_mbi()
    except ImportError:
        print("synth: skipped: mbi is not installed (pip install 'matmech-dp[synth]')")
        return 0
    results = sp.RESULTS
    tmp = None
    if args.smoke:
        tmp = tempfile.TemporaryDirectory()
        results = Path(tmp.name)
        _smoke_data(results)
        args.data_dir, args.datasets, args.eps, args.trials = str(results), ["titanic"], [1.0], 1
        args.methods, args.timeout = ["matmech"], min(args.timeout, 600.0)
        # one round, one pick, few iterations: three fits (seconds, most of it mbi's compile)
        args.matmech_iters = args.matmech_iters or 20
        args.matmech_rounds = args.matmech_rounds or 1
        args.matmech_picks = args.matmech_picks or 1
    path = results / "synth.json"
    peers_json = None if args.smoke else sp.RESULTS / "synth_peers.json"
    if args.render:
        print(render(path, peers_json))
        return 0
    data_dir = Path(args.data_dir) if args.data_dir else None
    if data_dir is None or not all((data_dir / f"{d}-domain.json").exists() for d in args.datasets):
        print(f"synth: skipped: no hd-datasets clean/ folder (--data-dir or ${sp.DATA_ENV})")
        return 0
    peers = Path(args.peers_dir) if args.peers_dir else None
    methods = {}
    for m in args.methods:
        why = sp.METHODS[m].missing(peers)
        if why:
            print(f"synth: {m} skipped: {why}")
        else:
            methods[m] = sp.METHODS[m]
    results.mkdir(exist_ok=True)
    if not args.resume:
        path.unlink(missing_ok=True)
    done = {sp._key(r) for r in sp._saved(path)["runs"] if r["status"] != "error"}
    opts = {
        "aim_max_iters": args.aim_max_iters,
        "aim_max_model_size": args.aim_max_model_size,
        "matmech_rounds": args.matmech_rounds,
        "matmech_picks": args.matmech_picks,
        "matmech_iters": args.matmech_iters,
    }
    import platform

    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "delta": sp.DELTA,
        "opts": {k: v for k, v in opts.items() if v is not None},
        "pins": {n: m.pins for n, m in methods.items()},
    }
    given_up: set = set()
    for m, d, e, t in sp.plan(list(methods), args.datasets, args.eps, args.trials):
        if (m, d, e, t) in done or (m, d, e) in given_up:
            continue
        spec = {
            "method": m,
            "dataset": d,
            "data_dir": str(data_dir),
            "eps": e,
            "delta": sp.DELTA,
            "rho": sp.rho_for(e, sp.DELTA),
            "trial": t,
            "seed": 1000 * t + sp.DATASETS.index(d),
            "peers": str(peers) if peers else None,
            "opts": opts,
        }
        row = sp.run_one(methods[m], spec, args.timeout, peers, script=__file__)
        if row["status"] == "timeout":
            given_up.add((m, d, e))
        print(sp._line(row), flush=True)
        sp._append(path, meta, row)
    if path.exists():
        print(render(path, peers_json))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
