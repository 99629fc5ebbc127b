"""Composition under each accountant (issue 33's table) and the ledger's cost per spend.

Prints:

* ten Gaussian releases, each calibrated to (1, 1e-6), charged to one budget: the spent ε at
  δ = 1e-6 under "basic", "zcdp" and "pld" (the discrete Gaussian drawn), through
  ``matmech.release`` itself;
* a (1, 1e-6) budget split k ways: the σ of each release at sensitivity 1 (a share of ρ under
  "zcdp"; the (1/k, 1e-6/k) of a basic split), and the variance ratio;
* the ledger: the median time of one spend (verify the chain, compare with the key record,
  insert, commit, write the record) on a ledger already holding n rows.

Saves benchmarks/results/accounting.json. ``--smoke``: k = 10 only, n up to 50.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import matmech as mm
from matmech import workloads as W
from matmech.privacy.accountant import pld_available
from matmech.privacy.calibration import gaussian_sigma
from matmech.privacy.ledger import Ledger

OUT = Path(__file__).parent / "results" / "accounting.json"


def ten_releases(x):
    out = {}
    names = ["basic", "zcdp"] + (["pld"] if pld_available() else [])
    for name in names:
        b = mm.PrivacyBudget(10.0, 1e-5, accountant=name)
        for _ in range(10):
            mm.release(x, W.identity(16), 1.0, 1e-6, budget=b, strategy="identity")
        out[name] = {"eps_at_1e-6": b.epsilon(1e-6), "spent": list(b.spent)}
    return out


def splits(x, ks):
    rows = []
    for k in ks:
        share = mm.PrivacyBudget(1.0, 1e-6).split(k)[0]
        r = mm.release(x, W.identity(16), budget=share, strategy="identity")
        basic = gaussian_sigma(1.0 / k, 1e-6 / k, 1.0)
        rows.append(
            {
                "k": k,
                "sigma_zcdp": r.measurement.scale,
                "sigma_basic": basic,
                "variance_ratio": (basic / r.measurement.scale) ** 2,
            }
        )
    return rows


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="a small run for CI")
    args = ap.parse_args(argv)
    x = mm.histogram(np.random.default_rng(0).integers(0, 16, 500), 16)
    load = os.getloadavg()[0]
    res = {
        "load_1min": load,
        "ten_releases": ten_releases(x),
        "splits": splits(x, [10] if args.smoke else [10, 100]),
        "ledger_spend": ledger_spend([0, 50] if args.smoke else [0, 100, 1000]),
    }
    print(f"load average {load:.1f}")
    print("10 releases at (1, 1e-6): spent eps at delta = 1e-6")
    for name, v in res["ten_releases"].items():
        print(f"  {name:<6} {v['eps_at_1e-6']:.4f}")
    print(f"{'k':>5} {'sigma zcdp':>11} {'sigma basic':>12} {'variance ratio':>15}")
    for r in res["splits"]:
        print(
            f"{r['k']:>5} {r['sigma_zcdp']:>11.2f} {r['sigma_basic']:>12.1f} {r['variance_ratio']:>15.1f}"
        )
    print(f"{'ledger rows':>11} {'median spend (ms)':>18}")
    for r in res["ledger_spend"]:
        print(f"{r['rows']:>11} {1e3 * r['median_s']:>18.1f}")
    if not args.smoke:
        OUT.parent.mkdir(exist_ok=True)
        OUT.write_text(json.dumps(res, indent=1))
        print(f"saved {OUT}")


if __name__ == "__main__":
    main()
