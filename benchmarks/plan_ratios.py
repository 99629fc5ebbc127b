"""Planning time side by side: matmech against ResidualPlanner+'s code and HDMM's templates (issue 32).

One run, every child in its own process with one BLAS thread, the programs interleaved per row
and repetition (so they see the same machine load); the figures are medians of the children's
CPU seconds (``time.process_time``: the least sensitive to other processes).

* **ResidualPlanner+'s twelve rows** (benchmarks/rpplus.py's unions at (ε, δ) = (1, 1e-6)):
  matmech's ``optimize(W, 1, 1e-6, bound=False)`` and ``advise(W, 1, 1e-6)`` against
  ResidualPlanner+'s released code (``--rpplus DIR --rpplus-python PY``; its
  ``workload_large_dataset`` + ``get_noise_level``, CPU after its import, basis search
  included). Target: matmech ≤ 3× its CPU.
* **HDMM's journal suite** (benchmarks/highdim.py's workloads, pure ε = 1 and (1, 1e-6)):
  matmech's ``optimize(W, 1, δ, bound=False)`` and ``advise`` against HDMM's three templates
  as its journal runs them (``DefaultKron``, ``DefaultUnionKron``, ``Marginals``; ``approx``
  for (ε, δ); ``--hdmm DIR --hdmm-python PY``: a checkout of dpcomp-org/hdmm and a Python
  with numpy and scipy; seeded), the workload built by HDMM's own
  ``experiments/journal/benchmarks.py``. "HDMM best" = the CPU of the template of least
  loss (of the faster one when two tie to 9 digits). Target: matmech ≤ 2× that, or under 0.2 s. HDMM is not run on loans and adult (it
  takes minutes there: issue 12 quotes 150-320 s and 20-40 s), those rows are matmech only.
* **optimize(all_range(1024))** (pure ε = 1, bound included) in units of one dense
  1024 × 1024 ``scipy.linalg.eigh`` timed in the same child (median of 3). Target ≤ 4.4.

Each matmech child first plans a tiny workload of the same kind (so lazy imports are not
counted, as ResidualPlanner+'s and HDMM's imports are not), then times the call.
``--before DIR`` (a checkout of an earlier version) runs that version's matmech in the same
interleaving, so the table gives before → after from one run.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/plan_ratios.py --rpplus DIR --rpplus-python PY
      --hdmm DIR --hdmm-python PY [--before DIR] [--runs 3] [--only rp,hdmm,hdmm-big,range]
      [--stem NAME]
Writes benchmarks/results/plan_ratios.{json,md} (``--stem``: another name). ``--smoke`` (CI): matmech only on
rpplus's tiny union, cps_W1 when its data is on the machine, and all_range(64); one run; the
files in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import rpplus  # noqa: E402  (the rows, the RP+ driver, the subprocess runner, stamp)

RESULTS = HERE / "results"
HDMM_NAMES = ("cps_W1", "cps_W2", "census_W1", "census_W2", "adultsmall_W1", "adultsmall_W2")
MM_ONLY = ("loans_W1", "loans_W2", "adult_W1", "adult_W2")
#: HDMM's builders in experiments/journal/benchmarks.py: name -> (function, index)
HDMM_BUILD = {
    "cps_W1": ("cps", 0),
    "cps_W2": ("cps", 1),
    "census_W1": ("census", 0),
    "census_W2": ("census", 1),
    "adultsmall_W1": ("adult", 0),
    "adultsmall_W2": ("adult", 1),
}
DELTAS = (0.0, 1e-6)
RP_TARGET, HDMM_TARGET, HDMM_FLOOR, EIGH_TARGET = 3.0, 2.0, 0.2, 4.4

_HDMM_DRIVER = """
import json, sys, time
import numpy as np
sys.path.insert(0, {src!r}); sys.path.insert(0, {exp!r})
import benchmarks
from hdmm import templates
from hdmm import workload
W = getattr(benchmarks, {fn!r})()[{idx}]
if not isinstance(W, workload.VStack):  # one Kronecker product (adult's W1): a union of one
    W = workload.VStack([W])
