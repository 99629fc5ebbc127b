"""The non-sampler part of the adult release, this checkout against an older one (issue 24).

``release_factored`` on ResidualPlanner's real adult file (48,842 records, all ≤3-way
marginals of its 14 attributes, (ε, δ) = (1, 1e-6), seed 0), one process per run, runs
interleaved, OPENBLAS_NUM_THREADS=1. Each run reports the release's CPU seconds (user +
system), the part spent in the exact sampler (:func:`matmech.privacy.noise.discrete_gaussian`,
timed by a wrapper), the reconstruction (the plan's ``estimate``) and the SHA-256 of the
answers and std: the seeded release must be byte-identical across the two checkouts.

    python benchmarks/adult_nonsampler.py --data /path/to/ResidualPlanner/residual_planner/adult.csv \
        --before /path/to/older/checkout --before-label 6859313 --repeats 5
    python benchmarks/adult_nonsampler.py --smoke   # this checkout, 2,000 generated records (CI)

``--smoke`` runs one release of the ≤2-way marginals of a 4-attribute domain on generated
records in this process (no adult file, no older checkout) and writes its files to a
temporary directory.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))
from residualplanner_adult import interleaved  # noqa: E402  (the interleaved subprocess runs)

DOM = (85, 9, 100, 16, 7, 15, 6, 5, 2, 100, 100, 99, 42, 2)  # ResidualPlanner's adult order


def _cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def _child(which, root, data, dom=DOM, order=3):
    import numpy as np

    sys.path.insert(0, root)
    from matmech.release import release_factored
    from matmech.plans.residual import ResidualPlan
    from matmech.linalg.terms import marginal_workload
    from matmech.privacy import noise

    x = np.loadtxt(data, delimiter=",", skiprows=1, dtype=np.int64)
    if x.shape[1] != len(dom) or (x < 0).any() or (x >= np.array(dom)).any():
        raise ValueError(f"{data} is not the adult file coded in the domain {dom}")
    subsets = [s for k in range(order + 1) for s in itertools.combinations(range(len(dom)), k)]
    W = marginal_workload(dom, subsets)
    spent = {"sampler": 0.0, "estimate": 0.0}

    def timed(name, f):
        def g(*a, **k):
            c = time.process_time()
            try:
                return f(*a, **k)
            finally:
                spent[name] += time.process_time() - c

        return g

    # the residual release draws through discrete_gaussian_mixed (one call per batch)
    noise.discrete_gaussian = timed("sampler", noise.discrete_gaussian)
    noise.discrete_gaussian_mixed = timed("sampler", noise.discrete_gaussian_mixed)
    seen = []
    estimate = ResidualPlan.estimate

    def kept(plan, draws):  # the plan and draws, for the warm reruns below
        seen.append((plan, draws))
        return estimate(plan, draws)

    ResidualPlan.estimate = timed("estimate", kept)
    u0, s0 = _cpu()
    t0 = time.perf_counter()
    rel = release_factored(x, W, 1.0, 1e-6, rng=np.random.default_rng(0))
    wall = time.perf_counter() - t0
    u1, s1 = _cpu()
    cpu = (u1 - u0) + (s1 - s0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    warm = []  # the reconstruction again on the same draws (its memory recycled: compute only)
    for _ in range(3):
        c = time.process_time()
        again = estimate(*seen[0])
        warm.append(time.process_time() - c)
        if not np.array_equal(again.answers, rel.answers):
            raise AssertionError("the reconstruction is not deterministic")
        del again
    out = {
        "which": which,
        "seconds": wall,
        "cpu_seconds": cpu,
        "user": u1 - u0,
        "sys": s1 - s0,
        "sampler": spent["sampler"],
        "estimate": spent["estimate"],
        "non_sampler": cpu - spent["sampler"],
        "answers_sha256": hashlib.sha256(np.ascontiguousarray(rel.answers).tobytes()).hexdigest(),
        "std_sha256": hashlib.sha256(np.ascontiguousarray(rel.std).tobytes()).hexdigest(),
        "expected_error": rel.expected_error,
        "estimate_warm": min(warm),
        "peak_rss_gib": peak,
    }
    print(json.dumps(out))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="ResidualPlanner's adult.csv")
    ap.add_argument("--before", help="an older matmech checkout (its root folder)")
    ap.add_argument("--before-label", help="what --before is (e.g. its commit)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--render", action="store_true", help="only rewrite the .md from the JSON")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument(
        "--smoke", action="store_true", help="one small release here; temporary directory"
    )
    args = ap.parse_args(argv)
    if args.render:
        return render()
    if args.smoke:
        return _smoke()
    if args.child:
        return _child(args.child[0], args.child[1], args.data)
    if not args.data or not args.before:
        ap.error("--data and --before are required")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    runs = [("before", args.before), ("this", str(HERE.parent))]
    argvs = [[sys.executable, __file__, "--data", args.data, "--child", w, r] for w, r in runs]
    rows, loads = interleaved(argvs, args.repeats, env)
    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}",
        "load_average_during": [round(min(loads), 2), round(max(loads), 2)],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "before": args.before_label or args.before,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "adult_nonsampler.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n"
    )
    render()


_COLUMNS = [
    ("cpu_seconds", "CPU s"),
    ("user", "user s"),
    ("sys", "system s"),
    ("sampler", "sampler CPU s"),
    ("non_sampler", "non-sampler CPU s"),
    ("estimate", "estimate CPU s"),
    ("estimate_warm", "estimate rerun CPU s"),
]


def _smoke():
    """One release of the ≤2-way marginals of (6, 5, 4, 3) on 2,000 generated records."""
    import numpy as np

    from factored_release import _generate

    dom = (6, 5, 4, 3)
    out = Path(tempfile.mkdtemp(prefix="matmech-smoke-"))
    data = out / "records.csv"
    np.savetxt(
        data,
        np.column_stack(_generate(dom, 2_000, 3)),
        fmt="%d",
        delimiter=",",
        header=",".join(f"a{i}" for i in range(len(dom))),
        comments="",
    )
    row = _child("this", str(HERE.parent), str(data), dom, 2)
    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}",
        "load_average_during": [round(os.getloadavg()[0], 2)] * 2,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "before": None,
    }
    (out / "adult_nonsampler.json").write_text(json.dumps({"meta": meta, "rows": [row]}) + "\n")
    render(out)


def render(results=RESULTS):
    """benchmarks/results/adult_nonsampler.md from the saved JSON."""
    saved = json.loads((results / "adult_nonsampler.json").read_text())
    meta, rows = saved["meta"], saved["rows"]
    lo, hi = meta["load_average_during"]
    lines = [
        "# adult file release: the non-sampler part, this checkout vs before",
        "",
        f"{meta['date']}, {meta['machine']}, load average {lo}-{hi} during the runs. "
        f"`release_factored` on ResidualPlanner's adult.csv (48,842 records, all ≤3-way "
        f"marginals, eps=1, delta=1e-6, seed 0); one process per run, interleaved, one BLAS "
        f"thread; medians of {len(rows) // 2} runs each (in brackets: every run). before: "
        f"{meta['before']}. Non-sampler = CPU − the time inside the exact sampler; estimate "
        f"rerun: the best of 3 more reconstructions on the same draws (memory recycled from "
        f"the first: its compute without the first touch of 336 MB of fresh output pages).",
        "",
        "| run | " + " | ".join(h for _, h in _COLUMNS) + " | peak GiB | answers, std sha256 |",
        "|---|" + "---|" * (len(_COLUMNS) + 2),
    ]
    for which in ("before", "this"):
        rs = [r for r in rows if r["which"] == which]
        if not rs:  # the smoke run has no "before"
            continue
        cells = []
        for key, _ in _COLUMNS:
            vals = [r[key] for r in rs]
            cells.append(f"{statistics.median(vals):.2f} ({', '.join(f'{v:.2f}' for v in vals)})")
        hashes = {(r["answers_sha256"][:12], r["std_sha256"][:12]) for r in rs}
        peak = max(r["peak_rss_gib"] for r in rs)
        lines.append(
            f"| {which} | "
            + " | ".join(cells)
            + f" | {peak:.2f} | "
            + "; ".join(f"{a}, {s}" for a, s in sorted(hashes))
            + " |"
        )
    (results / "adult_nonsampler.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
