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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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

__all__ = ["ResidualPlan", "plan_residuals", "OBJECTIVES", "MAX_RESIDUALS_CVX"]

OBJECTIVES = ("sum", "max")
#: Largest number of residuals for the cvxpy max-variance program.
MAX_RESIDUALS_CVX = 200_000


@dataclass(frozen=True, eq=False)
class ResidualPlan:
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
        return math.sqrt(self.total / self.queries)

    def __repr__(self):
        return (f"ResidualPlan({len(self.subsets)} marginals, {len(self.residuals)} residuals, objective={self.objective!r}, "
                f"rmse/σ={self.rmse:.6g}, weighted total/bound={self.weighted_total / self.svd_bound:.6f})")


def _sum_optimal(c, p):
    root = np.sqrt(c * p)
    K = float(root.sum())
    return K * np.sqrt(p / c)


def _max_optimal(lat, u0, solver):
    import cvxpy as cp
    import scipy.sparse as sp

    rows, cols, vals = cell_variance_coefficients(lat)
    n_s, n_t = len(lat.subsets), len(lat.residuals)
    B = sp.csr_matrix((lat.weights[rows] * vals * u0[cols], (rows, cols)), shape=(n_s, n_t))
    scale = float(B.sum(axis=1).max())  # the max at r = 1: keeps the program near unit scale
    B = B / scale
    q = lat.norm2 / u0  # Σ q_T / r_T <= 1 (equality at r = 1)
    r = cp.Variable(n_t, pos=True)
    t = cp.Variable()
    prob = cp.Problem(cp.Minimize(t), [B @ r <= t, cp.sum(cp.multiply(q, cp.inv_pos(r))) <= 1])
    if solver is None and "CLARABEL" in cp.installed_solvers():
        solver = "CLARABEL"  # interior point: accurate on this small conic program
    prob.solve(solver=solver)
    if prob.status not in ("optimal", "optimal_inaccurate") or r.value is None:
        raise ValueError(f"the max-variance program did not solve (status {prob.status!r})")
    u = u0 * np.maximum(np.asarray(r.value, dtype=np.float64), 1e-12)
    u = u * float(np.sum(lat.norm2 / u))  # exactly feasible: Σ p/u = 1
    return u, f"cvxpy {prob.solver_stats.solver_name} ({prob.status})"


def plan_residuals(domain, subsets, *, weights=None, objective="sum", solver=None):
    """The residual plan for the marginals on ``subsets`` of ``domain`` → :class:`ResidualPlan`.

    ``weights`` (one per subset, default 1) weight each marginal's variance. ``objective``:
    ``"sum"`` (closed form, the SVD bound) or ``"max"`` (the largest weighted per-cell
    variance, cvxpy; ``solver`` is passed to it). Data-independent.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    lat = lattice(domain, subsets, weights)
    if not lat.residuals:
        raise ValueError("the marginals have no residual to measure")
    c = total_variance_coefficients(lat)
    u = _sum_optimal(c, lat.norm2)
    solver_name = "closed form"
    if objective == "max":
        if len(lat.residuals) > MAX_RESIDUALS_CVX:
            raise ValueError(f"the max-variance program has {len(lat.residuals):,} residuals; at most "
                             f"{MAX_RESIDUALS_CVX:,} are supported (use objective='sum')")
        u, solver_name = _max_optimal(lat, u, solver)
    u.setflags(write=False)
    cellv = marginal_cell_variances(lat, u)
    cellv.setflags(write=False)
    return ResidualPlan(
        lattice=lat, variances=u, objective=objective, cell_variances=cellv, total=total_variance(lat, u),
        weighted_total=float(np.dot(c, u)), queries=int(lat.cells.sum()), svd_bound=svd_bound(lat),
        solver=solver_name,
    )
