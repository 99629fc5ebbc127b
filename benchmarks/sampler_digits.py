"""The exact discrete Laplace / Gaussian against their exact distributions, digit by digit.

For each scale (grid units) this draws N samples from the secure default source and tests
(chi-square, exact expected counts from closed forms):

* each base-256 digit of |Z| - 1 (a geometric truncated to [0, 256), ratio q**(256**d));
* |Z| mod 256 and mod 2**12 (the old defect: |Z| = 256, 512, ... were never drawn);
* the rate of non-zero multiples of 256 against its exact value;

and the discrete Gaussian's Z mod 256. It also runs the issue-21 end-to-end reproducer
(identity release at eps = 0.001 on x = 0 vs x = 1). Prints a table and saves
benchmarks/results/sampler_digits.json. Run on an older checkout (PYTHONPATH=...) for the
"before" column.

    python benchmarks/sampler_digits.py [--n 1000000]
    python benchmarks/sampler_digits.py --smoke   # 20,000 samples, 10,000 cells (CI)

``--smoke`` writes the JSON to a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import platform
import subprocess
import sys
import tempfile

import numpy as np

import matmech as mm
from matmech import workloads as W
from matmech.privacy import noise

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "privacy"))

from sampler_exact import chi2_p  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "sampler_digits.json"
LAPLACE_SCALES = [1, 30, 255, 256, 1000, 2**16, 2**20]
GAUSS_SIGMAS = [1, 30, 255, 256, 1000, 2**16, 2**20]


def digit_pmf(scale, d):
    """P[digit d of |Z| - 1 = c | Z != 0]: a geometric with ratio r = q**(256**d) truncated
    to [0, 256)."""
    log_r = -(256.0**d) / scale
    c = np.arange(256)
    logp = c * log_r
    logp -= np.logaddexp.reduce(logp)
    return np.exp(logp)


def abs_mod_pmf(scale, m):
    """P[|Z| mod m = r] for the discrete Laplace (closed form)."""
    q = math.exp(-1.0 / scale)
    qm = q**m
    c = (1 - q) / (1 + q)
    p = 2 * c * q ** np.arange(m, dtype=float) / (1 - qm)
    p[0] = c * (1 + 2 * qm / (1 - qm))
    return p / p.sum()


def laplace_rows(n):
    rows = []
    for scale in LAPLACE_SCALES:
        z = noise.discrete_laplace(scale, n)
        a = np.abs(z)
        y = a[a > 0] - 1
        digits = max(1, math.ceil(math.log(70 * scale, 256)))
        per_digit = []
        for d in range(digits):
            dig = (y >> (8 * d)) & 255
            per_digit.append(chi2_p(np.bincount(dig, minlength=256), digit_pmf(scale, d) * y.size))
        q = math.exp(-1.0 / scale)
        exact256 = 2 * (1 - q) / (1 + q) * q**256 / (1 - q**256)
        rows.append(
            {
                "sampler": "discrete_laplace",
                "scale": scale,
                "n": n,
                "p_digit": per_digit,
                "p_mod256": chi2_p(
                    np.bincount(a % 256, minlength=256), abs_mod_pmf(scale, 256) * n
                ),
                "p_mod4096": chi2_p(
                    np.bincount(a % 4096, minlength=4096), abs_mod_pmf(scale, 4096) * n
                ),
                "mult256_rate": float(np.mean((a % 256 == 0) & (a > 0))),
                "mult256_exact": exact256,
            }
        )
    return rows


def gauss_rows(n):
    rows = []
    for sigma in GAUSS_SIGMAS:
        z = noise.discrete_gaussian(sigma, n)
        if sigma < 2**16:
            span = int(40 * sigma) + 256
            k = np.arange(-span, span + 1)
            w = np.exp(-(k.astype(float) ** 2) / (2.0 * sigma**2))
            pmf = np.bincount(k % 256, weights=w, minlength=256)
            pmf /= pmf.sum()
        else:  # uniform to within exp(-2 pi**2 sigma**2 / 256**2)
            pmf = np.full(256, 1 / 256)
        rows.append(
            {
                "sampler": "discrete_gaussian",
                "scale": sigma,
                "n": n,
                "p_mod256": chi2_p(np.bincount(z % 256, minlength=256), pmf * n),
            }
        )
    return rows


def release_reproducer(cells=200_000):
    """Share of identity answers at eps = 0.001 (scale 1000 on the integer grid) that are
    non-zero multiples of 256, on x = 0 and on x = 1 (every cell one record more). Before
    the fix the first was 0 (an impossible event) and the second was not."""
    out = {}
    for name, value in (("x=0", 0.0), ("x=1", 1.0)):
        rel = mm.release(np.full(cells, value), W.identity(cells), 0.001, strategy="identity")
        a = np.abs(np.rint(np.asarray(rel.answers)).astype(np.int64))
        out[name] = float(np.mean((a % 256 == 0) & (a > 0)))
    q = math.exp(-1 / 1000)
    out["exact(x=0)"] = 2 * (1 - q) / (1 + q) * q**256 / (1 - q**256)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="samples per scale")
    ap.add_argument("--smoke", action="store_true", help="small samples; temporary directory")
    args = ap.parse_args()
    results = RESULTS
    if args.smoke:
        args.n = 20_000
        results = pathlib.Path(tempfile.mkdtemp(prefix="matmech-smoke-")) / RESULTS.name
    lap, gau = laplace_rows(args.n), gauss_rows(args.n // 2)
    rep = release_reproducer(10_000 if args.smoke else 200_000)
    print(
        f"{'sampler':18} {'scale':>8} {'p(digit 0..)':>34} {'p mod256':>9} {'p mod4096':>9}"
        f" {'mult256':>9} {'exact':>9}"
    )
    for r in lap:
        digs = " ".join(f"{p:.3f}" for p in r["p_digit"])
        print(
            f"{r['sampler']:18} {r['scale']:>8} {digs:>34} {r['p_mod256']:9.3g} "
            f"{r['p_mod4096']:9.3g} {r['mult256_rate']:9.3e} {r['mult256_exact']:9.3e}"
        )
    for r in gau:
        print(f"{r['sampler']:18} {r['scale']:>8} {'':>34} {r['p_mod256']:9.3g}")
    print(
        "identity release, eps=0.001: non-zero multiples of 256 among the answers:",
        ", ".join(f"{k} {v:.3e}" for k, v in rep.items()),
    )
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=pathlib.Path(__file__).parent,
        ).stdout.strip()
    except OSError:
        commit = "unknown"
    results.parent.mkdir(exist_ok=True)
    results.write_text(
        json.dumps(
            {
                "machine": platform.platform(),
                "commit": commit,
                "laplace": lap,
                "gaussian": gau,
                "release": rep,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
