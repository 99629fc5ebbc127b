"""Side by side with ResidualPlanner's released code (Xiao et al. 2023, github.com/dkifer/
ResidualPlanner, class_resplan.py; not part of matmech: pass the folder of a checkout with
--rp-dir, nothing is copied) on all ≤3-way marginals of the adult domain (its attribute
order), (ε, δ) = (1, 1e-6), ResidualPlanner's privacy cost 2ρ with ρ from its own
cdp2adp.cdp_rho. Records: the real adult file shipped with ResidualPlanner
(``--data <checkout>/residual_planner/adult.csv``, 48,842 rows, already coded in its domain),
or without ``--data`` 48,842 generated ones (benchmarks/factored_release.py's generator).

One process per run, runs interleaved, OPENBLAS_NUM_THREADS=1. ResidualPlanner: plan
(input_mech + sumvar selection), measurement (its tables and continuous Gaussian noise),
reconstruction (answers only, no per-answer variance). matmech: ``release_factored`` end to
end (plan, tables, exact discrete Gaussian, every answer with its exact std), at the default
``scale_bits`` 9 (and any other ``--bits``).

    python benchmarks/residualplanner_adult.py --rp-dir /path/to/ResidualPlanner/residual_planner \
        --data /path/to/ResidualPlanner/residual_planner/adult.csv --repeats 5
    python benchmarks/residualplanner_adult.py --smoke   # matmech only, small domain (CI)

``--smoke`` runs matmech's side once on the ≤2-way marginals of a 4-attribute domain (2,000
generated records) in this process; ResidualPlanner's side needs its code (``--rp-dir``) and
is left out. Its files go to a temporary directory.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DOM = (85, 9, 100, 16, 7, 15, 6, 5, 2, 100, 100, 99, 42, 2)  # ResidualPlanner's adult order
RECORDS = 48_842


def interleaved(argvs, repeats, env) -> tuple[list, list]:
    """Run every command line ``repeats`` times, interleaved (one process each, so the runs
    share the machine's load alike); returns the JSON each printed last and the load average
    before each run."""
    rows, loads = [], []
    for _ in range(repeats):
        for argv in argvs:
            loads.append(os.getloadavg()[0])
            p = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
            rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return rows, loads


def _records(data, dom=DOM, records=RECORDS):
    """The columns of the adult file (coded in DOM) or of generated records."""
    import numpy as np

    if data:
        x = np.loadtxt(data, delimiter=",", skiprows=1, dtype=np.int64)
        if x.shape[1] != len(DOM) or (x < 0).any() or (x >= np.array(DOM)).any():
            raise ValueError(f"{data} is not the adult file coded in the domain {DOM}")
        return [x[:, j] for j in range(len(DOM))]
    sys.path.insert(0, str(HERE))
    from factored_release import _generate

    return _generate(dom, records, 3)


def _child(which, rp_dir, bits, data, before=None, dom=DOM, records=RECORDS, order=3):
    import numpy as np

    cols = _records(data, dom, records)
    subsets = [s for k in range(order + 1) for s in itertools.combinations(range(len(dom)), k)]
    out = {"which": which}
    t0, c0 = time.perf_counter(), time.process_time()
    if which == "residualplanner":
        sys.path.insert(0, rp_dir)
        import pandas as pd
        from cdp2adp import cdp_rho
        from class_resplan import ResidualPlanner

        names = [str(i) for i in range(len(DOM))]
        system = ResidualPlanner(list(DOM))
        system.input_data(pd.DataFrame(dict(zip(names, cols))), names)
        for s in subsets:
            system.input_mech(s, var_bound=1)
        system.selection(choice="sumvar", pcost=2 * cdp_rho(1.0, 1e-6))
        np.random.seed(0)
        system.measurement()
        system.reconstruction()
    else:  # "matmech" from this checkout, "matmech before" from --before
        sys.path.insert(0, before if which == "matmech before" else str(HERE.parent))
        from matmech.release import release_factored
        from matmech.linalg.terms import marginal_workload

        W = marginal_workload(dom, subsets)
        rel = release_factored(
            np.column_stack(cols), W, 1.0, 1e-6, rng=np.random.default_rng(0), scale_bits=bits
        )
        out["rmse_analytic"] = float(np.sqrt(np.mean(rel.std**2)))
        out["matmech_from"] = str(Path(sys.modules["matmech"].__file__).parents[1])
        out["scale_bits"] = bits
    out["seconds"] = time.perf_counter() - t0
    out["cpu_seconds"] = time.process_time() - c0
    out["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps(out))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rp-dir", help="folder holding ResidualPlanner's class_resplan.py")
    ap.add_argument(
        "--render", action="store_true", help="only rewrite the .md from the saved JSON"
    )
    ap.add_argument("--data", help="ResidualPlanner's adult.csv (default: generated records)")
    ap.add_argument("--bits", type=int, nargs="+", default=[9], help="matmech scale_bits runs")
    ap.add_argument("--before", help="an older matmech checkout to run too (its scale_bits 9)")
    ap.add_argument("--before-label", help="what --before is (e.g. its commit), for the table")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument(
        "--smoke", action="store_true", help="matmech only, small domain; temporary directory"
    )
    args = ap.parse_args(argv)
    stem = "residualplanner_adult_file" if args.data else "residualplanner_adult"
    if args.render:
        return render(stem)
    if args.smoke:
        print("ResidualPlanner's side is not run: it needs its code (--rp-dir)")
        row = _child("matmech", None, 9, None, dom=(6, 5, 4, 3), records=2_000, order=2)
        out = Path(tempfile.mkdtemp(prefix="matmech-smoke-"))
        meta = {
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "load_average_during": [round(os.getloadavg()[0], 2)] * 2,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "records": 2_000,
            "data": "generated",
        }
        (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": [row]}) + "\n")
        return render(stem, out)
    if not args.rp_dir:
        ap.error("--rp-dir is required")
    if args.child:
        bits = int(args.child[1]) if args.child[1] != "-" else None
        return _child(args.child[0], args.rp_dir, bits, args.data, args.before)
    env = {
        **os.environ,
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    runs = [("residualplanner", "-")] + [("matmech", str(b)) for b in args.bits]
    runs += [("matmech before", "9")] if args.before else []
    data = ["--data", args.data] if args.data else []
    data += ["--before", args.before] if args.before else []
    argvs = [
        [sys.executable, __file__, "--rp-dir", args.rp_dir, *data, "--child", which, bits]
        for which, bits in runs
    ]
    rows, loads = interleaved(argvs, args.repeats, env)
    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}",
        "load_average_during": [round(min(loads), 2), round(max(loads), 2)],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "records": RECORDS,
        "data": "adult.csv (ResidualPlanner's, real)" if args.data else "generated",
        "domain": DOM,
        "before": args.before_label or args.before,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    render(stem)


def render(stem="residualplanner_adult", results=RESULTS):
    """benchmarks/results/<stem>.md from the saved JSON."""
    saved = json.loads((results / f"{stem}.json").read_text())
    meta, rows = saved["meta"], saved["rows"]
    lo, hi = meta["load_average_during"]
    lines = [
        f"# ResidualPlanner's code vs matmech, adult domain ≤3-way, {meta['records']:,} "
        f"{meta.get('data', 'generated')} records",
        "",
        f"{meta['date']}, {meta['machine']}, load average {lo}-{hi} during the runs. One process per run, "
        "interleaved, one BLAS thread. ResidualPlanner: continuous Gaussian, answers only. matmech: exact "
        "discrete Gaussian, every answer with its exact std."
        + (f" matmech before: {meta['before']}." if meta.get("before") else ""),
        "",
        "| run | median s | runs s | median CPU s | runs CPU s | peak GiB | RMSE (analytic) |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in sorted(
        {(r["which"], r.get("scale_bits")) for r in rows},
        key=lambda k: (k[0] != "residualplanner", k[0] == "matmech", -(k[1] or 0)),
    ):
        rs = [r for r in rows if (r["which"], r.get("scale_bits")) == key]
        name = key[0] if key[1] is None else f"{key[0]}, scale_bits {key[1]}"
        rm = f"{rs[0]['rmse_analytic']:.4f}" if "rmse_analytic" in rs[0] else "-"
        runs = ", ".join(f"{r['seconds']:.1f}" for r in rs)
        med = statistics.median(r["seconds"] for r in rs)
        cpu = [r["cpu_seconds"] for r in rs if "cpu_seconds" in r]
        cpu_runs = ", ".join(f"{c:.1f}" for c in cpu) or "-"
        cpu_med = f"{statistics.median(cpu):.1f}" if cpu else "-"
        peak = max(r["peak_rss_gib"] for r in rs)
        lines.append(
            f"| {name} | {med:.1f} | {runs} | {cpu_med} | {cpu_runs} | {peak:.2f} | {rm} |"
        )
    (results / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
