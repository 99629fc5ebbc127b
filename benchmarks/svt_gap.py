"""Free-gap selection (issue 16; Ding, Wang, Zhang, Kifer, PVLDB 2019): what the gaps buy.

1. MSE of the selected answers with the selection's outputs combined (GLS,
   matmech.svt.combine_gaps, formed here: since issue 31 a release never combines them, as
   they are biased given the selection; docs/guide/selection.md) vs the Matrix-Mechanism
   answers alone (what a release reports), from the SAME runs (equal
   total eps, equal split), for topc-gap, svt-gap and adaptive-svt, c = 2 and 5, at the
   advised split (no select eps given: matmech.svt.combine.advise_split) and at the even
   split; on the Zipf set-up of benchmarks/svt_zipf.py (identity workload over 10,000
   items, 1,000,000 records) and on a range workload (sliding windows of 64 cells, stride 8,
   over a 1024-cell Zipf histogram, hierarchical strategy).  "mechanism" is what ran:
   release picks the Laplace mechanism on the whole vector (matmech.svt.vector) for
   topc-gap / svt-gap when it has less noise per score; rows marked "paper" force the
   [DWZK19] mechanism (select vector=False) for comparison.  The analytic variance (mean of
   the release's per-answer variances) is shown next to the Monte Carlo MSE with its
   standard error; "|z|" = |MSE - analytic| / s.e. (4 or less expected).
2. SER (Lyu et al.'s metric, first c selections) and the number of rows found by the
   adaptive SVT vs [LSL17] Alg. 7 (sparse_vector) at equal eps on the Zipf counts.

Run:  python benchmarks/svt_gap.py [--trials 200]
Writes benchmarks/results/svt_gap.{json,md}. ``--smoke`` (CI): three trials of one case per
table, the files in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from matmech import release, svt
from matmech.svt.combine import answer_covariance
from matmech.svt.gap import adaptive_sparse_vector
from matmech.workloads import ranges

RESULTS = Path(__file__).resolve().parent / "results"
SEED = 20170901


def zipf_counts(rng, n_items, n_records):
    p = np.arange(1, n_items + 1, dtype=np.float64) ** -1.0
    return rng.multinomial(n_records, p / p.sum()).astype(np.int64)


def mse_case(
    name, x, W, *, method, c, eps, eps_select, strategy, trials, threshold=None, vector="auto"
):
    truth = W.matvec(x.astype(float))
    sel = dict(method=method, c=c, vector=vector)
    if eps_select is not None:
        sel["eps"] = eps_select
    if threshold is not None:
        sel["threshold"] = threshold
    se_gap, se_mm, var, mech, eps_s = [], [], [], set(), None
    for t in range(trials):
        r = release(x, W, eps, strategy=strategy, select=sel, rng=np.random.default_rng(SEED + t))
        eps_s = r.eps_select
        if not r.selected.size:
            continue
        mech.add(r.selection.mechanism)
        sub = W.take_rows(r.selected)
        mm = sub.matvec(r.estimate)
        cov = answer_covariance(sub, r.measurement.strategy, r.measurement.std**2)
        gm = svt.gap_measurement(r.selection.gap, threshold)
        est, C = svt.combine_gaps(mm, cov, gm, order=np.searchsorted(r.selected, gm.positions))
        se_gap.append(float(((est - truth[r.selected]) ** 2).mean()))
        se_mm.append(float(((mm - truth[r.selected]) ** 2).mean()))
        var.append(float(np.trace(C) / r.selected.size))
    g, m = np.array(se_gap), np.array(se_mm)
    se = float(g.std(ddof=1) / np.sqrt(g.size))
    return {
        "case": name,
        "method": method,
        "mechanism": "/".join(sorted(mech)),
        "c": c,
        "eps": eps,
        "split": "advised"
        if eps_select is None
        else ("even" if eps_select == eps / 2 else "given"),
        "eps_select": round(float(eps_s), 6),
        "trials": len(g),
        "mse_with_gaps": float(g.mean()),
        "mse_se": se,
        "mse_without_gaps": float(m.mean()),
        "analytic_variance": float(np.mean(var)),
        "z": float(abs(g.mean() - np.mean(var)) / se),
        "reduction": float(1 - g.mean() / m.mean()),
    }


def ser_case(x, *, c, eps, trials):
    order = np.argsort(-x, kind="stable")
    top = x[order[:c]]
    thr = (x[order[c - 1]] + x[order[c]]) / 2
    rng = np.random.default_rng(SEED)
    out = {"alg7": [], "adaptive": []}
    found = {"alg7": [], "adaptive": []}
    for _ in range(trials):
        perm = rng.permutation(x.size)
        v = x[perm]
        a7 = svt.sparse_vector(v, thr, c=c, eps=eps, monotonic=True, rng=rng).positions
        ad = adaptive_sparse_vector(v, thr, c=c, eps=eps, monotonic=True, rng=rng).positions
        for k, pos in (("alg7", a7), ("adaptive", ad)):
            s = v[list(pos[:c])].sum() if pos else 0
            out[k].append(1 - s / top.sum())
            found[k].append(int(np.sum(v[list(pos)] >= thr)) if pos else 0)
    return {
        "c": c,
        "eps": eps,
        "trials": trials,
        "ser_alg7": float(np.mean(out["alg7"])),
        "ser_adaptive": float(np.mean(out["adaptive"])),
        "true_positives_alg7": float(np.mean(found["alg7"])),
        "true_positives_adaptive": float(np.mean(found["adaptive"])),
    }


def top_threshold(v, c):
    """A threshold between the c-th and (c+1)-th largest true values (benchmark only)."""
    s = np.sort(v)[::-1]
    return float((s[c - 1] + s[c]) / 2)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--smoke", action="store_true", help="3 trials, one case; temporary dir")
    args = ap.parse_args(argv)
    results = RESULTS
    if args.smoke:
        args.trials, results = 3, Path(tempfile.mkdtemp(prefix="matmech-smoke-"))

    def pick(options):
        return options[-1:] if args.smoke else options

    t0 = time.time()
    rng = np.random.default_rng(SEED)
    xz = zipf_counts(rng, 10_000, 1_000_000)
    Wz = ranges(10_000, [(i, i) for i in range(10_000)])
    xr = zipf_counts(rng, 1024, 100_000)
    Wr = ranges(1024, [(i, i + 63) for i in range(0, 1024 - 63, 8)])
    setups = [("zipf identity", xz, Wz, "identity"), ("range windows", xr, Wr, "hierarchical")]
    eps = 0.1
    rows = []
    for name, x, W, strategy in pick(setups):
        v = W.matvec(x.astype(float))
        for method in pick(("topc-gap", "svt-gap", "adaptive-svt")):
            for c in pick((2, 5)):
                thr = None if method == "topc-gap" else top_threshold(v, c)
                for eps_select in pick((None, eps / 2)):
                    rows.append(
                        mse_case(
                            name,
                            x,
                            W,
                            method=method,
                            c=c,
                            eps=eps,
                            eps_select=eps_select,
                            strategy=strategy,
                            trials=args.trials,
                            threshold=thr,
                        )
                    )
                if method != "adaptive-svt" and rows[-1]["mechanism"].startswith("vector"):
                    # the [DWZK19] mechanism itself, for comparison (where release ran the vector)
                    r = mse_case(
                        name,
                        x,
                        W,
                        method=method,
                        c=c,
                        eps=eps,
                        eps_select=eps / 2,
                        strategy=strategy,
                        trials=args.trials,
                        threshold=thr,
                        vector=False,
                    )
                    r["mechanism"] += " (paper)"
                    rows.append(r)
    sers = [ser_case(xz, c=c, eps=0.1, trials=args.trials) for c in pick((25, 50, 100))]
    info = {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "seconds": round(time.time() - t0, 1),
    }
    results.mkdir(exist_ok=True)
    (results / "svt_gap.json").write_text(
        json.dumps({"mse": rows, "ser": sers, "run": info}, indent=1)
    )
    lines = [
        "| case | method | mechanism | c | split (eps select of 0.1) | MSE with gaps (± s.e.) | analytic var | |z| "
        "| MSE MM only | reduction |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['method']} | {r['mechanism']} | {r['c']} | {r['split']} ({r['eps_select']:.3g}) | "
            f"{r['mse_with_gaps']:.4g} ± {r['mse_se']:.2g} | {r['analytic_variance']:.4g} | {r['z']:.1f} | "
            f"{r['mse_without_gaps']:.4g} | {100 * r['reduction']:.1f}% |"
        )
    lines += [
        "",
        "| c | eps | SER Alg. 7 | SER adaptive | true positives Alg. 7 | true positives adaptive |",
        "|---|---|---|---|---|---|",
    ]
    for s in sers:
        lines.append(
            f"| {s['c']} | {s['eps']} | {s['ser_alg7']:.3f} | {s['ser_adaptive']:.3f} | "
            f"{s['true_positives_alg7']:.1f} | {s['true_positives_adaptive']:.1f} |"
        )
    lines.append(f"\n{args.trials} trials; {info}")
    (results / "svt_gap.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
