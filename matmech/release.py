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

Every release is one plan (:mod:`matmech.plans`) built from W, the strategy, ε, δ and the
declared domain, run by :func:`matmech.run.runner.run_plan`: every data-independent check
(shapes, ε/δ, budget type, whether A supports W) runs while the plan is built, the budget's
affordability before anything is read, the data checks before the one spend, so a failure
spends nothing and draws nothing. The data is a :class:`~matmech.sources.source.DataSource`
(:func:`~matmech.sources.source.as_source`: a histogram, records, marginal tables or an
engine); the route follows from W and the strategy alone
(:func:`matmech.plans.route.release_route`): a union of marginals on two or more
attributes with ``strategy="auto"`` (or ``"residual"``, or ``"optimize"`` under δ > 0) is
measured from marginal tables (the
residual basis, :mod:`matmech.plans.residual`), a histogram x being summed into them; records,
marginal tables or a data source in place of x go to the factored path too, which never
builds the histogram.

With ``select=`` a private row selection runs first (:func:`matmech.select_rows`, the sparse
vector technique or the exponential mechanism, Lyu, Su, Li, VLDB 2017; or a free-gap
mechanism, Ding et al., PVLDB 2019, whose gaps are then combined with the measurement): one
adaptive plan (:mod:`matmech.plans.selected`). It reads x too; its ε comes out of the
total, and the whole (ε, δ) is charged in one atomic spend before the selection's first
noise draw; only the selected rows are then measured and answered. Which rows were selected is itself a DP output, so choosing
the strategy for them afterwards is post-processing. Error bars are the exact
Matrix-Mechanism variances σ²·diag(W (A_gᵀA_g)⁺ Wᵀ) (Li et al., PODS 2010) for the matrix
actually measured and the variance of the discrete noise actually drawn; the 95% intervals
are the normal approximation answer ± 1.96·std (coverage can be slightly below 95% for an
answer that rests on very few Laplace draws).

This module is where plans are run (issue 34): the entries above plans/ and run/ —
:func:`release`, the factored paths (:func:`release_factored`, the generalised-marginal and
selected factored releases) and :func:`release_marginals` (the streamed residual release,
whose answers are reconstructed on demand) — build a plan without data and hand it to
:func:`~matmech.run.runner.run_plan`, the one caller of the one spend.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import numpy as np
import scipy.sparse as sp

from matmech.privacy import noise
from matmech.error import MAX_VARIANCE_ROWS
from matmech.advisor.choice import choose_strategy
from matmech.linalg.linop import LinOp, as_linop
from matmech.privacy.budget import check_budget, privacy_target
from matmech.privacy.params import check_neighbors, check_privacy_params
from matmech.privacy.measure import check_max_records
from matmech.plans.route import release_route
from matmech.linalg.terms import as_terms
from matmech.plans.plan import Plan
from matmech.plans.planned import PLANNED, choose_plan
from matmech.run.runner import run_plan
from matmech.plans.selected import selected_plan
from matmech.io.domain import Domain
from matmech.sources.source import (
    EngineSource,
    HistogramSource,
    as_source,
    declared_cells,
    histogram_cells,
)
from matmech.plans.strategy import plan_variances as _answer_variances  # noqa: F401 (tests)
from matmech.plans.strategy import strategy_plan
from matmech.svt.options import check_select_options
from matmech.workloads import ranges
from matmech.optimizers.blas import capped
from matmech.results.release import Release
from matmech.results.store import MarginalRelease
from matmech.limits import check_memory
from matmech.linalg.terms import MarginalWorkload, restrict
from matmech.measurements.residual import DEFAULT_SCALE_BITS, MAX_MEMORY
from matmech.plans.factored import MAX_KRON_CELLS, plan_path
from matmech.plans.factored_selected import SelectedRowsPlan
from matmech.plans.factored_selection import plan_factored_selection
from matmech.plans.gmarginal import gmarginal_plan, gmarginal_strategy
from matmech.plans.residual import (
    MARGINAL_BY_MARGINAL,
    check_search,
    covers_attributes,
    given_search,
    residual_plan,
)
from matmech.plans.streamed import streamed_plan
from matmech.privacy.budget import check_affordable
from matmech.sources.source import as_table_source
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # names used only in annotations
    from matmech.privacy.randomness import Rng
    from matmech.privacy.budget import PrivacyBudget
    import numpy.typing as npt


# -- the release ------------------------------------------------------------------------------


