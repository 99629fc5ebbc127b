"""The whole flow in one place: counts → strategy → measure → least squares → answers.

::

    x (histogram)   W (workload)
          │            │   choose strategy A from W, ε, δ only (no data)
          │            ▼
          │      plan: measured A_g, noise, grid;  per-answer variances (raises if A cannot answer W)
          ▼            │
    measure y = A_g x + z   ← the only step that reads x; charges the budget before any noise
          │
    x̂ = least squares (A_g, y)          ┐
    answers = W x̂, std = sqrt(var)      ┘ post-processing: no privacy cost

Every check (counts, shapes, ε/δ, budget type, whether A supports W) runs before the budget
is charged, so a failure spends nothing and draws nothing. Error bars are the exact
Matrix-Mechanism variances σ²·diag(W (A_gᵀA_g)⁺ Wᵀ) (Li et al., PODS 2010) for the matrix
actually measured and the variance of the discrete noise actually drawn; the 95% intervals
are the normal approximation answer ± 1.96·std (coverage can be slightly below 95% for an
answer that rests on very few Laplace draws).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from . import strategies as S
from .calibration import noise_variance
from .compare import domain_of, fixed_candidates
from .error import MAX_VARIANCE_ROWS, expected_error, per_query_variance, sensitivity
from .inference import least_squares, split_diagonal
from .intervals import Intervals
from .linop import Kron, LinOp, as_linop
from .mechanisms import (
    Measurement,
    RoundedDense,
    RoundedSparse,
    _check_budget,
    _check_neighbors,
    _check_privacy,
    _execute,
    check_counts,
    plan_measurement,
)
from .workloads import ranges

__all__ = ["Release", "release", "release_table", "choose_strategy", "Z95"]

#: Two-sided 95% normal quantile.
Z95 = 1.959963984540054
STRATEGY_NAMES = ("auto", "identity", "hierarchical", "haar", "optimize")


@dataclass(frozen=True, eq=False)
class Release:
    """Noisy answers to a workload with their analytic error bars.

    ``answers`` = W x̂; ``std`` the standard deviation of each answer; ``expected_error``
    their total variance Σ std² (squared counts); ``strategy`` the matrix actually
    measured, chosen as ``strategy_name`` (``strategy_note`` says how); ``eps``/``delta``
    what this release spent; ``budget_remaining`` what is left of the budget passed (or None).
    """

    answers: np.ndarray
    std: np.ndarray
    expected_error: float
    workload: LinOp = field(repr=False)
    strategy: LinOp = field(repr=False)
    strategy_name: str
    strategy_note: str
    eps: float
    delta: float
    neighbors: str
    budget_remaining: tuple | None
    measurement: Measurement = field(repr=False)
    estimate: np.ndarray = field(repr=False)

    @property
    def spent(self):
        """(ε, δ) spent by this release."""
        return (self.eps, self.delta)

    def interval(self, level=0.95):
        """(lower, upper) normal-approximation intervals answer ∓ z·std."""
        z = _z(level)
        return self.answers - z * self.std, self.answers + z * self.std

    def to_dict(self, *, labels=None, include_estimate=False):
        """A JSON-ready dict: the privacy spent, strategy, noise, and one row per query."""
        m = self.measurement
        out = {
            "eps": self.eps,
            "delta": self.delta,
            "neighbors": self.neighbors,
            "budget_remaining": None if self.budget_remaining is None else list(self.budget_remaining),
            "expected_error": self.expected_error,
            "rmse": math.sqrt(self.expected_error / self.answers.size),
            "strategy": {
                "name": self.strategy_name,
                "note": self.strategy_note,
                "type": type(self.strategy).__name__,
                "shape": list(self.strategy.shape),
                "rounded_to_grid": m.rounded,
            },
            "noise": {
                "distribution": m.noise,
                "scale": m.scale,
                "std": m.std,
                "grid": m.grid,
                "sensitivity": m.sensitivity,
                "secure_randomness": m.secure,
            },
            "queries": release_table(self, labels),
        }
        if include_estimate:
            out["estimate"] = self.estimate.tolist()
        return out

    def to_json(self, *, labels=None, include_estimate=False, **json_kwargs):
        """:meth:`to_dict` as a JSON string (keyword arguments go to ``json.dumps``)."""
        return json.dumps(self.to_dict(labels=labels, include_estimate=include_estimate), **json_kwargs)

    def __repr__(self):
        m = self.answers.size
        return (
            f"Release({m} answers, strategy={self.strategy_name!r}, eps={self.eps:g}, delta={self.delta:g}, "
            f"rmse={math.sqrt(self.expected_error / m):.4g})"
        )


def _z(level):
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if level == 0.95:
        return Z95
    from scipy.special import ndtri

    return float(ndtri(0.5 + level / 2))


def _default_labels(W):
    if isinstance(W, Intervals):
        lo, hi = W.bounds()
        return [f"[{a}, {b}]" for a, b in zip(lo.tolist(), hi.tolist())]
    return [f"q{i}" for i in range(W.shape[0])]


def release_table(release, labels=None, *, level=0.95):
    """One dict per query: ``query`` (label), ``answer``, ``std``, ``lower``, ``upper``.

    ``labels`` defaults to ``"[lo, hi]"`` for interval workloads and ``"q<i>"`` otherwise;
    the interval is answer ∓ z·std at ``level`` (normal approximation; default 95%).
    """
    if not isinstance(release, Release):
        raise TypeError(f"expected a Release, got {type(release).__name__}")
    m = release.answers.size
    labels = _default_labels(release.workload) if labels is None else list(labels)
    if len(labels) != m:
        raise ValueError(f"got {len(labels)} labels for {m} queries")
    lower, upper = release.interval(level)
    return [
        {"query": str(q), "answer": float(a), "std": float(s), "lower": float(lo), "upper": float(hi)}
        for q, a, s, lo, hi in zip(labels, release.answers, release.std, lower, upper)
    ]


# -- choosing the strategy (data-independent) ---------------------------------------------


def _per_attribute(W, make):
    dom = domain_of(W)
    return make(dom[0]) if len(dom) == 1 else S.kron(*[make(d) for d in dom])


def _optimiser_choice(W, eps, delta, neighbors):
    """advise(...).best or optimize(...).strategy when those modules exist, else None."""
    advise = _optional("advise")
    if advise is not None:
        best = advise(W, eps, delta).best
        A = best if isinstance(best, LinOp) else getattr(best, "strategy", None)
        if isinstance(A, LinOp):
            return A, f"chosen by matmech.advise ({getattr(best, 'name', type(A).__name__)})"
    optimize = _optional("optimize")
    if optimize is None:
        return None
    return optimize(W, eps, delta).strategy, "optimised by matmech.optimize"


def _optional(name):
    """matmech.<name>.<name> if that module exists (it is written separately), else None."""
    import importlib

    try:
        module = importlib.import_module(f".{name}", __package__)
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.{name}":
            raise  # the module exists but something it imports is missing
        return None
    return getattr(module, name)


def choose_strategy(W, eps, delta=0.0, *, strategy="auto", neighbors="add_remove"):
    """(A, name, note): the strategy to measure for W; reads no data.

    ``strategy``: a LinOp (used as is), ``"identity"``, ``"hierarchical"`` (b = 16, the
    branching Qardaji, Yang, Li, VLDB 2013 recommend with least squares; per attribute on a
    product domain), ``"haar"``, ``"optimize"`` (needs matmech.optimize), or ``"auto"``:
    matmech.advise / matmech.optimize when available, otherwise the fixed candidate
    (identity, hierarchical b ∈ {2,…,32}, Haar) with the least expected error.
    """
    W = as_linop(W)
    if isinstance(strategy, np.ndarray) or sp.issparse(strategy):
        strategy = as_linop(strategy)
    if isinstance(strategy, LinOp):
        return strategy, type(strategy).__name__, "given by the caller"
    if not isinstance(strategy, str) or strategy not in STRATEGY_NAMES:
        raise ValueError(f"strategy must be a LinOp or one of {STRATEGY_NAMES}, got {strategy!r}")
    if strategy == "identity":
        return _per_attribute(W, S.identity), "identity", "given by name"
    if strategy == "hierarchical":
        return _per_attribute(W, lambda d: S.hierarchical(d, 16)), "hierarchical b=16", "given by name"
    if strategy == "haar":
        return _per_attribute(W, S.haar), "haar", "given by name"
    if strategy == "optimize":
        optimize = _optional("optimize")
        if optimize is None:
            raise ValueError("strategy='optimize' needs matmech.optimize, which is not available")
        return optimize(W, eps, delta).strategy, "optimized", "optimised by matmech.optimize"
    choice = _optimiser_choice(W, eps, delta, neighbors)
    if choice is not None:
        return choice[0], "auto", choice[1]
    best = None
    for name, A in fixed_candidates(W):
        if name == "workload":
            continue
        try:
            err = expected_error(W, A, eps, delta, neighbors=neighbors)
        except ValueError:
            continue  # cannot answer W, or no structured inverse at this size
        if best is None or err < best[0]:
            best = (err, name, A)
    if best is None:
        raise ValueError("none of the fixed strategies (identity, hierarchical, Haar) can answer this workload")
    return best[2], best[1], "least expected error among identity/hierarchical/Haar (matmech.optimize not available)"


# -- the release ------------------------------------------------------------------------------


def _as_workload(W, n):
    if isinstance(W, LinOp):
        pass
    elif sp.issparse(W):
        W = as_linop(W)
    else:
        try:
            W = ranges(n, W)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"W must be a workload LinOp or a list of (lo, hi) intervals over {n} cells: {exc}") from None
    if W.shape[1] != n:
        raise ValueError(f"shape mismatch: the workload has {W.shape[1]} columns but x has {n} cells")
    if W.shape[0] > MAX_VARIANCE_ROWS:
        raise ValueError(f"the workload has {W.shape[0]:,} queries; release answers at most {MAX_VARIANCE_ROWS:,}")
    return W


def _interval_variances_split(W, split):
    """diag(W (D + RᵀR)⁻¹ Wᵀ) for interval rows without the n×n inverse.

    With M = D⁻¹ − D⁻¹Rᵀ C⁻¹ R D⁻¹ (Woodbury, C = I + RD⁻¹Rᵀ = LLᵀ) and a row w = 1[lo, hi]:
    w D⁻¹ wᵀ = Σ_{lo..hi} 1/d, and the low-rank part is ‖L⁻¹ R D⁻¹ wᵀ‖² = ‖Z_{hi+1} − Z_lo‖²
    with Z = P̃ D⁻¹ Rᵀ L⁻ᵀ (prefix sums, (n+1)×r). O(n r² + m r).
    """
    d, R = split
    dinv = 1.0 / d
    C = (R * dinv) @ R.T
    C[np.diag_indices_from(C)] += 1.0
    L = sla.cholesky(C, lower=True, check_finite=False)
    U = (R * dinv).T  # n×r
    Z = np.zeros((W.n + 1, R.shape[0]))
    np.cumsum(sla.solve_triangular(L, U.T, lower=True, check_finite=False).T, axis=0, out=Z[1:])
    cd = np.concatenate([[0.0], np.cumsum(dinv)])
    out = np.empty(W.shape[0])
    for start in range(0, W.shape[0], 16384):
        lo, hi = W.bounds(start, min(W.shape[0], start + 16384))
        diff = Z[hi + 1] - Z[lo]
        out[start : start + lo.size] = cd[hi + 1] - cd[lo] - np.einsum("ij,ij->i", diff, diff)
    return out


def _answer_variances(W, plan):
    """Per-answer variances for the measured strategy and the discrete noise actually used.

    per_query_variance uses the continuous noise variance of :func:`noise_variance`; the
    factor diag(W (AᵀA)⁺ Wᵀ) is rescaled to the exact discrete variance plan.std².
    Interval workloads on diagonal-plus-rows strategies (p-Identity) use the Woodbury form.
    """
    A = plan.strategy
    if isinstance(W, Intervals) and isinstance(A, (RoundedDense, RoundedSparse)):
        split = split_diagonal(A)
        if split is not None:
            return _interval_variances_split(W, split) * plan.std**2
    p = 1 if plan.delta == 0 else 2
    nominal = noise_variance(plan.eps, plan.delta, sensitivity=sensitivity(A, p, plan.neighbors))
    var = per_query_variance(W, A, plan.eps, plan.delta, neighbors=plan.neighbors)
    return var * (plan.std**2 / nominal)


def _release_rows(x, W, A, eps, delta, *, budget, rng, neighbors, name, note):
    """Measure A on x and answer the rows of W (x, W already validated). All checks run
    before :func:`_execute` charges the budget; a future row selection passes a RowSubset."""
    plan = plan_measurement(A, eps, delta, neighbors=neighbors)
    var = _answer_variances(W, plan)  # raises if A cannot answer W: nothing spent yet
    meas = _execute(plan, x, budget=budget, rng=rng, what=f"release {W.shape[0]} queries ({name})")
    xhat = least_squares(meas)
    answers = W.matvec(xhat)
    for arr in (answers, xhat):
        arr.setflags(write=False)
    std = np.sqrt(var)
    std.setflags(write=False)
    return Release(
        answers=answers,
        std=std,
        expected_error=float(var.sum()),
        workload=W,
        strategy=meas.strategy,
        strategy_name=name,
        strategy_note=note + ("; entries rounded to a power-of-two grid" if meas.rounded else ""),
        eps=meas.eps,
        delta=meas.delta,
        neighbors=neighbors,
        budget_remaining=None if budget is None else budget.remaining,
        measurement=meas,
        estimate=xhat,
    )


def release(x, W, eps, delta=0.0, *, strategy="auto", budget=None, rng=None, neighbors="add_remove"):
    """Answer workload W on counts x under (ε, δ)-DP with the Matrix Mechanism → :class:`Release`.

    ``x``: the histogram (non-negative integer counts; see :func:`matmech.histogram`).
    ``W``: a workload LinOp, or a list of inclusive 0-based (lo, hi) intervals over the
    cells of x. ``strategy``: see :func:`choose_strategy`. ``budget``: a PrivacyBudget
    charged (ε, δ) after every check and before any noise. ``rng``: None for the OS CSPRNG
    (secure); a numpy Generator for reproducible experiments only (NOT secure).
    Raises ValueError/TypeError, spending nothing, on bad input or a strategy that cannot
    answer W.
    """
    eps, delta = _check_privacy(eps, delta)
    _check_neighbors(neighbors)
    _check_budget(budget)
    x = check_counts(x)
    W = _as_workload(W, x.shape[0])
    A, name, note = choose_strategy(W, eps, delta, strategy=strategy, neighbors=neighbors)
    A = as_linop(A)
    if A.shape[1] != x.shape[0]:
        raise ValueError(f"shape mismatch: the strategy has {A.shape[1]} columns but x has {x.shape[0]} cells")
    return _release_rows(x, W, A, eps, delta, budget=budget, rng=rng, neighbors=neighbors, name=name, note=note)
