"""Synthetic-data peers on AIM's datasets: AIM and MST (private-pgm) and OpenDP's ContingencyTable.

The peers' side of issue 35's benchmark. Datasets nltcs, adult, titanic, salary of
``ryan112358/hd-datasets`` (``clean/<name>.csv`` and ``clean/<name>-domain.json``, already
coded 0..k-1; never committed here); workload: every 3-way marginal of at most 10,000 cells
(AIM's evaluation, McKenna, Mullins, Sheldon, Miklau, VLDB 2022); ε ∈ {1, 0.1, 10} in that
order of priority, δ = 1e-9; 5 trials.

Privacy, the same for every method: add/remove one record, and ρ-zCDP with ρ = 1/(2σ²) for
the σ of ``matmech.gaussian_sigma(ε, δ, 1)``, i.e. the largest ρ whose Canonne-Kamath-Steinke
conversion (NeurIPS 2020, Cor. 13) gives (ε, δ)-DP. private-pgm's ``cdp_rho`` is the same
bound (its value is recorded beside ours in each AIM run, ``info.peer_rho``). Each method is
handed that ρ: AIM through ``mech.rho``, MST through the ``cdp_rho`` name its module calls,
OpenDP as ``dp.loss_of(rho=ρ)`` (all keys declared, so OpenDP itself needs no δ).

Metric (DESIGN.md §3, AIM's): the mean over the workload's marginals of ½‖μ_true − μ_est‖₁ / N,
N the true record count, μ_est in counts. ``err_records``: μ_est from the synthetic records
(the error AIM's paper reports, every method has it); ``err_table``: from the fitted model's
marginals where the method returns its model (AIM, OpenDP). Cells outside the declared domain
(OpenDP adds a null category per column) count as error with true count 0. Seconds: wall and
CPU of the mechanism call (fit and synthetic records) in a fresh process per run (so JAX's
compilation is in it), plus the whole child process (imports, data, metric).

Peers run in their own virtual environments under the peers folder (``--peers-dir`` or
$MATMECH_PEERS_DIR); a method whose environment is missing is skipped with a one-line reason,
and with no peer at all the script prints one line and exits 0 (CI has none). Layout and pins
(the pair that works: private-pgm's repository at one commit, its ``mechanisms/`` with its own
``src/mbi``, on the JAX of that summer; mbi 2.0.0 from the package index dropped the
``estimation.mirror_descent`` function these scripts call)::

    PEERS=/path/to/peers; cd $PEERS
    git clone https://github.com/ryan112358/private-pgm && git -C private-pgm checkout 4d2b3c5
    python3 -m venv venv-mbi && venv-mbi/bin/pip install ./private-pgm matplotlib \\
        jax==0.7.0 jaxlib==0.7.0 chex==0.1.90 optax==0.2.5 pandas==2.3.1 numpy==2.3.2 \\
        scipy==1.16.1 networkx==3.5
    python3 -m venv venv-opendp && venv-opendp/bin/pip install "opendp[mbi]==0.16.0" pandas

(OpenDP 0.16 pins mbi 1.1.0 from the package index and runs on current JAX; its synthetic
records need pandas, which it does not declare.) Data:
``--data-dir`` or $MATMECH_HD_DATASETS, the ``clean/`` folder of a hd-datasets checkout.

    python benchmarks/synth_peers.py --peers-dir $PEERS --data-dir /path/to/hd-datasets/clean
    python benchmarks/synth_peers.py --smoke      # titanic, ε = 1, one trial, time-capped

Runs go trial-major within each ε (a first trial on every dataset before the second), one
process each; the JSON is rewritten after every run and ``--resume`` skips runs already saved,
so a long grid can be run in pieces. A run over ``--timeout`` is killed and recorded; the
same (method, dataset, ε) is not tried again in later trials. Methods are a registry
(``METHODS``): adding one (matmech's own release, run in this interpreter with ``venv=None``)
is one entry whose ``prepare`` returns the timed call. Writes benchmarks/results/
synth_peers.{json,md} (``--smoke``: synth_peers_smoke.{json,md}).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DATASETS = ("nltcs", "adult", "titanic", "salary")
EPSILONS = (1.0, 0.1, 10.0)  # the order of priority
DELTA = 1e-9
MAX_CELLS = 10_000
TRIALS = 5
PEERS_ENV = "MATMECH_PEERS_DIR"
DATA_ENV = "MATMECH_HD_DATASETS"
PRIVATE_PGM_COMMIT = "4d2b3c566b148da3ef800ce76e6189c548f2da22"

# ------------------------------------------------------------------ data, workload, metric
# numpy and the standard library only: this part runs in every method's environment.


def load(data_dir: Path, name: str) -> tuple[dict[str, int], dict[str, np.ndarray]]:
    """The declared domain (attribute -> size, the JSON's order) and the coded columns."""
    domain = json.loads((data_dir / f"{name}-domain.json").read_text())
    path = data_dir / f"{name}.csv"
    with path.open() as f:
        header = f.readline().strip().split(",")
    x = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    if sorted(header) != sorted(domain):
        raise ValueError(f"{path}: columns {header} are not the domain's {list(domain)}")
    cols = {a: x[:, header.index(a)] for a in domain}
    for a, k in domain.items():
        if cols[a].min() < 0 or cols[a].max() >= k:
            raise ValueError(f"{path}: column {a!r} has codes outside 0..{k - 1}")
    return domain, cols


def workload(domain: dict[str, int]) -> list[tuple[str, ...]]:
    """Every 3-way marginal of at most MAX_CELLS cells, in the domain's attribute order."""
    return [
        c for c in itertools.combinations(domain, 3) if math.prod(domain[a] for a in c) <= MAX_CELLS
    ]


def marginal(cols: dict[str, np.ndarray], shape: tuple[int, ...], clique) -> np.ndarray:
    """The count table of ``clique`` (axes in its order) over ``shape``."""
    idx = np.ravel_multi_index([cols[a] for a in clique], shape)
    return np.bincount(idx, minlength=math.prod(shape)).reshape(shape).astype(float)


def tv_error(truth: np.ndarray, est: np.ndarray, n: int) -> float:
    """½‖μ_true − μ_est‖₁ / N; an estimate may carry cells past the domain (true count 0)."""
    est = np.asarray(est, dtype=float)
    if est.ndim != truth.ndim or any(e < t for e, t in zip(est.shape, truth.shape)):
        raise ValueError(f"estimate of shape {est.shape} does not cover the table {truth.shape}")
    pad = np.zeros(est.shape)
    pad[tuple(slice(0, t) for t in truth.shape)] = truth
    return 0.5 * float(np.abs(pad - est).sum()) / n


def workload_error(cols, domain, cliques, est: Callable[[tuple[str, ...]], np.ndarray]) -> float:
    """AIM's workload error (DESIGN.md §3): mean over ``cliques`` of :func:`tv_error`."""
    n = len(next(iter(cols.values())))
    errs = [tv_error(marginal(cols, tuple(domain[a] for a in c), c), est(c), n) for c in cliques]
    return float(np.mean(errs))


def records_marginals(records: dict[str, np.ndarray], domain):
    """Marginals of synthetic records; codes past the domain (a peer's null) get one extra cell."""
    shape = {a: max(domain[a], int(records[a].max(initial=-1)) + 1) for a in domain}
    return lambda c: marginal(records, tuple(shape[a] for a in c), c)


def rho_for(eps: float, delta: float) -> float:
    """The ρ every method gets: 1/(2σ²), σ = matmech.gaussian_sigma(ε, δ, 1) (CKS Cor. 13)."""
    from matmech import gaussian_sigma

    return 0.5 / gaussian_sigma(eps, delta, 1.0) ** 2


# ------------------------------------------------------------------ methods (the registry)


@dataclass(frozen=True)
class Fit:
    """What a method released: its model's marginals (counts, or None) and synthetic records."""

    table: Callable[[tuple[str, ...]], np.ndarray] | None
    records: dict[str, np.ndarray] | None
    info: dict


@dataclass(frozen=True)
class Method:
    """One column of the benchmark.

    ``prepare(cols=, domain=, cliques=, rho=, eps=, delta=, seed=, peers=, opts=)`` runs in the
    method's own interpreter (``venv`` under the peers folder, or this one when None), does the
    imports and data set-up, and returns the call that is timed, which returns a :class:`Fit`.
    ``needs``: paths under the peers folder that must exist.
    """

    name: str
    label: str
    venv: str | None
    needs: tuple[str, ...]
    prepare: Callable[..., Callable[[], Fit]]
    pins: str

    def python(self, peers: Path | None) -> Path:
        if self.venv is None:
            return Path(sys.executable)
        if peers is None:
            raise ValueError(f"{self.name} runs in {self.venv} under a peers folder; none given")
        return peers / self.venv / "bin" / "python"

    def missing(self, peers: Path | None) -> str | None:
        """Why this method cannot run here (one line), or None."""
        if self.venv is None:
            return None
        if peers is None:
            return f"no peers folder (--peers-dir or ${PEERS_ENV})"
        for p in (f"{self.venv}/bin/python", *self.needs):
            if not (peers / p).exists():
                return f"{peers / p} is missing"
        return None


def _mbi_dataset(cols, domain):
    import pandas as pd
    from mbi import Dataset, Domain

    return Dataset(pd.DataFrame({a: cols[a] for a in domain}), Domain.fromdict(domain))


def _prepare_aim(*, cols, domain, cliques, rho, eps, delta, seed, peers, opts):
    """AIM (private-pgm's mechanisms/aim.py, its defaults unless --aim-* say otherwise)."""
    sys.path.insert(0, str(peers / "private-pgm" / "mechanisms"))
    from aim import AIM

    data = _mbi_dataset(cols, domain)

    def run() -> Fit:
        np.random.seed(seed)  # AIM draws from numpy's global generator
        mech = AIM(
            eps, delta, max_model_size=opts["aim_max_model_size"], max_iters=opts["aim_max_iters"]
        )
        peer_rho = float(mech.rho)
        mech.rho = rho
        model, synth = mech.run(data, [(c, 1.0) for c in cliques])
        return Fit(
            table=lambda c: np.asarray(model.project(c).datavector(flatten=False)),
            records={a: synth.df[a].to_numpy() for a in domain},
            info={"peer_rho": peer_rho, "model_cliques": len(model.cliques)},
        )

    return run


def _prepare_mst(*, cols, domain, cliques, rho, eps, delta, seed, peers, opts):
    """MST (private-pgm's mechanisms/mst.py): its records only (its model is on a compressed
    domain)."""
    sys.path.insert(0, str(peers / "private-pgm" / "mechanisms"))
    import mst

    peer_rho = float(mst.cdp_rho(eps, delta))
    mst.cdp_rho = lambda *_: rho  # the name MST() calls: hand it the common ρ
    data = _mbi_dataset(cols, domain)

    def run() -> Fit:
        np.random.seed(seed)
        synth = mst.MST(data, eps, delta)
        return Fit(None, {a: synth.df[a].to_numpy() for a in domain}, {"peer_rho": peer_rho})

    return run


def _prepare_opendp(*, cols, domain, cliques, rho, eps, delta, seed, peers, opts):
    """OpenDP's ContingencyTable, its default algorithm (AIM) on the workload as Count queries,
    every column's keys declared (0..k-1); its noise comes from OpenDP's own sampler."""
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    lf = pl.LazyFrame({a: cols[a] for a in domain})
    keys = {a: list(range(k)) for a, k in domain.items()}

    def run() -> Fit:
        np.random.seed(seed)  # only the records' rounding draws from numpy
        ctx = dp.Context.compositor(
            data=lf, privacy_unit=dp.unit_of(contributions=1), privacy_loss=dp.loss_of(rho=rho)
        )
        algorithm = dp.mbi.AIM(queries=[dp.mbi.Count(by=c) for c in cliques])
        table = ctx.query(rho=rho).contingency_table(keys=keys, algorithm=algorithm).release()
        synth = table.synthesize()
        # a null key (OpenDP adds one per column) is coded k: outside the domain, true count 0
        records = {a: synth[a].fill_null(domain[a]).to_numpy().astype(np.int64) for a in domain}
        return Fit(lambda c: np.asarray(table.project(list(c))), records, {})

    return run


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "aim",
            "AIM",
            "venv-mbi",
            ("private-pgm/mechanisms/aim.py",),
            _prepare_aim,
            f"private-pgm {PRIVATE_PGM_COMMIT[:7]} (mechanisms/ + its src/mbi), jax 0.7.0",
        ),
        Method(
            "mst",
            "MST",
            "venv-mbi",
            ("private-pgm/mechanisms/mst.py",),
            _prepare_mst,
            f"private-pgm {PRIVATE_PGM_COMMIT[:7]} (mechanisms/ + its src/mbi), jax 0.7.0",
        ),
        Method(
            "opendp",
            "OpenDP ContingencyTable",
            "venv-opendp",
            (),
            _prepare_opendp,
            "opendp 0.16.0 (mbi 1.1.0)",
        ),
    )
}

