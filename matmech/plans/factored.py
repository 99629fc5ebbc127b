"""Release on tables with many attributes without the full histogram (issue 14).

::

    W (union of Kronecker products)   data (records, an engine, or marginal tables)
      │ terms, support U, path (no data)        │
      ▼                                         │
    residual path (the tables route of matmech.plans.route: W a union of marginals on 2+
    attributes with strategy "auto" or "optimize" (δ > 0), or strategy "residual"; any size):
      plan_residuals → σ per residual (Xiao et al. 2023); δ = 0: plan_residuals_laplace
    Kronecker path (cells of U manageable): W_U, A_U restricted to U, plan_measurement(A_U)
      │  every check, the plan, the variances, check_affordable — before any data is read
      ▼                                         ▼
    marginal tables (each once) ──► checks on them ──► budget.spend ──► noise
      ▼
    residual: closed-form marginals;  Kronecker: least squares on x_U  (post-processing)
      ▼
    answers of W's terms, exact per-answer std → matmech.release.Release

Kronecker path: every term of W and of the strategy A is a total outside U, so A x = A_U x_U
with x_U the marginal of x on U; the plan, the grid, the noise draws, the least squares and
the variances σ²·diag(W_U (A_UᵀA_U)⁺ W_Uᵀ) are those of :func:`matmech.release` on x (the
same numbers: the sensitivity of A_U ⊗ 1ᵀ is that of A_U). Residual path: the Gaussian
optimum for marginals (it reaches the SVD bound), measured exactly
(:mod:`matmech.measurements.residual`) and reconstructed in closed form
(:mod:`matmech.estimators.reconstruct`). Pure ε marginals on the same route: weighted
marginal tables with exact discrete Laplace noise, each residual the inverse-variance mean of
the tables containing it (:func:`matmech.measurements.residual.plan_residual_laplace`), the table
weights searched over all attribute subsets up to :data:`SEARCH_ALL_MAX_ATTRIBUTES`
attributes. The route never depends on a cell count or on the form of the data (issue 22).
"""

from __future__ import annotations

import math

from matmech.plans.route import release_route
from matmech.linalg.terms import as_terms
from matmech.linalg.linop import LinOp
from matmech.optimizers.general_marginal_error import (
    MAX_GENERAL_ATTRIBUTES,
    GeneralMarginalStrategy,
)
from matmech.optimizers.unions import ResidualProductStrategy


#: Strategy names the factored release takes besides matmech.advisor.choice.STRATEGY_NAMES:
#: the residual basis (a union of marginals) and generalised marginals (plan_path).
FACTORED_STRATEGY_NAMES = ("residual", "gmarginals")
#: Largest marginal (cells of the support U) the Kronecker path solves on.
MAX_KRON_CELLS = 1 << 22


def _cells(domain, U):
    return math.prod(domain[i] for i in U)


def plan_path(W, eps, delta=0.0, *, strategy="auto", max_cells=MAX_KRON_CELLS):
    """("residual" | "kron" | "gmarginal", W's terms, strategy terms or None, U): which path a
    release takes; data-independent. Raises naming why none applies. "gmarginal" (a union of
    Kronecker products answered by a GeneralMarginalStrategy, given — its support larger than
    ``max_cells`` — or, for ``"auto"`` on a non-marginal W that large or ``"gmarginals"``,
    optimised): the third item is then the strategy itself, or None."""
    wt = as_terms(W, name="W")
    if isinstance(strategy, LinOp):
        at = as_terms(strategy, name="strategy")
        if at.domain != wt.domain:
            raise ValueError(
                f"the strategy's attribute sizes {at.domain} differ from the workload's {wt.domain}"
            )
        U = tuple(sorted(set(wt.support) | set(at.support))) or (0,)
        if _cells(wt.domain, U) > max_cells and isinstance(strategy, GeneralMarginalStrategy):
            return (
                "gmarginal",
                wt,
                strategy,
                U,
            )  # the strategy itself (matmech.plans.gmarginal)
        if _cells(wt.domain, U) > max_cells and isinstance(strategy, ResidualProductStrategy):
            raise ValueError(
                f"a ResidualProductStrategy (matmech.optimizers.unions) is released only on the Kronecker "
                f"path, and the supports of W and the strategy span {_cells(wt.domain, U):,} cells "
                f"(attributes {U}), more than its {max_cells:,}: the factored measurement of residual "
                "products is not implemented (nothing was spent); pass the GeneralMarginalStrategy of "
                "matmech.optimizers.unions.refine_general_l2, or strategy='auto' for a union of marginals"
            )
        if _cells(wt.domain, U) > max_cells:
            raise ValueError(
                f"the supports of W and the strategy span {_cells(wt.domain, U):,} cells "
                f"(attributes {U}); the Kronecker path solves on at most {max_cells:,}"
            )
        return "kron", wt, at, U
    if not isinstance(strategy, str):
        raise TypeError(
            f"strategy must be 'auto', 'residual', a strategy name or a LinOp, got {type(strategy).__name__}"
        )
    U = wt.support or (0,)
    big = _cells(wt.domain, U) > max_cells
    # the one rule (matmech.plans.route)
    if release_route(W, strategy, delta=delta).name == "tables":
        return "residual", wt, None, U
    if strategy == "gmarginals" or (
        strategy == "auto" and big and len(wt.domain) <= MAX_GENERAL_ATTRIBUTES
    ):
        return "gmarginal", wt, None, U  # a GeneralMarginalStrategy optimised for W
    if big:
        raise ValueError(
            f"this workload: the support of W spans {_cells(wt.domain, U):,} cells (attributes {U}), more "
            f"than the Kronecker path's {max_cells:,}; only a union of marginals takes the residual path"
        )
    return "kron", wt, None, U
