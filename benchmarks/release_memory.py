"""Memory estimates that refuse a release before its spend, against the measured peaks.

A release is refused before anything is spent when its estimated memory does not fit the
room the process really has (:mod:`matmech.limits`). An estimate below the real peak lets a
release spend and then fail for memory (issue 31: ε = 1 charged, then ``Unable to allocate
763 MiB``), so each estimate must cover its measured peak:

* ``release``: the in-memory residual release (:func:`matmech.plans.residual.residual_memory`)
  of every k-way marginal over d attributes of n values, pure ε and (ε, δ);
* ``output``: what ``matmech release`` holds while it writes the answers
  (``OUTPUT_BYTES + OUTPUT_BYTES_PER_ROW`` a row, :mod:`matmech.cli.release`).

Each case runs in its own subprocess; its resident memory is sampled every 5 ms during the
measured step and reported above the resident memory just before it (peak RSS − base), with
the address space (VmSize, sampled alike) for the ``ulimit -v`` view. The ratio is the
estimate over the larger of the two: at least 1 everywhere, or the estimate is wrong.

    python benchmarks/release_memory.py           # up to 10⁷ answers (minutes)
    python benchmarks/release_memory.py --smoke   # CI: 10⁵ answers, seconds

Writes benchmarks/results/release_memory.json and .md (not in --smoke).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

#: (d, n, k) shapes: one big marginal (tables = the marginal), many small ones, in between.
FULL = [(7, 10, 7), (7, 10, 5), (6, 10, 6), (12, 6, 3), (20, 10, 2)]
SMOKE = [(5, 10, 5), (5, 4, 2)]

CHILD = r"""
import itertools, json, sys, threading, time
import numpy as np
kind, d, n, k, delta = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
from matmech.release import release_factored
from matmech.plans.residual import lattice_plan, residual_memory
from matmech.linalg.terms import as_terms, marginal_workload
subsets = list(itertools.combinations(range(d), k))
W = marginal_workload((n,) * d, subsets)
codes = np.random.default_rng(0).integers(0, n, size=(2000, d))
# warm up: the modules a release imports on first use are not the release's memory
release_factored(codes[:, :3], marginal_workload((n,) * 3, [(0, 1)]), 1.0, delta, rng=np.random.default_rng(0))

def status():
    out = {}
    for line in open("/proc/self/status"):
        key, _, v = line.partition(":")
        if key in ("VmRSS", "VmSize", "VmPeak"):
            out[key] = int(v.split()[0]) * 1024
    return out

def measure(step):
    peak, stop, ready = [0, 0], [], threading.Event()
    def sample():
        while not stop:
            s = status()
            peak[0], peak[1] = max(peak[0], s["VmRSS"]), max(peak[1], s["VmSize"])
            ready.set(); time.sleep(0.005)
    t = threading.Thread(target=sample, daemon=True); t.start()
    ready.wait()  # the sampler's own stack and allocator arena are in the baseline
    time.sleep(0.02)
    base = status(); peak[0], peak[1] = base["VmRSS"], base["VmSize"]
    t0 = time.perf_counter(); out = step(); sec = time.perf_counter() - t0
    stop.append(1); t.join()
    return out, peak[0] - base["VmRSS"], peak[1] - base["VmSize"], sec

if kind == "release":
    wt = as_terms(W, name="W")
    plan, subs, _ = lattice_plan(wt, delta, "sum", "auto")
    est = residual_memory(plan, subs, wt.rows)
    _, rss, vm, sec = measure(lambda: release_factored(codes, W, 1.0, delta, rng=np.random.default_rng(1)))
else:
    import os
    from matmech.cli.files import postprocess, print_json, write_answers
    from matmech.cli.release import OUTPUT_BYTES, OUTPUT_BYTES_PER_ROW
    from matmech.io.labels import Labels, ProductLabels
    from matmech.results.release import iter_release_table
    from matmech.release import release
    rel = release(codes, W, 1.0, delta, rng=np.random.default_rng(1))
    labels = Labels([ProductLabels([[f"a{i}={c}" for c in range(n)] for i in s]) for s in subsets])
    est = OUTPUT_BYTES + OUTPUT_BYTES_PER_ROW * W.shape[0]
    path = f"/tmp/matmech_release_memory_{os.getpid()}.csv"
    def write():
        rows = postprocess(iter_release_table(rel, labels), decimals=None, nonnegative=True)
        write_answers(path, rows, selection=False)
        with open(os.devnull, "w") as null:
            print_json({"queries": None}, iter_release_table(rel, labels), write=null.write)
        os.unlink(path)
    _, rss, vm, sec = measure(write)
print(json.dumps({"rows": int(W.shape[0]), "estimate": int(est), "rss": int(rss), "vm": int(vm), "seconds": sec}))
"""


def run_case(kind, d, n, k, delta):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(d), str(n), str(k), str(delta)],
        capture_output=True,
        text=True,
        env=env,
        timeout=7200,
    )
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res.update(kind=kind, d=d, n=n, k=k, delta=delta)
    res["ratio"] = res["estimate"] / max(res["rss"], res["vm"], 1)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="two small shapes, no files written")
    args = ap.parse_args()
    shapes = SMOKE if args.smoke else FULL
    rows = []
    for kind in ("release", "output"):
        for d, n, k in shapes:
            for delta in (0.0, 1e-6):
                r = run_case(kind, d, n, k, delta)
                rows.append(r)
                print(
                    f"{kind:8s} d={d:2d} n={n:2d} k={k} delta={delta:<6g} rows={r['rows']:>11,} "
                    f"estimate {r['estimate'] / 2**20:8.1f} MiB  peak RSS +{r['rss'] / 2**20:8.1f} MiB  "
                    f"VM +{r['vm'] / 2**20:8.1f} MiB  ratio {r['ratio']:5.2f}  {r['seconds']:6.1f} s",
                    flush=True,
                )
    bad = [r for r in rows if r["ratio"] < 1]
    print(f"{len(rows)} cases, lowest ratio {min(r['ratio'] for r in rows):.2f}")
    if not args.smoke:
        meta = {
            "machine": platform.platform(),
            "python": sys.version.split()[0],
            "load": os.getloadavg(),
            "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "release_memory.json").write_text(
            json.dumps({"meta": meta, "rows": rows}, indent=2)
        )
        lines = [
            "| step | d | n | k | delta | answers | estimate MiB | peak RSS + MiB | VM + MiB | ratio |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['kind']} | {r['d']} | {r['n']} | {r['k']} | {r['delta']:g} | {r['rows']:,} | "
                f"{r['estimate'] / 2**20:.1f} | {r['rss'] / 2**20:.1f} | {r['vm'] / 2**20:.1f} | {r['ratio']:.2f} |"
            )
        (RESULTS / "release_memory.md").write_text("\n".join(lines) + "\n")
    if bad:
        sys.exit(f"{len(bad)} estimate(s) below the measured peak")


if __name__ == "__main__":
    main()
