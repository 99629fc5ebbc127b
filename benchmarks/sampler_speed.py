"""Speed of the exact samplers: sampler-table builds per scale and draws per second.

Issue 24 item 5 ("exact noise for millions of coordinates sharing few σ values at numpy
speed"). Two measurements, each interleaved with a baseline copy of
``matmech/privacy/discrete.py`` (e.g. ``git show 42140de:matmech/privacy/discrete.py``)
run in the same process, so that load drifts hit both alike:

* table builds: for every σ of a grid snapped to 9 significant bits (the residual path's
  ``scale_bits``), the discrete Laplace proposal table and the Gaussian acceptance table,
  built from scratch (no cache);
* many σ (the residual release's case): ``--many`` σ from 3 to 3,000 (log-spaced lower
  bounds τ), ``--per`` draws each, tables built from scratch: one call per σ with σ rounded
  up to 9 significant bits (the residual path before) against ``noise.gaussian_grid`` (9
  bits of 1/(2σ²)) and one ``noise.discrete_gaussian_mixed`` call (now);
* throughput: draws/s of ``discrete_gaussian`` at σ = 1, 30, 255, 1000, 2**16, one σ per
  call, from a seeded ``numpy.random.Generator`` (PCG64) and from the secure default source
  (the AES CTR_DRBG, current code only); the seeded draws of both versions are compared word
  for word.

Medians of ``--repeats`` runs; OPENBLAS_NUM_THREADS=1; the load average is recorded.
Prints a table and saves benchmarks/results/sampler_speed.{json,md}.

    git show 42140de:matmech/privacy/discrete.py > /tmp/discrete_before.py
    python benchmarks/sampler_speed.py --baseline /tmp/discrete_before.py
    python benchmarks/sampler_speed.py --smoke   # tiny sizes, no baseline (CI)

``--smoke`` writes its files to a temporary directory.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from matmech.privacy import discrete, noise, thresholds  # noqa: E402
from matmech.privacy.randomness import RandomSource, check_rng  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SIGMAS = [1, 30, 255, 1000, 2**16]


def load_baseline(path: str | None):
    """The baseline sampler module (a copy of discrete.py from an older commit) or None."""
    if not path:
        return None
    spec = importlib.util.spec_from_file_location("discrete_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["discrete_baseline"] = mod
    spec.loader.exec_module(mod)
    return mod


def snapped_sigmas(count: int, bits: int = 9) -> list[float]:
    """``count`` σ from 0.5 to 2**16, geometric, rounded up to ``bits`` significant bits."""
    f, e = np.frexp(np.geomspace(0.5, 2.0**16, count))
    return sorted({float(v) for v in np.ldexp(np.ceil(np.ldexp(f, bits)), e - bits)})


def build_time(mod, p) -> float:
    """Seconds to build both tables of one σ from scratch with module ``mod``."""
    if hasattr(mod, "_build_laplace"):
        lap, gauss = mod._build_laplace, mod._build_gauss
    else:  # the lru_cache'd builders of the baseline
        lap, gauss = mod._laplace_table.__wrapped__, mod._gauss_table.__wrapped__
    mod._floor_bits.cache_clear()
    t0 = time.perf_counter()
    lap(p.lap_t, p.lap_s)
    gauss(p.S)
    return time.perf_counter() - t0


def table_builds(base, sigmas: list[float]) -> dict:
    rows = {"sigma": sigmas, "now_ms": [], "base_ms": []}
    for s in sigmas:
        p = noise._gauss_params(s)
        rows["now_ms"].append(1e3 * build_time(thresholds, p))
        if base is not None:
            rows["base_ms"].append(1e3 * build_time(base, p))
    return rows


class IntegersSource(RandomSource):
    """The seeded source as it was before: words from ``Generator.integers`` (the same
    words as ``random_raw`` for PCG64, read more slowly)."""

    __slots__ = ("_rng",)

    def __init__(self, rng: np.random.Generator) -> None:
        super().__init__()
        self._rng = rng

    def _generate(self, n: int) -> np.ndarray:
        return self._rng.integers(0, 1 << 64, size=n, dtype=np.uint64)


def draw_rate(mod, sigma: float, n: int, rng) -> tuple[float, np.ndarray]:
    """(draws/s, the draws) of n discrete Gaussians at ``sigma`` (tables already built);
    the baseline module reads a seeded ``rng`` as before (:class:`IntegersSource`)."""
    p = noise._gauss_params(sigma)
    src = IntegersSource(rng) if mod is not discrete and rng is not None else check_rng(rng)
    t0 = time.perf_counter()
    z = mod.dgauss(p, n, src)
    return n / (time.perf_counter() - t0), z


def throughput(base, n: int, repeats: int) -> list[dict]:
    out = []
    for sigma in SIGMAS:
        for mod in (discrete, base):
            if mod is not None:
                draw_rate(mod, sigma, 1000, np.random.default_rng(0))  # build the tables
        now, before, secure, same = [], [], [], True
        for r in range(repeats):
            rate, z = draw_rate(discrete, sigma, n, np.random.default_rng(r))
            now.append(rate)
            if base is not None:
                rate_b, zb = draw_rate(base, sigma, n, np.random.default_rng(r))
                before.append(rate_b)
                same &= bool(np.array_equal(z, zb))
            secure.append(draw_rate(discrete, sigma, n, None)[0])
        row = {
            "sigma": sigma,
            "now": statistics.median(now),
            "now_secure": statistics.median(secure),
            "runs_now": now,
        }
        if base is not None:
            row.update(before=statistics.median(before), runs_before=before, same_draws=same)
        out.append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.startswith("runs")}))
    return out


def many_sigmas(count: int, per: int, repeats: int) -> dict:
    """Seconds (tables from scratch + draws) for ``per`` draws at each of ``count`` σ: one
    call per σ (σ rounded up to 9 bits) vs the dyadic grid and one mixed call."""
    tau = np.geomspace(3.0, 3000.0, count)
    f, e = np.frexp(tau)
    rounded = np.ldexp(np.ceil(np.ldexp(f, 9)), e - 9)
    per_call, mixed, tables = [], [], {}
    for r in range(repeats):
        thresholds.TABLES.clear()
        t0 = time.perf_counter()
        for sigma in rounded.tolist():
            noise.discrete_gaussian(sigma, per, rng=np.random.default_rng(r))
        per_call.append(time.perf_counter() - t0)
        tables["per_call"] = len(thresholds.TABLES)
        thresholds.TABLES.clear()
        t0 = time.perf_counter()
        params, index = noise.gaussian_grid(tau, bits=9)
        which = np.repeat(index, per)
        noise.discrete_gaussian_mixed(params, which, rng=np.random.default_rng(r))
        mixed.append(time.perf_counter() - t0)
        tables["mixed"] = len(thresholds.TABLES)
    row = {
        "count": count,
        "per": per,
        "per_call_s": statistics.median(per_call),
        "mixed_s": statistics.median(mixed),
        "tables": tables,
    }
    print(json.dumps(row))
    return row


def ratio(now: float, before: float | None) -> str:
    return f"{now / before:.2f}" if before else "-"


def render(saved: dict) -> str:
    meta, tb, tp = saved["meta"], saved["tables"], saved["throughput"]
    lines = [
        "# Exact sampler speed (issue 24 item 5)",
        "",
        f"{meta['date']}, {meta['machine']}, load average {meta['load'][0]}-{meta['load'][1]} "
        f"during the run; OPENBLAS_NUM_THREADS=1; baseline: {meta['baseline']}; "
        "baseline and current interleaved in one process.",
        "",
        f"## Table builds ({len(tb['sigma'])} σ, 0.5 to 2^16, 9 significant bits; "
        "Laplace proposal + Gaussian acceptance table, from scratch)",
        "",
        "| | median ms per σ | total s |",
        "|---|---|---|",
    ]
    for key, name in (("base_ms", "before (Python ints, one entry at a time)"), ("now_ms", "now")):
        if tb[key]:
            lines.append(
                f"| {name} | {statistics.median(tb[key]):.2f} | {sum(tb[key]) / 1e3:.2f} |"
            )
    lines += [
        "",
        f"## Discrete Gaussian draws/s ({meta['n']:,} draws per call, median of {meta['repeats']})",
        "",
        "| σ | before (seeded) | now (seeded) | ratio | now (secure default) | seeded draws identical |",
        "|---|---|---|---|---|---|",
    ]
    for r in tp:
        b = r.get("before")
        lines.append(
            f"| {r['sigma']:g} | {f'{b / 1e6:.2f} M' if b else '-'} | {r['now'] / 1e6:.2f} M"
            f" | {ratio(r['now'], b)} | {r['now_secure'] / 1e6:.2f} M"
            f" | {r.get('same_draws', '-')} |"
        )
    many = saved.get("many")
    if many:
        n = many["count"] * many["per"]
        lines += [
            "",
            f"## Many σ ({many['count']} σ from 3 to 3,000, {many['per']:,} draws each, tables "
            "from scratch, seeded; median of the repeats)",
            "",
            "| | seconds | draws/s | tables built |",
            "|---|---|---|---|",
            f"| one call per σ (σ rounded to 9 bits) | {many['per_call_s']:.2f} | "
            f"{n / many['per_call_s'] / 1e6:.2f} M | {many['tables']['per_call']} |",
            f"| gaussian_grid + one mixed call | {many['mixed_s']:.2f} | "
            f"{n / many['mixed_s'] / 1e6:.2f} M | {many['tables']['mixed']} |",
        ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="path of an older matmech/privacy/discrete.py")
    ap.add_argument("--baseline-label", help="what --baseline is (e.g. its commit)")
    ap.add_argument("--n", type=int, default=1 << 20, help="draws per call")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sigmas", type=int, default=120, help="σ values for the table builds")
    ap.add_argument("--many", type=int, default=400, help="σ values drawn in one mixed call")
    ap.add_argument("--per", type=int, default=2000, help="draws per σ in the mixed comparison")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes; temporary directory")
    args = ap.parse_args(argv)
    results = RESULTS
    if args.smoke:
        args.n, args.repeats, args.sigmas, args.many, args.per = 1 << 12, 1, 4, 8, 100
        results = pathlib.Path(tempfile.mkdtemp(prefix="matmech-smoke-"))
    base = load_baseline(args.baseline)
    loads = [os.getloadavg()[0]]
    tables = table_builds(base, snapped_sigmas(args.sigmas))
    loads.append(os.getloadavg()[0])
    tp = throughput(base, args.n, args.repeats)
    loads.append(os.getloadavg()[0])
    many = many_sigmas(args.many, args.per, args.repeats)
    loads.append(os.getloadavg()[0])
    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{sys.version.split()[0]}, numpy {np.__version__}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load": [round(min(loads), 2), round(max(loads), 2)],
        "baseline": args.baseline_label or args.baseline or "none",
        "n": args.n,
        "repeats": args.repeats,
    }
    saved = {"meta": meta, "tables": tables, "throughput": tp, "many": many}
    results.mkdir(exist_ok=True)
    (results / "sampler_speed.json").write_text(json.dumps(saved, indent=1) + "\n")
    text = render(saved)
    (results / "sampler_speed.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
