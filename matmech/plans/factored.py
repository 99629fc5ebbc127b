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

from matmech.advisor.choice import choose_strategy
from matmech.measurements.residual import DEFAULT_SCALE_BITS
from matmech.plans.residual import (
    MARGINAL_BY_MARGINAL,
    MAX_MEMORY,
    check_search,
    covers_attributes,
    given_search,
    residual_plan,
)
from matmech.plans.route import release_route
from matmech.plans.factored_selected import release_selected
from matmech.limits import check_memory
from matmech.linalg.terms import MarginalWorkload, as_terms, restrict
from matmech.linalg.linop import LinOp, as_linop
from matmech.optimizers.marginals import MAX_GENERAL_ATTRIBUTES, GeneralMarginalStrategy
from matmech.optimizers.unions import ResidualProductStrategy
from matmech.plans.planned import PLANNED, choose_plan
from matmech.run.runner import run_plan
from matmech.sources.source import as_table_source
from matmech.plans.strategy import strategy_plan
from matmech.privacy import noise
from matmech.privacy.budget import check_budget
from matmech.privacy.measure import check_max_records
from matmech.privacy.params import check_neighbors, check_privacy_params

__all__ = ["release_factored", "plan_path", "MAX_KRON_CELLS", "FACTORED_STRATEGY_NAMES"]

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


def _release_kron(data, W, wt, at, U, eps, delta, *, strategy, budget, rng, neighbors, max_records):
    W_U = restrict(wt, U)
    if at is not None:
        A_U, name, note = restrict(at, U), "given", "strategy given by the caller"
    else:
        A, name, note = choose_strategy(W_U, eps, delta, strategy=strategy, neighbors=neighbors)
        A_U = as_linop(A)
    note += f"; solved on the marginal of attributes {list(U)} ({_cells(wt.domain, U):,} cells)"
    plan = strategy_plan(
        W_U,
        A_U,
        eps,
        delta,
        neighbors=neighbors,
        max_records=max_records,
        name=name,
        note=note,
        sizes=tuple(wt.domain),
        attributes=U,
        workload=W,
    )
    return run_plan(plan, data, budget=budget, rng=rng)


