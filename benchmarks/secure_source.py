"""Speed of the secure random sources: os.urandom against the AES-256 CTR_DRBG default.

Issue 24 item 5 (exact noise at numpy speed with the secure default). In one process,
OPENBLAS_NUM_THREADS=1, the sources interleaved within every repeat so that load drift
hits them alike; medians of ``--repeats`` runs:

* MB/s of random words: ``os.urandom`` (:func:`matmech.privacy.randomness.os_source`)
  against the CTR_DRBG (``check_rng(None)``), per request of 2**13 words (the 64 KiB
  buffer refill) and of 2**20 words; and the time to make a fresh source and read its
  first word (what a call with ``rng=None`` pays before any noise);
* draws/s of ``noise.discrete_gaussian(sigma, n, rng=...)`` at σ = 1, 30, 255, 1000, 65536
  (tables built beforehand) with (a) ``os_source()``, (b) ``rng=None`` (the default),
  (c) a seeded ``numpy.random.default_rng`` (reproducible, NOT secure).

Prints a Markdown table and saves benchmarks/results/secure_source.{json,md}.

    OPENBLAS_NUM_THREADS=1 python benchmarks/secure_source.py
    python benchmarks/secure_source.py --smoke   # 2**12 draws, once (CI)

``--smoke`` writes its files to a temporary directory.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import cryptography  # noqa: E402
import numpy as np  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from matmech.privacy import noise  # noqa: E402
from matmech.privacy.randomness import check_rng, os_source  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SIGMAS = [1, 30, 255, 1000, 65536]
#: name -> a fresh ``rng`` argument for one call (seeded runs get their repeat's seed)
SOURCES = {
    "os.urandom": lambda r: os_source(),
    "CTR_DRBG (default)": lambda r: None,
    "seeded PCG64": lambda r: np.random.default_rng(r),
}
WORD_REQUESTS = [1 << 13, 1 << 20]
BYTE_SOURCES = {"os.urandom": os_source, "CTR_DRBG (default)": lambda: check_rng(None)}


def words_rate(make, words: int, calls: int) -> float:
    """MB/s of ``calls`` requests of ``words`` words from one source."""
    src = make()
    t0 = time.perf_counter()
    for _ in range(calls):
        src._generate(words)
    return 8 * words * calls / (time.perf_counter() - t0) / 1e6


def first_word_us(make, calls: int = 200) -> float:
    """Microseconds to make a fresh source and read one word (a 64 KiB buffer refill)."""
    t0 = time.perf_counter()
    for _ in range(calls):
        make().words64(1)
    return (time.perf_counter() - t0) / calls * 1e6


def bytes_table(repeats: int) -> list[dict]:
    rows = []
    for words in WORD_REQUESTS:
        calls = max(4, (1 << 26) // (8 * words))  # 64 MiB a run
        runs: dict[str, list[float]] = {k: [] for k in BYTE_SOURCES}
        for _ in range(repeats):
            for name, make in BYTE_SOURCES.items():
                runs[name].append(words_rate(make, words, calls))
        rows.append({"request_words": words, **{k: statistics.median(v) for k, v in runs.items()}})
    first: dict[str, list[float]] = {k: [] for k in BYTE_SOURCES}
    for _ in range(repeats):
        for name, make in BYTE_SOURCES.items():
            first[name].append(first_word_us(make))
    rows.append({"first_word_us": {k: statistics.median(v) for k, v in first.items()}})
    return rows


def draw_rate(sigma: float, n: int, rng) -> float:
    t0 = time.perf_counter()
    noise.discrete_gaussian(sigma, n, rng=rng)
    return n / (time.perf_counter() - t0)


def gauss_table(n: int, repeats: int) -> list[dict]:
    rows = []
    for sigma in SIGMAS:
        noise.discrete_gaussian(sigma, 1000, rng=np.random.default_rng(0))  # build the tables
        runs: dict[str, list[float]] = {k: [] for k in SOURCES}
        for r in range(repeats):
            for name, make in SOURCES.items():
                runs[name].append(draw_rate(sigma, n, make(r)))
        row = {"sigma": sigma, **{k: statistics.median(v) for k, v in runs.items()}, "runs": runs}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)
    return rows


def render(saved: dict) -> str:
    meta, bt, gt = saved["meta"], saved["bytes"], saved["gauss"]
    names = list(BYTE_SOURCES)
    lines = [
        "# Secure random sources: os.urandom against the AES-256 CTR_DRBG default",
        "",
        f"{meta['date']}, {meta['machine']}, load average {meta['load'][0]}-{meta['load'][1]} "
        f"during the run; OPENBLAS_NUM_THREADS={meta['openblas_threads']}; one process, the "
        f"sources interleaved in every repeat; medians of {meta['repeats']}.",
        "",
        "## Random words (MB/s)",
        "",
        "| request | " + " | ".join(names) + " | ratio |",
        "|---|---|---|---|",
    ]
    for r in bt[:-1]:
        a, b = (r[k] for k in names)
        lines.append(f"| {r['request_words']:,} words | {a:,.0f} | {b:,.0f} | {b / a:.1f} |")
    fw = bt[-1]["first_word_us"]
    a, b = (fw[k] for k in names)
    lines.append(f"| fresh source + first word (µs) | {a:.0f} | {b:.0f} | {a / b:.1f} |")
    lines += [
        "",
        f"## Discrete Gaussian draws/s ({meta['n']:,} draws per call, tables built beforehand)",
        "",
        "| σ | " + " | ".join(SOURCES) + " | default / os.urandom | default / seeded |",
        "|---|---|---|---|---|---|",
    ]
    for r in gt:
        a, b, c = (r[k] for k in SOURCES)
        lines.append(
            f"| {r['sigma']:g} | {a / 1e6:.2f} M | {b / 1e6:.2f} M | {c / 1e6:.2f} M "
            f"| {b / a:.2f} | {b / c:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 20, help="draws per call")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="2**12 draws, once; temporary directory")
    args = ap.parse_args(argv)
    results = RESULTS
    if args.smoke:
        args.n, args.repeats = 1 << 12, 1
        results = pathlib.Path(tempfile.mkdtemp(prefix="matmech-smoke-"))
    loads = [os.getloadavg()[0]]
    bt = bytes_table(args.repeats)
    loads.append(os.getloadavg()[0])
    gt = gauss_table(args.n, args.repeats)
    loads.append(os.getloadavg()[0])
    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{sys.version.split()[0]}, numpy {np.__version__}, cryptography "
        f"{cryptography.__version__}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load": [round(min(loads), 2), round(max(loads), 2)],
        "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "n": args.n,
        "repeats": args.repeats,
    }
    saved = {"meta": meta, "bytes": bt, "gauss": gt}
    results.mkdir(exist_ok=True)
    (results / "secure_source.json").write_text(json.dumps(saved, indent=1) + "\n")
    text = render(saved)
    (results / "secure_source.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