def _check_factored_domain(domain, W):
    """release(records | tables | source, W, domain=...): the declared domain must be W's
    (its attribute sizes for a Domain, its number of cells for an int); types and shapes
    only, nothing read from the data."""
    if domain is None:
        return
    if hasattr(domain, "sizes") and isinstance(getattr(domain, "n", None), numbers.Integral):
        sizes = tuple(int(s) for s in domain.sizes)
    elif isinstance(domain, numbers.Integral) and not isinstance(domain, (bool, np.bool_)):
        sizes = None
    else:
        raise TypeError(
            f"domain must be a number of cells or a matmech.io.domain.Domain, got {type(domain).__name__}"
        )
    wt = as_terms(W, name="W")
    if sizes is None:
        if int(domain) != math.prod(wt.domain):
            raise ValueError(
                f"the declared domain has {int(domain):,} cells but W is over {math.prod(wt.domain):,} "
                f"(attribute sizes {wt.domain})"
            )
    elif sizes != tuple(wt.domain):
        raise ValueError(
            f"the declared domain's attribute sizes {sizes} differ from W's {tuple(wt.domain)}"
        )


def _as_workload(W, n, domain=None) -> LinOp:
    if isinstance(W, LinOp):
        pass
    elif sp.issparse(W):
        W = as_linop(W)
    else:
        if domain is None:
            raise ValueError(
                "W is a list of intervals but no domain was declared: pass domain=<number of cells> or a "
                "Domain (the domain is never taken from len(x): x might be raw values, not counts)"
            )
        try:
            W = ranges(n, W)
        except (TypeError, ValueError) as exc:
            raise type(exc)(
                f"W must be a workload LinOp or a list of (lo, hi) intervals over {n} cells: {exc}"
            ) from None
    if W.shape[1] != n:
        raise ValueError(
            f"shape mismatch: the workload has {W.shape[1]} columns but x has {n} cells"
        )
    if W.shape[0] > MAX_VARIANCE_ROWS:
        raise ValueError(
            f"the workload has {W.shape[0]:,} queries; release answers at most {MAX_VARIANCE_ROWS:,}"
        )
    return W


def _tables_route_histogram(x, domain, W):
    """A histogram x on the tables route: its length must be the product of W's attribute
    sizes (and the declared domain's); a shape, never a count."""
    sizes = tuple(as_terms(W, name="W").domain)
    n = histogram_cells(x)
    if n != math.prod(sizes):
        raise ValueError(
            f"shape mismatch: the workload spans {math.prod(sizes):,} cells "
            f"(attribute sizes {list(sizes)}) but x has {n:,}"
        )
    declared_cells(domain, n)


