"""Factored release at scale (issue 14): all ≤3-way marginals of a 14-attribute table with
the adult domain of the HDMM suite (10⁶ records, Parquet) and all 2-way marginals of 100
attributes × 10 values (10⁵ records), end to end, never building the histogram.

Stages: load (Parquet → codes), tables (marginal tables, each once), plan (residual noise
scales, closed form), measure (exact discrete Gaussian on the residuals, budget charged
first), reconstruct (every marginal with its exact per-cell std). Each case runs in its own
process; peak memory is that process's maximum resident set size.

    python benchmarks/factored_release.py            # all cases → benchmarks/results/factored_release.{json,md}
    python benchmarks/factored_release.py --smoke    # 6 attributes × 10 in this process (CI)
    python benchmarks/factored_release.py --only pure   # only the pure-ε case, merged into the results
    python benchmarks/factored_release.py --only gmarginal  # HDMM's adult_W2 / loans_W2 (generalised marginals)
    python benchmarks/factored_release.py --only scale  # all ≤3-way of 100 and 200 attributes × 10 values (issue 24)

The pure-ε case (adult ≤3-way, 10⁶ records, δ = 0) plans table weights on the lattice
(:func:`matmech.optimizers.residual.plan_residuals_laplace`), adds exact discrete Laplace
noise to each marginal table and combines the residuals by inverse variance.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import multiprocessing as mp
import os
import platform
import queue
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ADULT = (100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2)
RESULTS = Path(__file__).resolve().parent / "results"


def _generate(domain, records, seed):
    """Synthetic records with dependence between attributes (a latent class per record)."""
    rng = np.random.default_rng(seed)
    latent = rng.integers(0, 8, size=records)
    cols = []
    for n in domain:
        shift = rng.integers(0, n, size=8)
        spread = max(1, n // 4)
        cols.append(((shift[latent] + rng.integers(0, spread, size=records)) % n).astype(np.int32))
    return cols


def _write_parquet(domain, records, seed, path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = _generate(domain, records, seed)
    pq.write_table(pa.table({f"a{i}": c for i, c in enumerate(cols)}), path)


def _codes_via_parquet(domain, records, seed, times):
    """Generated records written to Parquet and read back as codes (times["load parquet"])."""
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "table.parquet")
        _write_parquet(domain, records, seed, path)
        t0 = time.perf_counter()
        t = pq.read_table(path)
        codes = np.column_stack([t.column(i).to_numpy() for i in range(t.num_columns)])
        times["load parquet"] = time.perf_counter() - t0
    return codes


def _case(name, domain, records, k, exact_k, eps, delta, seed, out):
    from matmech.measurements.residual import measure_residuals, plan_residual_measurement
    from matmech.estimators.reconstruct import MarginalReconstructor
    from matmech.sources.tables import marginal_tables
    from matmech.optimizers.residual import plan_residuals
    from matmech.privacy.budget import PrivacyBudget

    subsets = [
        s
        for j in (range(k + 1) if not exact_k else [k])
        for s in itertools.combinations(range(len(domain)), j)
    ]
    times = {}
    codes = _codes_via_parquet(domain, records, seed, times)
    t0 = time.perf_counter()
    plan = plan_residuals(domain, subsets)
    times["plan"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    mplan = plan_residual_measurement(plan, eps, delta)
    budget = PrivacyBudget(eps, delta)
    tables = marginal_tables(codes, domain, plan.lattice.residuals)
    times["marginal tables"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    budget.spend(eps, delta, what="benchmark")
    meas = measure_residuals(mplan, tables, rng=np.random.default_rng(seed))
    del tables
    times["measure"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    answers, var = MarginalReconstructor(meas).stacked(plan.lattice.subsets)
    std = np.sqrt(var, out=var)  # as the release: in place
    times["reconstruct + answers"] = time.perf_counter() - t0
    total = sum(times.values()) - times["load parquet"]
    mean_var = float(np.dot(std, std) / std.size)  # no temporary of the answers' size
    sigma_unit = mplan.sigma / mplan.sensitivity  # σ of the unit-L2 Gaussian at (ε, δ)
    out.put(
        {
            "case": name,
            "attributes": len(domain),
            "domain_cells": f"{math.prod(domain):.3g}",
            "records": records,
            "marginals": len(subsets),
            "residuals": len(plan.lattice.residuals),
            "answers": int(plan.queries),
            "eps": eps,
            "delta": delta,
            "rmse_over_sigma_plan": plan.rmse,
            "svd_bound_ratio": plan.weighted_total / plan.svd_bound,
            "rmse_measured_analytic": math.sqrt(mean_var),
            "rmse_over_sigma_measured": math.sqrt(mean_var) / sigma_unit,
            "seconds": times,
            "seconds_total_excluding_load": total,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        }
    )


def _case_pure(name, domain, records, k, eps, seed, out):
    from matmech.measurements.residual import measure_residuals_laplace, plan_residual_laplace
    from matmech.estimators.reconstruct import MarginalReconstructor
    from matmech.sources.tables import marginal_tables
    from matmech.optimizers.residual import plan_residuals_laplace
    from matmech.privacy.budget import PrivacyBudget

    subsets = [s for j in range(k + 1) for s in itertools.combinations(range(len(domain)), j)]
    times = {}
    codes = _codes_via_parquet(domain, records, seed, times)
    t0 = time.perf_counter()
    plan = plan_residuals_laplace(domain, subsets)
    times["plan"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    mplan = plan_residual_laplace(plan, eps)
    budget = PrivacyBudget(eps)
    tables = marginal_tables(codes, domain, list(plan.tables) + [()])
    times["marginal tables"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    budget.spend(eps, 0.0, what="benchmark")
    meas = measure_residuals_laplace(mplan, tables, rng=np.random.default_rng(seed))
    del tables
    times["measure"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    answers, var = MarginalReconstructor(meas).stacked(plan.lattice.subsets)
    std = np.sqrt(var)
    times["reconstruct + answers"] = time.perf_counter() - t0
    total = sum(times.values()) - times["load parquet"]
    out.put(
        {
            "case": name,
            "attributes": len(domain),
            "domain_cells": f"{math.prod(domain):.3g}",
            "records": records,
            "marginals": len(subsets),
            "residuals": len(plan.lattice.residuals),
            "tables": len(plan.tables),
            "table_cells": int(sum(math.prod(domain[i] for i in t) for t in plan.tables)),
            "answers": int(plan.queries),
            "eps": eps,
            "delta": 0.0,
            "plan_start": plan.start,
            "rmse_eps1_plan_continuous": plan.rmse,
            "rmse_measured_analytic": float(math.sqrt(np.mean(std**2))),
            "l1_sensitivity": mplan.sensitivity,
            "distinct_scales": int(np.unique(mplan.scales).size),
            "seconds": times,
            "seconds_total_excluding_load": total,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        }
    )


def _case_gmarginal(name, workload, records, eps, delta, seed, out):
    """A union of Kronecker products of the HDMM suite (adult_W2, loans_W2: prefix factors on
    the numeric attributes inside products) on generated records: optimise a generalised
    marginal strategy, measure it from its marginal tables, answer W by factored GLS
    (:mod:`matmech.plans.gmarginal`, the stages run one by one to time them)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from highdim import load

    from matmech.measurements.gmarginal import measure_gmarginal, plan_gmarginal
    from matmech.plans.gmarginal import gmarginal_strategy
    from matmech.estimators.gmarginal_solve import GMarginalSolver
    from matmech.sources.tables import marginal_tables
    from matmech.linalg.terms import as_terms
    from matmech.optimizers.general_marginal_error import GeneralMarginalStrategy
    from matmech.privacy.budget import PrivacyBudget

    W, meta = load(workload)
    domain = tuple(meta["domain"])
    times = {}
    codes = _codes_via_parquet(domain, records, seed, times)
    t0 = time.perf_counter()
    A = gmarginal_strategy(W, eps, delta, None)[
        0
    ]  # the release's own: under (ε, δ) weights re-optimised for L2
    times["optimise"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = plan_gmarginal(A, eps, delta, max_records=records)
    solver = GMarginalSolver(plan.gls_strategy(), plan.subsets)
    wt = as_terms(W)
    var = solver.variances(wt)
    times["plan + variances"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    tables = marginal_tables(codes, domain, list(plan.subsets) + [()])
    times["marginal tables"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    PrivacyBudget(eps, delta).spend(eps, delta, what="benchmark")
    meas = measure_gmarginal(plan, tables, rng=np.random.default_rng(seed))
    del tables
    times["measure"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    answers = solver.answers(wt, solver.estimate(meas.y, plan.variances))
    std = np.sqrt(var)
    times["reconstruct + answers"] = time.perf_counter() - t0
    # not timed: the true answers, term by term from the marginal on each term's support
    supports = [tuple(i for i, k in enumerate(ks) if k != "T") for ks in wt.kinds]
    truth_tables = marginal_tables(codes, domain, supports)
    truth = []
    for w, fs, Z in zip(wt.weights, wt.factors, supports):
        t = truth_tables[Z].astype(np.float64)
        for a, i in enumerate(Z):
            t = np.moveaxis(np.tensordot(fs[i].dense(), t, axes=([1], [a])), 0, a)
        truth.append(w * t.reshape(-1))
    truth = np.concatenate(truth)
    # the same noise on the unrounded factors: what the grid rounding costs
    unrounded = GMarginalSolver(
        GeneralMarginalStrategy(domain, plan.gls_strategy().theta, A.factors), plan.subsets
    )
    total = sum(times.values()) - times["load parquet"]
    out.put(
        {
            "kind": "gmarginal",
            "case": name,
            "workload": workload,
            "attributes": len(domain),
            "domain_cells": f"{math.prod(domain):.3g}",
            "records": records,
            "answers": int(answers.size),
            "eps_delta": [eps, delta],
            "measured_subsets": len(plan.subsets),
            "classes": len(solver.classes),
            "grid_bits": plan.bits,
            "sensitivity": plan.sensitivity,
            "noise": plan.noise,
            "rmse_analytic": float(math.sqrt(np.mean(std**2))),
            "rmse_empirical": float(math.sqrt(np.mean((answers - truth) ** 2))),
            "rmse_analytic_unrounded_factors": float(math.sqrt(np.mean(unrounded.variances(wt)))),
            "stage_seconds": times,
            "seconds_total_excluding_load": total,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        }
    )


def _case_select(name, domain, records, k, select, eps, delta, seed, out):
    """Private selection over every cell of the k-way marginals, then only the selected cells
    measured (matmech.plans.factored_selected), never the histogram."""
    from matmech.release import release_factored
    from matmech.plans.factored_selected import row_values
    from matmech.plans.factored_selection import plan_factored_selection
    from matmech.sources.tables import marginal_tables
    from matmech.linalg.terms import marginal_workload
    from matmech.privacy.budget import PrivacyBudget

    W = marginal_workload(domain, list(itertools.combinations(range(len(domain)), k)))
    times = {}
    codes = _codes_via_parquet(domain, records, seed, times)
    t0 = time.perf_counter()
    plan = plan_factored_selection(
        W, eps, delta, select=select, max_records=2**32, max_memory=8 << 30
    )
    times["plan (no data)"] = time.perf_counter() - t0
    budget = PrivacyBudget(eps, delta)
    t0 = time.perf_counter()
    rel = release_factored(
        codes, W, eps, delta, select=select, budget=budget, rng=np.random.default_rng(seed)
    )
    times["release (tables + W x + select + measure)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    truth = np.concatenate(row_values(plan, marginal_tables(codes, domain, list(plan.subsets))))
    times["tables + W x alone"] = time.perf_counter() - t0
    err = rel.answers - truth[rel.selected]
    out.put(
        {
            "case": name,
            "kind": "select",
            "attributes": len(domain),
            "domain_cells": f"{math.prod(domain):.3g}",
            "records": records,
            "marginals": len(plan.subsets),
            "rows": plan.rows,
            "select": {**select},
            "eps": eps,
            "delta": delta,
            "selected": int(rel.selected.size),
            "eps_select": rel.eps_select,
            "rmse_selected_analytic": float(math.sqrt(np.mean(rel.std**2)))
            if rel.selected.size
            else None,
            "rmse_selected_empirical": float(math.sqrt(np.mean(err**2)))
            if rel.selected.size
            else None,
            "note": rel.strategy_note,
            "seconds": times,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        }
    )


def _case_refused(name, domain, records, k, eps, delta, seed, out):
    """A release the residual path refuses up front (its memory estimate is over
    ``max_memory``): how long planning and the refusal take, and the estimate."""
    from matmech.release import release_factored
    from matmech.measurements.residual import MAX_MEMORY
    from matmech.linalg.terms import marginal_workload
    from matmech.privacy.budget import PrivacyBudget

    subsets = [s for j in range(k + 1) for s in itertools.combinations(range(len(domain)), j)]
    codes = np.column_stack(_generate(domain, records, seed))
    W = marginal_workload(domain, subsets)
    budget = PrivacyBudget(eps, delta)
    t0 = time.perf_counter()
    try:
        release_factored(codes, W, eps, delta, budget=budget, rng=np.random.default_rng(seed))
        message = None
    except ValueError as e:
        message = str(e)
    out.put(
        {
            "case": name,
            "kind": "refused",
            "attributes": len(domain),
            "records": records,
            "marginals": len(subsets),
            "answers": int(sum(math.prod(domain[i] for i in s) for s in subsets)),
            "eps": eps,
            "delta": delta,
            "max_memory_gib": MAX_MEMORY / 2**30,
            "refusal": message,
            "budget_untouched": budget.remaining == (eps, delta),
            "seconds_to_refusal": time.perf_counter() - t0,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        }
    )


def _plan_only(out):
    """ResidualPlanner's planning target: all ≤3-way marginals of 100 attributes × 10 values."""
    from matmech.optimizers.residual import plan_residuals

    subsets = [s for j in range(4) for s in itertools.combinations(range(100), j)]
    t0 = time.perf_counter()
    plan = plan_residuals((10,) * 100, subsets)
    out.put(
        {
            "case": "plan only: 100×10 ≤3-way",
            "marginals": len(subsets),
            "residuals": len(plan.lattice.residuals),
            "answers": int(plan.queries),
            "rmse_over_sigma_plan": plan.rmse,
            "svd_bound_ratio": plan.weighted_total / plan.svd_bound,
            "seconds_plan": time.perf_counter() - t0,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        }
    )


_KINDS = {
    "gmarginal": _case_gmarginal,
    "pure": _case_pure,
    "refused": _case_refused,
    "select": _case_select,
}


def run(cases, *, inline=False):
    """Each case in its own process (its peak RSS is the case's), or here (``inline``)."""
    ctx = mp.get_context("spawn")
    rows = []
    for c in cases:
        if not c:
            target, args = _plan_only, ()
        elif c[0] in _KINDS:
            target, args = _KINDS[c[0]], c[1:]
        else:
            target, args = _case, c
        if inline:
            q: queue.Queue = queue.Queue()
            target(*args, q)
            rows.append(q.get_nowait())
            continue
        q = ctx.Queue()
        p = ctx.Process(target=target, args=(*args, q))
        p.start()
        rows.append(q.get())
        p.join()
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="6 attributes × 10, 2,000 records, in this process; files to a temporary directory",
    )
    ap.add_argument(
        "--only",
        choices=["pure", "gmarginal", "select", "scale"],
        help="run only this case and merge it into the saved results",
    )
    args = ap.parse_args(argv)
    scale = 1
    pure = ("pure", "adult ≤3-way, pure ε", ADULT, 1_000_000 // scale, 3, 1.0, 0)
    cases = [
        ("adult ≤3-way", ADULT, 1_000_000 // scale, 3, False, 1.0, 1e-6, 0),
        ("100×10 2-way", (10,) * 100, 100_000 // scale, 2, True, 1.0, 1e-6, 1),
        (),
        pure,
    ]
    gm = [
        (
            "gmarginal",
            f"{w} gmarginals, {'pure ε' if d == 0 else '(ε, δ)'}",
            w,
            1_000_000 // scale,
            1.0,
            d,
            2,
        )
        for w in ("adult_W2", "loans_W2")
        for d in (0.0, 1e-6)
    ]
    cases += gm
    sel = [
        (
            "select",
            "adult 2-way, top 50 cells (em)",
            ADULT,
            1_000_000 // scale,
            2,
            dict(method="em", c=50, eps=0.2),
            1.0,
            1e-6,
            0,
        ),
        (
            "select",
            "adult 2-way, svt threshold auto, pure ε",
            ADULT,
            1_000_000 // scale,
            2,
            dict(method="svt", c=100, eps=0.3, threshold="auto"),
            1.0,
            0.0,
            0,
        ),
        (
            "select",
            "100×10 2-way, top 50 cells (topc-gap)",
            (10,) * 100,
            100_000 // scale,
            2,
            dict(method="topc-gap", c=50, eps=0.3),
            1.0,
            1e-6,
            1,
        ),
    ]
    cases += sel
    big = [
        ("100×10 ≤3-way", (10,) * 100, 100_000 // scale, 3, False, 1.0, 1e-6, 1),
        ("refused", "200×10 ≤3-way", (10,) * 200, 100_000 // scale, 3, 1.0, 1e-6, 1),
    ]
    cases += big
    if args.only == "scale":
        cases = big
    if args.only == "select":
        cases = sel
    if args.only == "pure":
        cases = [pure]
    if args.only == "gmarginal":
        cases = gm
    if args.smoke:  # no HDMM workloads (data), no 100-attribute plans
        small = (10,) * 6
        cases = [
            ("6×10 ≤3-way", small, 2_000, 3, False, 1.0, 1e-6, 0),
            ("pure", "6×10 ≤3-way, pure ε", small, 2_000, 3, 1.0, 0),
            ("select", "6×10 2-way, top 5 (em)", small, 2_000, 2, dict(method="em", c=5, eps=0.2))
            + (1.0, 1e-6, 0),
        ]
    rows = run(cases, inline=args.smoke)
    load = os.getloadavg()
    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}",
        "load_average": [round(v, 2) for v in load],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    print(json.dumps({"meta": meta, "rows": rows}, indent=1))
    results = Path(tempfile.mkdtemp(prefix="matmech-smoke-")) if args.smoke else RESULTS
    results.mkdir(exist_ok=True)
    if args.only:
        old = json.loads((results / "factored_release.json").read_text())
        done = {r["case"] for r in rows}
        rows = [r for r in old["rows"] if r["case"] not in done] + rows
        for r in rows:
            r.setdefault("run", old["meta"] if r["case"] not in done else meta)
        meta = {**old["meta"], "partial_rerun": meta}
    (results / "factored_release.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n"
    )
    lines = [
        f"# Factored release ({meta['date']}, {meta['machine']}, load {meta['load_average']})",
        "",
        "| case | records | marginals | answers | RMSE/σ (plan) | × SVD bound | tables s | plan s | measure s | "
        "reconstruct s | total s | peak GiB |",
        "|" + "---|" * 12,
    ]
    for r in rows:
        if "seconds" not in r or r.get("delta") == 0.0 or r.get("kind") == "select":
            continue
        t = r["seconds"]
        lines.append(
            f"| {r['case']} | {r['records']:,} | {r['marginals']:,} | {r['answers']:,} | "
            f"{r['rmse_over_sigma_plan']:.4f} | {r['svd_bound_ratio']:.6f} | {t['marginal tables']:.1f} | "
            f"{t['plan']:.1f} | {t['measure']:.1f} | {t['reconstruct + answers']:.1f} | "
            f"{r['seconds_total_excluding_load']:.1f} | {r['peak_rss_gib']:.2f} |"
        )
    for r in rows:
        if "seconds_plan" in r:
            lines += [
                "",
                f"{r['case']}: {r['marginals']:,} marginals, {r['residuals']:,} residuals, "
                f"{r['answers']:,} answers; plan in {r['seconds_plan']:.1f} s (ResidualPlanner reports 9.9 s), "
                f"RMSE/σ {r['rmse_over_sigma_plan']:.4f}, × SVD bound {r['svd_bound_ratio']:.6f}.",
            ]
    for r in rows:
        if r.get("delta") == 0.0 and r.get("kind") != "select":
            t, when = r["seconds"], r.get("run", meta)
            lines += [
                "",
                f"Pure ε ({when['date']}, load {when['load_average']}): {r['case']}, {r['records']:,} records, "
                f"{r['answers']:,} answers from {r['tables']} noisy marginal tables ({r['table_cells']:,} cells, "
                f"{r['distinct_scales']} distinct Laplace scales, L1 sensitivity {r['l1_sensitivity']:.6g}); "
                f"per-query RMSE at ε = 1: {r['rmse_eps1_plan_continuous']:.4g} (plan, continuous Laplace), "
                f"{r['rmse_measured_analytic']:.4g} (exact discrete noise drawn); tables "
                f"{t['marginal tables']:.1f} s, plan {t['plan']:.1f} s, measure {t['measure']:.1f} s, "
                f"reconstruct {t['reconstruct + answers']:.1f} s, total {r['seconds_total_excluding_load']:.1f} s, "
                f"peak {r['peak_rss_gib']:.2f} GiB.",
            ]
    gm_rows = [r for r in rows if r.get("kind") == "gmarginal"]
    if gm_rows:
        lines += [
            "",
            "Generalised marginals (HDMM's adult_W2 / loans_W2 on generated records; strategy from "
            '`optimize(method="gmarginals")`, under (ε, δ) its lattice weights re-optimised for the L2 error '
            "with the factors fixed, measured from its marginal tables, factored GLS):",
            "",
            "| case | records | answers | subsets | classes | grid bits | RMSE analytic | RMSE empirical | "
            "RMSE unrounded | optimise s | tables s | plan s | measure s | reconstruct s | total s | peak GiB |",
            "|" + "---|" * 16,
        ]
        for r in gm_rows:
            t = r["stage_seconds"]
            lines.append(
                f"| {r['case']} | {r['records']:,} | {r['answers']:,} | {r['measured_subsets']} | "
                f"{r['classes']} | {r['grid_bits']} | {r['rmse_analytic']:.4g} | {r['rmse_empirical']:.4g} | "
                f"{r['rmse_analytic_unrounded_factors']:.4g} | {t['optimise']:.1f} | {t['marginal tables']:.1f} | "
                f"{t['plan + variances']:.2f} | {t['measure']:.2f} | {t['reconstruct + answers']:.2f} | "
                f"{r['seconds_total_excluding_load']:.1f} | {r['peak_rss_gib']:.2f} |"
            )
    sel_rows = [r for r in rows if r.get("kind") == "select"]
    if sel_rows:
        lines += [
            "",
            "Selection over marginal cells (`release(..., select=...)` on the factored path; only the "
            "selected cells are measured):",
            "",
            "| case | records | rows | ε, δ | selected | RMSE analytic | RMSE empirical | plan s | "
            "release s | of which tables + W x s | peak GiB |",
            "|" + "---|" * 11,
        ]
        for r in sel_rows:
            t = r["seconds"]
            rm = (
                "-" if r["rmse_selected_analytic"] is None else f"{r['rmse_selected_analytic']:.4g}"
            )
            re_ = (
                "-"
                if r["rmse_selected_empirical"] is None
                else f"{r['rmse_selected_empirical']:.4g}"
            )
            lines.append(
                f"| {r['case']} | {r['records']:,} | {r['rows']:,} | {r['eps']:g}, {r['delta']:g} | "
                f"{r['selected']} | {rm} | {re_} | {t['plan (no data)']:.2f} | "
                f"{t['release (tables + W x + select + measure)']:.1f} | {t['tables + W x alone']:.1f} | "
                f"{r['peak_rss_gib']:.2f} |"
            )
    for r in rows:
        if r.get("kind") == "refused":
            lines += [
                "",
                f"{r['case']}, {r['records']:,} records: {r['marginals']:,} marginals, {r['answers']:,} "
                f"answers (float64 answers and std alone: {16 * r['answers'] / 2**30:.1f} GiB); refused before "
                f"reading the data in {r['seconds_to_refusal']:.1f} s (budget untouched: {r['budget_untouched']}): "
                f"{r['refusal']}",
            ]
    lines += [
        "",
        "Total excludes reading the Parquet file (`load parquet` in the JSON). RMSE/σ is HDMM's unit "
        "(per-query RMSE over σ of the unit-L2 Gaussian); the measured analytic RMSE uses the exact "
        "discrete noise actually drawn.",
    ]
    (results / "factored_release.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
