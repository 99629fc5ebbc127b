"""matmech against ResidualPlanner+ and HDMM on issue 24's twelve (ε, δ) rows.

Workload: the union over the attribute subsets of order k (k = 1, 2, 3, or every order 0-3:
"≤3", which like ResidualPlanner+'s "3D" workload includes the grand total) of Kron(prefix on
the numeric attributes of the subset, identity on its categorical ones, total elsewhere).
Domains: CPS (50, 100, 7, 4, 2), first 2 numeric; Loans (101, 101, 101, 101, 3, 8, 36, 6, 51,
4, 5, 15), first 4 numeric; Adult (100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2), first 5
numeric. Unit: per-query RMSE with Gaussian noise σ = 1 per unit of L2 sensitivity, i.e.
``optimize(W, eps=1, delta=1e-6).rmse`` divided by σ(1, 1e-6) of a unit-sensitivity query.

Each matmech row runs ``matmech.optimize(W, eps=1, delta=1e-6, bound=False)`` (method "auto")
in its own subprocess with one BLAS thread; seconds = ``OptimizeResult.seconds`` (all families
auto tried), wall = the whole child. ``--rpplus DIR --rpplus-python PY``: also runs
ResidualPlanner+'s released code (a checkout of cmla-psu/ResidualPlannerPlus, in its own
environment: it imports gurobipy) one process per row, interleaved with ours, through its
public entry points ``resplan.workload.workload_large_dataset`` / ``get_noise_level``; its
seconds include its per-attribute basis search. Published figures are those quoted in issue 24.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/rpplus.py [--rpplus DIR --rpplus-python PY] [--only CPS]
Writes benchmarks/results/rpplus.{json,md}. ``--smoke`` (CI): the 1-way row of a small
3-attribute union (``SMOKE_DATASETS``), ours only, the files in a temporary directory.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def stamp() -> dict:
    """The run's date (UTC) and machine: the first keys of every benchmark's ``meta``."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
    }


RESULTS = Path(__file__).resolve().parent / "results"
DATASETS = {
    "CPS": ((50, 100, 7, 4, 2), 2),
    "Loans": ((101, 101, 101, 101, 3, 8, 36, 6, 51, 4, 5, 15), 4),
    "Adult": ((100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2), 5),
}
#: A small union of the same shape for the smoke runs (--smoke here and in plan_speed.py):
#: no published figures.
SMOKE_DATASETS = {"tiny": ((6, 5, 3), 1)}
ORDERS = {"1": (1,), "2": (2,), "3": (3,), "<=3": (0, 1, 2, 3)}
#: issue 24: ResidualPlanner+ (published) and HDMM (published), same unit
RPPLUS = {
    "CPS": (3.081, 5.823, 7.302, 7.570),
    "Loans": (4.681, 14.502, 34.168, 34.144),
    "Adult": (5.081, 17.274, 45.223, 45.174),
}
HDMM = {
    "CPS": (3.347, 6.625, 8.634, 8.623),
    "Loans": (5.127, 17.149, 42.938, 44.338),
    "Adult": (5.648, 21.111, 60.025, 61.613),
}
#: issue 24: matmech before this change (auto: kron / gmarginals)
BEFORE = {
    "CPS": (3.890, 6.874, 8.635, 8.623),
    "Loans": (6.237, 20.866, 47.744, 47.596),
    "Adult": (6.849, 24.996, 63.447, 63.266),
}
EPS, DELTA = 1.0, 1e-6
#: HDMM's journal workloads (benchmarks/highdim.py) run at (1, 1e-6) with ``--hdmm``; HDMM's own
#: figures in the same unit where known (issue 24: adult_W2, loans_W2; issue 12: census_W1)
HDMM_L2 = {"adult_W2": 21.11, "loans_W2": 19.18, "census_W1": 3.387}
HDMM_NAMES = (
    "cps_W1",
    "cps_W2",
    "census_W1",
    "census_W2",
    "adultsmall_W1",
    "adultsmall_W2",
    "loans_W1",
    "loans_W2",
    "adult_W1",
    "adult_W2",
)
#: matmech at (1, 1e-6) before issue 24 (benchmarks/results/highdim.json), HDMM's unit
HDMM_L2_BEFORE = {
    "cps_W1": 1.859,
    "cps_W2": 6.976,
    "census_W1": 2.317,
    "census_W2": 2.574,
    "adultsmall_W1": 1.92,
    "adultsmall_W2": 2.331,
    "loans_W1": 8.206,
    "loans_W2": 18.06,
    "adult_W1": 10.67,
    "adult_W2": 25.0,
}

_RP_DRIVER = """
import json, sys, time
sys.path.insert(0, {dir!r})
t0 = time.perf_counter()
from resplan.workload import workload_large_dataset, root_mean_squared_error
t1, c1 = time.perf_counter(), time.process_time()
system, total = workload_large_dataset({ds!r}, {wk!r}, "sumvar")
obj = system.get_noise_level()
t2, c2 = time.perf_counter(), time.process_time()
print("RESULT " + json.dumps({{"rmse": float(root_mean_squared_error(obj, total, 1.0)), "seconds": t2 - t1, "cpu": c2 - c1, "queries": float(total)}}))
"""


