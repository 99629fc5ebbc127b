"""All ≤3-way marginals of 100 and 200 attributes × 10 values, end to end (issue 24, item 5).

ResidualPlanner's scale benchmark: plan, measure (count the marginal tables, contrast, exact
discrete Gaussian) and reconstruct every answer with its std, through
:func:`matmech.release.release_marginals` (bounded memory: the released integers
in RAM when they fit, else in a file; answers reconstructed marginal by marginal and reduced
to their RMSE). Stage times come from timing wrappers around the release's own calls (the
planner, the table reader, the batch measurement and the sampler). Each case runs in its own
process; peak memory is that process's maximum resident set size. Also: the sampler's
throughput, and the max-variance plan at 100 attributes (``objective="max"``, cvxpy).

    OPENBLAS_NUM_THREADS=1 python benchmarks/factored_release_scale.py           # 100 and 200
    OPENBLAS_NUM_THREADS=1 python benchmarks/factored_release_scale.py --only 100
    OPENBLAS_NUM_THREADS=1 python benchmarks/factored_release_scale.py --only 200-secure  # rng=None
    OPENBLAS_NUM_THREADS=1 python benchmarks/factored_release_scale.py --only max
    OPENBLAS_NUM_THREADS=1 python benchmarks/factored_release_scale.py --only 100-pure  # δ = 0
    OPENBLAS_NUM_THREADS=1 python benchmarks/factored_release_scale.py --smoke   # seconds (CI)

Results merge into benchmarks/results/factored_release_scale.{json,md}; ``--smoke`` runs 8
attributes × 10 values (both models and the max plan) in this process and writes its files
to a temporary directory.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's matmech
RESULTS = Path(__file__).resolve().parent / "results"
NAME = "factored_release_scale"


def _records(d, n, records, seed):
    """Synthetic codes with dependence between attributes (a latent class per record), as
    benchmarks/factored_release.py generates them."""
    rng = np.random.default_rng(seed)
    latent = rng.integers(0, 8, size=records)
    cols = []
    for _ in range(d):
        shift = rng.integers(0, n, size=8)
        spread = max(1, n // 4)
        cols.append(((shift[latent] + rng.integers(0, spread, size=records)) % n).astype(np.int32))
    return np.column_stack(cols)


class _Timer:
    """Accumulated seconds of wrapped calls (the wrappers replace module attributes)."""

    def __init__(self):
        self.seconds, self.cpu, self.calls = {}, {}, {}

    def add(self, stage, t0, c0):
        self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - t0
        self.cpu[stage] = self.cpu.get(stage, 0.0) + time.process_time() - c0
        self.calls[stage] = self.calls.get(stage, 0) + 1

    def wrap(self, module, name, stage):
        real = getattr(module, name)

        def timed(*a, **k):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return real(*a, **k)
            finally:
                self.add(stage, t0, c0)

        setattr(module, name, timed)


def _case(name, d, records, seed, spill, secure, delta, k, out):
    """One release of all ≤k-way marginals of d attributes × 10 values: (ε, δ) = (1, delta);
    delta = 0 is the pure-ε release (Laplace tables combined into the residuals)."""
    from matmech.measurements import residual as measure, table_batches
    from matmech.plans import streamed
    from matmech.release import release_marginals as mm_release_marginals
    from matmech.results import streamed_kinds
    from matmech.sources import source as pipeline_source
    from matmech.linalg.terms import marginal_workload
    from matmech.privacy import noise
    from matmech.privacy.budget import PrivacyBudget

    codes = _records(d, 10, records, seed)
    subsets = [s for r in range(k + 1) for s in itertools.combinations(range(d), r)]
    W = marginal_workload((10,) * d, subsets)
    timer = _Timer()
    pure = delta == 0
    # the streamed plan's two planning steps (matmech.plans.factored): the lattice plan and
    # the measurement (noise) plan; each returns a tuple whose first item is kept
    for name_, keep_as in (("lattice_plan", "plan"), ("noise_plan", "mplan")):
        timer.wrap(streamed, name_, "plan")
        real_ = getattr(streamed, name_)

        def keep(*a, _real=real_, _as=keep_as, **kw):
            out = _real(*a, **kw)
            setattr(timer, _as, out[0])
            return out

        setattr(streamed, name_, keep)
    if pure:
        timer.wrap(table_batches.TableBatches, "draw", "measure (tables + noise)")
        timer.wrap(table_batches.TableBatches, "combine", "combine")
        timer.wrap(noise, "discrete_laplace", "noise draws")
    else:
        timer.wrap(streamed_kinds, "measure_batch", "measure (contrast + noise)")
        timer.wrap(measure, "_contrast", "contrast")
        timer.wrap(noise, "discrete_gaussian", "noise draws")
        timer.wrap(noise, "discrete_gaussian_mixed", "noise draws")
    real_reader = pipeline_source.table_reader  # the streamed plan's checked reader

    def reader(data, domain, **k):
        r = real_reader(data, domain, **k)
        real_call = r._read

        def timed(subsets):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return real_call(subsets)
            finally:
                timer.add("tables", t0, c0)

        r._read = timed
        return r

    pipeline_source.table_reader = reader
    budget = PrivacyBudget(1.0, max(delta, 1e-6))
    with tempfile.TemporaryDirectory(dir=spill) as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        rel = mm_release_marginals(
            codes,
            W,
            1.0,
            delta,
            budget=budget,
            rng=None if secure else np.random.default_rng(seed),
            spill_dir=tmp,
        )
        t_release, c_release = time.perf_counter() - t0, time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        sq, n, checksum = 0.0, 0, 0.0
        for _, v, s in rel.iter_marginals():  # every answer and its std
            sq += float(np.dot(s.reshape(-1), s.reshape(-1)))
            checksum += float(v.sum())
            n += v.size
        t_rec, c_rec = time.perf_counter() - t0, time.process_time() - c0
        del rel
    if pure:  # one draw per cell of every measured table
        draws = int(sum(math.prod(10 for _ in t) for t in timer.mplan.plan.tables))
    else:
        draws = int(sum(math.prod(9 for _ in range(r)) * math.comb(d, r) for r in range(k + 1)))
    extra = streamed_kinds.kind_of(timer.mplan).extra_bytes(timer.mplan)
    sec = timer.seconds
    step = "combine" if pure else "contrast"
    measured = "measure (tables + noise)" if pure else "measure (contrast + noise)"
    out.put(
        {
            "case": name,
            "attributes": d,
            "records": records,
            "marginals": len(subsets),
            "answers": n,
            "noise_draws": draws,
            "eps_delta": [1.0, delta],
            "noise": "discrete Laplace (tables)" if pure else "discrete Gaussian (residuals)",
            "randomness": "secure default (AES-256 CTR_DRBG)" if secure else "seeded Generator",
            "rmse_analytic": math.sqrt(sq / n),
            "seconds": {
                "plan": sec.get("plan", 0.0),
                "tables": sec.get("tables", 0.0),
                step: sec.get(step, 0.0),
                "noise draws": sec.get("noise draws", 0.0),
                measured: sec.get(measured, 0.0),
                "release (plan + tables + measure)": t_release,
                "reconstruct every answer + std": t_rec,
            },
            "seconds_total": t_release + t_rec,
            "cpu_seconds": {
                **{k: timer.cpu.get(k, 0.0) for k in ("plan", "tables", step, "noise draws")},
                "release (plan + tables + measure)": c_release,
                "reconstruct every answer + std": c_rec,
            },
            "cpu_seconds_total": c_release + c_rec,
            "memory_estimate_gib": streamed.streamed_memory(timer.plan, in_ram=False, extra=extra)
            / 2**30,
            "draws_per_second": draws / max(sec.get("noise draws", 1e-9), 1e-9),
            "draws_per_cpu_second": draws / max(timer.cpu.get("noise draws", 1e-9), 1e-9),
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "load_after": [round(v, 2) for v in os.getloadavg()],
        }
    )


def _sampler(out):
    """Throughput of the exact discrete Gaussian (seeded Generator and the secure default)."""
    from matmech.privacy import noise

    rows = []
    for sigma in (700.0, 3000.0, 20000.0):  # the range of the ≤3-way plans' rounded σ
        for secure in (False, True):
            rng = None if secure else np.random.default_rng(0)
            noise.discrete_gaussian(sigma, 1000, rng=rng)  # the sampler's table, once
            t0, c0 = time.perf_counter(), time.process_time()
            noise.discrete_gaussian(sigma, 1 << 22, rng=rng)
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            rows.append(
                {
                    "sigma": sigma,
                    "secure": secure,
                    "draws_per_second": (1 << 22) / dt,
                    "draws_per_cpu_second": (1 << 22) / dc,
                }
            )
    out.put({"case": "sampler", "rows": rows})


def _max_plan(d, out):
    """The max-variance residual plan (ResidualPlanner ≈ 120 s at 100 × 10, ≤3-way) through
    the public planner."""
    from matmech.optimizers.residual import plan_residuals

    subsets = [s for k in range(4) for s in itertools.combinations(range(d), k)]
    t0, c0 = time.perf_counter(), time.process_time()
    plan = plan_residuals((10,) * d, subsets, objective="max")
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    s = plan_residuals((10,) * d, subsets)
    ds, cs = time.perf_counter() - t0, time.process_time() - c0
    out.put(
        {
            "case": f"max-variance plan {d}×10 ≤3-way",
            "residuals": len(plan.lattice.residuals),
            "solver": plan.solver,
            "seconds_plan_max": dt,
            "seconds_plan_sum": ds,
            "cpu_seconds_plan_max": dc,
            "cpu_seconds_plan_sum": cs,
            "max_cell_variance": float(np.max(plan.cell_variances)),
            "max_cell_variance_sum_plan": float(np.max(s.cell_variances)),
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        }
    )


def run(cases, *, inline=False):
    """Each case in its own process (its peak RSS is the case's), or here (``inline``: the
    smoke run; the stage wrappers then stay installed, which only the next case's timings
    see)."""
    rows = []
    if inline:
        for target, args in cases:
            q: queue.Queue = queue.Queue()
            target(*args, q)
            rows.append(q.get_nowait())
        return rows
    ctx = mp.get_context("spawn")
    for target, args in cases:
        q = ctx.Queue()
        p = ctx.Process(target=target, args=(*args, q))
        p.start()
        while True:
            try:
                rows.append(q.get(timeout=5))
                break
            except queue.Empty:
                if not p.is_alive():
                    raise RuntimeError(
                        f"{target.__name__}{args[:1]} failed (exit code {p.exitcode})"
                    ) from None
        p.join()
    return rows


def _table(meta, rows):
    lines = [
        f"# Streamed residual release, ≤3-way marginals ({meta['date']}, {meta['machine']})",
        "",
        "| case | records | marginals | answers | draws | RMSE | plan s | tables s | contrast / combine s | "
        "noise s | release s | reconstruct s | total s | CPU s | peak GiB (estimate) | load |",
        "|" + "---|" * 16,
    ]
    for r in rows:
        if "noise_draws" not in r:
            continue
        t = r["seconds"]
        lines.append(
            f"| {r['case']} | {r['records']:,} | {r['marginals']:,} | {r['answers']:,} | "
            f"{r['noise_draws']:,} | {r['rmse_analytic']:.2f} | {t['plan']:.1f} | {t['tables']:.1f} | "
            f"{t.get('contrast', t.get('combine', float('nan'))):.1f} | {t['noise draws']:.1f} | "
            f"{t['release (plan + tables + measure)']:.1f} | {t['reconstruct every answer + std']:.1f} | "
            f"{r['seconds_total']:.1f} | {r.get('cpu_seconds_total', float('nan')):.1f} | "
            f"{r['peak_rss_gib']:.2f} ({r.get('memory_estimate_gib', float('nan')):.2f}) | "
            f"{r['run']['load_average']} |"
        )
    for r in rows:
        if r["case"] == "sampler":
            cells = ", ".join(
                f"σ={x['sigma']:g} {'secure' if x['secure'] else 'seeded'}: "
                f"{x['draws_per_second'] / 1e6:.2f} M/s "
                f"({x.get('draws_per_cpu_second', float('nan')) / 1e6:.2f} M per CPU-s)"
                for x in r["rows"]
            )
            lines += [
                "",
                f"Exact discrete Gaussian sampler (load {r['run']['load_average']}): {cells}.",
            ]
        if r["case"].startswith("max-variance"):
            lines += [
                "",
                f"{r['case']} (load {r['run']['load_average']}): {r['residuals']:,} residuals, "
                f"{r['solver']}, {r['seconds_plan_max']:.1f} s, CPU {r.get('cpu_seconds_plan_max', float('nan')):.1f} s "
                f"(sum plan {r['seconds_plan_sum']:.1f} s); "
                f"largest cell variance / σ² {r['max_cell_variance']:.6g} vs {r['max_cell_variance_sum_plan']:.6g} "
                f"for the sum plan; peak {r['peak_rss_gib']:.2f} GiB.",
            ]
    lines += [
        "",
        "Release = plan + tables + measure (one atomic spend before the first draw); tables, "
        "contrast and noise are the parts of it spent in the table reader, the integer contrasts "
        "and the sampler (pure ε rows: draws = the cells of the Laplace tables, and "
        "combine = adding each noisy table batch into the residuals it contains). Reconstruct = every answer and its exact std, marginal by marginal "
        "(reduced to the RMSE). CPU s = the process's CPU time (user + system): the wall time "
        "it would take with a core to itself. Estimate = `streamed_memory`, checked before the "
        "spend. One BLAS thread; load = the 1/5/15-minute load average when the case finished "
        "(2 cores shared by other jobs).",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="8 attributes, 2,000 records, in this process; files to a temporary directory (CI)",
    )
    ap.add_argument(
        "--only",
        choices=[
            "100",
            "200",
            "100-secure",
            "200-secure",
            "100-pure",
            "100-pure-2way",
            "sampler",
            "max",
        ],
    )
    ap.add_argument("--spill", default=None, help="directory of the spill files")
    args = ap.parse_args(argv)
    cases = {
        "sampler": (_sampler, ()),
        "100": (_case, ("100×10 ≤3-way", 100, 100_000, 1, args.spill, False, 1e-6, 3)),
        "200": (_case, ("200×10 ≤3-way", 200, 100_000, 1, args.spill, False, 1e-6, 3)),
        "100-secure": (
            _case,
            ("100×10 ≤3-way, secure", 100, 100_000, 1, args.spill, True, 1e-6, 3),
        ),
        "200-secure": (
            _case,
            ("200×10 ≤3-way, secure", 200, 100_000, 1, args.spill, True, 1e-6, 3),
        ),
        "max": (_max_plan, (100,)),
        "100-pure": (_case, ("100×10 ≤3-way, pure ε", 100, 100_000, 1, args.spill, False, 0.0, 3)),
        "100-pure-2way": (
            _case,
            ("100×10 ≤2-way, pure ε", 100, 100_000, 1, args.spill, False, 0.0, 2),
        ),
    }
    if args.smoke:
        chosen = [
            (_case, ("8×10 ≤3-way", 8, 2_000, 1, args.spill, False, 1e-6, 3)),
            (_case, ("8×10 ≤3-way, pure ε", 8, 2_000, 1, args.spill, False, 0.0, 3)),
            (_max_plan, (8,)),
        ]
    else:
        chosen = [cases[args.only]] if args.only else [cases[k] for k in ("sampler", "100", "200")]
    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    rows = run(chosen, inline=args.smoke)
    for r in rows:
        r["run"] = {"date": meta["date"], "load_average": [round(v, 2) for v in os.getloadavg()]}
    print(json.dumps(rows, indent=1))
    out = Path(tempfile.mkdtemp(prefix=f"matmech-smoke-{NAME}-")) if args.smoke else RESULTS
    out.mkdir(exist_ok=True)
    path = out / f"{NAME}.json"
    old = json.loads(path.read_text())["rows"] if path.exists() else []
    done = {r["case"] for r in rows}
    rows = [r for r in old if r["case"] not in done] + rows
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (out / f"{NAME}.md").write_text(_table(meta, rows))
    print(f"wrote {path} and {NAME}.md")


if __name__ == "__main__":
    main()