@capped
def release(
    x: Any,
    W: LinOp | npt.ArrayLike | Sequence[tuple[int, int]],
    eps: float | None = None,
    delta: float | None = None,
    *,
    strategy: str | LinOp = "auto",
    budget: PrivacyBudget | None = None,
    rng: Rng = None,
    neighbors: str = "add_remove",
    select: Mapping[str, Any] | None = None,
    max_records: int | None = None,
    domain: Any = None,
) -> Release:
    """Answer workload W on counts x under (ε, δ)-DP with the Matrix Mechanism → :class:`Release`.

    ``x``: the histogram (non-negative integer counts; see :func:`matmech.histogram`) — or,
    for tables with many attributes, the records themselves (a records × attributes code
    array), a mapping attribute subset → marginal table, or a data source (DataFrame, Arrow
    table, CSV/Parquet path) with ``domain`` a :class:`matmech.io.domain.Domain` (with records or
    tables a given ``domain`` must match W's attribute sizes, else ValueError): these take
    the factored path (:func:`matmech.release.release_factored`), which builds only
    marginal tables, never the histogram. ``domain``: the declared domain (a number of cells
    or a Domain); a histogram x must have exactly its cells, and is required when W is a
    list of intervals (the domain is never taken from len(x)).
    ``W``: a workload LinOp, or a list of inclusive 0-based (lo, hi) intervals over the
    declared domain. ``strategy``: see :func:`choose_strategy`. ``budget``: a PrivacyBudget
    charged the release's privacy events (the noise it draws, composed by the budget's
    accountant) after every check and before any noise; with ``eps`` (and ``delta``) left out
    it must be a share (``budget.split(k)``) and the release calibrates to all of it: Gaussian
    noise to its zCDP ρ, pure-ε noise (``delta=0``, or a share of a pure-ε budget) to
    ε = sqrt(2ρ) or its ε; with ``select`` the selection's pure ``select['eps']`` costs
    ρ = ε²/2 and the measurement the rest (with selection, the explicit histogram path only:
    a factored selected release needs ``eps``; the factored path calibrates Gaussian noise to
    the (ε, δ) that ρ implies, whose σ never charges more than ρ). ``rng``: None for the secure CTR_DRBG (secure); a numpy Generator for
    reproducible experiments only (NOT secure).

    ``select``: None (answer every row) or a dict of :func:`matmech.select_rows` options
    choosing the rows worth answering first: ``eps`` (required; comes out of the total
    ``eps``, which must be larger), ``c`` (required; at most c rows), ``method`` ("svt",
    default, "em", or the free-gap methods "topc-gap", "svt-gap", "adaptive-svt", whose gaps
    are combined with the measured answers; with these ``eps`` may be left out and is then
    advised), ``threshold`` (svt: a number, one number per row, or ``"auto"``),
    ``target_rel_error`` (with ``"auto"``, default 0.1), ``monotonic`` ("auto", True,
    False), ``ratio``, ``sigma`` (adaptive-svt's top-branch margin: "auto" or a number),
    ``vector`` ("auto" default, True, False: "topc-gap"/"svt-gap" run as the Laplace
    mechanism on the whole vector W x when that puts less noise on each score,
    :mod:`matmech.svt.vector`). ``threshold="auto"`` tests row i against std_i / target_rel_error,
    std_i being the analytic std of its answer under the strategy for the whole workload
    at the measurement's ε (ε − select ε) and δ: a row is answered when its relative error
    std_i / count_i would be at most the target. (For a named or given strategy std_i is
    exactly the std the answer gets; with "auto"/"optimize" the strategy is re-chosen for
    the selected rows, which lowers their total error.) The selection is pure ε-DP; the
    measurement spends ε − select ε and δ; the budget is charged for each before its noise.
    Monotonic SVT noise is used only where valid (non-negative rows, add/remove neighbours);
    ``monotonic=True`` otherwise raises.

    ``max_records``: the declared bound on the number of records Σx (default
    :data:`matmech.privacy.measure.MAX_RECORDS` = 2**32). It sets the grid that keeps A x exact;
    x with more records is refused before anything is spent, with a message that never
    contains the total. With ``select``, the whole (ε, δ) is charged in one atomic spend
    before the selection's first noise draw (a concurrent spender can never leave a
    selection paid for and its measurement refused).

    Raises ValueError/TypeError, spending nothing, on bad input or a strategy that cannot
    answer W; an exhausted budget raises BudgetExceededError before x is read.

    Parameters
    ----------
    x : array_like, mapping or data source
        The histogram, or records / marginal tables / a data source (factored path).
    W : LinOp, array_like or list of (lo, hi)
        The workload.
    eps : float, optional
        The total ε in [1e-4, 100]; left out only with a share as ``budget``.
    delta : float, optional
        0 (default) for pure ε-DP, else in [1e-100, 1).
    strategy : str or LinOp, default "auto"
        ``"auto"``, ``"identity"``, ``"hierarchical"``, ``"haar"``, ``"optimize"`` or an
        operator (e.g. from :func:`load_strategy`).
    budget : PrivacyBudget or Ledger, optional
        Charged once, before the first noise draw.
    rng : numpy.random.Generator, optional
        None (default) for the secure CTR_DRBG; a Generator is reproducible and NOT secure.
    neighbors : {"add_remove", "substitute"}, default "add_remove"
        The neighbouring relation.
    select : dict, optional
        Selection options (above).
    max_records : int, optional
        The declared bound on the number of records.
    domain : int or Domain, optional
        The declared domain.

    Returns
    -------
    Release
        The answers, their exact standard deviations and what was spent.

    Raises
    ------
    ValueError
        Bad input, a strategy that cannot answer W, or anything too large; nothing is spent.
    TypeError
        Arguments of the wrong kind.
    BudgetExceededError
        The budget cannot afford (ε, δ); raised before x is read.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> x = histogram([0, 1, 1, 3], 4)
    >>> r = release(x, W.prefix(4), 1.0, strategy="identity", rng=np.random.default_rng(0))
    >>> r.answers.shape, r.strategy_name, r.eps
    ((4,), 'identity', 1.0)
    """
    check_budget(budget)
    target = privacy_target(eps, delta, budget)
    eps, delta = check_privacy_params(target.eps, target.delta)
    check_neighbors(neighbors)
    max_records = check_max_records(max_records)
    noise.check_rng(rng)
    source = as_source(x, domain)
    factored = True
    planned = select is None and isinstance(strategy, str) and strategy in PLANNED
    if isinstance(source, HistogramSource):
        x = source.x  # shapes below are checked on the histogram itself
        factored = (
            not planned
            and isinstance(W, LinOp)
            and release_route(W, strategy, delta=delta).name == "tables"
        )
        if factored:  # the route follows from W and the strategy, never from x
            _tables_route_histogram(x, domain, W)
    if factored:
        if target.rho is not None and select is not None:
            raise ValueError(
                "a release with selection calibrated to a share's rho (eps left out) runs on the "
                "explicit histogram path only; this workload takes the factored path: pass eps and delta"
            )
        _check_factored_domain(domain, W)
        if select is not None:
            check_select_options(select, eps)  # the explicit path's option rules, before any read

        return release_factored(
            source,
            W,
            eps,
            delta,
            strategy=strategy,
            budget=budget,
            rng=rng,
            neighbors=neighbors,
            max_records=max_records,
            select=select,
        )
    n = histogram_cells(x)
    declared_cells(domain, n)
    W = _as_workload(W, n, domain)
    plan: Plan
    declared: dict[str, Any] = dict(neighbors=neighbors, max_records=max_records)
    if planned:  # the planner's best plan of any kind (auto) or of one optimiser family
        plan = choose_plan(W, eps, delta, strategy=strategy, **declared)
    elif select is not None:
        plan = selected_plan(
            W, eps, delta, strategy=strategy, select=select, rho=target.rho, **declared
        )
    else:
        A, name, note = choose_strategy(W, eps, delta, strategy=strategy, neighbors=neighbors)
        A = as_linop(A)
        if A.shape[1] != n:
            raise ValueError(
                f"shape mismatch: the strategy has {A.shape[1]} columns but x has {n} cells"
            )
        plan = strategy_plan(W, A, eps, delta, name=name, note=note, rho=target.rho, **declared)
    return run_plan(plan, source, budget=budget, rng=rng)


