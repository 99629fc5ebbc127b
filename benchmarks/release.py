"""Release benchmark: secure measurement + least squares + answers (+ error bars), timed by stage.

Part ``tree``: n = 2**20 cells, hierarchical strategy b = 16 (1,118,481 noisy node counts
from the OS CSPRNG), answering 10**6 random ranges. Target: measure + least squares +
answering <= 5 s and <= 2 GB on 2 cores.
Part ``optimized``: n = 4096 with an optimised strategy (matmech.optimize when available,
otherwise a random p-Identity strategy [I; Θ]D with p = 256, the shape HDMM's optimiser
returns, and a random square dense strategy), answering 10**5 random ranges. Target <= 2 s.

Each part runs in its own process so that its peak RSS (resource.getrusage) is its own.
Every figure is the median over ``--repeats`` runs (min and max recorded too).

    python benchmarks/release.py [--repeats 5] [--out benchmarks/results/release.json]
    python benchmarks/release.py --smoke   # n = 2**12 and 256, once, in this process (CI)

``--smoke`` writes its JSON to a temporary directory.
"""

from __future__ import annotations

import argparse
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from matmech import strategies as S  # noqa: E402
from matmech.estimators.gls import least_squares  # noqa: E402
from matmech.linalg.intervals import Intervals  # noqa: E402
from matmech.linalg.linop import Dense  # noqa: E402
from matmech.privacy.measure import check_counts, execute, plan_measurement  # noqa: E402
from matmech.release import _answer_variances, release  # noqa: E402


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def random_ranges(n, m, seed):
    r = np.random.default_rng(seed)
    a, b = r.integers(0, n, m), r.integers(0, n, m)
    return Intervals(n, np.minimum(a, b), np.maximum(a, b))


def summarise(samples):
    out = {}
    for key in samples[0]:
        vals = [s[key] for s in samples]
        out[key] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
    return out


def staged(x, W, make_strategy, eps, delta):
    """One release written out stage by stage (the same calls release() makes)."""
    t = {}
    t0 = time.perf_counter()
    A = make_strategy()
    t1 = time.perf_counter()
    plan = plan_measurement(A, eps, delta)
    t2 = time.perf_counter()
    meas = execute(plan, x)  # secure: OS CSPRNG
    t3 = time.perf_counter()
    xhat = least_squares(meas)
    t4 = time.perf_counter()
    answers = W.matvec(xhat)
    t5 = time.perf_counter()
    var = _answer_variances(W, plan)
    t6 = time.perf_counter()
    t.update(
        strategy=t1 - t0,
        plan=t2 - t1,
        measure=t3 - t2,
        least_squares=t4 - t3,
        answer=t5 - t4,
        std=t6 - t5,
    )
    t["measure+least_squares+answer"] = t3 - t2 + t4 - t3 + t5 - t4
    t["all stages"] = t6 - t0
    assert answers.shape == var.shape
    return t, meas


def timed_release(x, W, A, eps, delta):
    t0 = time.perf_counter()
    rel = release(x, W, eps, delta, strategy=A)
    return time.perf_counter() - t0, rel


def part_tree(repeats, n=2**20, m=10**6):
    eps = 1.0
    x = check_counts(np.random.default_rng(1).poisson(50, n))
    W = random_ranges(n, m, 2)
    base = peak_rss_mb()
    samples, meas = [], None
    for _ in range(repeats):
        t, meas = staged(x, W, lambda: S.hierarchical(n, 16), eps, 0.0)
        samples.append(t)
    rel_times, gauss_times = [], []
    for _ in range(repeats):
        dt, rel = timed_release(x, W, S.hierarchical(n, 16), eps, 0.0)
        rel_times.append(dt)
        dt, _ = timed_release(x, W, S.hierarchical(n, 16), eps, 1e-6)
        gauss_times.append(dt)
    err = rel.answers - W.matvec(x.astype(float))
    return {
        "n": n,
        "queries": m,
        "strategy": "hierarchical b=16",
        "rows_measured": meas.strategy.shape[0],
        "records": int(x.sum()),
        "eps": eps,
        "noise": meas.noise,
        "secure_randomness": meas.secure,
        "seconds": summarise(samples),
        "release()_seconds_eps": {
            "median": statistics.median(rel_times),
            "min": min(rel_times),
            "max": max(rel_times),
        },
        "release()_seconds_eps_delta=1e-6": {
            "median": statistics.median(gauss_times),
            "min": min(gauss_times),
            "max": max(gauss_times),
        },
        "rmse_observed": float(np.sqrt(np.mean(err**2))),
        "rmse_expected": float(np.sqrt(rel.expected_error / m)),
        "rss_mb_after_setup": base,
        "peak_rss_mb": peak_rss_mb(),
    }


def p_identity_theta(n, p, seed):
    r = np.random.default_rng(seed)
    return r.random((p, n)) * (r.random((p, n)) < 0.25)


def p_identity(n, p, seed):
    theta = p_identity_theta(n, p, seed)
    return Dense(np.vstack([np.eye(n), theta]) / (1 + theta.sum(0)))


