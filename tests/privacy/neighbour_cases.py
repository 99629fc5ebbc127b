"""Neighbouring datasets at every internal limit of the selection code (issue 21).

Shared by ``tests/privacy/test_neighbour_limits.py`` and ``benchmarks/neighbour_limits.py``.

A *case* is a selection method (every entry of :data:`matmech.svt.select.METHODS`, plus the
two vector selections of :data:`matmech.svt.vector.VECTOR_METHODS` forced with
``vector=True``; the free-gap methods run with ``vector=False`` so that each mechanism is
covered once) x a path (``select_rows`` on a histogram, ``release(x, W, select=...)`` on a
histogram, ``release(tables, W, select=...)`` on the factored path) x a workload. A *pair*
is the dataset with 2**k - 1 records in one cell against its neighbour with 2**k, both within
the same declaration ``max_records``; :func:`run_side` runs one side with a fresh budget and
the same seeded rng, and returns everything a neighbour could see apart from the noise.

The limits k: the int64 grid arithmetic refused |value| / grid >= 2**60 (the k where that
happened before issue 21 depends on the grid: :func:`old_limits` recomputes it from the
calibration without a declared bound), exact float sums stop at 2**53 (outside every
declaration: max_records <= 2**50), the default declaration is 2**32, record totals are
summed in 2**31 halves, the samplers' scale limits sit at 2**46 - 2**48, the scan's chunks at
2**12 / 2**20 / 2**22 candidates, and max_records itself ends at 2**50.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import matmech as mm
from matmech.linalg.terms import marginal_workload
from matmech.linalg.linop import Scaled
from matmech.svt.calibration import svt_budget
from matmech.svt.gap_calibration import gap_calibration
from matmech.svt.select import entry_range, row_noise_rule
from matmech.svt.methods import METHODS
from matmech.svt.vector import (
    VECTOR_METHODS,
    joint_sensitivity,
    prefer_vector,
    vector_calibration,
)
from matmech.workloads import identity, prefix

#: (name, select_rows method, vector option): every method as a user calls it (vector="auto"),
#: the two free-gap methods forced to their [DWZK19] mechanism and to the vector selection.
SELECTIONS = (
    [(m, m, "auto") for m in METHODS]
    + [(f"{m}(vector=False)", m, False) for m in VECTOR_METHODS]
    + [(vm, m, True) for m, vm in VECTOR_METHODS.items()]
)
PATHS = ("select_rows", "release", "factored")
#: The limits every pair is run at (see the module docstring), before adding each case's own.
BASE_KS = (1, 2, 12, 20, 22, 27, 28, 29, 31, 32, 33, 44, 45, 46, 47, 48, 49, 50)
C, EPS, EPS_TOTAL, THRESHOLD = 2, 1.0, 2.0, 100.0
#: From here on the one big cell decides the selection whatever the noise (>= 8191 against
#: noise scales of at most ~10 and a threshold of 100): the rows are compared too.
DECISIVE_K = 14


@dataclass(frozen=True)
class Case:
    name: str  # selection name (a method or a vector mechanism)
    method: str
    vector: object
    path: str
    workload: str

    @property
    def label(self):
        return f"{self.name}/{self.path}/{self.workload}"


def workloads(path):
    """{name: W} per path: a real-valued one (its values are snapped to the grid) and an
    integer one; the factored path takes marginal workloads (the issue's weight 0.5 and 1)."""
    if path == "factored":
        return {
            "marginal(64x2)*0.5": marginal_workload((64, 2), [(0,)], weights=[0.5]),
            "marginals(16x2)": marginal_workload((16, 2), [(0,), (0, 1)]),
        }
    return {"identity(64)*0.5": Scaled(identity(64), 0.5), "prefix(16)": prefix(16)}


def cases():
    out = []
    for path in PATHS:
        for wname in workloads(path):
            for name, method, vector in SELECTIONS:
                out.append(Case(name, method, vector, path, wname))
    return out


def _selection_params(case):
    """(rows, largest |entry|, row sensitivity, monotonic, integer values, joint sensitivity) of
    the case's workload: what the selection's calibration reads (add/remove neighbours)."""
    W = workloads(case.path)[case.workload]
    if (
        case.path == "factored"
    ):  # marginals: 0/1 cells times the term's weight, one cell per term per column
        w = np.abs(np.asarray(W.weights, dtype=np.float64))
        rows = sum(math.prod(W.domain[i] for i in s) for s in W.subsets)
        integer = all(float(v).is_integer() for v in W.weights)
        return rows, float(w.max()), float(w.max()), True, integer, float(w.sum())
    lo, hi = entry_range(W)
    sens, mono = row_noise_rule(W, "auto", "add_remove")
    return W.shape[0], max(abs(lo), abs(hi)), sens, mono, W.integer_valued(), joint_sensitivity(W)


def old_limits(case):
    """The k at which the grid of the run (as calibrated before issue 21, with no declared
    bound) overflowed: |value| / grid >= 2**60 for 2**k records in the cell (k <= 50 only)."""
    if case.method == "em":
        return set()
    rows, entry, sens, mono, integer, joint = _selection_params(case)
    vector = case.vector is True or (
        case.vector == "auto"
        and prefer_vector(
            case.method,
            c=C,
            eps=EPS,
            row_sensitivity=sens,
            joint=joint,
            monotonic=mono,
            n_values=rows,
            integer_values=integer,
        )
    )  # the choice before issue 21 (no declared bound)
    if vector:
        g = vector_calibration(
            VECTOR_METHODS[case.method],
            c=C,
            eps=EPS,
            sensitivity=joint,
            n_values=rows,
            integer_values=integer,
        ).grid
    elif case.method == "svt":
        g = svt_budget(c=C, eps=EPS, sensitivity=sens, monotonic=mono, integer_values=integer).grid
    else:
        g = gap_calibration(
            case.method,
            c=C,
            eps=EPS,
            sensitivity=sens,
            monotonic=mono,
            integer_values=integer,
            n_candidates=rows if case.method == "adaptive-svt" else 0,
        ).grid
    k = math.ceil(60 + math.log2(g) - math.log2(entry))
    return {j for j in (k - 1, k, k + 1) if 1 <= j <= 50}


def ks(case):
    return sorted(set(BASE_KS) | old_limits(case))


def _select(case):
    opts = dict(method=case.method, c=C, eps=EPS, vector=case.vector)
    if case.method in ("svt", "svt-gap", "adaptive-svt"):
        opts["threshold"] = THRESHOLD
    return opts


def declaration(case, k):
    """The declared max_records of a pair: the widest (2**50) on the select_rows path, the
    tightest that holds both neighbours (2**k) on the release paths."""
    return 2**50 if case.path == "select_rows" else 2**k


def run_side(case, k, records, *, seed=0, strategy="auto"):
    """Run one side (``records`` in cell 0, none elsewhere) → a dict of everything but the noise
    (and the noisy values): outcome, exception, rows, mechanism, shapes, notes, spends.
    ``strategy``: the histogram release's strategy ("auto" chooses one for the selected rows)."""
    rng = np.random.default_rng(seed)
    budget = mm.PrivacyBudget(10.0)
    max_records = declaration(case, k)
    out = {}
    try:
        if case.path == "factored":
            W = workloads("factored")[case.workload]
            table = np.zeros(W.domain, dtype=np.int64)
            table[0, 0] = records
            r = mm.release(
                {(0, 1): table},
                W,
                EPS_TOTAL,
                select=_select(case),
                budget=budget,
                rng=rng,
                max_records=max_records,
            )
            out.update(_release_fields(r))
        else:
            W = workloads(case.path)[case.workload]
            x = np.zeros(W.shape[1], dtype=np.int64)
            x[0] = records
            if case.path == "select_rows":
                opts = _select(case)
                s = mm.select_rows(W, x, budget=budget, rng=rng, max_records=max_records, **opts)
                out.update(
                    outcome="returns",
                    rows=tuple(int(i) for i in s.rows),
                    mechanism=s.mechanism,
                    stopped=s.stopped,
                    n_rows=len(s.rows),
                    eps=s.eps,
                )
            else:
                r = mm.release(
                    x,
                    W,
                    EPS_TOTAL,
                    select=_select(case),
                    budget=budget,
                    rng=rng,
                    max_records=max_records,
                    strategy=strategy,
                )
                out.update(_release_fields(r))
    except Exception as exc:  # noqa: BLE001 - the outcome itself is what is compared
        out.update(outcome="raises", error=f"{type(exc).__name__}: {exc}")
    out["spent"] = budget.spent
    out["ledger"] = tuple((e.what, e.eps, e.delta) for e in budget.ledger)
    return out


def _release_fields(r):
    return dict(
        outcome="returns",
        rows=tuple(int(i) for i in r.selected),
        mechanism=r.selection.mechanism,
        stopped=r.selection.stopped,
        n_rows=len(r.selected),
        answers_shape=r.answers.shape,
        std=tuple(np.round(r.std, 12)),
        strategy_name=r.strategy_name,
        note=r.strategy_note,
        eps=r.eps,
        eps_select=r.eps_select,
    )


#: Fields that do not depend on the noise whatever the data; the rest (rows and what follows
#: from them) are compared from :data:`DECISIVE_K` on, where the big cell decides the selection.
ALWAYS = ("outcome", "error", "spent", "ledger", "eps", "eps_select")


def compare(case, k, seed=0, strategy="auto"):
    """(left, right, differences): the pair 2**k - 1 | 2**k and the fields that differ."""
    left = run_side(case, k, 2**k - 1, seed=seed, strategy=strategy)
    right = run_side(case, k, 2**k, seed=seed, strategy=strategy)
    keys = set(left) | set(right)
    fields = (
        keys
        if k >= DECISIVE_K
        else [f for f in ALWAYS if f in keys] + (["mechanism"] if "mechanism" in keys else [])
    )
    diff = sorted(f for f in fields if left.get(f) != right.get(f))
    return left, right, diff


# -- the reproducers of issue 21 (one side each: side 0 is 2**k - 1 records, side 1 is 2**k) ----


def repro_scaled_identity(side, budget):
    """select_rows(Scaled(identity(4096), 0.5), x, c=1, eps=1, method="topc-gap"), x0 = 2**28 - 1 vs 2**28."""
    x = np.zeros(4096, dtype=np.int64)
    x[0] = 2**28 - 1 + side
    return mm.select_rows(
        Scaled(identity(4096), 0.5),
        x,
        c=1,
        eps=1,
        method="topc-gap",
        budget=budget,
        rng=np.random.default_rng(5),
    )


def repro_factored_marginal(side, budget):
    """factored marginal_workload((2**20, 2), [(0,)], weights=[0.5]), topc-gap, 2**20 - 1 vs 2**20 records in one cell."""
    W = marginal_workload((2**20, 2), [(0,)], weights=[0.5])
    t = np.zeros((2**20,), dtype=np.int64)
    t[0] = 2**20 - 1 + side
    return mm.release(
        {(0,): t},
        W,
        2.0,
        select=dict(method="topc-gap", c=1, eps=1.0),
        budget=budget,
        rng=np.random.default_rng(5),
    )


def repro_svt_2_50(side, budget):
    """plain SVT, prefix(16), max_records=2**50, 2**45 - 1 vs 2**45 records in one cell."""
    x = np.zeros(16, dtype=np.int64)
    x[3] = 2**45 - 1 + side
    return mm.select_rows(
        prefix(16),
        x,
        c=1,
        eps=1.0,
        threshold=10.0,
        method="svt",
        budget=budget,
        max_records=2**50,
        rng=np.random.default_rng(5),
    )


def repro_threshold(side, budget):
    """select_rows(prefix(16), x, c=3, eps=1.0, threshold=1e300, method="svt") (one dataset)."""
    return mm.select_rows(
        prefix(16),
        np.arange(16),
        c=3,
        eps=1.0,
        threshold=1e300,
        method="svt",
        budget=budget,
        rng=np.random.default_rng(5),
    )


REPRODUCERS = [repro_scaled_identity, repro_factored_marginal, repro_svt_2_50, repro_threshold]


def run_reproducer(fn, side):
    """{outcome, rows, error, spent} of one side of a reproducer, with a fresh budget of 10."""
    budget = mm.PrivacyBudget(10.0)
    try:
        r = fn(side, budget)
        rows = r.rows if hasattr(r, "rows") else r.selected
        out = dict(outcome="returns", rows=[int(i) for i in rows])
    except Exception as exc:  # noqa: BLE001 - the outcome itself is reported
        out = dict(outcome="raises", error=f"{type(exc).__name__}: {exc}")
    out["spent"] = budget.spent[0]
    return out
