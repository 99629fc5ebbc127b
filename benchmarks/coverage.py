"""Coverage of the 95% intervals and the winner's curse after selection (issue 23).

Table 1 (strategies): all ranges over n = 16 cells (136 answers: single cells to the total),
strategies identity, hierarchical and optimized (``matmech.optimize``, on n = 32: 528 answers,
a p-Identity strategy on a power-of-two grid; at n = 16 it returns the identity), ε from 0.1 to 10, pure
ε and δ = 1e-6. The interval law of each configuration is the one ``mm.release`` attaches (its
half-widths are data-independent: one release gives them); the N replicate releases then run
the release's own measurement plan (``plan_measurement`` → exact noise → ``inference.solve``,
all N at once). Coverage = share of (release, answer) pairs whose interval holds the truth;
SE = the binomial SE of N·m pairs (an underestimate where answers are correlated).
``exact``: the mean of the exact coverage the release reports (rows with method "exact" or
"convolution", the latter a lower bound): Monte Carlo should agree within ~4 SE.

Table 2 (selection): the Zipf set-up of issue 23: 200 items, 20,000 records with P(i) ∝ 1/i
(seeded), c = 19, threshold halfway between the 19th and 20th counts (158, 156) (threshold methods);
identity strategy, ε = 1, selection share advised (``share`` column) and 0.3; methods topc-gap and svt-gap
with the free gaps (vector=False) and as the vector mechanism (vector=True). Rows "near" the
threshold: true count within 1 std (of the GLS answer) of the threshold (for top-c: of the
midpoint between the c-th and (c+1)-th counts). ``before``: the GLS combination of every gap
(:func:`matmech.svt.combine.combine_selection`, recomputed from the release's measurement);
``after``: the release's answers (:func:`matmech.svt.curse.guard`). bias in units of each
answer's reported std; cover = the reported 95% interval holds the truth.

Run:  python benchmarks/coverage.py [--n-rel 2000] [--n-sel 1000] [--quick]
Writes benchmarks/results/coverage.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import sys

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matmech as mm  # noqa: E402
from matmech import workloads as wl  # noqa: E402
from matmech.inference import solve  # noqa: E402
from matmech.privacy import noise  # noqa: E402
from matmech.privacy.measure import plan_measurement  # noqa: E402
from matmech.svt.combine import answer_covariance, combine_selection  # noqa: E402
from matmech.svt.select import take_rows  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
C_SEL = 19  # the 19th and 20th counts are 158 and 156: rows sit within 1 std of the threshold
EPS = (0.1, 0.5, 1.0, 2.3, 5.0, 10.0)
DELTAS = (0.0, 1e-6)
STRATEGIES = ("identity", "hierarchical", "optimized")


def _strategy(name, W, eps, delta):
    if name == "optimized":
        return mm.optimize(W, eps, delta).strategy
    return name


def coverage_cell(strategy, eps, delta, n_rel, rng):
    n = 32 if strategy == "optimized" else 16  # at n = 16 optimize returns the identity
    W = wl.all_range(n)
    x = np.random.default_rng(7).poisson(30, n)
    truth = W.matvec(x.astype(float))
    r = mm.release(x, W, eps, delta, strategy=_strategy(strategy, W, eps, delta), rng=rng)
    law = r.interval_law()
    plan = plan_measurement(r.strategy, eps, delta)  # the release's own plan (same strategy, same noise)
    assert plan.scale == r.measurement.scale and plan.grid == r.measurement.grid
    p = r.strategy.shape[0]
    Ax = r.strategy.matvec(x.astype(float))
    hits, done = 0.0, 0
    for start in range(0, n_rel, 500):
        k = min(500, n_rel - start)
        if plan.grid == 1.0:
            draw = noise.discrete_laplace if plan.noise == "discrete_laplace" else noise.discrete_gaussian
            Z = draw(plan.scale, (p, k), rng=rng).astype(float)
        else:
            draw = noise.laplace if plan.noise == "discrete_laplace" else noise.gaussian
            Z = draw(plan.scale, (p, k), grid=plan.grid, rng=rng)
        ans = W.matmat(solve(plan.strategy, Ax[:, None] + Z))
        hits += float((np.abs(ans - truth[:, None]) <= law.half[:, None] * (1 + 1e-12)).sum())
        done += k
    pairs = done * truth.size
    cov = hits / pairs
    ex = law.coverage[np.isfinite(law.coverage)]
    return {"strategy": strategy, "eps": eps, "delta": delta, "N": done, "answers": int(truth.size),
            "coverage": cov, "se": math.sqrt(cov * (1 - cov) / pairs), "methods": law.counts(),
            "exact_mean": float(ex.mean()) if ex.size else None,
            "half_over_normal": float(np.mean(law.half / (1.959963984540054 * r.std)))}


def zipf():
    rng = np.random.default_rng(20231123)
    p = 1.0 / np.arange(1, 201)
    x = rng.multinomial(20000, p / p.sum())
    srt = np.sort(x)[::-1]
    return x, float(srt[C_SEL - 1] + srt[C_SEL]) / 2


def selection_cell(method, vector, share, n_sel, rng):
    x, T = zipf()
    W = wl.identity(x.size)
    sel = dict(method=method, c=C_SEL, vector=vector)
    if method == "svt-gap":
        sel["threshold"] = T
    if share is not None:
        sel["eps"] = share
    acc = {k: [] for k in ("b_before", "c_before", "b_after", "c_after", "flag")}
    n_sel_rows = 0
    worst = {}
    for _ in range(n_sel):
        r = mm.release(x, W, 1.0, strategy="identity", select=dict(sel), rng=rng)
        if r.selected.size == 0 or r.measurement is None:
            continue
        rows = r.selected
        sub = take_rows(W, rows)
        measured = sub.matvec(r.estimate)
        cov = answer_covariance(sub, r.measurement.strategy, r.measurement.std**2)
        thr = sel.get("threshold")
        est_b, var_b, _, done = combine_selection(measured, cov, rows, r.selection, thr)
        if not done:
            continue
        sd_b = np.sqrt(var_b)
        tr = x[rows].astype(float)
        near = np.abs(tr - T) <= sd_b
        n_sel_rows += rows.size
        lo, hi = r.interval()
        for i in np.flatnonzero(near):
            per = worst.setdefault(float(tr[i]), {"b": [], "a": [], "cb": [], "ca": []})
            per["b"].append((est_b[i] - tr[i]) / sd_b[i])
            per["a"].append((r.answers[i] - tr[i]) / r.std[i])
            per["cb"].append(abs(est_b[i] - tr[i]) <= 1.959963984540054 * sd_b[i])
            per["ca"].append(lo[i] <= tr[i] <= hi[i])
            acc["b_before"].append((est_b[i] - tr[i]) / sd_b[i])
            acc["c_before"].append(abs(est_b[i] - tr[i]) <= 1.959963984540054 * sd_b[i])
            acc["b_after"].append((r.answers[i] - tr[i]) / r.std[i])
            acc["c_after"].append(lo[i] <= tr[i] <= hi[i])
            acc["flag"].append(bool(r.near_threshold[i]))
    k = len(acc["b_before"])

    def m(a):
        return float(np.mean(a)) if a else None

    def se(a):
        return float(np.std(a) / math.sqrt(len(a))) if len(a) > 1 else None

    return {"method": method, "vector": vector, "share": r.eps_select, "N": n_sel, "near_rows": k,
            "bias_before": m(acc["b_before"]), "bias_before_se": se(acc["b_before"]),
            "cover_before": m(acc["c_before"]), "bias_after": m(acc["b_after"]), "bias_after_se": se(acc["b_after"]),
            "cover_after": m(acc["c_after"]), "flagged": m(acc["flag"]), "threshold": T,
            "per_truth": {str(t): {"n": len(v["b"]), "bias_before": m(v["b"]), "bias_after": m(v["a"]),
                                   "cover_before": m(v["cb"]), "cover_after": m(v["ca"])} for t, v in sorted(worst.items())}}


def markdown(cov_rows, sel_rows, meta):
    out = [f"load average {meta['load_before'][0]:.1f} → {meta['load_after'][0]:.1f}; {meta['date']}; "
           f"{meta['seconds']:.0f} s", "", "## Coverage of the 95% interval (all ranges, n = 16; optimized n = 32)", "",
           "| strategy | ε | δ | N | coverage | SE | exact (reported) | half / 1.96σ | methods |", "|---|---|---|---|---|---|---|---|---|"]
    for r in cov_rows:
        ex = "-" if r["exact_mean"] is None else f"{100 * r['exact_mean']:.2f}%"
        out.append(f"| {r['strategy']} | {r['eps']:g} | {r['delta']:g} | {r['N']} | {100 * r['coverage']:.2f}% | "
                   f"{100 * r['se']:.2f} | {ex} | {r['half_over_normal']:.3f} | "
                   f"{', '.join(f'{k} {v}' for k, v in r['methods'].items())} |")
    out += ["", "## Selected rows within 1 std of the threshold (Zipf, c = 19, identity, ε = 1)", "",
            "| method | vector | share | N | near rows | bias before (std) | cover before | bias after (std) | "
            "cover after | flagged |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sel_rows:
        def f(v, pct=False):
            return "-" if v is None else (f"{100 * v:.1f}%" if pct else f"{v:+.2f}")
        out.append(f"| {r['method']} | {r['vector']} | {r['share']:g} | {r['N']} | {r['near_rows']} | "
                   f"{f(r['bias_before'])} ± {f(r['bias_before_se']) if r['bias_before_se'] else '-'} | "
                   f"{f(r['cover_before'], True)} | {f(r['bias_after'])} ± "
                   f"{f(r['bias_after_se']) if r['bias_after_se'] else '-'} | {f(r['cover_after'], True)} | "
                   f"{f(r['flagged'], True)} |")
    out += ["", "Per true count among the near rows (the row below the threshold is selected only when its noise "
            "is positive: the worst case):", "", "| method | vector | share | truth | n | bias before | cover before | "
            "bias after | cover after |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sel_rows:
        for t, v in r["per_truth"].items():
            if v["n"] < 20:
                continue
            out.append(f"| {r['method']} | {r['vector']} | {r['share']:g} | {t} | {v['n']} | {v['bias_before']:+.2f} | "
                       f"{100 * v['cover_before']:.1f}% | {v['bias_after']:+.2f} | {100 * v['cover_after']:.1f}% |")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-rel", type=int, default=2000)
    ap.add_argument("--n-sel", type=int, default=1000)
    ap.add_argument("--only", choices=("coverage", "selection"))
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    rng = np.random.default_rng(2026)
    t0, load0 = time.time(), os.getloadavg()
    cov_rows, sel_rows = [], []
    if a.only != "selection":
        for s in STRATEGIES:
            for d in DELTAS:
                for e in EPS:
                    row = coverage_cell(s, e, d, a.n_rel, rng)
                    cov_rows.append(row)
                    print(json.dumps(row), flush=True)
    if a.only != "coverage":
        for method in ("topc-gap", "svt-gap"):
            for vector in (False, True):
                for share in (None, 0.3):
                    row = selection_cell(method, vector, share, a.n_sel, rng)
                    sel_rows.append(row)
                    print(json.dumps(row), flush=True)
    meta = {"load_before": load0, "load_after": os.getloadavg(), "seconds": time.time() - t0,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "n_rel": a.n_rel, "n_sel": a.n_sel}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "" if a.only is None else f"_{a.only}"
    (out / f"coverage{suffix}.json").write_text(json.dumps({"meta": meta, "coverage": cov_rows, "selection": sel_rows},
                                                            indent=1))
    md = markdown(cov_rows, sel_rows, meta)
    (out / f"coverage{suffix}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