def workload(name, order):
    """The union of issue 24 as a VStack of Kronecker products."""
    from matmech import workloads as wl
    from matmech.linalg.linop import Kron, VStack

    domain, numeric = {**DATASETS, **SMOKE_DATASETS}[name]
    blocks = []
    for k in ORDERS[order]:
        for T in itertools.combinations(range(len(domain)), k):
            fs = [
                (wl.prefix(n) if i < numeric else wl.identity(n)) if i in T else wl.total(n)
                for i, n in enumerate(domain)
            ]
            blocks.append(Kron(*fs))
    return VStack(blocks)


def child(name, order):
    import matmech
    from matmech.privacy.calibration import noise_variance

    t0 = time.perf_counter()
    W = workload(name, order)
    c0 = time.process_time()
    res = matmech.optimize(W, eps=EPS, delta=DELTA, bound=False)
    cpu = time.process_time() - c0
    sigma = math.sqrt(noise_variance(EPS, DELTA, sensitivity=1.0))
    tried = {
        k: math.sqrt(v["error"] / W.shape[0]) / sigma
        for k, v in dict(res.params.get("tried", {})).items()
    }
    tried_seconds = {k: v["seconds"] for k, v in dict(res.params.get("tried", {})).items()}
    out = {
        "rmse": res.rmse / sigma,
        "method": res.method,
        "plan": res.params.get("plan"),
        "seconds": res.seconds,
        "cpu": cpu,
        "queries": W.shape[0],
        "tried": tried,
        "tried_seconds": tried_seconds,
        "wall": time.perf_counter() - t0,
    }
    print("RESULT " + json.dumps(out), flush=True)


