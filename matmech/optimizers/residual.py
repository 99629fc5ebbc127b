"""Noise scales of the residual measurements: ResidualPlanner's optimisation (Xiao et al.,
NeurIPS 2023, §5) for marginal workloads under (ε, δ) (Gaussian noise, unit L2 sensitivity).

Residual T is measured with noise variance u_T per orthonormal coordinate
(:mod:`matmech.linalg.residual`). The mechanism has squared L2 sensitivity Σ_T p_T/u_T
(the same on every cell), so at unit sensitivity the plans are

* ``objective="sum"``: minimise Σ_T c_T u_T (the weighted total variance, c_T from
  equation (1)) s.t. Σ_T p_T/u_T = 1. Lagrange: u_T = K √(p_T/c_T), K = Σ_T √(c_T p_T),
  total = K² — which equals the SVD bound (Σ_T m_T √(λ_T/N))² term by term, because
  c_T p_T = m_T² λ_T/N: the residual plan is optimal among all Gaussian strategies.
* ``objective="max"``: minimise max_S w_S v_S (the largest per-cell variance) s.t.
  Σ p_T/u_T <= 1: a small convex program (linear objective, convex inverse constraint),
  solved with cvxpy in the variables r_T = u_T / u_T^sum (the sum-optimal plan as scale).

All variances are per unit of noise variance: multiply by σ² of the unit-sensitivity
Gaussian (:func:`matmech.privacy.calibration.gaussian_sigma` at sensitivity 1) for
(ε, δ); HDMM's unit (RMSE/σ) is √(total/m).

Pure ε (:func:`plan_residuals_laplace`, Laplace noise, L1 sensitivity). Measuring residual T
isotropically on an orthonormal basis Q_T costs L1 sensitivity Σ_T (1/β_T)·max_c‖Q_T e_c‖₁,
and max_c‖Q_T e_c‖₁ = Π_{i∈T} max_c‖Qᵢe_c‖₁ (the sum of products of non-negative per-attribute
norms is monotone in each, so its maximum over the cells is at the per-attribute maxima);
for the contrast trees that is about 2.3 per attribute of 100 values, 9× the RMSE of the
marginal optimiser on adult_W1. The identity frame costs 1 per attribute instead: residual
T is read from the *marginal table* on T (Qᵢ Iᵢ, isotropic), and the table on T also holds
every residual T' ⊆ T, with per-coordinate noise variance rest·V_T (rest = Π_{i∈T∖T'} nᵢ,
V_T the table's per-cell variance). So the plan measures the table on every residual T of
the lattice with weight θ_T (Laplace scale 1/(ε θ_T), Σθ_T = 1 the exact L1 sensitivity: a
record is one cell of each table) and combines the estimates of each residual by inverse
variance (the generalised least squares, which decouples per residual):

    u_T' = 1 / Σ_{T ⊇ T'} θ_T² / (2·rest),   minimise  (Σ_T θ_T)² Σ_T' c_T' u_T'

(HDMM's marginal objective, McKenna et al. VLDB 2018 §6, restricted to the lattice),
over log θ with L-BFGS from θ ∝ c^{1/3} (the optimum when each table serves only its own
residual) and from the workload's own marginals, keeping the best.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from matmech.linalg.residual import (
    Lattice,
    cell_variance_coefficients,
    lattice,
    marginal_cell_variances,
    svd_bound,
    total_variance,
    total_variance_coefficients,
)
from matmech.validate import choice


OBJECTIVES = ("sum", "max")
#: Largest number of residuals for the cvxpy max-variance program.
MAX_RESIDUALS_CVX = 200_000
#: Max-variance programs with at most this many variables are solved to 1e-10 (Clarabel).
TIGHT_MAX_VARIABLES = 5_000
#: Pure-ε tables whose optimal weight is below this fraction of the largest are not measured.
PRUNE_RELATIVE = 1e-6


class _OnLattice:
    """What a plan on a marginal lattice reads off its ``lattice``, ``total`` and ``queries``."""

    lattice: Lattice
    total: float
    queries: int

    @property
    def domain(self):
        return self.lattice.domain

    @property
    def subsets(self):
        return self.lattice.subsets

    @property
    def residuals(self):
        return self.lattice.residuals

    @property
    def rmse(self):
        """Per-query RMSE in units of the noise scale (σ, or 1/ε for Laplace plans)."""
        return math.sqrt(self.total / self.queries)


@dataclass(frozen=True, eq=False)
class ResidualAllocation(_OnLattice):
    """Per-residual noise variances for a marginal workload, at unit L2 sensitivity.

    ``lattice`` (:class:`~matmech.linalg.residual.Lattice`) holds the domain, the marginals
    ``subsets`` and the ``residuals``; ``residuals[j]`` is measured with variance ``variances[j]`` per orthonormal coordinate
    (Σ_j p_j / variances[j] = 1); ``cell_variances[i]`` is the per-cell variance of the
    marginal ``subsets[i]``; ``total`` = Σ_i cells_i × cell_variances[i] (unweighted),
    ``queries`` = Σ_i cells_i, ``rmse`` = √(total/queries) (HDMM's unit when multiplied by
    nothing: RMSE/σ); ``svd_bound`` the weighted lower bound and ``weighted_total`` the
    weighted objective it bounds.
    """

    lattice: Lattice
    variances: np.ndarray
    objective: str
    cell_variances: np.ndarray
    total: float
    weighted_total: float
    queries: int
    svd_bound: float
    solver: str = "closed form"

    def __repr__(self):
        return (
            f"ResidualAllocation({len(self.subsets)} marginals, {len(self.residuals)} residuals, objective={self.objective!r}, "
            f"rmse/σ={self.rmse:.6g}, weighted total/bound={self.weighted_total / self.svd_bound:.6f})"
        )


def _sum_optimal(c, p):
    root = np.sqrt(c * p)
    K = float(root.sum())
    return K * np.sqrt(p / c)


def _max_optimal(lat, u0, solver):
    """Residual variances minimising the largest weighted per-cell variance, Σ p/u = 1.

    The program is first shrunk to one variable per class of residuals and one constraint
    per class of marginals of an equitable partition (:mod:`matmech.optimizers.symmetry`:
    same optimum; all ≤3-way marginals of 100 attributes × 10 values: 4 × 4 instead of
    166,751 × 166,751); when no partition is verified the full program is solved."""
    import scipy.sparse as sp

    from matmech.optimizers.symmetry import equitable_partition

    rows, cols, vals = cell_variance_coefficients(lat)
    n_s, n_t = len(lat.subsets), len(lat.residuals)
    b = lat.weights[rows] * vals
    part = equitable_partition(rows, cols, b, (n_s, n_t), col_labels=lat.norm2)
    if part is None:
        B = sp.csr_matrix((b, (rows, cols)), shape=(n_s, n_t))
        size, q, ref = np.ones(n_t), lat.norm2, u0
        lift, note = np.arange(n_t), ""
    else:
        r, c, v = part.blocks
        nr, nc = part.n_row_classes, part.n_col_classes
        B = sp.csr_matrix((v, (r, c)), shape=(nr, nc))
        size = np.bincount(part.col_class, minlength=nc).astype(np.float64)
        q = np.bincount(part.col_class, weights=lat.norm2, minlength=nc) / size
        ref = np.bincount(part.col_class, weights=u0, minlength=nc) / size
        lift, note = part.col_class, f", {nr} x {nc} after symmetry"
    x, status = _solve_max(B, size * q, ref, solver)
    u = x[lift]
    u = u * float(np.sum(lat.norm2 / u))  # exactly feasible: Σ p/u = 1
    return u, status + note


def _solve_max(B, q, u0, solver):
    """argmin_u max(B u) s.t. Σ q/u ≤ 1 (cvxpy; variables r = u/u0 near 1 for scale)."""
    import cvxpy as cp
    import scipy.sparse as sp

    B = B @ sp.diags(np.asarray(u0, dtype=np.float64))
    scale = float(B.sum(axis=1).max())  # the max at r = 1: keeps the program near unit scale
    B = B / scale
    q = q / u0  # Σ q_T / r_T <= 1 (equality at r = 1 for the sum plan)
    r = cp.Variable(B.shape[1], pos=True)
    t = cp.Variable()
    prob = cp.Problem(cp.Minimize(t), [B @ r <= t, cp.sum(cp.multiply(q, cp.inv_pos(r))) <= 1])
    opts = {}
    if solver is None and "CLARABEL" in cp.installed_solvers():
        solver = "CLARABEL"  # interior point: accurate on this small conic program
        if B.shape[1] <= TIGHT_MAX_VARIABLES:
            opts = {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10}
    prob.solve(solver=solver, **opts)
    if prob.status not in ("optimal", "optimal_inaccurate") or r.value is None:
        raise ValueError(f"the max-variance program did not solve (status {prob.status!r})")
    u = u0 * np.maximum(np.asarray(r.value, dtype=np.float64), 1e-12)
    return u, f"cvxpy {prob.solver_stats.solver_name} ({prob.status})"


def _lattice_coefficients(domain, subsets, weights):
    """The lattice of ``subsets`` and its total-variance coefficients (ValueError when there
    is no residual to measure): what every residual plan starts from."""
    lat = lattice(domain, subsets, weights)
    if not lat.residuals:
        raise ValueError("the marginals have no residual to measure")
    return lat, total_variance_coefficients(lat)


def plan_residuals(domain, subsets, *, weights=None, objective="sum", solver=None):
    """The residual plan for the marginals on ``subsets`` of ``domain`` → :class:`ResidualAllocation`.

    ``weights`` (one per subset, default 1) weight each marginal's variance. ``objective``:
    ``"sum"`` (closed form, the SVD bound) or ``"max"`` (the largest weighted per-cell
    variance, cvxpy; ``solver`` is passed to it). Data-independent.
    """
    choice(objective, "objective", OBJECTIVES)
    lat, c = _lattice_coefficients(domain, subsets, weights)
    u = _sum_optimal(c, lat.norm2)
    solver_name = "closed form"
    if objective == "max":
        if len(lat.residuals) > MAX_RESIDUALS_CVX:
            raise ValueError(
                f"the max-variance program has {len(lat.residuals):,} residuals; at most "
                f"{MAX_RESIDUALS_CVX:,} are supported (use objective='sum')"
            )
        u, solver_name = _max_optimal(lat, u, solver)
    return ResidualAllocation(
        lattice=lat,
        objective=objective,
        svd_bound=svd_bound(lat),
        solver=solver_name,
        **_figures(lat, c, u),
    )


def _figures(lat, c, u) -> dict[str, Any]:
    """The fields every allocation of residual variances ``u`` has: ``u`` and the per-cell
    variances (frozen), the total and ``c``-weighted total variance, the number of queries."""
    cellv = marginal_cell_variances(lat, u)
    for a in (u, cellv):
        a.setflags(write=False)
    return dict(
        variances=u,
        cell_variances=cellv,
        total=total_variance(lat, u),
        weighted_total=float(np.dot(c, u)),
        queries=int(lat.cells.sum()),
    )


@dataclass(frozen=True, eq=False)
class LaplaceResidualAllocation(_OnLattice):
    """Table weights for a marginal workload under pure ε (Laplace), at ε = 1.

    The marginal table on ``tables[j]`` (the lattice's residuals unless tables were given)
    is measured with weight ``theta[j]``
    (Σθ = 1 = the L1 sensitivity; continuous Laplace scale 1/θ_j per cell at ε = 1);
    ``variances[j]`` is the per-coordinate variance of residual j after the inverse-variance
    combination (2/Σ θ²/rest), ``cell_variances``/``total``/``weighted_total``/``queries`` as in
    :class:`ResidualAllocation` (per unit ε⁻²; the exact discrete variances are the measurement's).
    """

    lattice: Lattice
    theta: np.ndarray
    variances: np.ndarray
    cell_variances: np.ndarray
    total: float
    weighted_total: float
    queries: int
    start: str
    tables: tuple
    solver: str = "L-BFGS-B"

    def __repr__(self):
        return (
            f"LaplaceResidualAllocation({len(self.subsets)} marginals, {len(self.tables)} tables, "
            f"rmse·ε={self.rmse:.6g}, start {self.start!r})"
        )


def table_pairs(lat, tables=None):
    """(table index, residual index, rest) of every residual T' of ``lat`` inside a measured
    table T (default: the tables on the lattice's residuals, a downward-closed set)."""
    tables = lat.residuals if tables is None else tables
    tl = lattice(lat.domain, tables)
    index = {t: j for j, t in enumerate(lat.residuals)}
    remap = np.array([index.get(t, -1) for t in tl.residuals], dtype=np.int64)
    keep = remap[tl.pair_t] >= 0
    return tl.pair_s[keep], remap[tl.pair_t[keep]], tl.pair_rest[keep]


def laplace_residual_variances(lat, theta, table_variances=None, tables=None):
    """Per-coordinate variance of each residual when the table on ``tables[j]`` (default
    ``lat.residuals[j]``) has per-cell noise variance ``table_variances[j]`` (default 2/θ_j²,
    continuous Laplace at ε = 1 and Σθ = 1) and every residual takes the inverse-variance
    mean of the tables that contain it."""
    ps, pt, rest = table_pairs(lat, tables)
    if table_variances is None:
        theta = np.asarray(theta, dtype=np.float64)
        table_variances = 2.0 / np.maximum(theta, 1e-300) ** 2
    prec = np.bincount(
        pt, weights=1.0 / (rest * np.asarray(table_variances)[ps]), minlength=len(lat.residuals)
    )
    return 1.0 / prec


def _given_tables(lat, tables, theta):
    from matmech.linalg.residual import check_lattice

    _, tables, _ = check_lattice(lat.domain, tables)
    theta = np.asarray(theta, dtype=np.float64)
    if (
        theta.shape != (len(tables),)
        or not np.all(np.isfinite(theta))
        or np.any(theta < 0)
        or not theta.sum() > 0
    ):
        raise ValueError(
            f"theta must hold {len(tables)} non-negative finite weights (one per table), not all zero"
        )
    if len(set(tables)) != len(tables):
        raise ValueError("tables repeat an attribute subset")
    live = theta > 0
    tables = tuple(t for t, k in zip(tables, live) if k)
    theta = theta[live] / theta[live].sum()
    ps, pt, _ = table_pairs(lat, tables)
    missing = np.setdiff1d(np.arange(len(lat.residuals)), pt)
    if missing.size:
        raise ValueError(
            f"no table with a positive weight contains residual {lat.residuals[int(missing[0])]}"
        )
    return tables, theta


def _all_subsets_theta(lat):
    """HDMM's OPT_M over every attribute subset (:func:`optimize_marginals_pure`) → (tables, θ)."""
    from matmech.linalg.linop import Kron, VStack
    from matmech.optimizers.marginal_lattice import MAX_ATTRIBUTES, optimize_marginals_pure
    from matmech.workloads import identity, total

    d = len(lat.domain)
    if d > MAX_ATTRIBUTES:
        raise ValueError(
            f"search='all' optimises over 2^{d} attribute subsets; at most {MAX_ATTRIBUTES} attributes "
            "are supported (use search='lattice')"
        )
    # Interval factors: the form optimize_marginals_pure recognises as identity / total
    blocks = [
        Kron(*[identity(n) if i in s else total(n) for i, n in enumerate(lat.domain)])
        for s in lat.subsets
    ]
    W = VStack(blocks, weights=np.sqrt(lat.weights))
    theta = optimize_marginals_pure(W).theta
    live = [m for m in range(1 << d) if theta[m] > 0]
    return [tuple(i for i in range(d) if m >> i & 1) for m in live], [float(theta[m]) for m in live]


SEARCHES = ("lattice", "all")


def plan_residuals_laplace(
    domain, subsets, *, weights=None, tables=None, theta=None, search="lattice", maxiter=500
):
    """The pure-ε table plan for the marginals on ``subsets`` → :class:`LaplaceResidualAllocation`
    (data-independent; see the module notes). ``search``: ``"lattice"`` (tables on the
    lattice's subsets, L-BFGS, fast at any number of attributes) or ``"all"`` (HDMM's
    optimiser over all 2^d subsets, :func:`matmech.optimizers.marginal_lattice.optimize_marginals_pure`:
    better, e.g. 95.7 instead of 104.9 on loans_W1, but minutes for 12+ attributes).
    ``tables`` and ``theta`` (both or neither): measure these attribute subsets with these
    weights instead."""
    from scipy.optimize import minimize

    if search not in SEARCHES:
        raise ValueError(f"search must be one of {SEARCHES}, got {search!r}")
    lat, c = _lattice_coefficients(domain, subsets, weights)
    if (tables is None) != (theta is None):
        raise ValueError("give both tables and theta, or neither")
    if tables is None and search == "all":
        tables, theta = _all_subsets_theta(lat)
    if tables is not None:
        tables, theta = _given_tables(lat, tables, theta)
        how = "optimize_marginals_pure" if search == "all" else "given"
        return _laplace_plan(lat, c, theta, tables, start=how, solver=how)
    ps, pt, rest = table_pairs(lat)
    n_t = len(lat.residuals)

    def fun(z):
        th = np.exp(z - z.max())
        S = th.sum()
        P = np.bincount(pt, weights=th[ps] ** 2 / rest, minlength=n_t) / 2.0
        F = float(np.sum(c / P))
        g_P = -c / P**2  # ∂F/∂P
        g_th = 2.0 * S * F + S * S * np.bincount(ps, weights=g_P[pt] * th[ps] / rest, minlength=n_t)
        return S * S * F, g_th * th

    index = {t: j for j, t in enumerate(lat.residuals)}
    own = np.full(n_t, 1e-6)
    for s, w in zip(lat.subsets, lat.weights):
        t = tuple(i for i in s if lat.domain[i] > 1)
        own[index[t]] += math.sqrt(w)
    starts = [("c^(1/3)", np.cbrt(np.maximum(c, 1e-300))), ("workload marginals", own)]
    tried = []
    for name, th0 in starts:
        z0 = np.log(th0 / th0.sum())
        res = minimize(
            fun,
            z0,
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": maxiter, "ftol": 1e-13, "gtol": 1e-10},
        )
        f0 = fun(z0)[0]
        z, f = (res.x, float(res.fun)) if res.fun <= f0 else (z0, f0)
        tried.append((z, f, name))
    z, _, name = min(tried, key=lambda t: t[1])  # the first of equals, as a running best
    theta = np.exp(z - z.max())
    # tables the optimum all but drops are not measured (their noise scale would leave the
    # sampler's range); a residual left uncovered keeps its own table at the floor weight
    keep = theta >= PRUNE_RELATIVE
    covered = np.zeros(n_t, dtype=bool)
    covered[pt[keep[ps]]] = True
    keep |= ~covered
    theta = np.where(keep, np.maximum(theta, PRUNE_RELATIVE), 0.0)
    tables = tuple(t for t, k in zip(lat.residuals, keep) if k)
    theta = theta[keep] / theta[keep].sum()
    return _laplace_plan(lat, c, theta, tables, start=name)


def _laplace_plan(lat, c, theta, tables, *, start, solver="L-BFGS-B"):
    """The :class:`LaplaceResidualAllocation` of table weights ``theta`` on ``tables`` (frozen
    arrays: residual and per-cell variances, totals)."""
    theta.setflags(write=False)
    u = laplace_residual_variances(lat, theta, tables=tables)
    return LaplaceResidualAllocation(
        lattice=lat, theta=theta, start=start, solver=solver, tables=tables, **_figures(lat, c, u)
    )


# -- the tables route's lattice plan for a union of marginals -----------------------------------

#: ``search="auto"``: pure-ε table weights over all 2^d attribute subsets (HDMM's OPT_M, as
#: good as the explicit optimum: flights 2-way RMSE 16.56 vs 16.54, lattice 17.52) up to this
#: many attributes, over the lattice's subsets beyond.
SEARCH_ALL_MAX_ATTRIBUTES = 10


def table_search(domain, search="auto"):
    """The pure-ε table search: ``"auto"`` is HDMM's search over all 2^d attribute subsets for
    d <= :data:`SEARCH_ALL_MAX_ATTRIBUTES` (0.34 s at d = 10, 0.85 s at 11), else the lattice's
    own subsets: a rule on the domain, never on time."""
    if search == "auto":
        return "all" if len(domain) <= SEARCH_ALL_MAX_ATTRIBUTES else "lattice"
    return search


def marginal_lattice_plan(domain, subsets, row_weights, delta, *, objective="sum", search="auto"):
    """The lattice plan of the marginals on ``subsets`` (row weights ``row_weights``, equal
    subsets merged: a row weight w scales a variance by w²): pure ε (δ = 0) the weighted
    marginal tables (:func:`plan_residuals_laplace`, the search of :func:`table_search`),
    δ > 0 the Gaussian residuals (:func:`plan_residuals`); data-independent."""
    merged: dict = {}
    for s, w in zip(subsets, row_weights):
        merged[tuple(s)] = merged.get(tuple(s), 0.0) + w * w
    if delta > 0:
        return plan_residuals(
            domain, list(merged), weights=list(merged.values()), objective=objective
        )
    if objective != "sum":
        raise ValueError(
            f"pure eps residual releases minimise the total variance only (objective='sum'), "
            f"got objective={objective!r}"
        )
    return plan_residuals_laplace(
        domain, list(merged), weights=list(merged.values()), search=table_search(domain, search)
    )


def residual_total(plan, eps, delta, neighbors="add_remove"):
    """The weighted total squared error of a lattice ``plan`` of :func:`marginal_lattice_plan`
    at (ε, δ) with continuous noise (it scales as 1/ε², or as 1/ρ): pure ε the tables'
    Laplace variances 2(Δ₁/(εθ))², (ε, δ) σ² of the Gaussian at the plan's L2 sensitivity (the
    calibration of :func:`matmech.privacy.calibration.gaussian_sigma`). The release draws the
    exact discrete noise at scales rounded up to a few bits (≤ 0.4% more)."""
    from matmech.linalg.residual import table_sensitivity1
    from matmech.privacy.calibration import gaussian_sigma, neighbor_sensitivity

    if delta == 0:
        lat = plan.lattice
        sens = neighbor_sensitivity(
            table_sensitivity1(lat.domain, plan.tables, plan.theta), neighbors, margin=True
        )
        return float(plan.weighted_total * (sens / eps) ** 2)
    s2 = float(np.sum(plan.lattice.norm2 / plan.variances))
    sigma = gaussian_sigma(eps, delta, neighbor_sensitivity(math.sqrt(s2), neighbors, margin=True))
    return float(plan.weighted_total * sigma**2)