@dataclass(frozen=True)
class _Factored:
    """The options of a factored release (:func:`release_factored`, :func:`release_marginals`),
    checked once at that boundary and handed to every route."""

    eps: float
    delta: float
    budget: PrivacyBudget | None
    rng: Rng
    neighbors: str
    max_records: int | None
    max_memory: int = MAX_MEMORY
    scale_bits: int | None = DEFAULT_SCALE_BITS
    objective: str = "sum"
    search: str = "auto"

    def options(self, *names: str) -> dict[str, Any]:
        """The plan options ``neighbors``, ``max_records`` and those ``names``, by keyword."""
        return {k: getattr(self, k) for k in ("neighbors", "max_records", *names)}

    def run(self, plan: Plan, data: Any) -> Any:
        """``plan`` run on ``data`` (:func:`~matmech.run.runner.run_plan`), charged to the budget."""
        return run_plan(plan, data, budget=self.budget, rng=self.rng)


def _release_kron(data, W, wt, at, U, o: _Factored, *, strategy):
    W_U = restrict(wt, U)
    if at is not None:
        A_U, name, note = restrict(at, U), "given", "strategy given by the caller"
    else:
        A, name, note = choose_strategy(
            W_U, o.eps, o.delta, strategy=strategy, neighbors=o.neighbors
        )
        A_U = as_linop(A)
    note += f"; solved on the marginal of attributes {list(U)} ({math.prod(wt.domain[i] for i in U):,} cells)"
    plan = strategy_plan(
        W_U,
        A_U,
        o.eps,
        o.delta,
        **o.options(),
        name=name,
        note=note,
        sizes=tuple(wt.domain),
        attributes=U,
        workload=W,
    )
    return o.run(plan, data)


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
    (:func:`matmech.release.release_selected`; ``strategy`` "auto" or "optimize").
    """
    eps, delta = check_privacy_params(eps, delta)
    check_neighbors(neighbors)
    check_budget(budget)
    max_records = check_max_records(max_records)
    noise.check_rng(rng)
    data = as_table_source(data)
    check_search(search)
    o = _Factored(
        eps, delta, budget, rng, neighbors, max_records, max_memory, scale_bits, objective
    )
    if select is not None:
        return release_selected(data, W, o, select=select, strategy=strategy)
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
            **o.options(),
            search=given_search(data, len(as_terms(W, name="W").domain), search),
            covers=lambda S: covers_attributes(data, S),
            max_cells=max_cells,
        )
        return o.run(plan, data)
    path, wt, at, U = plan_path(W, eps, delta, strategy=strategy, max_cells=max_cells)
    if (
        path == "kron"
        and strategy == "auto"
        and wt.marginals() is not None
        and not covers_attributes(data, U)
    ):
        path = "residual"  # tables that suffice for W's marginals: the Kronecker path would need the table on U
    o = replace(o, search=given_search(data, len(wt.domain), search))
    if path == "kron":
        return _release_kron(data, W, wt, at, U, o, strategy=strategy)
    if path == "gmarginal":
        return release_gmarginal(data, W, wt, at, o)
    plan = residual_plan(
        W, wt, eps, delta, **o.options("objective", "max_memory", "scale_bits", "search")
    )
    return o.run(plan, data)


def release_gmarginal(data, W, wt, A, o: _Factored):
    """Answer W (its :class:`~matmech.linalg.terms.Terms` ``wt``) from the marginal tables
    of ``data`` on the subsets of the GeneralMarginalStrategy ``A`` (None: optimised) →
    :class:`~matmech.results.release.Release` (``strategy`` the measured one, with its rounded factors;
    ``measurement`` and ``estimate`` None). The options ``o`` of
    :func:`matmech.release.release_factored`, already validated there."""
    what = f"release {wt.rows} queries (gmarginals, factored)"
    # before the (seconds-long) optimisation too
    check_affordable(o.budget, o.eps, o.delta, what=what)
    A, name, note = gmarginal_strategy(W, o.eps, o.delta, A)
    options = o.options("max_memory", "scale_bits")
    plan = gmarginal_plan(W, wt, A, o.eps, o.delta, **options, name=name, note=note)
    return o.run(plan, as_table_source(data))


def release_selected(data, W, o: _Factored, *, select, strategy="auto"):
    """Select rows of W privately from marginal tables of ``data``, measure only those →
    :class:`matmech.release.Release` (``selected``, ``selection``, ``eps_select`` as for
    :func:`matmech.release` with ``select=``). Called by
    :func:`matmech.release.release_factored` with its options ``o``, checked there.


    Order (:func:`matmech.run.runner.run_plan`): every data-independent check
    (:func:`plan_factored_selection`, the rng, the budget's affordability) → the marginal
    tables and the declared bound on the records → W x → one atomic spend of (ε, δ) → the
    selection's noise → the measurement's noise.
    """
    options = o.options("max_memory")
    plan = plan_factored_selection(W, o.eps, o.delta, select=select, strategy=strategy, **options)
    noise.check_rng(o.rng)
    return o.run(SelectedRowsPlan(plan, W), as_table_source(data))


def release_marginals(
    data: Any,
    W: LinOp,
    eps: float | None = None,
    delta: float | None = None,
    *,
    budget: PrivacyBudget | None = None,
    rng: Rng = None,
    neighbors: str = "add_remove",
    max_records: int | None = None,
    objective: str = "sum",
    max_memory: int = MAX_MEMORY,
    scale_bits: int = DEFAULT_SCALE_BITS,
    spill_dir: str | None = None,
    search: str = "auto",
    domain: Any = None,
) -> MarginalRelease:
    """Answer W (a union of marginals, any size) under (ε, δ)-DP or pure ε-DP with the
    residual plan, in bounded memory → :class:`MarginalRelease`.

    The same plan, noise and draws as :func:`matmech.release.release_factored`'s
    residual path (equal answers for equal ``rng``), but the answers are reconstructed on
    demand. δ > 0: every residual measured with exact discrete Gaussian noise; δ = 0: the
    weighted marginal tables of the pure-ε plan with exact discrete Laplace noise, each
    batch combined into the residuals (inverse-variance means) as it is drawn, the noisy
    tables dropped. It is the :class:`StreamedPlan` run by
    :func:`matmech.run.runner.run_plan`: affordability → the data checked once → one
    spend → draws batch by batch.

    Parameters
    ----------
    data : numpy.ndarray, Mapping, DataFrame, Arrow table or path
        Records as a 2-D integer code array (records × attributes), a mapping subset →
        marginal table, or a histogram (1-D counts over the cells), all checked once before
        the spend; or, with ``domain`` a :class:`matmech.io.domain.Domain`, a table or file
        the data engine reads (pandas/Polars DataFrame, Arrow table, CSV/Parquet path, Spark
        DataFrame, as :func:`matmech.release`): every table the plan reads is counted in the
        engine before the spend (one scan per batch of tables that fits ``max_memory``),
        kept in a file in ``spill_dir`` and checked, then read batch by batch after it.
    W : LinOp
        A union of marginals (:func:`matmech.linalg.terms.marginal_workload` or Kron terms
        of identities and totals).
    eps, delta : float
        The privacy parameters (delta > 0: Gaussian residuals; delta = 0: pure ε, Laplace
        tables). Both left out with ``budget`` a share (``budget.split(k)``): all of the
        share, as :func:`matmech.release` takes it (Gaussian residuals at the (ε, δ) its ρ
        implies; ``delta=0``: pure ε = sqrt(2ρ)).
    budget : PrivacyBudget, optional
        Charged its privacy events once (the residuals' discrete Gaussian: its zCDP ρ under
        the ``"zcdp"`` accountant), after every check and before the first draw.
    rng : numpy.random.Generator or None
        The randomness (None: the secure default, an AES-256 CTR_DRBG seeded from os.urandom; a seeded generator is NOT secure).
    neighbors, max_records, objective, scale_bits
        As :func:`matmech.release.release_factored` (pure ε: ``objective="sum"``
        only; ``scale_bits`` rounds the Laplace scales up).
    max_memory : int
        Bytes the release may hold (:func:`streamed_memory`); the stored residuals stay in
        RAM when they fit with the rest, else they go to a file in ``spill_dir``.
    spill_dir : str or None
        Where the stored residuals go: None keeps them in RAM when they fit, else in a file
        in the system's temporary directory; a directory always puts them in a file there.
        The file is removed with the release.
    search : str
        Pure ε: the tables' weights over the lattice (``"lattice"``) or every attribute
        subset (``"all"``); ``"auto"`` as :func:`~matmech.release.release_factored`
        (given tables without the full table: ``"lattice"``).
    domain : Domain, optional
        The declared domain of a table or file read by the data engine (its attribute sizes
        must be W's).

    Returns
    -------
    MarginalRelease
        The answers on demand (``marginal(S)``, ``iter_marginals()``, ``save(path)``,
        ``to_release()``); std in the units of the answers (counts).

    Raises
    ------
    ValueError
        Before any spend: W not a union of marginals, eps too small for the exact samplers,
        the working set over ``max_memory``, too little disk for the spill file, bad record
        codes or tables, records beyond ``max_records``.
    TypeError
        A data engine object without a declared domain (nothing is read or spent).
    BudgetExceededError
        The budget cannot afford (eps, delta); nothing is read.

    Examples
    --------
    >>> import itertools, numpy as np
    >>> from matmech import release_marginals
    >>> from matmech.linalg.terms import marginal_workload
    >>> codes = np.random.default_rng(0).integers(0, 3, size=(500, 4))
    >>> W = marginal_workload((3,) * 4, list(itertools.combinations(range(4), 2)))
    >>> rel = release_marginals(codes, W, 1.0, 1e-6, rng=np.random.default_rng(1))
    >>> rel.rows
    54
    >>> pure = release_marginals(codes, W, 1.0, 0.0, rng=np.random.default_rng(1))
    >>> pure.delta, pure.marginal((0, 1))[1].shape
    (0.0, (3, 3))
    """
    check_budget(budget)
    if eps is None or delta is None:
        target = privacy_target(eps, delta, budget)
        eps, delta = target.eps, target.delta
    noise.check_rng(rng)
    if domain is not None and not isinstance(domain, Domain):
        raise TypeError(f"domain must be a matmech.io.domain.Domain, got {type(domain).__name__}")
    source = as_source(data, domain, name="data")
    if isinstance(source, EngineSource):
        w_sizes = tuple(
            W.domain if isinstance(W, MarginalWorkload) else as_terms(W, name="W").domain
        )
        if tuple(source.domain.sizes) != w_sizes:
            raise ValueError(
                f"the declared domain's attribute sizes {tuple(source.domain.sizes)} differ from "
                f"W's {w_sizes}"
            )
    if search == "auto":  # an unknown search is refused by streamed_plan
        d = len(W.domain if isinstance(W, MarginalWorkload) else as_terms(W, name="W").domain)
        search = given_search(source, d, search)
    o = _Factored(
        eps, delta, budget, rng, neighbors, max_records, max_memory, scale_bits, objective
    )
    options = o.options("objective", "max_memory", "scale_bits")
    return o.run(
        streamed_plan(W, eps, delta, **options, spill_dir=spill_dir, search=search), source
    )
