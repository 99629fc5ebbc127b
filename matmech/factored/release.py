"""Release on tables with many attributes without the full histogram (issue 14).

::

    W (union of Kronecker products)   data (records, an engine, or marginal tables)
      │ terms, support U, path (no data)        │
      ▼                                         │
    residual path (the tables route of matmech.factored.route: W a union of marginals on 2+
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
(:mod:`matmech.factored.measure`) and reconstructed in closed form
(:mod:`matmech.factored.reconstruct`). Pure ε marginals on the same route: weighted
marginal tables with exact discrete Laplace noise, each residual the inverse-variance mean of
the tables containing it (:func:`matmech.factored.measure.plan_residual_laplace`), the table
weights searched over all attribute subsets up to :data:`SEARCH_ALL_MAX_ATTRIBUTES`
attributes. The route never depends on a cell count or on the form of the data (issue 22).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from matmech.advisor.choice import choose_strategy
from matmech.factored.measure import (
    DEFAULT_SCALE_BITS,
    measure_residuals,
    measure_residuals_laplace,
    plan_residual_laplace,
    plan_residual_measurement,
)
from matmech.factored.reconstruct import MarginalReconstructor
from matmech.factored.route import release_route
from matmech.factored.select import release_selected
from matmech.factored.streamed_kinds import kind_of
from matmech.factored.terms import MarginalWorkload, as_terms, restrict
from matmech.linalg.linop import LinOp, as_linop
from matmech.optimizers.marginals import MAX_GENERAL_ATTRIBUTES, GeneralMarginalStrategy
from matmech.optimizers.unions import ResidualProductStrategy
from matmech.optimizers.residual import (
    plan_residuals,
    plan_residuals_laplace,
    total_variance_coefficients,
)
from matmech.pipeline.plan import Draws, Estimate, MeasuredPlan, check_record_count
from matmech.pipeline.run import run_plan
from matmech.pipeline.source import as_table_source
from matmech.pipeline.strategy import strategy_plan
from matmech.privacy import noise
from matmech.privacy.budget import check_budget
from matmech.privacy.measure import check_max_records
from matmech.privacy.params import check_neighbors, check_privacy_params

__all__ = [
    "release_factored",
    "ResidualPlan",
    "residual_plan",
    "plan_path",
    "MAX_KRON_CELLS",
    "MAX_MEMORY",
    "SEARCH_ALL_MAX_ATTRIBUTES",
    "residual_error",
]

#: Largest marginal (cells of the support U) the Kronecker path solves on.
MAX_KRON_CELLS = 1 << 22
#: ``search="auto"``: pure-ε table weights over all 2^d attribute subsets (HDMM's OPT_M, as
#: good as the explicit optimum: flights 2-way RMSE 16.56 vs 16.54, lattice 17.52) up to this
#: many attributes, over the lattice's subsets beyond.
SEARCH_ALL_MAX_ATTRIBUTES = 10
#: Memory the residual path may plan to use (bytes): tables, lifted residuals, answers.
MAX_MEMORY = 8 << 30


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
            )  # the strategy itself (matmech.factored.gmarginal_release)
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
    # the one rule (matmech.factored.route)
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


def _merged(wt):
    """W's marginals (subsets, row weights) and each distinct subset's weight Σ w² (a row
    weight w scales the variance by w²)."""
    subsets, rw = wt.marginals()
    merged: dict = {}
    for s, w in zip(subsets, rw):
        merged[s] = merged.get(s, 0.0) + w * w
    return subsets, rw, merged


def _residual_plan(wt, objective):
    subsets, rw, merged = _merged(wt)
    plan = plan_residuals(
        wt.domain, list(merged), weights=list(merged.values()), objective=objective
    )
    return plan, subsets, rw


def _memory(plan, rows):
    """Bytes the residual release holds at its peak, about: the marginal tables read (pure ε:
    twice, noisy copies), three numbers per residual coordinate (the record's value and
    variance, a draw) and the answers with their std (100 × 10 ≤3-way: 6.7 GB estimated,
    6.0 GiB measured)."""
    d = plan.lattice.domain
    res_cells = sum(_cells(d, t) for t in plan.lattice.residuals)
    tables = getattr(plan, "tables", None)
    tab_cells = sum(
        _cells(d, t) for t in (tables if tables is not None else plan.lattice.residuals)
    )
    return 8 * 3 * res_cells + 8 * (2 if tables is not None else 1) * tab_cells + 8 * 2 * rows


def _search(domain, search):
    """The pure-ε table search: ``"auto"`` is HDMM's search over all 2^d attribute subsets for
    d <= :data:`SEARCH_ALL_MAX_ATTRIBUTES` (0.34 s at d = 10, 0.85 s at 11), else the lattice's
    own subsets: a rule on the domain, never on time."""
    if search == "auto":
        return "all" if len(domain) <= SEARCH_ALL_MAX_ATTRIBUTES else "lattice"
    return search


def _laplace_plan(wt, objective, search):
    search = _search(wt.domain, search)
    if objective != "sum":
        raise ValueError(
            f"pure eps residual releases minimise the total variance only (objective='sum'), "
            f"got objective={objective!r}"
        )
    subsets, rw, merged = _merged(wt)
    plan = plan_residuals_laplace(
        wt.domain, list(merged), weights=list(merged.values()), search=search
    )
    return plan, subsets, rw


def residual_error(W, eps, delta=0.0, *, neighbors="add_remove", objective="sum", search="auto"):
    """The expected total squared error of the tables route's residual plan for W (a union
    of marginals), data-independent, for :func:`matmech.advise`-style comparisons. Pure ε:
    exactly the release's figure (each residual's exact discrete-Laplace variance times its
    total-variance coefficient). (ε, δ): the plan's continuous figure σ₁²·Σ c_T u_T; the
    release's per-row σ are rounded up (1/(2σ²) to ``scale_bits`` bits), so it reports up to
    0.4% more."""
    eps, delta = check_privacy_params(eps, delta)
    check_neighbors(neighbors)
    wt = as_terms(W, name="W")
    if wt.marginals() is None:
        raise ValueError(
            "the residual plan needs W to be a union of marginals (identity and total factors)"
        )
    if delta == 0:
        plan = _laplace_plan(wt, objective, search)[0]
        mplan = plan_residual_laplace(plan, eps, neighbors=neighbors)
        return float(np.dot(total_variance_coefficients(plan.lattice), mplan.row_variance))
    plan = _residual_plan(wt, objective)[0]
    mplan = plan_residual_measurement(plan, eps, delta, neighbors=neighbors)
    return float(plan.weighted_total * mplan.sigma**2)


class _ReadOnce(Mapping):
    """The checked tables as the residual draw reads them: each table is released as it is
    read (:func:`~matmech.factored.measure.measure_residuals` stacks each residual's table
    once), so its memory holds the released values next instead of fresh pages; a second
    read raises naming the subset."""

    def __init__(self, tables):
        self._tables = dict(tables)  # its own references: the caller's mapping is untouched
        self._keys = tuple(self._tables)

    def __getitem__(self, key):
        try:
            return self._tables.pop(key)
        except KeyError:
            raise KeyError(f"the table on {key} was read already or never counted") from None

    def __iter__(self):
        return iter(self._keys)

    def __len__(self):
        return len(self._keys)


@dataclass(frozen=True, eq=False)
class ResidualPlan(MeasuredPlan):
    """The tables route's plan (:class:`~matmech.pipeline.plan.Plan`): the residual basis of
    Xiao et al. (2023) measured from marginal tables — (ε, δ): each residual with exact
    discrete Gaussian noise; pure ε: weighted marginal tables with exact discrete Laplace
    noise — reconstructed in closed form (:class:`~matmech.factored.reconstruct.MarginalReconstructor`)."""

    workload: LinOp = field(repr=False)
    lattice_plan: object = field(repr=False)
    measurement: object = field(repr=False)
    marginals: tuple = field(repr=False)  # (W's subsets, their row weights)
    sizes: tuple
    subsets: tuple = field(repr=False)
    note: str = ""

    @property
    def what(self) -> str:
        return f"release {self.workload.shape[0]} marginal queries (residual, factored)"

    @property
    def pure(self) -> bool:
        return self.delta == 0

    def check(self, tables):
        check_record_count(tables[()], self.measurement.max_records)
        return tables if self.pure else _ReadOnce(tables)

    def draw(self, tables, *, rng) -> Draws:
        measure = measure_residuals_laplace if self.pure else measure_residuals
        meas = measure(self.measurement, tables, rng=rng)
        return Draws(meas.records, meas)

    def estimate(self, draws: Draws) -> Estimate:
        meas = draws.state
        answers, var = MarginalReconstructor(meas).stacked(*self.marginals)
        fields = dict(
            strategy_name="residual",
            strategy_note=self.note,
            measured=_residual_record(self.lattice_plan, self.measurement, meas, self.pure),
            noise_law=kind_of(self.measurement).noise_law(self.measurement, *self.marginals),
        )
        # std in var's buffer: one array of the answers' size fewer
        return Estimate.of_variances(answers, var, fields, overwrite_var=True)


def lattice_plan(wt, delta, objective, search):
    """(lattice plan, W's subsets, their row weights) of the residual path: pure ε the
    weighted marginal tables (:func:`_laplace_plan`), δ > 0 the Gaussian residuals
    (:func:`_residual_plan`); data-independent. Shared with the streamed release."""
    return _laplace_plan(wt, objective, search) if delta == 0 else _residual_plan(wt, objective)


def noise_plan(plan, wt, eps, delta, *, neighbors, max_records, objective, scale_bits, search):
    """(measurement plan, note, the tables the measurement reads) of the lattice ``plan``:
    exact discrete Laplace per table (δ = 0, :func:`plan_residual_laplace`) or discrete
    Gaussian per residual (:func:`plan_residual_measurement`); data-independent. Shared
    with the streamed release."""
    if delta == 0:
        mplan = plan_residual_laplace(
            plan, eps, neighbors=neighbors, max_records=max_records, scale_bits=scale_bits
        )
        note = (
            f"residual basis of Xiao et al. 2023 ({len(plan.lattice.residuals)} residuals from {len(plan.tables)} "
            f"marginal tables, weights optimised for the sum of variances over {_search(wt.domain, search)!r} subsets); exact discrete Laplace per table, "
            f"L1 sensitivity {mplan.sensitivity:.6g}"
        )
        return mplan, note, tuple(plan.tables)
    mplan = plan_residual_measurement(
        plan, eps, delta, neighbors=neighbors, max_records=max_records, scale_bits=scale_bits
    )
    note = (
        f"residual basis of Xiao et al. 2023 ({len(plan.lattice.residuals)} residuals, {objective} of variances, "
        f"{plan.weighted_total / plan.svd_bound:.6f} × the SVD bound); exact discrete Gaussian, "
        f"σ₁ = {mplan.sigma:.6g} per unit scale, sensitivity {mplan.sensitivity:.6g}"
    )
    return mplan, note, tuple(plan.lattice.residuals)


def residual_plan(
    W, wt, eps, delta, *, neighbors, max_records, objective, max_memory, scale_bits, search
) -> ResidualPlan:
    """The :class:`ResidualPlan` of W (its terms ``wt``, a union of marginals): the lattice
    plan, its memory (refused above ``max_memory``), the exact noise; data-independent."""
    plan, subsets, rw = lattice_plan(wt, delta, objective, search)
    rows = wt.rows
    need = _memory(plan, rows)
    if need > max_memory:
        raise ValueError(
            f"the residual release would use about {need / 2**30:.1f} GiB (> max_memory "
            f"{max_memory / 2**30:.1f} GiB): {rows:,} answers over {len(plan.lattice.residuals):,} residuals"
        )
    mplan, note, needed = noise_plan(
        plan,
        wt,
        eps,
        delta,
        neighbors=neighbors,
        max_records=max_records,
        objective=objective,
        scale_bits=scale_bits,
        search=search,
    )
    return ResidualPlan(
        W,
        plan,
        mplan,
        (subsets, rw),
        tuple(wt.domain),
        tuple(needed) + ((),),
        note,
    )


def _residual_record(plan, mplan, meas, pure):
    """What the residual path measured, for :meth:`Release.to_dict` and re-analysis: the
    marginal tables (pure ε) or residuals (δ > 0) with their exact noise; no data in it."""
    lat = plan.lattice
    if pure:
        strategy = {
            "type": "weighted marginal tables",
            "tables": [list(t) for t in plan.tables],
            "weights": [float(v) for v in np.asarray(plan.theta)],
        }
        noise_ = {
            "distribution": "discrete_laplace",
            "scale": [float(b) for b in mplan.scales],
            "std": [math.sqrt(v) for v in mplan.table_variances],
            "grid": 1.0,
            "sensitivity": mplan.sensitivity,
            "secure_randomness": meas.secure,
        }
    else:
        strategy = {
            "type": "residual basis",
            "residuals": [list(t) for t in lat.residuals],
            "variances": [float(v) for v in np.asarray(plan.variances)],
        }
        noise_ = {
            "distribution": "discrete_gaussian",
            "scale": mplan.sigma,
            "per": "unit residual variance",
            "scale_bits": mplan.scale_bits,
            "shared_sampler_tables": mplan.shared_tables,
            "grid": 1.0,
            "sensitivity": mplan.sensitivity,
            "secure_randomness": meas.secure,
        }
    return {"strategy": strategy, "noise": noise_}


def check_search(search) -> None:
    """ValueError unless ``search`` (the pure-ε table weights' search) is one of
    "auto", "lattice", "all"."""
    if not isinstance(search, str):
        raise TypeError(
            f"search must be 'auto', 'lattice' or 'all', got {type(search).__name__}: {search!r}"
        )
    if search not in ("auto", "lattice", "all"):
        raise ValueError(f"search must be 'auto', 'lattice' or 'all', got {search!r}")


def given_search(source, d: int, search):
    """``search`` checked, "auto" read as "lattice" when the source holds given marginal
    tables none of which covers all ``d`` attributes (the keys, not the counts, decide):
    only W's lattice can then be summed out. The rule of the in-memory and the streamed
    release."""
    check_search(search)
    if search == "auto" and not _holds_superset(source, tuple(range(d))):
        return "lattice"
    return search


def _holds_superset(source, U):
    """False when the source holds a mapping of marginal tables none of which covers every
    attribute of U (decided from the keys only); True for records, engines and malformed keys
    (the table reader then names the problem)."""
    data = getattr(source, "data", None)
    if not isinstance(data, Mapping):
        return True
    try:
        keys = [{int(a) for a in k} for k in data]
    except (TypeError, ValueError):
        return True
    return any(set(U) <= k for k in keys)


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
    ``marginal_counts(subsets)``, or a mapping subset → table (:mod:`matmech.factored.tables`).
    ``W``: a Kron or a weighted stack of Krons (e.g. ``matmech.workloads.marginals``); the
    answers follow its rows. ``strategy``: ``"auto"`` (the residual path for a union of
    marginals on two or more attributes, :func:`matmech.factored.route.release_route`, as
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
    (:func:`matmech.factored.select.release_selected`; ``strategy`` "auto" or "optimize").
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
            f"(> max_memory {max_memory / 2**30:.1f} GiB); nothing was spent. A union of marginals "
            "this large is answered marginal by marginal (pure eps or delta > 0): "
            "`from matmech.factored import release_marginals; rel = release_marginals(data, W, "
            "eps, delta, budget=budget, rng=rng)` (data: the record codes, a mapping of "
            "marginal tables or the histogram) returns a MarginalRelease: rel.marginal(S), "
            "rel.iter_marginals(), rel.save(path)"
        )
    path, wt, at, U = plan_path(W, eps, delta, strategy=strategy, max_cells=max_cells)
    if (
        path == "kron"
        and strategy == "auto"
        and wt.marginals() is not None
        and not _holds_superset(data, U)
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
        from matmech.factored.gmarginal_release import release_gmarginal

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
