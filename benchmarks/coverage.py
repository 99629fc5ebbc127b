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

Run:  python benchmarks/coverage.py [--n-rel 2000] [--n-sel 1000] [--only coverage|selection]
Writes benchmarks/results/coverage.{json,md}. ``--smoke``: one configuration per table with a
few replicates, the files in a temporary directory (seconds, for CI).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matmech as mm
from matmech import workloads as wl
from matmech.error import noise_weights
from matmech.inference import solve
from matmech.privacy import noise
from matmech.privacy.confidence import law_intervals
from matmech.privacy.measure import plan_measurement
from matmech.svt.combine import answer_covariance, combine_selection
from matmech.svt.curse import DEFAULT_MARGIN, guard
from matmech.svt.select import take_rows

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
    plan = plan_measurement(
        r.strategy, eps, delta
    )  # the release's own plan (same strategy, same noise)
    assert plan.scale == r.measurement.scale and plan.grid == r.measurement.grid
    p = r.strategy.shape[0]
    Ax = r.strategy.matvec(x.astype(float))
    hits, done = 0.0, 0
    for start in range(0, n_rel, 500):
        k = min(500, n_rel - start)
        if plan.grid == 1.0:
            draw = (
                noise.discrete_laplace
                if plan.noise == "discrete_laplace"
                else noise.discrete_gaussian
            )
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
    return {
        "strategy": strategy,
        "eps": eps,
        "delta": delta,
        "N": done,
        "answers": int(truth.size),
        "coverage": cov,
        "se": math.sqrt(cov * (1 - cov) / pairs),
        "methods": law.counts(),
        "exact_mean": float(ex.mean()) if ex.size else None,
        "half_over_normal": float(np.mean(law.half / (1.959963984540054 * r.std))),
    }


def zipf():
    rng = np.random.default_rng(20231123)
    p = 1.0 / np.arange(1, 201)
    x = rng.multinomial(20000, p / p.sum())
    srt = np.sort(x)[::-1]
    return x, float(srt[C_SEL - 1] + srt[C_SEL]) / 2


MARGINS = (2.0, 3.0, math.inf)  # guard thresholds compared (inf: the measurement alone)


def selection_cell(method, vector, share, n_sel, rng):
    x, T = zipf()
    W = wl.identity(x.size)
    sel = dict(method=method, c=C_SEL, vector=vector)
    if method == "svt-gap":
        sel["threshold"] = T
    if share is not None:
        sel["eps"] = share
    keys = ["before"] + [f"m{g:g}" for g in MARGINS]
    acc = {k: {"b": [], "c": [], "s": [], "f": []} for k in keys}
    per = {}
    checked = 0
    for _ in range(n_sel):
        r = mm.release(x, W, 1.0, strategy="identity", select=dict(sel), rng=rng)
        if r.selected.size == 0 or r.measurement is None:
            continue
        rows = r.selected
        sub = take_rows(W, rows)
        m = r.measurement
        measured = sub.matvec(r.estimate)
        cov = answer_covariance(sub, m.strategy, m.std**2)
        mvar = np.clip(np.diag(cov), 0.0, None)
        est_b, var_b, _, done = combine_selection(
            measured, cov, rows, r.selection, sel.get("threshold")
        )
        if not done:
            continue
        half_meas = law_intervals(noise_weights(sub, m.strategy), m.noise, m.scale, m.grid).half
        sd_b = np.sqrt(var_b)
        tr = x[rows].astype(float)
        near_truth = np.abs(tr - T) <= sd_b
        out = {"before": (est_b, var_b, 1.959963984540054 * sd_b, np.zeros(rows.size, bool))}
        for g in MARGINS:
            est, var, flag = guard(measured, mvar, est_b, var_b, rows, r.selection, margin=g)
            out[f"m{g:g}"] = (
                est,
                var,
                np.where(flag, half_meas, 1.959963984540054 * np.sqrt(var)),
                flag,
            )
        if r.near_threshold is not None:  # the release is the default guard
            d = out[f"m{DEFAULT_MARGIN:g}"]
            assert np.allclose(d[0], r.answers) and np.array_equal(d[3], r.near_threshold)
            checked += 1
        for i in np.flatnonzero(near_truth):
            slot = per.setdefault(float(tr[i]), {k: {"b": [], "c": []} for k in keys})
            for k, (est, var, half, flag) in out.items():
                sd = math.sqrt(var[i])
                acc[k]["b"].append((est[i] - tr[i]) / sd)
                acc[k]["c"].append(abs(est[i] - tr[i]) <= half[i])
                acc[k]["s"].append(sd / sd_b[i])
                acc[k]["f"].append(bool(flag[i]))
                slot[k]["b"].append((est[i] - tr[i]) / sd)
                slot[k]["c"].append(abs(est[i] - tr[i]) <= half[i])

    def mean(a):
        return float(np.mean(a)) if len(a) else None

    def se(a):
        return float(np.std(a) / math.sqrt(len(a))) if len(a) > 1 else None

    return {
        "method": method,
        "vector": vector,
        "share": r.eps_select,
        "N": n_sel,
        "near_rows": len(acc["before"]["b"]),
        "threshold": T,
        "release_checked": checked,
        "estimators": {
            k: {
                "bias": mean(v["b"]),
                "bias_se": se(v["b"]),
                "cover": mean(v["c"]),
                "std_ratio": mean(v["s"]),
                "flagged": mean(v["f"]),
            }
            for k, v in acc.items()
        },
        "per_truth": {
            str(t): {
                k: {"n": len(v["b"]), "bias": mean(v["b"]), "cover": mean(v["c"])}
                for k, v in d.items()
            }
            for t, d in sorted(per.items())
        },
    }


