"""Rank the stream factorizations for a horizon n, the privacy parameters and an objective.

Every row is exact, in the units of the noise actually drawn: each candidate is built for
the norm of the noise (L1 under pure ε, where the noise is discrete Laplace calibrated to
the largest column L1 norm of C; L2 under δ > 0, discrete Gaussian), planned as a stream
would be (:func:`matmech.stream.plan.plan_stream`: rounded to its grid, calibrated), and
scored by :meth:`~matmech.stream.plan.StreamPlan.errors`: the mean and max over the steps
of the variance of a released running total, in counts². ``mean_unit``/``max_unit`` are the
same at unit noise per unit sensitivity (Δ_p(C)²·‖B_t‖²), beside the SVD bound (mean) and a
γ₂ bound (max) of :mod:`matmech.stream.bounds`, which bound both norms (Δ₁ ≥ Δ₂). The
binary tree with least squares is listed for comparison; it is not a square factorization
and the streaming release does not offer it. The best releasable row is what
``factorization="auto"`` runs when it is among :func:`~matmech.stream.plan.auto_candidates`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from matmech.privacy.calibration import lattice_variance, neighbor_sensitivity, noise_for
from matmech.stream.bounds import gamma2_bound, svd_bound, tree_errors
from matmech.stream.factorizations import MAX_DENSE_N, OBJECTIVES, build, check_horizon
from matmech.stream.plan import StreamSpec, plan_stream
from matmech.validate import choice, flag, texts


@dataclass(frozen=True)
class StreamChoice:
    """One candidate: the mean and max over the steps of a running total's variance in
    counts² under the noise drawn (``mean``, ``max``), the same at unit noise per unit
    sensitivity (``mean_unit``, ``max_unit``), and numbers of state per step."""

    name: str
    mean: float
    max: float
    state: int
    releasable: bool = True
    note: str = ""
    mean_unit: float = math.nan
    max_unit: float = math.nan

    @property
    def rmse(self) -> float:
        """√mean: the root mean squared error of a running total (counts)."""
        return math.sqrt(self.mean)


@dataclass(frozen=True)
class StreamAdvice:
    """Candidates ranked for ``objective`` (best first) under (``eps``, ``delta``) with
    ``noise``, and the two lower bounds (unit noise per unit sensitivity)."""

    n: int
    objective: str
    choices: tuple[StreamChoice, ...]
    mean_bound: float
    max_bound: float
    eps: float = 1.0
    delta: float = 0.0
    noise: str = "discrete_laplace"

    @property
    def best(self) -> StreamChoice:
        return next(c for c in self.choices if c.releasable)


def _tree_row(spec: StreamSpec) -> StreamChoice:
    """The binary tree with least squares (not releasable), scored with the same noise rule
    on its integer strategy (Δ₁ = levels, Δ₂ = √levels; grid 1)."""
    tm, tx, levels = tree_errors(spec.horizon)  # × Δ₂² = levels
    eps, delta = spec.charge
    norm = float(levels) if delta == 0 else math.sqrt(levels)
    kind, scale = noise_for(eps, delta, neighbor_sensitivity(norm, spec.neighbors, margin=True))
    var = lattice_variance(kind, scale, 1.0, remedy="raise eps")
    per = (norm**2 / levels) if delta == 0 else 1.0  # Δ_p²·‖B‖² at unit noise
    return StreamChoice(
        "tree+ls",
        var * tm / levels,
        var * tx / levels,
        levels,
        False,
        "binary tree, online least squares; not a square C",
        tm * per,
        tx * per,
    )


def advise_stream(
    n: int,
    *,
    eps: float = 1.0,
    delta: float = 0.0,
    objective: str = "mean",
    dense: bool | None = None,
    names: tuple[str, ...] | None = None,
) -> StreamAdvice:
    """Rank ``names`` for a stream of n steps under (``eps``, ``delta``) — δ = 0: pure ε,
    Laplace noise, L1 sensitivity; δ > 0: Gaussian noise, L2 — by the exact variance of a
    running total in counts² (``objective``: its mean or max over the steps). ``names``
    default: sqrt, blt, banded, identity, prefix and hierarchical; the dense
    optimum is added when ``dense`` (default n ≤ 1024); the binary tree is listed too."""
    n = check_horizon(n)
    choice(objective, "objective", OBJECTIVES)
    spec = StreamSpec(n, eps=eps, delta=delta, objective=objective)  # checks eps and delta
    if names is None:
        names = ("sqrt", "blt", "banded", "identity", "prefix", "hierarchical")
    names = texts(names, "names")
    if dense is not None:
        flag(dense, "dense")
    if dense is None:
        dense = n <= 1024
    if not names and not dense:
        raise ValueError("names must name at least one factorization (or pass dense=True)")
    if dense and n > MAX_DENSE_N:
        raise ValueError(f"dense=True needs n <= {MAX_DENSE_N}, got n={n}")
    rows = []
    for name in tuple(dict.fromkeys(names + (("dense",) if dense else ()))):
        plan = plan_stream(spec, build(name, n, objective=objective, norm=spec.norm))
        mean, mx = plan.errors()
        mu, xu = plan.factorization.errors(spec.norm)
        rows.append(
            StreamChoice(name, mean, mx, plan.factorization.memory_per_step(), True, "", mu, xu)
        )
    rows.append(_tree_row(spec))
    key = 0 if objective == "mean" else 1
    rows.sort(key=lambda c: (c.mean, c.max)[key])
    eps_c, delta_c = spec.charge
    return StreamAdvice(
        n,
        objective,
        tuple(rows),
        svd_bound(n),
        gamma2_bound(n),
        eps_c,
        delta_c,
        "discrete_laplace" if delta_c == 0 else "discrete_gaussian",
    )