def release_factored(
    data,
    W,
    eps,
    delta=0.0,
    *,
    strategy="auto",
    budget=None,
    rng=None,
    neighbors="add_remove",
    max_records=None,
    objective="sum",
    max_cells=MAX_KRON_CELLS,
    max_memory=MAX_MEMORY,
    scale_bits=DEFAULT_SCALE_BITS,
    search="auto",
    select=None,
):
    """Answer W (a union of Kronecker products over many attributes) from marginal tables of
    ``data`` under (ε, δ)-DP → :class:`matmech.release.Release`, never building the histogram.

    ``data``: records as a 2-D integer code array (records × attributes), an object with
    ``marginal_counts(subsets)``, or a mapping subset → table (:mod:`matmech.sources.tables`).
    ``W``: a Kron or a weighted stack of Krons (e.g. ``matmech.workloads.marginals``); the
    answers follow its rows. ``strategy``: ``"auto"`` (the residual path for a union of
    marginals on two or more attributes, :func:`matmech.plans.route.release_route`, as
    ``"optimize"`` under δ > 0; else the strategy :func:`matmech.advisor.choice.choose_strategy`
    picks for W on its support), ``"residual"``, a strategy name, or a LinOp union of Kronecker products
    over the same attributes (Kronecker path). ``scale_bits``: significant bits of 1/(2σ²) for the
    residual path's per-row σ (:func:`matmech.privacy.noise.gaussian_grid`; None keeps them
    exact, at the cost of one pair of sampler tables per distinct σ). ``objective``: the residual plan's ``"sum"``
    (total variance, the SVD bound) or ``"max"`` (largest per-cell variance). ``budget``,
    ``rng``, ``neighbors``, ``max_records``: as :func:`matmech.release`; the budget is charged
    once after every check and before the first noise draw. ``strategy_name`` of the record
    is ``"residual"`` (``measurement``/``estimate``/``strategy`` are then None: no matrix
    over the domain exists) or that of the Kronecker path (``estimate`` is the marginal on U).
    ``search`` (pure ε residual path): the tables' weights over the lattice (``"lattice"``)
    or over every attribute subset (``"all"``, HDMM's optimiser; slower, more accurate) —
    :func:`matmech.optimizers.residual.plan_residuals_laplace`; ``"auto"`` (default) is
    ``"all"`` up to :data:`SEARCH_ALL_MAX_ATTRIBUTES` attributes, else ``"lattice"``.

    ``select``: None, or the options of :func:`matmech.release`'s ``select=`` (method, eps,
    c, threshold, ...): rows of W are selected privately from W x computed term by term from
    the marginal tables, and only the selected rows are measured
    (:func:`matmech.plans.factored_selected.release_selected`; ``strategy`` "auto" or "optimize").
    """
    eps, delta = check_privacy_params(eps, delta)
    check_neighbors(neighbors)
    check_budget(budget)
    max_records = check_max_records(max_records)
    noise.check_rng(rng)
    data = as_table_source(data)
    check_search(search)
    if select is not None:
        return release_selected(
            data,
            W,
            eps,
            delta,
            select=select,
            strategy=strategy,
            budget=budget,
            rng=rng,
            neighbors=neighbors,
            max_records=max_records,
            max_memory=max_memory,
        )
    rows = W.shape[0] if isinstance(W, MarginalWorkload) else None
    if rows is not None and 16 * rows > max_memory:  # every path returns the answers and their std
        raise ValueError(
            f"the release would return {rows:,} answers: with their std {16 * rows / 2**30:.1f} GiB alone "
            f"(> max_memory {max_memory / 2**30:.1f} GiB)" + MARGINAL_BY_MARGINAL
        )
    if rows is not None:
        check_memory(16 * rows, f"the {rows:,} answers and their std", after=MARGINAL_BY_MARGINAL)
    if (
        isinstance(strategy, str)
        and strategy in PLANNED
        and (objective, max_cells, max_memory, scale_bits)
        == ("sum", MAX_KRON_CELLS, MAX_MEMORY, DEFAULT_SCALE_BITS)
    ):  # the planner's best plan: the same for every form of the data
        plan = choose_plan(
            W,
            eps,
            delta,
            strategy=strategy,
            neighbors=neighbors,
            max_records=max_records,
            search=given_search(data, len(as_terms(W, name="W").domain), search),
            covers=lambda S: covers_attributes(data, S),
            max_cells=max_cells,
        )
        return run_plan(plan, data, budget=budget, rng=rng)
    path, wt, at, U = plan_path(W, eps, delta, strategy=strategy, max_cells=max_cells)
    if (
        path == "kron"
        and strategy == "auto"
        and wt.marginals() is not None
        and not covers_attributes(data, U)
    ):
        path = "residual"  # tables that suffice for W's marginals: the Kronecker path would need the table on U
    search = given_search(data, len(wt.domain), search)
    if path == "kron":
        return _release_kron(
            data,
            W,
            wt,
            at,
            U,
            eps,
            delta,
            strategy=strategy,
            budget=budget,
            rng=rng,
            neighbors=neighbors,
            max_records=max_records,
        )
    if path == "gmarginal":
        from matmech.plans.gmarginal import release_gmarginal

        return release_gmarginal(
            data,
            W,
            wt,
            at,
            eps,
            delta,
            budget=budget,
            rng=rng,
            neighbors=neighbors,
            max_records=max_records,
            max_memory=max_memory,
            scale_bits=scale_bits,
        )
    plan = residual_plan(
        W,
        wt,
        eps,
        delta,
        neighbors=neighbors,
        max_records=max_records,
        objective=objective,
        max_memory=max_memory,
        scale_bits=scale_bits,
        search=search,
    )
    return run_plan(plan, data, budget=budget, rng=rng)
