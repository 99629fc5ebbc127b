"""The cost of authenticating the spill file of a streamed marginal release (issue 31, item 4).

A release whose residuals go to a file (``spill_dir``) writes them with a keyed MAC per block
and checks every block it reads back. This times, on one release per noise kind (all ≤3-way
marginals of d attributes × 10 values, the residuals on disk), the release itself (plan,
measurement, the writes) and reading everything back (``iter_marginals`` over every marginal,
and 200 single ``marginal(S)`` calls in a random order): CPU and wall seconds, medians of
``--repeat`` runs in this process, and the CPU seconds spent inside the sealed file (its
reads, writes and MACs: an upper bound on what the integrity costs, measured within the same
run, so the machine's load cancels). Run it on two checkouts to compare
(``PYTHONPATH=<checkout>``); on a shared machine compare CPU seconds.

    OPENBLAS_NUM_THREADS=1 python benchmarks/spill_integrity.py            # d = 40, 100,000 records
    OPENBLAS_NUM_THREADS=1 python benchmarks/spill_integrity.py --smoke    # d = 8: CI

Results go to benchmarks/results/spill_integrity.json (``--out`` to change).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: one BLAS thread (shared cores)

import numpy as np  # noqa: E402

if not os.environ.get("PYTHONPATH"):  # else the checkout PYTHONPATH names
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from matmech import release_marginals  # noqa: E402
from matmech.linalg.terms import marginal_workload  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _records(d, n, records, seed):
    rng = np.random.default_rng(seed)
    latent = rng.integers(0, 8, size=records)
    cols = []
    for _ in range(d):
        shift = rng.integers(0, n, size=8)
        cols.append((shift[latent] + rng.integers(0, 3, size=records)) % n)
    return np.stack(cols, axis=1).astype(np.int64)


#: CPU seconds spent inside the sealed spill file (reads, writes and MACs), per method; on a
#: checkout without one (before the MACs) nothing is counted.
SEALED: dict[str, float] = {}


def _instrument():
    from matmech.results import store

    sealed = getattr(store, "SealedFile", None)
    for name in ("gather", "scatter", "append", "finish", "_seal"):
        real = getattr(sealed, name, None)
        if real is None:
            continue

        def timed(self, *a, _real=real, _name=name, **kw):
            t = time.process_time()
            try:
                return _real(self, *a, **kw)
            finally:
                SEALED[_name] = SEALED.get(_name, 0.0) + time.process_time() - t

        setattr(sealed, name, timed)


def _sealed():
    """(CPU s inside the sealed file, of which MACs) since the last call."""
    out = (sum(v for k, v in SEALED.items() if k != "_seal"), SEALED.get("_seal", 0.0))
    SEALED.clear()
    return out


def _clock():
    return time.perf_counter(), time.process_time()


def _since(t0):
    wall, cpu = _clock()
    return wall - t0[0], cpu - t0[1]


def _case(d, records, delta, spill, seed):
    """Wall and CPU seconds of the release, reading everything back, and 200 marginals."""
    codes = _records(d, 10, records, seed)
    W = marginal_workload((10,) * d, list(itertools.combinations(range(d), 3)))
    _sealed()
    t = _clock()
    rel = release_marginals(codes, W, 1.0, delta, rng=np.random.default_rng(seed), spill_dir=spill)
    out = {"release": _since(t), "release_sealed": _sealed()}
    t = _clock()
    total = 0.0
    for _, v, _ in rel.iter_marginals():
        total += float(v.sum())
    out["read_all"] = _since(t)
    out["read_all_sealed"] = _sealed()
    order = np.random.default_rng(seed).permutation(len(rel.subsets))[:200]
    t = _clock()
    for i in order:
        rel.marginal(rel.subsets[int(i)])
    out["marginal_200"] = _since(t)
    out["bytes"] = os.path.getsize(rel.store.path)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="8 attributes, 2,000 records, one run")
    ap.add_argument("--d", type=int, default=40)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--label", default="", help="a name for this checkout in the results")
    ap.add_argument("--out", default=str(RESULTS / "spill_integrity.json"))
    args = ap.parse_args(argv)
    d, records, repeat = (8, 2_000, 1) if args.smoke else (args.d, args.records, args.repeat)
    _instrument()
    rows = []
    for delta, kind in (
        (1e-6, "(eps, delta): appended integers"),
        (0.0, "pure eps: sums in place"),
    ):
        runs = []
        for r in range(repeat):
            with tempfile.TemporaryDirectory() as spill:
                runs.append(_case(d, records, delta, spill, seed=r))
        row = {"case": f"{d}x10, all 3-way, {kind}", "spill_MiB": runs[0]["bytes"] / 2**20}
        for k in ("release", "read_all", "marginal_200"):
            row[f"{k}_wall_s"] = statistics.median(x[k][0] for x in runs)
            row[f"{k}_cpu_s"] = statistics.median(x[k][1] for x in runs)
        for k in ("release", "read_all"):
            row[f"{k}_in_sealed_file_cpu_s"] = statistics.median(x[f"{k}_sealed"][0] for x in runs)
            row[f"{k}_macs_cpu_s"] = statistics.median(x[f"{k}_sealed"][1] for x in runs)
        rows.append(row)
        print(
            f"{row['case']:45s} spill {row['spill_MiB']:7.1f} MiB  CPU s (wall s): release "
            f"{row['release_cpu_s']:.2f} ({row['release_wall_s']:.2f})  read all "
            f"{row['read_all_cpu_s']:.2f} ({row['read_all_wall_s']:.2f})  200 marginals "
            f"{row['marginal_200_cpu_s']:.3f} ({row['marginal_200_wall_s']:.3f}); in the sealed "
            f"file: release {row['release_in_sealed_file_cpu_s']:.2f} (MACs "
            f"{row['release_macs_cpu_s']:.2f}), read all {row['read_all_in_sealed_file_cpu_s']:.2f} "
            f"(MACs {row['read_all_macs_cpu_s']:.2f})",
            flush=True,
        )
    if args.smoke:
        return 0
    out = Path(args.out)
    data = json.loads(out.read_text()) if out.exists() else {}
    data[args.label or "run"] = {
        "rows": rows,
        "repeat": repeat,
        "records": records,
        "load": os.getloadavg(),
        "machine": platform.platform(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