def part_optimized(repeats, n=4096, m=10**5):
    eps = 1.0
    x = check_counts(np.random.default_rng(3).poisson(50, n))
    W = random_ranges(n, m, 4)
    cases = []
    try:
        from matmech.optimizers.dispatch import optimize
    except ImportError:
        optimize = None
    if optimize is not None:
        from matmech.workloads import all_range

        t0 = time.perf_counter()
        res = optimize(all_range(n), eps, 0.0)
        opt_seconds = time.perf_counter() - t0
        cases.append(
            ("matmech.optimize (all ranges, pure eps)", lambda: res.strategy, 0.0, opt_seconds)
        )
    else:
        cases.append(
            (
                "random p-Identity [I; Θ]D, p=256 (optimize not available)",
                lambda: p_identity(n, 256, 5),
                0.0,
                None,
            )
        )
        try:  # the optimiser's strategy class, if it is already in the tree
            from matmech.optimizers.pidentity import PIdentity
        except ImportError:
            PIdentity = None
        if PIdentity is not None:
            th = p_identity_theta(n, 256, 5)
            cases.append(
                (
                    "matmech.optimizers.pure.PIdentity with random Θ, p=256",
                    lambda: PIdentity(th),
                    0.0,
                    None,
                )
            )
        sq = Dense(np.eye(n) + np.random.default_rng(6).random((n, n)) / n)
        cases.append(("random square dense n×n (optimize not available)", lambda: sq, 1e-6, None))
    out = []
    for name, make, delta, opt_seconds in cases:
        samples = []
        for _ in range(repeats):
            t, meas = staged(x, W, make, eps, delta)
            samples.append(t)
        rel_times = [timed_release(x, W, make(), eps, delta)[0] for _ in range(repeats)]
        out.append(
            {
                "strategy": name,
                "strategy_shape": list(meas.strategy.shape),
                "measured_type": type(meas.strategy).__name__,
                "grid": meas.grid,
                "eps": eps,
                "delta": delta,
                "noise": meas.noise,
                "optimize_seconds": opt_seconds,
                "seconds": summarise(samples),
                "release()_seconds": {
                    "median": statistics.median(rel_times),
                    "min": min(rel_times),
                    "max": max(rel_times),
                },
            }
        )
    return {"n": n, "queries": m, "cases": out, "peak_rss_mb": peak_rss_mb()}


def machine():
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import scipy

    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "load_average_at_start": list(os.getloadavg()),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "release.json"))
    ap.add_argument("--part", choices=["tree", "optimized"], help=argparse.SUPPRESS)
    ap.add_argument(
        "--smoke", action="store_true", help="small n, once, in this process; temporary directory"
    )
    args = ap.parse_args(argv)
    if args.part:
        result = part_tree(args.repeats) if args.part == "tree" else part_optimized(args.repeats)
        print(json.dumps(result))
        return 0
    report = {"machine": machine()}
    if args.smoke:
        args.out = str(Path(tempfile.mkdtemp(prefix="matmech-smoke-")) / "release.json")
        report["tree"] = part_tree(1, 2**12, 10**4)
        report["optimized"] = part_optimized(1, 256, 10**3)
    for part in () if args.smoke else ("tree", "optimized"):
        proc = subprocess.run(
            [sys.executable, __file__, "--part", part, "--repeats", str(args.repeats)],
            capture_output=True,
            text=True,
            check=True,
        )
        report[part] = json.loads(proc.stdout.strip().splitlines()[-1])
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    tree = report["tree"]
    print(
        f"n = 2^20, hierarchical b = 16, {tree['queries']:,} random ranges, secure discrete Laplace:"
    )
    for k, v in tree["seconds"].items():
        print(f"  {k:32s} {v['median']:7.3f} s  (min {v['min']:.3f}, max {v['max']:.3f})")
    print(f"  {'release() end to end, eps':32s} {tree['release()_seconds_eps']['median']:7.3f} s")
    print(
        f"  {'release() end to end, eps,delta':32s} {tree['release()_seconds_eps_delta=1e-6']['median']:7.3f} s"
    )
    print(
        f"  peak RSS {tree['peak_rss_mb']:.0f} MB; RMSE observed {tree['rmse_observed']:.2f}, expected {tree['rmse_expected']:.2f}"
    )
    for case in report["optimized"]["cases"]:
        print(
            f"n = 4096, {case['strategy']} ({case['measured_type']} {case['strategy_shape']}), delta = {case['delta']}:"
        )
        for k, v in case["seconds"].items():
            print(f"  {k:32s} {v['median']:7.3f} s")
        print(f"  {'release() end to end':32s} {case['release()_seconds']['median']:7.3f} s")
    print(
        f"peak RSS (n = 4096 part) {report['optimized']['peak_rss_mb']:.0f} MB; machine: {report['machine']['cpu']}, "
        f"{report['machine']['cpus']} CPUs, load {report['machine']['load_average_at_start']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