# ------------------------------------------------------------------ one run (child process)


def child(spec: dict) -> None:
    """Run one (method, dataset, ε, trial) and print ``RESULT <json>`` last."""
    method = METHODS[spec["method"]]
    domain, cols = load(Path(spec["data_dir"]), spec["dataset"])
    cliques = workload(domain)
    run = method.prepare(
        cols=cols,
        domain=domain,
        cliques=cliques,
        rho=spec["rho"],
        eps=spec["eps"],
        delta=spec["delta"],
        seed=spec["seed"],
        peers=Path(spec["peers"]) if spec["peers"] else None,
        opts=spec["opts"],
    )
    t0, c0 = time.perf_counter(), time.process_time()
    fit = run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {"wall_fit": wall, "cpu_fit": cpu, "queries": len(cliques), "info": fit.info}
    if fit.records is not None:
        out["err_records"] = workload_error(
            cols, domain, cliques, records_marginals(fit.records, domain)
        )
        out["synth_rows"] = len(next(iter(fit.records.values())))
    if fit.table is not None:
        out["err_table"] = workload_error(cols, domain, cliques, fit.table)
    out["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print("RESULT " + json.dumps(out), flush=True)


# ------------------------------------------------------------------ the grid (parent)


def run_one(
    method: Method, spec: dict, timeout: float, peers: Path | None, *, script: str | None = None
) -> dict:
    """One child process (``script --child``, default this one); its result, or status
    timeout / error, with seconds and load."""
    env = dict(os.environ)
    if method.venv is not None:  # a peer: none of this checkout on its path
        env.pop("PYTHONPATH", None)
        env["JAX_PLATFORMS"] = "cpu"
    argv = [str(method.python(peers)), script or __file__, "--child", json.dumps(spec)]
    row = {k: spec[k] for k in ("method", "dataset", "eps", "delta", "rho", "trial", "seed")}
    row["load_before"] = round(os.getloadavg()[0], 2)
    row["timeout_s"] = timeout
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the child we started, and anything it started
        out, err = p.communicate()
        row["status"] = "timeout"
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    row["wall_total"] = time.perf_counter() - t0
    row["cpu_total"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    row["load_after"] = round(os.getloadavg()[0], 2)
    results = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if row.get("status") != "timeout":
        if p.returncode == 0 and results:
            row.update(json.loads(results[-1][len("RESULT ") :]), status="ok")
        else:
            row["status"] = "error"
            row["error"] = (err or out).strip().splitlines()[-3:]
    return row


def plan(methods, datasets, epsilons, trials) -> list[tuple[str, str, float, int]]:
    """(method, dataset, ε, trial) in the order of priority: ε, then trial, then dataset."""
    return [
        (m, d, e, t) for e in epsilons for t in range(trials) for d in datasets for m in methods
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers-dir", default=os.environ.get(PEERS_ENV))
    ap.add_argument("--data-dir", default=os.environ.get(DATA_ENV))
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    ap.add_argument("--eps", nargs="+", type=float, default=list(EPSILONS))
    ap.add_argument("--trials", type=int, default=TRIALS)
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    ap.add_argument("--hours", type=float, default=None, help="start no run after this long")
    ap.add_argument("--resume", action="store_true", help="keep saved runs, run the rest")
    ap.add_argument("--smoke", action="store_true", help="titanic, ε = 1, one trial, 600 s cap")
    ap.add_argument(
        "--aim-max-iters",
        type=int,
        help="AIM's mirror-descent iterations (its default 1000; --smoke: 100)",
    )
    ap.add_argument("--aim-max-model-size", type=float, default=80.0, help="AIM's default: 80")
    ap.add_argument("--render", action="store_true", help="only rewrite the .md from the JSON")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return 0
    stem = "synth_peers_smoke" if args.smoke else "synth_peers"
    if args.render:
        render(stem)
        return 0
    if args.smoke:
        args.datasets, args.eps, args.trials = ["titanic"], [1.0], 1
        args.timeout = min(args.timeout, 600.0)
    if args.aim_max_iters is None:
        args.aim_max_iters = 100 if args.smoke else 1000
    peers = Path(args.peers_dir) if args.peers_dir else None
    why = {n: METHODS[n].missing(peers) for n in args.methods}
    methods = {n: METHODS[n] for n in args.methods if not why[n]}
    if not methods:  # one line: CI has no peers
        print(f"synth_peers: skipped: {'; '.join(dict.fromkeys(why.values()))}")  # type: ignore[arg-type]
        return 0
    for n in args.methods:
        if why[n]:
            print(f"synth_peers: {n} skipped: {why[n]}")
    data_dir = Path(args.data_dir) if args.data_dir else None
    if data_dir is None or not all((data_dir / f"{d}-domain.json").exists() for d in args.datasets):
        print(f"synth_peers: skipped: no hd-datasets clean/ folder (--data-dir or ${DATA_ENV})")
        return 0

    path = RESULTS / f"{stem}.json"
    RESULTS.mkdir(exist_ok=True)
    if not args.resume:
        path.unlink(missing_ok=True)
    runs = _saved(path)["runs"]
    done = {_key(r) for r in runs if r["status"] != "error"}  # an error is tried again
    given_up = {(r["method"], r["dataset"], r["eps"]) for r in runs if r["status"] == "timeout"}
    opts = {"aim_max_iters": args.aim_max_iters, "aim_max_model_size": args.aim_max_model_size}
    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "delta": DELTA,
        "max_cells": MAX_CELLS,
        "trials": args.trials,
        "opts": opts,
        "pins": {n: m.pins for n, m in methods.items()},
        "rho_rule": "1/(2 sigma^2), sigma = matmech.gaussian_sigma(eps, delta, 1) (CKS Cor. 13)",
    }
    rhos = {e: rho_for(e, DELTA) for e in args.eps}
    start = time.perf_counter()
    for m, d, e, t in plan(list(methods), args.datasets, args.eps, args.trials):
        if (m, d, e, t) in done:
            continue
        if (m, d, e) in given_up:
            continue
        if args.hours is not None and time.perf_counter() - start > 3600 * args.hours:
            print("synth_peers: --hours reached; the rest is left for --resume")
            break
        spec = {
            "method": m,
            "dataset": d,
            "data_dir": str(data_dir),
            "eps": e,
            "delta": DELTA,
            "rho": rhos[e],
            "trial": t,
            "seed": 1000 * t + DATASETS.index(d),
            "peers": str(peers) if peers else None,
            "opts": opts,
        }
        row = run_one(methods[m], spec, args.timeout, peers)
        runs.append(row)
        if row["status"] == "timeout":
            given_up.add((m, d, e))
        print(_line(row), flush=True)
        _append(path, meta, row)
    if path.exists():
        render(stem)
    return 0


def _key(r: dict) -> tuple:
    return (r["method"], r["dataset"], r["eps"], r["trial"])


def _saved(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {"meta": {}, "runs": []}


def _append(path: Path, meta: dict, row: dict) -> None:
    """Add ``row`` to the saved JSON under a lock: pieces of the grid (disjoint ``--methods``
    or ``--datasets``, each with ``--resume``) may run at once and share the file."""
    import fcntl
    import tempfile

    with open(Path(tempfile.gettempdir()) / f"{path.stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = _saved(path)
        pins = {**saved["meta"].get("pins", {}), **meta["pins"]}
        runs = [r for r in saved["runs"] if _key(r) != _key(row)] + [row]
        saved = {"meta": {**saved["meta"], **meta, "pins": pins}, "runs": runs}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(saved, indent=1) + "\n")
        tmp.replace(path)


def _line(r: dict) -> str:
    errs = " ".join(f"{k}={r[k]:.4f}" for k in ("err_records", "err_table") if k in r)
    return (
        f"{r['method']:7s} {r['dataset']:8s} eps={r['eps']:<4g} trial={r['trial']} "
        f"{r['status']:7s} {errs} wall={r['wall_total']:.0f}s cpu={r['cpu_total']:.0f}s "
        f"load={r['load_before']}"
    )


def _fmt_err(rs, key) -> str:
    v = [r[key] for r in rs if r["status"] == "ok" and key in r]
    if not v:
        return "-"
    sd = f" ± {statistics.stdev(v):.3f}" if len(v) > 1 else ""
    return f"{statistics.mean(v):.3f}{sd} ({len(v)})"


def _fmt_time(rs, key) -> str:
    """Median over the runs that finished; a killed run shows what it had used (its whole
    process: wall for the wall columns, CPU for the CPU column)."""
    ok = [r[key] for r in rs if r["status"] == "ok" and key in r]
    out = f"{statistics.median(ok):.0f}" if ok else ""
    if any(r["status"] == "timeout" for r in rs):
        used = "cpu_total" if key.startswith("cpu") else "wall_total"
        cap = max(r[used] for r in rs if r["status"] == "timeout")
        out += ("; " if out else "") + f"killed at {cap:.0f}"
    if any(r["status"] == "error" for r in rs):
        out += ("; " if out else "") + "error"
    return out or "-"


def render(stem: str = "synth_peers") -> None:
    """benchmarks/results/<stem>.md from the saved JSON."""
    saved = json.loads((RESULTS / f"{stem}.json").read_text())
    meta, runs = saved["meta"], saved["runs"]
    names = [m for m in METHODS if any(r["method"] == m for r in runs)]
    cells = sorted(
        {(r["dataset"], r["eps"]) for r in runs},
        key=lambda k: (EPSILONS.index(k[1]) if k[1] in EPSILONS else 9, DATASETS.index(k[0])),
    )
    loads = [r["load_before"] for r in runs] + [r["load_after"] for r in runs]
    lines = [
        "# Synthetic-data peers on AIM's datasets (issue 35)",
        "",
        f"{meta['date']}, {meta['machine']}, load average {min(loads)}-{max(loads)} "
        f"(1 min, before/after each run). δ = {meta['delta']:g}; workload every 3-way marginal "
        f"of ≤ {meta['max_cells']:,} cells; ρ = {meta['rho_rule']}. Error: mean over the "
        "workload of ½‖μ_true − μ_est‖₁ / N (mean ± sd over trials, trials in brackets). "
        "Seconds: the mechanism call (fit + synthetic records), median over the runs that "
        "finished; a run past its wall-clock cap is killed and shows what it had used (whole "
        f"process). AIM options: {meta['opts']}. Pins: "
        + "; ".join(f"{k}: {v}" for k, v in meta["pins"].items())
        + "."
        + (f" Note: {meta['note']}." if meta.get("note") else ""),
        "",
        "## Workload error of the synthetic records",
        "",
        "| dataset | ε | " + " | ".join(METHODS[m].label for m in names) + " |",
        "|---|---|" + "---|" * len(names),
    ]

    def sel(d, e, m):
        return [r for r in runs if (r["dataset"], r["eps"], r["method"]) == (d, e, m)]

    for d, e in cells:
        errs = [_fmt_err(sel(d, e, m), "err_records") for m in names]
        lines.append(f"| {d} | {e:g} | " + " | ".join(errs) + " |")
    lines += [
        "",
        "## Details",
        "",
        "| dataset | ε | method | error, model tables | wall s | CPU s | whole process wall s "
        "| peak GiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d, e in cells:
        for m in names:
            rs = sel(d, e, m)
            if not rs:
                continue
            peaks = [r["peak_rss_gib"] for r in rs if "peak_rss_gib" in r]
            peak = f"{max(peaks):.2f}" if peaks else "-"
            lines.append(
                f"| {d} | {e:g} | {METHODS[m].label} | {_fmt_err(rs, 'err_table')} | "
                f"{_fmt_time(rs, 'wall_fit')} | {_fmt_time(rs, 'cpu_fit')} | "
                f"{_fmt_time(rs, 'wall_total')} | {peak} |"
            )
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
