"""Reproduce the Zipf experiment of Lyu, Su, Li (VLDB 2017), Sec. 6, Fig. 4(g,h) and 5(g,h).

Data: 1,000,000 records over 10,000 items, item i drawn with probability
proportional to 1/i^s with Zipf exponent s = 1 (the paper: "the i'th query
has a score proportional to 1/i"); counts are a multinomial sample from a
seeded numpy Generator (seed below), so the table is reproducible.

Task: select the top c items (c in 25..300) with eps = 0.1; the threshold is
halfway between the c-th and (c+1)-th largest counts; every trial shuffles the
item order (100 trials).  Counts are monotonic queries (add/remove one record
moves every count the same way), so, as in the paper, SVT-S, SVT-ReTr and EM
use their monotonic calibrations; SVT-DPBook is the book's Alg. 2 as is.

Metrics (paper Sec. 6):
  FNR = fraction of the true top-c items that were not selected;
  SER = 1 - avgScore(S) / avgScore(Top_c), where both averages divide by c
        (a selection with fewer than c items scores 0 for the missing ones).
Ties at the c-th count are broken by item rank (they are rare and only affect
FNR).

Also times ``sparse_vector`` over 10^7 candidate values (median of 5), with
the secure default source (rng=None) and with a seeded Generator.

Run:  python benchmarks/svt_zipf.py [--trials 100] [--jobs 2]
Writes benchmarks/results/svt_zipf.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from matmech import svt

RESULTS = Path(__file__).resolve().parent / "results"
SEED = 20170901
N_RECORDS = 1_000_000
N_ITEMS = 10_000
ZIPF_EXPONENT = 1.0
EPS = 0.1
CS = (25, 50, 100, 150, 200, 250, 300)
RETR_BOOSTS = (1, 3, 5)


def zipf_counts(rng: np.random.Generator) -> np.ndarray:
    ranks = np.arange(1, N_ITEMS + 1, dtype=np.float64)
    p = ranks ** -ZIPF_EXPONENT
    return rng.multinomial(N_RECORDS, p / p.sum()).astype(np.int64)


def methods(c: int):
    """name -> f(values, threshold, rng) -> selected positions."""
    m = {
        "SVT-DPBook": lambda v, t, r: svt.sparse_vector_dpbook(v, t, c=c, eps=EPS, rng=r).positions,
        "SVT-S-1:1": lambda v, t, r: svt.sparse_vector(v, t, c=c, eps=EPS, monotonic=True, ratio=1.0, rng=r).positions,
        "SVT-S-1:3": lambda v, t, r: svt.sparse_vector(v, t, c=c, eps=EPS, monotonic=True, ratio=3.0, rng=r).positions,
        "SVT-S-1:c": lambda v, t, r: svt.sparse_vector(v, t, c=c, eps=EPS, monotonic=True, ratio=float(c), rng=r).positions,
        "SVT-S-1:c^(2/3)": lambda v, t, r: svt.sparse_vector(v, t, c=c, eps=EPS, monotonic=True, ratio="optimal", rng=r).positions,
    }
    for k in RETR_BOOSTS:
        m[f"SVT-ReTr-{k}D"] = (
            lambda v, t, r, k=k: svt.sparse_vector_retraversal(
                v, t, c=c, eps=EPS, boost=float(k), monotonic=True, ratio="optimal", rng=r
            ).positions
        )
    m["EM"] = lambda v, t, r: svt.exponential_top_c(v, c, EPS, monotonic=True, rng=r).positions
    return m


BLOCK = 25  # trials per task; tasks are spread over worker processes


def _run_block(args):
    """Trials [start, start + size) for one c; seeded by (SEED, c, start), so the
    result does not depend on how tasks are spread over processes."""
    c, start, size = args
    counts = zipf_counts(np.random.default_rng(SEED))
    order = np.argsort(-counts, kind="stable")  # by count, ties by item rank
    sorted_counts = counts[order]
    top = set(order[:c].tolist())
    top_sum = float(sorted_counts[:c].sum())
    threshold = (sorted_counts[c - 1] + sorted_counts[c]) / 2.0
    rng = np.random.default_rng([SEED, c, start])
    ms = methods(c)
    rows = {name: [] for name in ms}
    t0 = time.process_time()
    for _ in range(size):
        perm = rng.permutation(N_ITEMS)  # shuffled[j] = counts[perm[j]]
        shuffled = counts[perm]
        for name, f in ms.items():
            sel = perm[np.asarray(f(shuffled, threshold, rng), dtype=np.int64)]
            ser = 1.0 - float(counts[sel].sum()) / top_sum
            fnr = 1.0 - len(top.intersection(sel.tolist())) / c
            rows[name].append((ser, fnr, len(sel)))
    return c, start, rows, time.process_time() - t0


def run_zipf(trials: int, jobs: int) -> dict:
    counts = zipf_counts(np.random.default_rng(SEED))
    sorted_counts = np.sort(counts)[::-1]
    tasks = [(c, s, min(BLOCK, trials - s)) for c in CS for s in range(0, trials, BLOCK)]
    results = {c: {} for c in CS}
    cpu = {c: 0.0 for c in CS}
    if jobs > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(jobs) as pool:
            done = list(pool.imap_unordered(_run_block, tasks))
    else:
        done = [_run_block(t) for t in tasks]
    for c, start, rows, sec in done:
        results[c][start] = rows
        cpu[c] += sec
    out = {"per_c": {}}
    for c in CS:
        names = list(results[c][0])
        merged = {n: [r for s in sorted(results[c]) for r in results[c][s][n]] for n in names}
        out["per_c"][c] = {
            "threshold": float((sorted_counts[c - 1] + sorted_counts[c]) / 2.0),
            "cpu_seconds": cpu[c],
            "methods": {
                n: {
                    "SER_mean": float(np.mean([r[0] for r in merged[n]])),
                    "SER_std": float(np.std([r[0] for r in merged[n]])),
                    "FNR_mean": float(np.mean([r[1] for r in merged[n]])),
                    "FNR_std": float(np.std([r[1] for r in merged[n]])),
                    "selected_mean": float(np.mean([r[2] for r in merged[n]])),
                    "runs_short_of_c": int(sum(r[2] < c for r in merged[n])),
                }
                for n in names
            },
        }
        print(f"  c={c}: {cpu[c]:.1f}s cpu", file=sys.stderr)
    out["counts_top5"] = sorted_counts[:5].tolist()
    out["counts_at_c"] = {c: [int(sorted_counts[c - 1]), int(sorted_counts[c])] for c in CS}
    return out


def time_sparse_vector(n: int = 10_000_000, repeats: int = 5) -> dict:
    """Worst case for the scan: nothing clears the threshold, so all n values are tested."""
    gen = np.random.default_rng(SEED + 1)
    ints = gen.poisson(5.0, size=n).astype(np.int64)
    floats = ints + gen.random(n)
    timings = {}
    cases = {
        "int64 values, rng=None (OS CSPRNG)": (ints, None),
        "int64 values, seeded Generator": (ints, np.random.default_rng(1)),
        "float64 values, rng=None (OS CSPRNG)": (floats, None),
    }
    for label, (vals, r) in cases.items():
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            res = svt.sparse_vector(vals, 1e5, c=10, eps=1.0, rng=r)
            ts.append(time.perf_counter() - t0)
        assert res.n_processed == n, res.n_processed
        timings[label] = {"median_s": statistics.median(ts), "all_s": ts}
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        svt.exponential_top_c(ints, 10, 1.0)
        t.append(time.perf_counter() - t0)
    timings["exponential_top_c, int64 values, rng=None"] = {"median_s": statistics.median(t), "all_s": t}
    return {"n": n, "repeats": repeats, "timings": timings}


def markdown(res: dict, timing: dict, trials: int) -> str:
    names = list(next(iter(res["per_c"].values()))["methods"])
    head = "| method | " + " | ".join(f"c={c}" for c in CS) + " |"
    sep = "|---|" + "---|" * len(CS)
    lines = [
        "# SVT vs EM on Zipf data (Lyu, Su, Li VLDB 2017, Sec. 6)",
        "",
        f"{N_RECORDS:,} records over {N_ITEMS:,} items, Zipf exponent {ZIPF_EXPONENT}, "
        f"seed {SEED}; eps = {EPS}; {trials} shuffled trials per c; threshold halfway "
        "between the c-th and (c+1)-th counts. Monotonic calibration for SVT-S, "
        "SVT-ReTr (ratio 1:c^(2/3), threshold raised by kD = k query-noise std) and EM.",
        "",
        "## SER (mean ± std)",
        "",
        head,
        sep,
    ]
    for name in names:
        cells = [
            f"{res['per_c'][c]['methods'][name]['SER_mean']:.3f} ± {res['per_c'][c]['methods'][name]['SER_std']:.3f}"
            for c in CS
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## FNR (mean)", "", head, sep]
    for name in names:
        cells = [f"{res['per_c'][c]['methods'][name]['FNR_mean']:.3f}" for c in CS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    short = [
        f"{name} at c={c}: {res['per_c'][c]['methods'][name]['runs_short_of_c']}/{trials}"
        for c in CS for name in names
        if res["per_c"][c]["methods"][name]["runs_short_of_c"] and name.startswith("SVT-ReTr")
    ]
    lines += [
        "",
        "SER counts unselected slots as score 0 (both averages divide by c). SVT-S and "
        "DPBook stop after c positives or at the end of the list; SVT-ReTr traverses "
        "again until c are found or 1000 passes (the default max_passes) are done.",
    ]
    if short:
        lines += ["", "SVT-ReTr runs that ended at max_passes with fewer than c items: " + "; ".join(short) + "."]
    lines += ["", f"## sparse_vector on {timing['n']:,} values (median of {timing['repeats']})", ""]
    lines += ["| case | median seconds |", "|---|---|"]
    for label, t in timing["timings"].items():
        lines.append(f"| {label} | {t['median_s']:.3f} |")
    lines += ["", f"Machine: {platform.platform()}, Python {platform.python_version()}, numpy {np.__version__}."]
    return "\n".join(lines) + "\n"


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(next(iter(res["per_c"].values()))["methods"])
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    colors = dict(zip(names, plt.cm.tab10.colors))
    styles = {
        name: dict(color=colors[name], ls="--" if "DPBook" in name else ":" if "ReTr" in name else "-")
        for name in names
    }
    styles["EM"] = dict(color="black", lw=2.5, zorder=1)
    cs = [int(c) for c in res["per_c"]]
    for ax, metric in zip(axes, ("SER", "FNR")):
        for name in names:
            y = [res["per_c"][c]["methods"][name][f"{metric}_mean"] for c in res["per_c"]]
            ax.plot(cs, y, marker="o", ms=4, label=name, **styles[name])
        ax.set_xlabel("c (number of items to select)")
        ax.set_ylabel(metric)
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"Zipf, eps={EPS}: {metric} (lower is better)")
        ax.grid(alpha=0.3)
    axes[1].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes for the Zipf trials")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--replot", action="store_true", help="only redraw the PNG from the saved JSON")
    args = ap.parse_args(argv)
    if args.replot:
        plot(json.loads((RESULTS / "svt_zipf.json").read_text())["zipf"], RESULTS / "svt_zipf.png")
        return
    t0 = time.perf_counter()
    res = run_zipf(args.trials, args.jobs)
    timing = time_sparse_vector() if not args.no_timing else {"n": 0, "repeats": 0, "timings": {}}
    md = markdown(res, timing, args.trials)
    print(md)
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "config": {
            "records": N_RECORDS, "items": N_ITEMS, "zipf_exponent": ZIPF_EXPONENT, "seed": SEED,
            "eps": EPS, "cs": list(CS), "trials": args.trials, "retraversal_boosts": list(RETR_BOOSTS),
            "jobs": args.jobs,
        },
        "zipf": res,
        "timing": timing,
        "total_seconds": time.perf_counter() - t0,
    }
    (RESULTS / "svt_zipf.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    (RESULTS / "svt_zipf.md").write_text(md)
    plot(res, RESULTS / "svt_zipf.png")
    print(f"total {time.perf_counter() - t0:.1f}s; wrote {RESULTS}/svt_zipf.{{json,md,png}}", file=sys.stderr)


if __name__ == "__main__":
    main()
