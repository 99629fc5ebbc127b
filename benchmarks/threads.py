"""Default BLAS threading against one thread, and the 2,916-cell explicit release (issue 23).

Each case runs in a fresh child process under three settings: ``default`` (no environment
variable: matmech caps BLAS itself, :mod:`matmech.optimizers.blas`), ``one`` (OPENBLAS_NUM_THREADS
= 1, the setting the test suite uses) and ``uncapped`` (MATMECH_BLAS_THREADS = the core count:
what a user got before the cap). The child times only the call (``time.perf_counter``), after a
warm-up import; the three settings are interleaved over ``--rounds`` rounds (default 3) and
the median is reported (the ratio is that of the medians of one run of the script). Cases: ``matmech.optimize(W, eps=1)`` on HDMM's journal workloads
(/work/shared/benchmarks/hdmm-journal, loaded by benchmarks/highdim.py), 1-D all ranges at
n = 1024, and ``matmech.release`` of all 2-way marginals over a 4×9×9×9 = 2,916-cell histogram
(strategy "auto": first call, then the cached choice).

Run:  python benchmarks/threads.py [--only NAME[,NAME]] [--out DIR]
Writes benchmarks/results/threads.{json,md}. ``--smoke`` (CI): the explicit release on a
3×4×4 = 48-cell histogram (``explicit_48``), one round, the files in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HDMM = (
    "cps_W1",
    "cps_W2",
    "census_W1",
    "census_W2",
    "adultsmall_W1",
    "adultsmall_W2",
    "adult_W1",
    "adult_W2",
    "loans_W1",
    "loans_W2",
)
CASES = HDMM + ("range1d_1024", "explicit_2916")
SETTINGS = ("default", "one", "uncapped")
CAP = 900.0


def child(name):
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(HERE))
    import numpy as np

    import matmech as mm
    from matmech import workloads as wl

    out = {}
    if name in HDMM:
        from highdim import load

        W, _ = load(name)
        t = time.perf_counter()
        mm.optimize(W, eps=1.0)
        out["seconds"] = time.perf_counter() - t
    elif name == "range1d_1024":
        W = wl.all_range(1024)
        t = time.perf_counter()
        mm.optimize(W, eps=1.0)
        out["seconds"] = time.perf_counter() - t
    else:
        dom = (4, 9, 9, 9) if name == "explicit_2916" else (3, 4, 4)
        W = wl.marginals(dom, 2)
        x = np.random.default_rng(0).poisson(3, int(np.prod(dom)))
        t = time.perf_counter()
        mm.release(x, W, 1.0, rng=np.random.default_rng(1), domain=x.size)
        out["seconds"] = time.perf_counter() - t
        t = time.perf_counter()
        r = mm.release(x, W, 1.0, rng=np.random.default_rng(2), domain=x.size)
        out["cached_seconds"] = time.perf_counter() - t
        t = time.perf_counter()
        r.interval_law()
        out["interval_seconds"] = time.perf_counter() - t
        out["strategy"] = type(r.strategy).__name__
    print(json.dumps(out))


def run(name, setting):
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "OPENBLAS_NUM_THREADS",
            "OMP_NUM_THREADS",
            "MKL_NUM_THREADS",
            "MATMECH_BLAS_THREADS",
        )
    }
    if setting == "one":
        env["OPENBLAS_NUM_THREADS"] = "1"
    elif setting == "uncapped":
        env["MATMECH_BLAS_THREADS"] = str(os.cpu_count() or 2)
    try:
        p = subprocess.run(
            [sys.executable, __file__, "--child", name],
            env=env,
            capture_output=True,
            text=True,
            timeout=CAP,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"over {CAP:.0f} s"}
    if p.returncode:
        return {
            "error": p.stderr.strip().splitlines()[-1]
            if p.stderr.strip()
            else f"exit {p.returncode}"
        }
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--only")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="one case, one round; temporary dir")
    a = ap.parse_args(argv)
    if a.child:
        return child(a.child)
    if a.smoke:
        a.only, a.rounds, a.out = "explicit_48", 1, tempfile.mkdtemp(prefix="matmech-smoke-")
    names = a.only.split(",") if a.only else CASES
    load0 = os.getloadavg()
    rows = []
    for name in names:
        row = {"case": name}
        runs = {s: [] for s in SETTINGS}
        for _ in range(
            a.rounds
        ):  # settings interleaved, so that load drifts and cold caches hit all alike
            for s in ("one", "default", "uncapped"):
                runs[s].append(run(name, s))
        for s in SETTINGS:
            ok = [r for r in runs[s] if "seconds" in r]
            if not ok:
                row[s] = runs[s][0]
                continue
            ok.sort(key=lambda r: r["seconds"])
            row[s] = dict(
                ok[len(ok) // 2], runs=[round(r["seconds"], 3) for r in runs[s] if "seconds" in r]
            )
        d, o = row["default"].get("seconds"), row["one"].get("seconds")
        row["ratio_default_one"] = None if d is None or o is None else d / o
        rows.append(row)
        print(json.dumps(row), flush=True)
    meta = {
        "load_before": load0,
        "load_after": os.getloadavg(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "threads.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [
        f"load average {meta['load_before'][0]:.1f} → {meta['load_after'][0]:.1f}, {meta['cpus']} cores, "
        f"{meta['date']}",
        "",
        "| case | default s (median) | one thread s | uncapped s | default/one |",
        "|---|---|---|---|---|",
    ]

    def f(r):
        return f"{r['seconds']:.3f}" if "seconds" in r else r.get("error", "-")

    for r in rows:
        ratio = "-" if r["ratio_default_one"] is None else f"{r['ratio_default_one']:.2f}"
        lines.append(
            f"| {r['case']} | {f(r['default'])} | {f(r['one'])} | {f(r['uncapped'])} | {ratio} |"
        )
        if r["case"].startswith("explicit") and "seconds" in r["default"]:
            d = r["default"]
            lines.append(
                f"| {r['case']}, cached auto | {d['cached_seconds']:.3f} | "
                f"{r['one'].get('cached_seconds', float('nan')):.3f} | "
                f"{r['uncapped'].get('cached_seconds', float('nan')):.3f} | strategy {d['strategy']}, "
                f"intervals {d['interval_seconds']:.2f} s |"
            )
    (out / "threads.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
