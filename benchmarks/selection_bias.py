"""Bias and 95% coverage of selected answers, per selection method × path × set-up (issue 31).

For every selection method (svt, em, svt-gap and topc-gap as the vector mechanism and as the
paper's, adaptive-svt), both release paths (``explicit``: ``mm.release(x, W, ...,
select=...)`` on the histogram; ``factored``: ``release_factored`` from marginal tables) and
three set-ups, seeded releases are repeated until at least ``--answers`` selected answers are
collected; each answer is compared with the truth:

* ``zipf``: 20,000 records over 1,000 cells with P(i) ∝ 1/i (one seeded histogram), W the
  identity (a Kronecker product of one factor), c = 10, total ε = 0.25 (so that the rows
  ranked 10 to 12, 264, 239 and 231 records around the threshold 251.5, lie within 2
  answer std of it), strategy identity;
* ``marginals``: 20,000 records over 3 attributes of 10 values (a seeded, correlated
  model: each attribute a noisy copy of a Zipf-distributed latent value), W all 300 cells of
  the three 2-way marginals, c = 50 (the threshold, 201, has 46 cells within 2 answer std),
  total ε = 0.5, strategy identity (explicit path: an answer sums 10 cells' draws;
  factored: the selected cells are measured themselves);
* ``plateau``: 20,000 records over 1,000 cells, 40 of them with 1% of the records each
  (about 200) and the rest spread evenly (about 12 each): the threshold, 208, cuts through
  the plateau, so 35 rows lie within 2 answer std of it and the selection is close to a
  lottery among them (the winner's curse at its strongest). W, c = 10, ε as ``zipf``.

Each cell runs until it has ``--answers`` selected answers, then on (up to 4 times as many
releases) until a fifth as many of them are near the threshold.
Threshold methods test every row against the midpoint between the c-th and (c+1)-th true
answers; top-c methods have no threshold, and their "near" rows are counted against the same
midpoint. svt and em get half of ε for the selection; the gap methods the advised share
(``eps_sel`` column). ``bias`` is the mean of (answer − truth)/std in the std the release
reports (± its standard error); ``cover`` the share of answers whose reported 95% interval
(``Release.interval_law``) holds the truth; ``near``: the answers whose truth is within 2
reported std of the threshold. ``NaN cov``: answers whose reported coverage is NaN.
``GLS``: the combination of the same release's measurement with its selection's gaps or
values by generalised least squares (``svt.combine_gaps``, what a release reported before
issue 31 for rows its guard kept), on the explicit path: its bias and normal-interval
coverage over the near rows, and ``std ratio`` = the reported std / the GLS std (the
precision the release gives up by never combining the selecting draw; 1 for svt and em).

Run:  python benchmarks/selection_bias.py [--answers 10000] [--smoke] [--tree PATH] [--out PREFIX]
      [--setups zipf,marginals,plateau] [--paths explicit,factored] [--resume] [--merge A.json B.json ...]
(``--tree``: import matmech from another checkout, e.g. the tree before issue 31, to measure
it with the same script; ``--resume``: keep the finished cells of the checkpoint
OUT.partial.jsonl, written as each cell ends). Writes benchmarks/results/selection_bias.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

METHODS = (
    ("svt", {}),
    ("em", {}),
    ("svt-gap", {}),
    ("svt-gap", {"vector": False}),
    ("topc-gap", {}),
    ("topc-gap", {"vector": False}),
    ("adaptive-svt", {}),
)
THRESHOLD = ("svt", "svt-gap", "adaptive-svt")
RECORDS = 20_000
Z95 = 1.959963984540054


def zipf_setup():
    from matmech.linalg.combinators import Kron
    from matmech.linalg.linop import Identity

    p = 1.0 / np.arange(1, 1001)
    x = np.random.default_rng(31).multinomial(RECORDS, p / p.sum())
    W = Kron(Identity(1000))
    tables = {(0,): x, (): np.array(x.sum())}
    return "zipf", x, W, tables, 0.25, 10


def plateau_setup():
    from matmech.linalg.combinators import Kron
    from matmech.linalg.linop import Identity

    p = np.full(1000, 0.6 / 960)
    p[:40] = 0.4 / 40  # 40 cells of about 200 records: the threshold cuts through them
    x = np.random.default_rng(33).multinomial(RECORDS, p)
    W = Kron(Identity(1000))
    tables = {(0,): x, (): np.array(x.sum())}
    return "plateau", x, W, tables, 0.25, 10


def marginals_setup():
    from matmech import workloads as wl

    rng = np.random.default_rng(32)
    p = 1.0 / np.arange(1, 11)
    latent = rng.choice(10, size=RECORDS, p=p / p.sum())
    codes = np.stack(
        [
            np.where(rng.random(RECORDS) < 0.7, latent, rng.integers(0, 10, RECORDS))
            for _ in range(3)
        ],
        axis=1,
    )
    x = np.bincount(np.ravel_multi_index(codes.T, (10, 10, 10)), minlength=1000)
    W = wl.marginals((10, 10, 10), 2)
    return "marginals", x, W, codes, 0.5, 50


def run_cell(setup, path, method, extra, target, seed):
    import matmech as mm
    from matmech import svt
    from matmech.release import release_factored
    from matmech.svt.combine import answer_covariance

    name, x, W, data, EPS, C = setup
    truth = W.matvec(x.astype(np.float64))
    srt = np.sort(truth)[::-1]
    thr = float(srt[C - 1] + srt[C]) / 2
    sel = dict(method=method, c=C, **extra)
    if method in THRESHOLD:
        sel["threshold"] = thr
    if method in ("svt", "em"):
        sel["eps"] = EPS / 2
    rng = np.random.default_rng(seed)
    z, cover, near, nan_cov, std = [], [], [], 0, []
    gz, gcover, gratio = [], [], []
    methods: dict = {}
    trials, t0 = 0, time.perf_counter()
    r = None
    first = None  # trials that reached the target; then more, up to 4x, for the near rows
    while trials < 50 * target:
        if len(z) >= target:
            first = first or trials
            if sum(near) >= target // 5 or trials >= 4 * first:
                break
        trials += 1
        if path == "explicit":
            r = mm.release(x, W, EPS, strategy="identity", select=dict(sel), rng=rng)
        else:
            r = release_factored(data, W, EPS, select=dict(sel), rng=rng, max_records=10**6)
        rows = np.asarray(r.selected)
        if rows.size == 0:
            continue
        law = r.interval_law(0.95)
        tr = truth[rows]
        err = np.asarray(r.answers) - tr
        sd = np.asarray(r.std)
        z.extend((err / sd).tolist())
        cover.extend((np.abs(err) <= law.half * (1 + 1e-12)).tolist())
        is_near = np.abs(tr - thr) <= 2 * sd
        near.extend(is_near.tolist())
        std.extend(sd.tolist())
        nan_cov += int(np.isnan(np.asarray(law.coverage, dtype=float)).sum())
        for k, v in law.counts().items():
            methods[k] = methods.get(k, 0) + v
        if path == "explicit" and r.selection.gap is not None:  # the GLS the release no longer does
            sub = W.take_rows(rows)
            measured = sub.matvec(r.estimate)
            cov = answer_covariance(sub, r.measurement.strategy, r.measurement.std**2)
            gm = svt.gap_measurement(r.selection.gap, thr if method in THRESHOLD else None)
            est, C_ = svt.combine_gaps(measured, cov, gm, order=np.searchsorted(rows, gm.positions))
            gsd = np.sqrt(np.clip(np.diag(C_), 1e-300, None))
            msd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
            keep = is_near
            gz.extend(((est - tr) / gsd)[keep].tolist())
            gcover.extend((np.abs(est - tr) <= Z95 * gsd)[keep].tolist())
            gratio.extend((msd / gsd).tolist())
    z, cover, near = np.array(z), np.array(cover, dtype=bool), np.array(near, dtype=bool)

    def stats(zz, cc):
        n = zz.size
        if n == 0:
            return {"n": 0, "bias": None, "bias_se": None, "cover": None, "cover_se": None}
        c = float(cc.mean())
        return {
            "n": int(n),
            "bias": float(zz.mean()),
            "bias_se": float(zz.std(ddof=1) / math.sqrt(n)) if n > 1 else None,
            "cover": c,
            "cover_se": math.sqrt(max(c * (1 - c), 1e-12) / n),
        }

    out = {
        "setup": name,
        "path": path,
        "method": method,
        "vector": extra.get("vector", "auto"),
        "mechanism": None if r is None else r.selection.mechanism,
        "eps": EPS,
        "c": C,
        "eps_select": None if r is None else float(r.eps_select),
        "trials": trials,
        "threshold": thr,
        "all": stats(z, cover),
        "near": stats(z[near], cover[near]),
        "mean_std": float(np.mean(std)) if std else None,
        "nan_coverage": nan_cov,
        "interval_methods": methods,
        "seconds": time.perf_counter() - t0,
    }
    if gratio:
        out["gls_near"] = stats(np.array(gz), np.array(gcover, dtype=bool))
        out["std_ratio"] = float(np.mean(gratio))
    return out


def _f(v, fmt):
    return "-" if v is None else format(v, fmt)


def worst(r):
    """A cell's worst |bias| (with its SE) and worst coverage over all its answers and its
    near ones (the near figures only when there are at least 100 of them)."""
    parts = [r["all"]] + ([r["near"]] if r["near"]["n"] >= 100 else [])
    b = max(parts, key=lambda p: abs(p["bias"]))
    return abs(b["bias"]), b["bias_se"], min(p["cover"] for p in parts)


def summary(rows):
    """The headline: per method (mechanism) and set-up × path, the worst |bias| ± SE (std)
    and the worst coverage, over all answers and the near ones."""
    cols = list(dict.fromkeys((r["setup"], r["path"]) for r in rows if r["all"]["n"]))
    keys = list(dict.fromkeys((r["method"], r["vector"]) for r in rows))
    out = [
        "| method (mechanism) | " + " | ".join(f"{s} {p}" for s, p in cols) + " | std / GLS std |",
        "|---" * (len(cols) + 2) + "|",
    ]
    for m, v in keys:
        cells, mech, ratio = [], m, []
        for s, p in cols:
            r = next(
                (
                    r
                    for r in rows
                    if (r["method"], r["vector"], r["setup"], r["path"]) == (m, v, s, p)
                ),
                None,
            )
            if r is None or not r["all"]["n"]:
                cells.append("-")
                continue
            mech = m if r["mechanism"] in (None, m) else f"{m} ({r['mechanism']})"
            b, se, c = worst(r)
            cells.append(f"{b:.3f} ± {se:.3f} · {100 * c:.1f}%")
            if "std_ratio" in r:
                ratio.append(r["std_ratio"])
        lo, hi = (f"{v:.2f}" for v in (min(ratio, default=1), max(ratio, default=1)))
        cost = "1" if not ratio else lo if lo == hi else f"{lo}–{hi}"
        out.append(f"| {mech} | " + " | ".join(cells) + f" | {cost} |")
    return "\n".join(out)


def markdown(rows, meta):
    head = (
        f"{meta['date']}; load average {meta['load_before'][0]:.1f} → {meta['load_after'][0]:.1f} "
        f"(2 shared cores); {meta['seconds']:.0f} s; matmech from {meta['tree']}; target "
        f"{meta['answers']} answers per cell"
    )
    n_min = min((r["all"]["n"] for r in rows), default=0)
    near_min = min((r["near"]["n"] for r in rows), default=0)
    out = [
        "# Selected answers: bias and coverage of the 95% interval",
        "",
        head,
        "",
        "Headline: per cell, the worst |bias| (in the reported std, ± its Monte-Carlo SE) and "
        "the worst coverage of the reported 95% interval, over all selected answers and over "
        f"those near the threshold (at least {n_min} answers per cell, {near_min} of them near); "
        "std / GLS std: the reported std over the std a GLS combination with the selection's "
        "gaps or values would have had (explicit path, range over the set-ups).",
        "",
        summary(rows),
        "",
        "Every cell:",
        "",
        "bias in the reported std (± SE); cover: the reported interval holds the truth (± SE); "
        "near: truth within 2 reported std of the threshold; GLS: the same measurement combined "
        "with the selection's gaps/values (explicit path, near rows), and the reported std over "
        "the GLS std (the cost of never combining the selecting draw).",
        "",
        "| set-up | path | method (mechanism) | ε / ε_sel | answers | bias | cover | near | near bias | "
        "near cover | NaN cov | GLS near bias | GLS near cover | std / GLS std |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        a, n, g = r["all"], r["near"], r.get("gls_near")
        mech = r["method"] + (
            "" if r["mechanism"] in (None, r["method"]) else f" ({r['mechanism']})"
        )
        out.append(
            f"| {r['setup']} | {r['path']} | {mech} | {r['eps']:g} / {_f(r['eps_select'], '.3g')} | {a['n']} | "
            f"{_f(a['bias'], '+.3f')} ± {_f(a['bias_se'], '.3f')} | "
            f"{_f(a['cover'] and 100 * a['cover'], '.1f')}% | {n['n']} | "
            f"{_f(n['bias'], '+.3f')} ± {_f(n['bias_se'], '.3f')} | "
            f"{_f(n['cover'] and 100 * n['cover'], '.1f')}% | {r['nan_coverage']} | "
            + (
                f"{_f(g['bias'], '+.2f')} | {_f(g['cover'] and 100 * g['cover'], '.1f')}% | "
                f"{r['std_ratio']:.2f} |"
                if g
                else "- | - | 1 |"
                if r["path"] == "explicit" and r["method"] in ("svt", "em")
                else "- | - | - |"
            )
        )
    worst = [r for r in rows if r["all"]["n"]]
    if worst:
        b = max(abs(r["all"]["bias"]) for r in worst)
        nb = max((abs(r["near"]["bias"]) for r in worst if r["near"]["n"] > 1), default=0.0)
        cv = min(r["all"]["cover"] for r in worst)
        nc = min((r["near"]["cover"] for r in worst if r["near"]["n"] > 1), default=1.0)
        out += [
            "",
            f"Worst cell: |bias| {b:.3f} (near {nb:.3f}) std; coverage {100 * cv:.1f}% "
            f"(near {100 * nc:.1f}%); NaN coverages {sum(r['nan_coverage'] for r in rows)}.",
        ]
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answers", type=int, default=10_000, help="selected answers per cell")
    ap.add_argument("--smoke", action="store_true", help="a few answers per cell (CI)")
    ap.add_argument("--tree", default=str(ROOT), help="the checkout to import matmech from")
    ap.add_argument("--out", default=str(RESULTS / "selection_bias"), help="output path prefix")
    ap.add_argument("--setups", default="zipf,marginals,plateau", help="comma-separated subset")
    ap.add_argument("--paths", default="explicit,factored", help="comma-separated subset")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep the cells the checkpoint (OUT.partial.jsonl) has",
    )
    ap.add_argument(
        "--merge", nargs="+", help="JSON results of partial runs to merge into --out (no run)"
    )
    a = ap.parse_args(argv)
    if a.merge:
        parts = [json.loads(Path(p).read_text()) for p in a.merge]
        rows = [r for part in parts for r in part["cells"]]
        meta = dict(parts[0]["meta"])
        meta.update(
            seconds=sum(p["meta"]["seconds"] for p in parts),
            load_after=parts[-1]["meta"]["load_after"],
            merged=[p["meta"]["date"] for p in parts],
        )
        md = markdown(rows, meta)
        Path(a.out + ".json").write_text(json.dumps({"meta": meta, "cells": rows}, indent=1))
        Path(a.out + ".md").write_text(md)
        print(md)
        return
    sys.path.insert(0, a.tree)
    target = 40 if a.smoke else a.answers
    load0 = os.getloadavg()
    setups = {"zipf": zipf_setup, "marginals": marginals_setup, "plateau": plateau_setup}
    # every cell of the full grid has its own seed, whichever subset runs (--setups, --paths)
    grid = [
        (s, p, k) for s in setups for p in ("explicit", "factored") for k in range(len(METHODS))
    ]
    # finished cells go to a JSON-lines checkpoint as they end; --resume skips them
    ckpt = Path(a.out + ".partial.jsonl")
    done = {}
    if a.resume and ckpt.exists():
        for line in ckpt.read_text().splitlines():
            row = json.loads(line)
            if row["trials"] and row.get("target") == target:
                done[row["cell"]] = row
    rows = []
    for name in a.setups.split(","):
        setup = setups[name]()
        for path in a.paths.split(","):
            for k, (method, extra) in enumerate(METHODS):
                cell = grid.index((name, path, k))
                if cell in done:
                    rows.append(done[cell])
                    continue
                row = run_cell(setup, path, method, extra, target, 1000 * cell + k)
                row.update(cell=cell, target=target)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if not a.smoke:
                    ckpt.parent.mkdir(parents=True, exist_ok=True)
                    with ckpt.open("a") as f:
                        f.write(json.dumps(row) + "\n")
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": load0,
        "load_after": os.getloadavg(),
        "seconds": sum(r["seconds"] for r in rows),
        "answers": target,
        "tree": "this tree" if Path(a.tree).resolve() == ROOT else a.tree,
    }
    md = markdown(rows, meta)
    if not a.smoke:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out + ".json").write_text(json.dumps({"meta": meta, "cells": rows}, indent=1))
        Path(a.out + ".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