def markdown(cov_rows, sel_rows, meta):
    out = [
        f"load average {meta['load_before'][0]:.1f} → {meta['load_after'][0]:.1f}; {meta['date']}; "
        f"{meta['seconds']:.0f} s",
        "",
        "## Coverage of the 95% interval (all ranges, n = 16; optimized n = 32)",
        "",
        "| strategy | ε | δ | N | coverage | SE | exact (reported) | half / 1.96σ | methods |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in cov_rows:
        ex = "-" if r["exact_mean"] is None else f"{100 * r['exact_mean']:.2f}%"
        out.append(
            f"| {r['strategy']} | {r['eps']:g} | {r['delta']:g} | {r['N']} | {100 * r['coverage']:.2f}% | "
            f"{100 * r['se']:.2f} | {ex} | {r['half_over_normal']:.3f} | "
            f"{', '.join(f'{k} {v}' for k, v in r['methods'].items())} |"
        )
    out += [
        "",
        "## Selected rows within 1 std of the threshold (Zipf, c = 19, identity, ε = 1)",
        "",
        "before = GLS of every gap; m2/m3 = guard at 2/3 std (the release's default is "
        f"{DEFAULT_MARGIN:g}); m inf = the measurement alone. bias in reported std; cover = the reported "
        "interval holds the truth; std = reported std / the GLS std (the precision paid); flagged = share of "
        "these rows answered from the measurement.",
        "",
        "| method | vector | share | N | near rows | estimator | bias (std) | cover | std ratio | flagged |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sel_rows:
        for k, e in r["estimators"].items():
            se_ = "-" if e["bias_se"] is None else f"{e['bias_se']:.2f}"
            out.append(
                f"| {r['method']} | {r['vector']} | {r['share']:g} | {r['N']} | {r['near_rows']} | {k} | "
                f"{e['bias']:+.2f} ± {se_} | {100 * e['cover']:.1f}% | {e['std_ratio']:.2f} | "
                f"{100 * e['flagged']:.0f}% |"
            )
    out += [
        "",
        "Per true count among the near rows (the row just below the threshold is selected only when its "
        "noise is positive: the worst case):",
        "",
        "| method | vector | share | truth | n | "
        + " | ".join(f"bias {k} | cover {k}" for k in ("before", "m2", "m3", "minf"))
        + " |",
        "|---|---|---|---|---|" + "---|" * 8,
    ]
    for r in sel_rows:
        for t, d in r["per_truth"].items():
            if d["before"]["n"] < 20:
                continue
            cells = " | ".join(
                f"{d[k]['bias']:+.2f} | {100 * d[k]['cover']:.1f}%"
                for k in ("before", "m2", "m3", "minf")
            )
            out.append(
                f"| {r['method']} | {r['vector']} | {r['share']:g} | {t} | {d['before']['n']} | {cells} |"
            )
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-rel", type=int, default=2000)
    ap.add_argument("--n-sel", type=int, default=1000)
    ap.add_argument("--only", choices=("coverage", "selection"))
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--smoke", action="store_true", help="a few replicates of one configuration")
    a = ap.parse_args(argv)
    if a.smoke:
        a.n_rel, a.n_sel, a.out = 20, 5, tempfile.mkdtemp(prefix="matmech-smoke-")

    def pick(options):
        return options[:1] if a.smoke else options

    rng = np.random.default_rng(2026)
    t0, load0 = time.time(), os.getloadavg()
    cov_rows, sel_rows = [], []
    if a.only != "selection":
        for s in pick(STRATEGIES):
            for d in pick(DELTAS):
                for e in pick(EPS):
                    row = coverage_cell(s, e, d, a.n_rel, rng)
                    cov_rows.append(row)
                    print(json.dumps(row), flush=True)
    if a.only != "coverage":
        for method in pick(("topc-gap", "svt-gap")):
            for vector in pick((False, True)):
                for share in pick((None, 0.3)):
                    row = selection_cell(method, vector, share, a.n_sel, rng)
                    sel_rows.append(row)
                    print(json.dumps(row), flush=True)
    meta = {
        "load_before": load0,
        "load_after": os.getloadavg(),
        "seconds": time.time() - t0,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "n_rel": a.n_rel,
        "n_sel": a.n_sel,
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "" if a.only is None else f"_{a.only}"
    (out / f"coverage{suffix}.json").write_text(
        json.dumps({"meta": meta, "coverage": cov_rows, "selection": sel_rows}, indent=1)
    )
    md = markdown(cov_rows, sel_rows, meta)
    (out / f"coverage{suffix}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