approx = {approx!r}
def domain(W):
    from hdmm import workload
    if isinstance(W, workload.VStack):
        W = W.matrices[0]
    if isinstance(W, workload.Weighted):
        W = W.base
    return tuple(Wi.shape[1] for Wi in W.matrices)
ns = domain(W)
out = {{}}
# warm-up on a tiny workload (not timed), as matmech's children
tiny = workload.VStack([workload.Kronecker([workload.Prefix(8), workload.IdentityTotal(4)])])
templates.DefaultKron((8, 4), approx).optimize(tiny)
templates.Marginals((8, 4), approx).optimize(tiny)
np.random.seed(0)
for name, make in (
    ("kron", lambda: templates.DefaultKron(ns, approx)),
    ("union", lambda: templates.DefaultUnionKron(ns, len(W.matrices), approx)),
    ("marg", lambda: templates.Marginals(ns, approx)),
):
    t = make()
    c0 = time.process_time()
    loss = t.optimize(W)
    out[name] = {{"cpu": time.process_time() - c0, "rmse": float(np.sqrt(loss / W.shape[0]))}}
best = min(out, key=lambda k: (float("%.9g" % out[k]["rmse"]), out[k]["cpu"]))  # a tie: the faster
print("RESULT " + json.dumps({{"templates": out, "best": best, "cpu": out[best]["cpu"], "rmse": out[best]["rmse"]}}))
"""


def _mm_child(kind, name, arg, delta):
    """matmech's side: warm up on a tiny workload of the same kind, then time optimize and
    advise (CPU seconds) and report their RMSEs."""
    import numpy as np
    import scipy.linalg as sla
    import scipy.optimize  # noqa: F401  (imported before timing, as highdim.py does)

    import matmech as mm
    from matmech import workloads as wl
    from matmech.privacy.calibration import noise_variance

    delta = float(delta)
    out = {}
    if kind == "range":
        n = int(arg)
        x = np.random.default_rng(0).normal(size=(n, n))
        x = x + x.T
        times = []
        for _ in range(3):
            c0 = time.process_time()
            sla.eigh(x)
            times.append(time.process_time() - c0)
        mm.optimize(wl.all_range(16), eps=1.0)
        c0 = time.process_time()
        res = mm.optimize(wl.all_range(n), eps=1.0)
        cpu = time.process_time() - c0
        eigh = statistics.median(times)
        out = {"cpu": cpu, "eigh": eigh, "units": cpu / eigh, "rmse": res.rmse}
        print("RESULT " + json.dumps(out), flush=True)
        return
    if kind == "rp":
        W, tiny = rpplus.workload(name, arg), rpplus.workload("tiny", "1")
    else:
        import highdim

        W, _ = highdim.load(name)
        tiny = wl.kron(wl.identity(3), wl.prefix(4))
    mm.optimize(tiny, 1.0, delta, bound=False)
    mm.advise(tiny, 1.0, delta)
    c0 = time.process_time()
    res = mm.optimize(W, 1.0, delta, bound=False)
    c1 = time.process_time()
    adv = mm.advise(W, 1.0, delta)
    c2 = time.process_time()
    unit = math.sqrt(noise_variance(1.0, delta, sensitivity=1.0))
    if delta == 0:
        unit = math.sqrt(2.0)  # HDMM's pure-ε unit: noise variance 1 per unit L1 sensitivity
    out = {
        "cpu": c1 - c0,
        "advise_cpu": c2 - c1,
        "rmse": res.rmse / unit,
        "advise_rmse": adv.best_row.rmse / unit,
        "method": res.method,
        "advise_best": adv.best_row.name,
    }
    print("RESULT " + json.dumps(out), flush=True)


def _cmd_mm(tree, kind, name, arg, delta):
    return [
        sys.executable,
        str(Path(tree) / "benchmarks" / "plan_ratios.py"),
        "--child",
        kind,
        name,
        arg,
        str(delta),
    ]


def _ratio(a, b):
    return None if a is None or not b else a / b


def _med(runs, key):
    vals = [r[key] for r in runs if r.get("status") == "ok" and r.get(key) is not None]
    return statistics.median(vals) if vals else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=4, metavar=("KIND", "NAME", "ARG", "DELTA"))
    ap.add_argument("--rpplus", help="a checkout of cmla-psu/ResidualPlannerPlus")
    ap.add_argument("--rpplus-python", default=sys.executable)
    ap.add_argument("--hdmm", help="a checkout of dpcomp-org/hdmm")
    ap.add_argument("--hdmm-python", default=sys.executable)
    ap.add_argument("--before", help="a checkout of an earlier matmech, run side by side")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--only",
        default="rp,hdmm,hdmm-big,range",
        help="rp, hdmm, hdmm-big (loans, adult: matmech only), range (comma-separated)",
    )
    ap.add_argument("--stem", default="plan_ratios", help="the output files' name")
    ap.add_argument("--cap", type=float, default=900.0)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    if args.child:
        return _mm_child(*args.child)
    parts = set(args.only.split(","))
    rows = []  # (section, label, mm command args, peer command or None)
    if args.smoke:
        args.runs, args.rpplus, args.hdmm, args.before = 1, None, None, None
        args.out = tempfile.mkdtemp(prefix="matmech-smoke-")
        rows.append(("rp", "tiny 1", ("rp", "tiny", "1", 1e-6), None))
        import highdim

        if (highdim.DATA / "cps_W1.npz").exists():
            rows.append(("hdmm", "cps_W1 pure", ("hdmm", "cps_W1", "-", 0.0), None))
        rows.append(("range", "all_range(64)", ("range", "-", "64", 0.0), None))
    else:
        if "rp" in parts:
            for d in rpplus.DATASETS:
                for k in rpplus.ORDERS:
                    peer = None
                    if args.rpplus:
                        code = rpplus._RP_DRIVER.format(
                            dir=args.rpplus, ds=d, wk=int(k) if k.isdigit() else "3D"
                        )
                        peer = [args.rpplus_python, "-c", code]
                    rows.append(("rp", f"{d} {k}", ("rp", d, k, 1e-6), peer))
        names = (HDMM_NAMES if "hdmm" in parts else ()) + (MM_ONLY if "hdmm-big" in parts else ())
        if names:
            for name in names:
                for delta in DELTAS:
                    peer = None
                    if args.hdmm and name in HDMM_BUILD:
                        fn, idx = HDMM_BUILD[name]
                        code = _HDMM_DRIVER.format(
                            src=str(Path(args.hdmm) / "src"),
                            exp=str(Path(args.hdmm) / "experiments" / "journal"),
                            fn=fn,
                            idx=idx,
                            approx=delta > 0,
                        )
                        peer = [args.hdmm_python, "-c", code]
                    label = f"{name} {'pure' if delta == 0 else '(1, 1e-6)'}"
                    rows.append(("hdmm", label, ("hdmm", name, "-", delta), peer))
        if "range" in parts:
            rows.append(("range", "all_range(1024)", ("range", "-", "1024", 0.0), None))
    trees = {"after": ROOT}
    if args.before:
        trees["before"] = Path(args.before).resolve()
    loads = [os.getloadavg()]
    results = {label: {v: [] for v in (*trees, "peer")} for _, label, _, _ in rows}
    for rep in range(args.runs):
        for _, label, mm_args, peer in rows:
            order = [*trees, "peer"] if rep % 2 == 0 else ["peer", *reversed(list(trees))]
            for who in order:
                if who == "peer":
                    if peer is None:
                        continue
                    r = rpplus._run(peer, args.cap)
                else:
                    r = rpplus._run(_cmd_mm(trees[who], *mm_args), args.cap, root=str(trees[who]))
                results[label][who].append(r)
                show = {
                    k: (round(v, 4) if isinstance(v, float) else v)
                    for k, v in r.items()
                    if k in ("status", "cpu", "advise_cpu", "rmse", "units", "best", "message")
                }
                print(f"{label:26s} {who:6s} run {rep + 1}: {show}", flush=True)
        loads.append(os.getloadavg())
    table = []
    for section, label, _, _ in rows:
        res = results[label]
        row = {"section": section, "row": label}
        for who in (*trees, "peer"):
            row[who] = {
                k: _med(res[who], k)
                for k in ("cpu", "advise_cpu", "rmse", "advise_rmse", "units", "eigh")
            }
            row[who]["status"] = [r.get("status") for r in res[who]]
            if who == "peer" and res[who]:
                row[who]["best"] = res[who][-1].get("best")
                row[who]["templates"] = res[who][-1].get("templates")
        peer = row["peer"]["cpu"]
        for who in trees:
            row[who]["ratio"] = _ratio(row[who]["cpu"], peer)
            row[who]["advise_ratio"] = _ratio(row[who]["advise_cpu"], peer)
        table.append(row)
    meta = {
        **rpplus.stamp(),
        "load": [round(x[0], 2) for x in loads],
        "runs": args.runs,
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "before": args.before,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.stem}.json").write_text(json.dumps({"meta": meta, "rows": table}, indent=1))
    md = markdown(table, meta, list(trees))
    (out / f"{args.stem}.md").write_text(md)
    print(md)
    print(f"wrote {out / (args.stem + '.json')}")


def _f(x, fmt="{:.3f}"):
    return "-" if x is None else fmt.format(x)


def markdown(table, meta, versions):
    before = "before" in versions
    lines = [
        "# Planning time: matmech vs ResidualPlanner+'s code and HDMM's best template (issue 32)",
        "",
        f"{meta['date']}, {meta['machine']}, OPENBLAS_NUM_THREADS={meta['blas_threads']}, "
        f"1-min load {min(meta['load'])}-{max(meta['load'])} during the run (other agents share the machine). "
        f"Median of {meta['runs']} runs per program, one child process each, interleaved. cpu = CPU seconds of the call "
        "(matmech: optimize(W, 1, δ, bound=False) and advise(W, 1, δ) after a warm-up on a tiny workload; "
        "ResidualPlanner+: workload_large_dataset + get_noise_level; HDMM: its template of least loss). "
        "ratio = matmech cpu / the peer's. RMSE in the peers' unit (σ = 1 per unit sensitivity).",
        "",
    ]
    head = "| row | peer cpu | optimize cpu | advise cpu | optimize / peer | advise / peer |"
    sep = "|---|---|---|---|---|---|"
    if before:
        head += " before: optimize / advise cpu | before: optimize / peer |"
        sep += "---|---|"
    head += " RMSE matmech | RMSE peer | target |"
    sep += "---|---|---|"
    for section, title in (
        ("rp", "## ResidualPlanner+'s rows, (ε, δ) = (1, 1e-6); target optimize ≤ 3× RP+"),
        ("hdmm", "## HDMM's journal suite; target ≤ 2× HDMM's best template or < 0.2 s"),
    ):
        rows = [r for r in table if r["section"] == section]
        if not rows:
            continue
        lines += [title, "", head, sep]
        for r in rows:
            a, p = r["after"], r["peer"]
            if section == "rp":
                ok = a["ratio"] is not None and a["ratio"] <= RP_TARGET
            else:
                ok = (a["cpu"] is not None and a["cpu"] < HDMM_FLOOR) or (
                    a["ratio"] is not None and a["ratio"] <= HDMM_TARGET
                )
            cells = [
                r["row"] + (f" ({p.get('best')})" if p.get("best") else ""),
                _f(p["cpu"]),
                _f(a["cpu"]),
                _f(a["advise_cpu"]),
                _f(a["ratio"], "{:.2f}"),
                _f(a["advise_ratio"], "{:.2f}"),
            ]
            if before:
                b = r["before"]
                cells += [f"{_f(b['cpu'])} / {_f(b['advise_cpu'])}", _f(b["ratio"], "{:.2f}")]
            cells += [_f(a["rmse"], "{:.4f}"), _f(p["rmse"], "{:.4f}"), "met" if ok else "not met"]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    rows = [r for r in table if r["section"] == "range"]
    if rows:
        lines += [
            f"## optimize(all_range(n)), pure ε = 1, in units of one n × n eigh (target ≤ {EIGH_TARGET} at n = 1024)",
            "",
            "| row | cpu | eigh cpu | units | before units | RMSE |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            a = r["after"]
            b = r.get("before", {})
            lines.append(
                f"| {r['row']} | {_f(a['cpu'])} | {_f(a['eigh'])} | {_f(a['units'], '{:.2f}')} | "
                f"{_f(b.get('units'), '{:.2f}')} | {_f(a['rmse'], '{:.4f}')} |"
            )
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