def _run(cmd, cap, root=None):
    env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")}
    if root is not None:  # our child imports matmech from this checkout
        env["PYTHONPATH"] = os.pathsep.join(
            [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
    try:
        proc = subprocess.run(
            cmd, check=False, capture_output=True, text=True, timeout=cap, env=env
        )
    except subprocess.TimeoutExpired:
        return {"status": f"timeout > {cap:.0f} s"}
    for line in proc.stdout.splitlines()[::-1]:
        if line.startswith("RESULT "):
            return {"status": "ok", **json.loads(line[len("RESULT ") :])}
    return {
        "status": f"exit {proc.returncode}",
        "message": " | ".join((proc.stderr or "").strip().splitlines()[-2:])[:300],
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=2, metavar=("DATASET", "ORDER"))
    ap.add_argument(
        "--rpplus", help="a checkout of cmla-psu/ResidualPlannerPlus (run side by side)"
    )
    ap.add_argument(
        "--rpplus-python", default=sys.executable, help="python of ResidualPlanner+'s environment"
    )
    ap.add_argument(
        "--rpplus-from",
        help="an earlier rpplus.json whose 'RP+ here' figures are kept (instead of --rpplus)",
    )
    ap.add_argument("--only", help="comma-separated dataset names")
    ap.add_argument(
        "--hdmm",
        action="store_true",
        help="also HDMM's journal suite at (1, 1e-6) via benchmarks/highdim.py",
    )
    ap.add_argument("--skip-table", action="store_true", help="only the --hdmm rows")
    ap.add_argument("--cap", type=float, default=900.0)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument(
        "--smoke", action="store_true", help="a small union, ours only; temporary directory"
    )
    args = ap.parse_args(argv)
    if args.child:
        return child(*args.child)
    if args.smoke:
        args.only, args.rpplus, args.hdmm = "tiny", None, False
        args.out = tempfile.mkdtemp(prefix="matmech-smoke-")
    names = args.only.split(",") if args.only else list(DATASETS)
    kept, kept_date = {}, None
    if args.rpplus_from:
        earlier = json.loads(Path(args.rpplus_from).read_text())
        kept_date = earlier["meta"]["date"]
        kept = {
            (r["dataset"], r["k"]): r["rpplus_here"]
            for r in earlier["rows"]
            if r.get("rpplus_here")
        }
    load0 = os.getloadavg()[0]
    rows, hdmm_rows = [], []
    for name in [] if args.skip_table else names:
        for j, order in enumerate(ORDERS):
            if args.smoke and order != "1":
                continue
            ours = _run(
                [sys.executable, __file__, "--child", name, order],
                args.cap,
                root=str(Path(__file__).resolve().parent.parent),
            )
            row = {
                "dataset": name,
                "k": order,
                "matmech": ours,
                "rpplus_published": RPPLUS[name][j] if name in RPPLUS else None,
                "hdmm_published": HDMM[name][j] if name in HDMM else None,
                "before": BEFORE[name][j] if name in BEFORE else None,
            }
            if args.rpplus:
                wk = {"1": 1, "2": 2, "3": 3, "<=3": "3D"}[order]
                row["rpplus_here"] = _run(
                    [args.rpplus_python, "-c", _RP_DRIVER.format(dir=args.rpplus, ds=name, wk=wk)],
                    args.cap,
                )
            elif (name, order) in kept:
                row["rpplus_here"] = {**kept[(name, order)], "from": kept_date}
            rows.append(row)
            _print_row(row)
    root = str(Path(__file__).resolve().parent.parent)
    for name in HDMM_NAMES if args.hdmm else ():
        r = _run(
            [
                sys.executable,
                str(Path(__file__).resolve().parent / "highdim.py"),
                "--child",
                name,
                "--delta",
                repr(DELTA),
            ],
            args.cap,
            root=root,
        )
        row = {
            "workload": name,
            "rmse": r.get("rmse_hdmm_unit"),
            "method": r.get("method"),
            "seconds": r.get("seconds"),
            "hdmm": HDMM_L2.get(name),
            "before": HDMM_L2_BEFORE.get(name),
            "status": r.get("status"),
            "tried": r.get("tried"),
        }
        hdmm_rows.append(row)
        print(
            f"{name:14s} {_f(row['rmse'])} ({row['method']}, {_f(row['seconds'], '{:.1f}')} s)  HDMM {_f(row['hdmm'])}  before {_f(row['before'])}",
            flush=True,
        )
    meta = {
        **stamp(),
        "load_start": load0,
        "load_end": os.getloadavg()[0],
        "eps": EPS,
        "delta": DELTA,
    }
    if kept_date is not None and not args.rpplus:
        meta["rpplus_from"] = kept_date
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "rpplus" if not args.skip_table else "rpplus_hdmm"
    (out / f"{stem}.json").write_text(
        json.dumps({"meta": meta, "rows": rows, "hdmm_journal_l2": hdmm_rows}, indent=1)
    )
    (out / f"{stem}.md").write_text(markdown(rows, meta, hdmm_rows))
    print(f"wrote {out / (stem + '.json')}")


def _f(x, fmt="{:.3f}"):
    return "-" if x is None else fmt.format(x)


def _print_row(r):
    m, rp = r["matmech"], r.get("rpplus_here") or {}
    print(
        f"{r['dataset']:6s} k={r['k']:4s} matmech {_f(m.get('rmse'))} ({m.get('plan') or m.get('method')}, {_f(m.get('seconds'), '{:.1f}')} s)"
        f"  RP+ published {_f(r['rpplus_published'])}  HDMM {_f(r['hdmm_published'])}  RP+ here {_f(rp.get('rmse'))} ({_f(rp.get('seconds'), '{:.2f}')} s)",
        flush=True,
    )


def markdown(rows, meta, hdmm_rows=()):
    lines = [
        "# matmech vs ResidualPlanner+ and HDMM, (ε, δ) = (1, 1e-6) (issue 24)",
        "",
        (
            f"{meta['date']}, {meta['machine']}, OPENBLAS_NUM_THREADS=1, 1-min load {meta['load_start']:.2f} at the start and "
            f"{meta['load_end']:.2f} at the end (other agents share the machine). RMSE per query with σ = 1 per unit L2 sensitivity. "
            "matmech = optimize(W, eps=1, delta=1e-6) (auto), seconds = its optimisation time (wall, every family tried), cpu = "
            "the process's CPU seconds for it (less sensitive to the load); 'RP+ here' = ResidualPlanner+'s "
            "released code run on this machine (one process per row, interleaved), seconds and cpu include its basis search"
            + (
                f" (kept from the run of {meta['rpplus_from']}: not rerun here)."
                if meta.get("rpplus_from")
                else "."
            )
        ),
        "",
        "| dataset | k | matmech | plan | seconds | cpu | RP+ published | HDMM published | RP+ here | RP+ s | RP+ cpu | before | ≤ RP+ published |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        m, rp = r["matmech"], r.get("rpplus_here") or {}
        pub = r["rpplus_published"]
        ok = (
            "-"
            if pub is None
            else "yes"
            if m.get("rmse") is not None and m["rmse"] <= pub
            else "NO"
        )
        lines.append(
            f"| {r['dataset']} | {r['k']} | {_f(m.get('rmse'))} | {m.get('plan') or m.get('method') or m.get('status')} | "
            f"{_f(m.get('seconds'), '{:.1f}')} | {_f(m.get('cpu'), '{:.1f}')} | {_f(pub)} | {_f(r['hdmm_published'])} | "
            f"{_f(rp.get('rmse'))} | {_f(rp.get('seconds'), '{:.2f}')} | {_f(rp.get('cpu'), '{:.2f}')} | {_f(r['before'])} | {ok} |"
        )
    if hdmm_rows:
        lines += [
            "",
            "## HDMM's journal suite at (1, 1e-6), HDMM's unit (RMSE / σ of the unit-L2 Gaussian)",
            "",
            "| workload | matmech | method | seconds | HDMM | before | families tried (RMSE in counts) |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in hdmm_rows:
            tried = (
                "; ".join(f"{k} {v['rmse']:.4g}" for k, v in (r.get("tried") or {}).items()) or "-"
            )
            lines.append(
                f"| {r['workload']} | {_f(r['rmse'])} | {r['method'] or r['status']} | {_f(r['seconds'], '{:.1f}')} | {_f(r['hdmm'])} | "
                f"{_f(r['before'])} | {tried} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
