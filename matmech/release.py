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
from matmech.sources.source import HistogramSource, as_source, declared_cells, histogram_cells
from matmech.plans.strategy import plan_variances as _answer_variances  # noqa: F401 (tests)
from matmech.plans.strategy import strategy_plan
from matmech.svt.options import DEFAULT_TARGET_REL_ERROR, SELECT_OPTIONS, check_select_options
from matmech.workloads import ranges
from matmech.optimizers.blas import capped
from matmech.results.release import Z95, Release, release_table
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # names used only in annotations
    from matmech.privacy.randomness import Rng
    from matmech.privacy.budget import PrivacyBudget
    import numpy.typing as npt

__all__ = [
    "Release",
    "release",
    "release_table",
    "choose_strategy",
    "Z95",
    "SELECT_OPTIONS",
    "DEFAULT_TARGET_REL_ERROR",
]


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
    the factored path (:func:`matmech.plans.factored.release_factored`), which builds only
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
        from matmech.plans.factored import release_factored

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
    if planned:  # the planner's best plan of any kind (auto) or of one optimiser family
        plan = choose_plan(
            W, eps, delta, strategy=strategy, neighbors=neighbors, max_records=max_records
        )
    elif select is not None:
        plan = selected_plan(
            W,
            eps,
            delta,
            strategy=strategy,
            neighbors=neighbors,
            select=select,
            max_records=max_records,
            rho=target.rho,
        )
    else:
        A, name, note = choose_strategy(W, eps, delta, strategy=strategy, neighbors=neighbors)
        A = as_linop(A)
        if A.shape[1] != n:
            raise ValueError(
                f"shape mismatch: the strategy has {A.shape[1]} columns but x has {n} cells"
            )
        plan = strategy_plan(
            W,
            A,
            eps,
            delta,
            neighbors=neighbors,
            max_records=max_records,
            name=name,
            note=note,
            rho=target.rho,
        )
    return run_plan(plan, source, budget=budget, rng=rng)
