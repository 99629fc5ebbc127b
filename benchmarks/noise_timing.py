"""Timing side channel of the exact noise samplers: draw time by |value| (issue 10, finding 4).

For single draws (size 1, the way SVT draws its threshold noise rho) this records the time
of every draw with ``time.perf_counter_ns`` and reports the MEDIAN time per |value| bucket
(|v| < 1 scale, 1-2, 2-3, 3-4, 4-5, > 5 scales), for

* ``new``: the current :mod:`matmech.privacy.noise` (fixed work per draw / per rejection round);
* ``old``: the previous variable-time implementation (CKS 2020 Alg. 1-3 as loops), kept
  verbatim below for this comparison only (matmech no longer contains it).

Both read ``os.urandom`` through one persistent secure source (``os_source()``); old and new draws are
interleaved so that machine drift hits both alike. It also measures bulk throughput
(samples/s) at size 1 and 2**20. Results go to benchmarks/results/noise_timing.{json,md}.
This is a benchmark, not a test: medians on a shared machine are noisy.

    python benchmarks/noise_timing.py [--reps 20000]
    python benchmarks/noise_timing.py --smoke   # 200 draws, bulk size 2**12 (CI)

``--smoke`` writes its files to a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

from matmech.privacy import noise
from matmech.privacy.randomness import os_source
from matmech.svt import grid as svt_noise

RESULTS = pathlib.Path(__file__).parent / "results"
BUCKETS = ["<1", "1-2", "2-3", "3-4", "4-5", ">5"]

# --------------------------------------------------------------------------------------
# The old variable-time samplers (matmech.privacy.noise before issue 10 finding 4), verbatim
# --------------------------------------------------------------------------------------
_TWO32 = 1 << 32
_INT64_MAX = (1 << 63) - 1
_LMAX = 12


def _plan(den, k0, _cache={}):  # noqa: B006 (a deliberate memo)
    key = (den, k0)
    if key in _cache:
        return _cache[key]

    def longest(limit):
        L, M = 0, 1
        while L < _LMAX and M * den * (k0 + L) <= limit:
            M *= den * (k0 + L)
            L += 1
        return L, M

    L32, M32 = longest(_TWO32)
    L64, M64 = longest(_INT64_MAX)
    L, M = (L32, M32) if L32 >= 1 and 2 * L32 >= L64 else (L64, M64)
    out = None
    if L:
        coefs = tuple(den ** (L - j) * math.prod(range(k0 + j, k0 + L)) for j in range(1, L + 1))
        out = (L, M, coefs)
    _cache[key] = out
    return out


def _bern_exp_unit(num, den, src):
    n = num.size
    out = np.empty(n, dtype=bool)
    idx = np.arange(n)
    cur = num
    k0 = 1
    while idx.size:
        m = idx.size
        plan = _plan(den, k0)
        if plan is None:
            L = 1
            steps = ((src.integers(den, m) < cur) & (src.integers(k0, m) == 0)).astype(np.int64)
        else:
            L, M, coefs = plan
            w = src.integers(M, m)
            steps = (w < cur * coefs[0]).astype(np.int64)
            power = cur
            for c in coefs[1:]:
                power = power * cur
                steps += w < power * c
        stop = steps < L
        out[idx[stop]] = ((k0 + steps[stop]) & 1) == 1
        keep = ~stop
        idx, cur = idx[keep], cur[keep]
        k0 += L
    return out


_E1_M = math.factorial(11)
_E1_THRESH = np.array([_E1_M // math.factorial(j) for j in range(11, 0, -1)], dtype=np.int64)


def _bern_exp_minus_one(n, src):
    w = src.integers(_E1_M, n)
    steps = 11 - np.searchsorted(_E1_THRESH, w, side="right")
    out = (steps & 1) == 0
    rest = np.flatnonzero(steps == 11)
    if rest.size:
        out[rest] = _bern_exp_from(np.ones(rest.size, dtype=np.int64), 1, 12, src)
    return out


def _bern_exp_from(num, den, k0, src):
    out = np.empty(num.size, dtype=bool)
    for i, v in enumerate(num.tolist()):
        k = k0
        while src.randbelow(den * k) < v:
            k += 1
        out[i] = k & 1 == 1
    return out


def _bern_exp(num, den, src):
    q, r = np.divmod(num, den)
    alive = np.ones(num.size, dtype=bool)
    idx = np.flatnonzero(q > 0)
    j = 0
    while idx.size:
        ok = _bern_exp_minus_one(idx.size, src)
        alive[idx[~ok]] = False
        j += 1
        idx = idx[ok]
        idx = idx[q[idx] > j]
    out = np.zeros(num.size, dtype=bool)
    live = np.flatnonzero(alive)
    out[live] = _bern_exp_unit(r[live], den, src)
    return out


def _geometric(t, n, src):
    if t == 1:
        u = np.zeros(n, dtype=np.int64)
    else:
        u = src.integers(t, n)
        bad = np.flatnonzero(~_bern_exp_unit(u, t, src))
        while bad.size:
            cand = src.integers(t, bad.size)
            ok = _bern_exp_unit(cand, t, src)
            u[bad[ok]] = cand[ok]
            bad = bad[~ok]
    v = np.zeros(n, dtype=np.int64)
    idx = np.arange(n)
    while idx.size:
        idx = idx[_bern_exp_minus_one(idx.size, src)]
        v[idx] += 1
    return u + t * v


def old_dlaplace(t, s, n, src):
    out = np.empty(n, dtype=np.int64)
    todo = None
    m = n
    while m:
        y = _geometric(t, m, src)
        if s != 1:
            y //= s
        neg = src.bits(m)
        redo = neg & (y == 0)
        np.negative(y, out=y, where=neg)
        if todo is None:
            out[:] = y
            todo = np.flatnonzero(redo)
        else:
            out[todo] = y
            todo = todo[redo]
        m = todo.size
    return out


def _old_gauss_accept(ay, p, src):
    # the huge-|y| branch of the old code (probability < 2**-100) is omitted here
    num = (ay * p.A - p.B) * ay + p.C
    return _bern_exp(num, p.S, src)


def old_dgauss(p, n, src):
    out = np.empty(n, dtype=np.int64)
    todo = None
    m = n
    while m:
        y = old_dlaplace(p.lap_t, p.lap_s, m, src)
        ok = _old_gauss_accept(np.abs(y), p, src)
        if todo is None:
            out[:] = y
            todo = np.flatnonzero(~ok)
        else:
            out[todo[ok]] = y[ok]
            todo = todo[~ok]
        m = todo.size
    return out


def old_discrete_laplace(scale, size, *, rng):
    f = noise._laplace_fraction(scale)
    return old_dlaplace(f.numerator, f.denominator, size, noise.check_rng(rng))


def old_discrete_gaussian(sigma, size, *, rng):
    return old_dgauss(noise._gauss_params(sigma), size, noise.check_rng(rng))


# --------------------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------------------

SVT_SCALE = 4.0  # threshold noise Lap(2/eps1) with eps1 = 0.5
SVT_GRID = noise.grid_for(SVT_SCALE)  # the grid SVT uses for it (2**-14): 65536 units


def configs():
    """(name, scale for bucketing in output units, new single draw, old single draw)."""
    for scale in (1, 10, 2**16):
        yield (
            f"discrete_laplace scale={scale}",
            scale,
            lambda src, s=scale: noise.discrete_laplace(s, 1, rng=src)[0],
            lambda src, s=scale: old_discrete_laplace(s, 1, rng=src)[0],
        )
    yield (
        "discrete_gaussian sigma=10",
        10,
        lambda src: noise.discrete_gaussian(10, 1, rng=src)[0],
        lambda src: old_discrete_gaussian(10, 1, rng=src)[0],
    )
    units = int(round(SVT_SCALE / SVT_GRID))
    yield (
        f"SVT threshold rho (svt_noise.draw, Lap({SVT_SCALE:g}) on grid 2**{int(math.log2(SVT_GRID))})",
        units,
        lambda src: svt_noise.draw(SVT_SCALE, 1, SVT_GRID, src)[0],
        lambda src: old_discrete_laplace(units, 1, rng=src)[0],
    )


def bucket(v, scale):
    return BUCKETS[min(5, int(abs(int(v)) / scale))]


def single_draws(reps):
    src = os_source()
    rows = []
    for name, scale, new, old in configs():
        for f in (new, old):  # warm-up: tables, caches
            for _ in range(200):
                f(src)
        times = {"new": {b: [] for b in BUCKETS}, "old": {b: [] for b in BUCKETS}}
        clock = time.perf_counter_ns
        for _ in range(reps):
            for impl, f in (("new", new), ("old", old)):
                t0 = clock()
                v = f(src)
                t1 = clock()
                times[impl][bucket(v, scale)].append(t1 - t0)
        for impl in ("old", "new"):
            med = {b: (statistics.median(x) / 1000 if x else None) for b, x in times[impl].items()}
            cnt = {b: len(x) for b, x in times[impl].items()}
            vals = [m for b, m in med.items() if m is not None and cnt[b] >= 50]
            rows.append(
                {
                    "config": name,
                    "impl": impl,
                    "median_us": med,
                    "count": cnt,
                    "max_over_min": max(vals) / min(vals),
                }
            )
        print(f"  {name}: done", file=sys.stderr)
    return rows


def throughput(bulk=1 << 20, runs=(3000, 3)):
    """Samples/s at size 1 (median of runs[0] calls) and size ``bulk`` (of runs[1])."""
    src = os_source()
    out = []
    cases = [
        (
            "discrete_laplace scale=2**16",
            lambda n: noise.discrete_laplace(2**16, n, rng=src),
            lambda n: old_discrete_laplace(2**16, n, rng=src),
        ),
        (
            "discrete_laplace scale=10",
            lambda n: noise.discrete_laplace(10, n, rng=src),
            lambda n: old_discrete_laplace(10, n, rng=src),
        ),
        (
            "discrete_gaussian sigma=1000",
            lambda n: noise.discrete_gaussian(1000, n, rng=src),
            lambda n: old_discrete_gaussian(1000, n, rng=src),
        ),
    ]
    for name, new, old in cases:
        row = {"config": name}
        for size, n_runs in ((1, runs[0]), (bulk, runs[1])):
            for impl, f in (("old", old), ("new", new)):
                f(size)
                ts = []
                for _ in range(n_runs):
                    t0 = time.perf_counter_ns()
                    f(size)
                    ts.append(time.perf_counter_ns() - t0)
                row[f"{impl}_size{size}"] = size / (statistics.median(ts) / 1e9)
        out.append(row)
        print(f"  throughput {name}: done", file=sys.stderr)
    return out


def fmt(x):
    return "-" if x is None else f"{x:.0f}"


def markdown(rows, thr, meta):
    lines = [
        f"# Noise draw time by |value| ({meta['machine']})",
        "",
        f"Median µs per single draw (size 1, os.urandom source), {meta['reps']} draws per "
        "configuration and implementation, bucketed by |value| in units of the scale "
        "(sigma for the Gaussian). Count per bucket in parentheses. max/min: ratio of "
        "the largest to the smallest bucket median (buckets with >= 50 draws).",
        "",
        "| config | impl | " + " | ".join(f"|v| {b}" for b in BUCKETS) + " | max/min |",
        "|---|---|" + "---|" * (len(BUCKETS) + 1),
    ]
    for r in rows:
        cells = [f"{fmt(r['median_us'][b])} ({r['count'][b]})" for b in BUCKETS]
        lines.append(
            f"| {r['config']} | {r['impl']} | "
            + " | ".join(cells)
            + f" | {r['max_over_min']:.2f} |"
        )
    lines += [
        "",
        f"Throughput (samples/s; size 1 and size {meta.get('bulk', 1 << 20):,}: medians of "
        "3000 and 3 calls; --smoke: 30 and 1).",
        "",
        "| config | old size 1 | new size 1 | old size 2**20 | new size 2**20 | new/old 2**20 |",
        "|---|---|---|---|---|---|",
    ]
    big = f"size{meta.get('bulk', 1 << 20)}"
    for r in thr:
        lines.append(
            f"| {r['config']} | {r['old_size1']:,.0f} | {r['new_size1']:,.0f} | "
            f"{r['old_' + big]:,.0f} | {r['new_' + big]:,.0f} | "
            f"{r['new_' + big] / r['old_' + big]:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20_000)
    ap.add_argument(
        "--smoke", action="store_true", help="200 draws, bulk 2**12; files to a temporary directory"
    )
    args = ap.parse_args()
    results = RESULTS
    if args.smoke:
        args.reps, results = 200, pathlib.Path(tempfile.mkdtemp(prefix="matmech-smoke-"))
    bulk = 1 << 12 if args.smoke else 1 << 20
    meta = {
        "machine": f"{os.cpu_count()} shared cores, {platform.machine()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}",
        "reps": args.reps,
        "source": "os.urandom",
        "bulk": bulk,
    }
    rows = single_draws(args.reps)
    thr = throughput(bulk, (30, 1) if args.smoke else (3000, 3))
    md = markdown(rows, thr, meta)
    print(md)
    results.mkdir(exist_ok=True)
    (results / "noise_timing.json").write_text(
        json.dumps({"meta": meta, "single_draws": rows, "throughput": thr}, indent=1) + "\n"
    )
    (results / "noise_timing.md").write_text(md)


if __name__ == "__main__":
    main()
