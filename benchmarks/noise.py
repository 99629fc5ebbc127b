"""Throughput of the exact noise samplers (matmech.privacy.noise).

Prints samples/second (median of 5 runs of 10**6 samples) for the discrete Laplace and
Gaussian, from the secure OS source and from a seeded numpy Generator, and saves the table
with the machine description to benchmarks/results/noise.json.

Target: >= 1,000,000 secure discrete Laplace samples/s at scale 10 and at grid scale 2**16.

    python benchmarks/noise.py
    python benchmarks/noise.py --smoke   # 10**4 samples once, no target check (CI)

``--smoke`` writes the JSON to a temporary directory.
"""

from __future__ import annotations

import argparse
import json
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

SAMPLES = 10**6
RUNS = 5
TARGET = 1_000_000
RESULTS = pathlib.Path(__file__).parent / "results" / "noise.json"


def cases():
    scale = 1 / 0.3  # a realistic non-dyadic scale: scale/grid is not an integer
    grid = noise.grid_for(scale)
    yield "discrete_laplace", "scale=1", lambda rng: noise.discrete_laplace(1, SAMPLES, rng=rng)
    yield "discrete_laplace", "scale=10", lambda rng: noise.discrete_laplace(10, SAMPLES, rng=rng)
    yield (
        "discrete_laplace",
        "scale=1000",
        lambda rng: noise.discrete_laplace(1000, SAMPLES, rng=rng),
    )
    yield (
        "discrete_laplace",
        "scale=2**16",
        lambda rng: noise.discrete_laplace(2**16, SAMPLES, rng=rng),
    )
    yield (
        "laplace",
        f"scale=1/0.3, grid=grid_for (scale/grid={scale / grid:.1f})",
        lambda rng: noise.laplace(scale, SAMPLES, grid=grid, rng=rng),
    )
    yield "discrete_gaussian", "sigma=1", lambda rng: noise.discrete_gaussian(1, SAMPLES, rng=rng)
    yield "discrete_gaussian", "sigma=10", lambda rng: noise.discrete_gaussian(10, SAMPLES, rng=rng)
    yield (
        "discrete_gaussian",
        "sigma=1000",
        lambda rng: noise.discrete_gaussian(1000, SAMPLES, rng=rng),
    )
    yield (
        "discrete_gaussian",
        "sigma=2**16",
        lambda rng: noise.discrete_gaussian(2**16, SAMPLES, rng=rng),
    )
    yield (
        "gaussian",
        f"sigma=1/0.3, grid=grid_for (sigma/grid={scale / grid:.1f})",
        lambda rng: noise.gaussian(scale, SAMPLES, grid=grid, rng=rng),
    )
    yield "uniform", "(0, 1)", lambda rng: noise.uniform(SAMPLES, rng=rng)


def reference_cases():
    """numpy's floating-point samplers: fast but not safe for DP (Mironov 2012)."""
    yield (
        "numpy Generator.laplace (insecure float)",
        "scale=10",
        lambda rng: rng.laplace(0, 10, SAMPLES),
    )
    yield (
        "numpy Generator.normal (insecure float)",
        "sigma=10",
        lambda rng: rng.normal(0, 10, SAMPLES),
    )


def timed(fn, make_rng):
    fn(make_rng())  # warm-up (caches, imports)
    times = []
    for _ in range(RUNS):
        rng = make_rng()
        t0 = time.perf_counter()
        fn(rng)
        times.append(time.perf_counter() - t0)
    return times


def main(argv=None) -> int:
    global SAMPLES, RUNS, RESULTS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--smoke", action="store_true", help="10**4 samples once; JSON to a temporary directory"
    )
    smoke = ap.parse_args(argv).smoke
    if smoke:
        SAMPLES, RUNS = 10**4, 1
        RESULTS = pathlib.Path(tempfile.mkdtemp(prefix="matmech-smoke-")) / "noise.json"
    sources = {
        "secure (os.urandom)": os_source,
        "secure default (AES CTR_DRBG)": lambda: None,
        "seeded Generator": lambda: np.random.default_rng(12345),
    }
    rows = []
    for dist, param, fn in cases():
        for source, make_rng in sources.items():
            times = timed(fn, make_rng)
            rows.append(
                {
                    "sampler": dist,
                    "parameter": param,
                    "source": source,
                    "samples": SAMPLES,
                    "runs": RUNS,
                    "seconds": times,
                    "median_seconds": statistics.median(times),
                    "samples_per_second": SAMPLES / statistics.median(times),
                }
            )
    for dist, param, fn in reference_cases():
        times = timed(fn, sources["seeded Generator"])
        rows.append(
            {
                "sampler": dist,
                "parameter": param,
                "source": "seeded Generator",
                "samples": SAMPLES,
                "runs": RUNS,
                "seconds": times,
                "median_seconds": statistics.median(times),
                "samples_per_second": SAMPLES / statistics.median(times),
            }
        )

    w1 = max(len(r["sampler"]) for r in rows)
    w2 = max(len(r["parameter"]) for r in rows)
    w3 = max(len(r["source"]) for r in rows)
    print(f"{'sampler':<{w1}}  {'parameter':<{w2}}  {'source':<{w3}}  {'samples/s':>12}")
    print("-" * (w1 + w2 + w3 + 18))
    for r in rows:
        print(
            f"{r['sampler']:<{w1}}  {r['parameter']:<{w2}}  {r['source']:<{w3}}  "
            f"{r['samples_per_second']:>12,.0f}"
        )

    targets = {}
    for param in ("scale=10", "scale=2**16"):
        for r in rows:  # each secure source: os.urandom and the default CTR_DRBG
            if not (
                r["sampler"] == "discrete_laplace"
                and r["parameter"] == param
                and r["source"].startswith("secure")
            ):
                continue
            targets[f"{r['source']} discrete_laplace {param}"] = {
                "samples_per_second": r["samples_per_second"],
                "target": TARGET,
                "met": r["samples_per_second"] >= TARGET,
            }
    print()
    for name, t in targets.items():
        status = "met" if t["met"] else "MISSED"
        print(f"target >= {TARGET:,}/s for {name}: {t['samples_per_second']:,.0f}/s ({status})")

    machine = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        # other processes compete for the cores; a high load lowers every figure
        "load_average_1min_at_end": os.getloadavg()[0],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {"benchmark": "noise", "machine": machine, "targets": targets, "results": rows},
            indent=2,
        )
        + "\n"
    )
    print(f"\nsaved {RESULTS}")
    return 0 if smoke or all(t["met"] for t in targets.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
