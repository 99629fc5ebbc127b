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
is charged, so a failure spends nothing and draws nothing. The route follows from W and the
strategy alone (:func:`matmech.factored.route.release_route`): a union of marginals on two or
more attributes with ``strategy="auto"`` (or ``"residual"``) is measured from marginal tables
(the residual basis, :mod:`matmech.factored`), a histogram x being summed into them; records,
marginal tables or a data source in place of x go to the factored path too, which never
builds the histogram.

With ``select=`` a private row selection runs first (:func:`matmech.select_rows`, the sparse
vector technique or the exponential mechanism, Lyu, Su, Li, VLDB 2017; or a free-gap
mechanism, Ding et al., PVLDB 2019, whose gaps are then combined with the measurement). It
reads x too; its ε comes out of the total, and the whole (ε, δ) is charged in one atomic
spend before the selection's first noise draw; only the selected rows are then measured
and answered. Which rows were selected is itself a DP output, so choosing
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
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import scipy.sparse as sp

from matmech.privacy import noise
from matmech import strategies as S
from matmech.error import MAX_VARIANCE_ROWS, expected_error, measured_variances
from matmech.inference import least_squares
from matmech.advisor.choice import choose_strategy, fixed_choice, per_attribute
from matmech.linalg.linop import LinOp, as_linop
from matmech.privacy.budget import check_affordable, check_budget
from matmech.privacy.params import check_neighbors, check_privacy_params, rest_of
from matmech.privacy.measure import (
    integer_valued,
    check_counts,
    check_max_records,
    check_records,
    execute,
    plan_measurement,
)
from matmech.factored.route import release_route
from matmech.factored.terms import as_terms
from matmech.svt.combine import answer_basis, answer_covariance, combine_selection
from matmech.svt.curse import DEFAULT_MARGIN, guard
from matmech.svt.select import (
    DEFAULT_TARGET_REL_ERROR,
    SELECT_OPTIONS,
    advised_select_eps,
    check_select_options,
    selection_arguments,
    shown_select_options,
    check_selection,
    plan_selection,
    run_selection,
    take_rows,
)
from matmech.workloads import ranges
from matmech.validate import rectangular
from matmech.optimizers.blas import capped
from matmech.record import Z95, Release, gap_record, release_table, strategy_record
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


def _declared_cells(domain, n):
    """The declared number of cells (an int or a :class:`matmech.io.domain.Domain`); x must match it."""
    if domain is None:
        return None
    if isinstance(domain, numbers.Integral) and not isinstance(domain, (bool, np.bool_)):
        cells = int(domain)
    elif isinstance(getattr(domain, "n", None), numbers.Integral) and hasattr(domain, "sizes"):
        cells = int(domain.n)
    else:
        raise TypeError(
            f"domain must be a number of cells or a matmech.io.domain.Domain, got {type(domain).__name__}"
        )
    if cells <= 0:
        raise ValueError(f"domain must have at least one cell, got {cells}")
    if cells != n:
        raise ValueError(
            f"x has {n} cells but the declared domain has {cells}: x must be the histogram over the "
            "domain (matmech.histogram), not raw values"
        )
    return cells


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
    from matmech.factored.terms import as_terms

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


def _as_workload(W, n, domain=None):
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


def _answer_variances(W, plan):
    """Per-answer variances for the measured strategy and the discrete noise actually used."""
    return measured_variances(W, plan.strategy, plan.std**2)


def _record(
    meas, answered, W, var, *, budget, name, note, neighbors, eps=None, delta=None, **record
):
    """Reconstruct from ``meas`` (post-processing), answer the rows ``answered`` (W or its
    selected rows) and wrap it in a :class:`Release` of W; ``eps``/``delta`` default to the
    measurement's."""
    xhat = least_squares(meas)
    answers = answered.matvec(xhat)
    std = np.sqrt(var)
    for arr in (answers, xhat, std):
        arr.setflags(write=False)
    return Release(
        answers=answers,
        std=std,
        expected_error=float(var.sum()),
        workload=W,
        strategy=meas.strategy,
        strategy_name=name,
        strategy_note=note + ("; entries rounded to a power-of-two grid" if meas.rounded else ""),
        eps=meas.eps if eps is None else eps,
        delta=meas.delta if delta is None else delta,
        neighbors=neighbors,
        budget_remaining=None if budget is None else budget.remaining,
        measurement=meas,
        estimate=xhat,
        measurements=(strategy_record(meas),),
        **record,
    )


def _release_rows(x, W, A, eps, delta, *, budget, rng, neighbors, name, note, max_records):
    """Measure A on x and answer every row of W. Every data-independent check (the plan,
    whether A answers W, the budget) runs before x is read."""
    plan = plan_measurement(A, eps, delta, neighbors=neighbors, max_records=max_records)
    var = _answer_variances(W, plan)  # raises if A cannot answer W: nothing spent yet
    what = f"release {W.shape[0]} queries ({name})"
    check_affordable(budget, plan.eps, plan.delta, what=what)
    x = check_counts(x, W.shape[1])
    check_records(x, plan.max_records)  # the declared bound; the message never carries the total
    if budget is not None:
        budget.spend(plan.eps, plan.delta, what=what)  # the one atomic spend, before any noise
    meas = execute(plan, x, rng=rng)
    return _record(meas, W, W, var, budget=budget, name=name, note=note, neighbors=neighbors)


# -- release with a private row selection in front ----------------------------------------


def _late_plan(sub, eps_m, delta, *, strategy, neighbors, max_records):
    """Strategy, plan and variances for the selected rows (strategy 'auto'/'optimize').

    Runs after the selection: it sees only the selected rows (a DP output) and W, never x,
    so falling back to the best fixed strategy when the choice fails is post-processing.
    """
    try:
        A, name, note = choose_strategy(sub, eps_m, delta, strategy=strategy, neighbors=neighbors)
        plan = plan_measurement(
            as_linop(A), eps_m, delta, neighbors=neighbors, max_records=max_records
        )
        return plan, _answer_variances(sub, plan), name, note + "; chosen for the selected rows"
    except (ValueError, MemoryError, np.linalg.LinAlgError) as exc:
        A, name, note = fixed_choice(sub, eps_m, delta, neighbors)
        note += f" for the selected rows (strategy={strategy!r} failed for them: {str(exc).splitlines()[0]})"
        plan = plan_measurement(A, eps_m, delta, neighbors=neighbors, max_records=max_records)
        return plan, _answer_variances(sub, plan), name, note


@dataclass(frozen=True, eq=False)
class _SelectedPlan:
    """Everything a release with selection decides before it reads x."""

    opts: Mapping
    eps_measure: float
    select: Mapping  # the checked keyword arguments of plan_selection
    late: bool  # the strategy is chosen for the selected rows ('auto' / 'optimize')
    plan: object  # the measurement plan for the whole workload (None when late)
    var_full: np.ndarray | None  # each row's variance under that plan (threshold='auto')
    name: str
    note: str


def _advised_select_eps(W, eps, delta, opts, *, strategy, neighbors):
    """The selection's share of ``eps`` for a gap method when the user gives none
    (:func:`matmech.svt.combine.advise_split`): data independent (W, the strategy, ε, δ, c).

    The strategy is the one chosen for the whole workload at the full ε (the share does
    not change which strategy is best, only its noise scale)."""
    from matmech.error import per_query_variance

    A, _, _ = choose_strategy(W, eps, delta, strategy=strategy, neighbors=neighbors)
    A = as_linop(A)
    unit = per_query_variance(W, A, 1.0, 0.0, neighbors=neighbors).mean()  # Laplace: ∝ 1/ε²

    def row_variance(e_m):
        if delta > 0:
            return float(per_query_variance(W, A, e_m, delta, neighbors=neighbors).mean())
        return float(unit / e_m**2)

    return advised_select_eps(
        W, eps, opts, row_variance, neighbors=neighbors, integer_values=integer_valued(W)
    )


def _plan_selected(W, eps, delta, *, strategy, neighbors, select, max_records):
    """The data-independent part of a release with selection: options, thresholds and, where
    the strategy is known in advance, its plan (it must answer every row of W)."""
    opts = check_select_options(select, eps)
    if opts["eps"] is None:
        opts["eps"] = _advised_select_eps(
            W, eps, delta, opts, strategy=strategy, neighbors=neighbors
        )
        opts["_advised"] = True
    eps_m = rest_of(eps, opts["eps"])
    late = isinstance(strategy, str) and strategy in ("auto", "optimize")
    auto_thr = isinstance(opts["threshold"], str)
    plan = var_full = None
    name = note = ""
    if not late or auto_thr:
        A, name, note = choose_strategy(W, eps_m, delta, strategy=strategy, neighbors=neighbors)
        A = as_linop(A)
        if A.shape[1] != W.shape[1]:
            raise ValueError(
                f"shape mismatch: the strategy has {A.shape[1]} columns but x has {W.shape[1]} cells"
            )
        plan = plan_measurement(A, eps_m, delta, neighbors=neighbors, max_records=max_records)
        if auto_thr:
            var_full = _answer_variances(W, plan)
        else:
            expected_error(W, A, eps_m, delta, neighbors=neighbors)  # raises if A cannot answer W
    if late:  # the fallback for the selected rows must work whatever is selected
        plan_measurement(
            per_attribute(W, S.identity), eps_m, delta, neighbors=neighbors, max_records=max_records
        )
    threshold = opts["threshold"]
    if auto_thr:
        # answer row i only if std_i <= target · count_i, i.e. count_i >= std_i / target
        threshold = np.sqrt(var_full) / opts["target_rel_error"]
    sel = selection_arguments(opts, c=opts["c"], threshold=threshold, neighbors=neighbors)
    check_selection(W, **sel)
    return _SelectedPlan(
        MappingProxyType(opts), eps_m, MappingProxyType(sel), late, plan, var_full, name, note
    )


def _nothing_selected(W, eps, delta, *, budget, neighbors, record):
    empty = np.zeros(0)
    empty.setflags(write=False)
    return Release(
        answers=empty,
        std=empty,
        expected_error=0.0,
        workload=W,
        strategy=None,
        strategy_name="none",
        strategy_note="no row was selected, so nothing was measured (the measurement's share was reserved "
        "with the selection and is spent)",
        eps=eps,
        delta=delta,
        neighbors=neighbors,
        budget_remaining=None if budget is None else budget.remaining,
        measurement=None,
        estimate=None,
        **record,
    )


def _release_selected(x, W, eps, delta, *, strategy, budget, rng, neighbors, select, max_records):
    """release(..., select=...): select rows privately, then measure and answer only those.

    Order: every data-independent check (:func:`_plan_selected`, the rng, the budget) → x is
    checked → the whole (ε, δ) is charged in one atomic spend → the selection draws its noise
    → the strategy for the selected rows (from the selection and W only) → the measurement
    draws its noise. Nothing after the spend reads x except the two noisy mechanisms, and
    nothing branches on x.
    """
    plan_sel = _plan_selected(
        W,
        eps,
        delta,
        strategy=strategy,
        neighbors=neighbors,
        select=select,
        max_records=max_records,
    )
    noise.check_rng(rng)
    what = f"release with selection ({plan_sel.opts['method']}, up to {plan_sel.opts['c']} of {W.shape[0]} queries)"
    check_affordable(budget, eps, delta, what=what)
    # -- reads x from here on ---------------------------------------------------------------
    sel_plan = plan_selection(
        W, x, max_records=max_records, **plan_sel.select
    )  # checks x and the declared bound
    x = check_counts(x, W.shape[1])
    if budget is not None:
        budget.spend(eps, delta, what=what)  # selection and measurement, reserved at once
    sel = run_selection(sel_plan, rng=rng)
    rows = np.sort(np.asarray(sel.rows, dtype=np.int64))
    rows.setflags(write=False)
    record = dict(
        selected=rows,
        selection=sel,
        eps_select=plan_sel.opts["eps"],
        select_options=MappingProxyType(shown_select_options(plan_sel.opts)),
    )
    if rows.size == 0:
        return _nothing_selected(W, eps, delta, budget=budget, neighbors=neighbors, record=record)
    sub = take_rows(W, rows)
    if plan_sel.late:
        plan, var, name, note = _late_plan(
            sub,
            plan_sel.eps_measure,
            delta,
            strategy=strategy,
            neighbors=neighbors,
            max_records=max_records,
        )
    else:
        plan, name, note = (
            plan_sel.plan,
            plan_sel.name,
            plan_sel.note + "; measured for the selected rows",
        )
        var = (
            plan_sel.var_full[rows]
            if plan_sel.var_full is not None
            else _answer_variances(sub, plan)
        )
    meas = execute(plan, x, rng=rng)
    out = _record(
        meas,
        sub,
        W,
        var,
        budget=budget,
        name=name,
        note=note,
        neighbors=neighbors,
        eps=eps,
        delta=delta,
        **record,
    )
    return out if sel.gap is None else _with_gaps(out, sub, rows, sel, plan_sel)


def _with_gaps(out, sub, rows, sel, plan_sel):
    """The measured answers combined with the selection's free gaps (or vector values) by
    :func:`matmech.svt.combine.combine_selection`, with exact per-answer variances; if the
    k×k covariance is too large to form, the measured answers are kept and the note says so."""
    import dataclasses

    try:
        cov = answer_covariance(sub, out.measurement.strategy, out.measurement.std**2)
    except ValueError as exc:
        return dataclasses.replace(
            out,
            strategy_note=out.strategy_note + f"; gaps not combined ({str(exc).splitlines()[0]})",
        )
    est, var, what, gm = combine_selection(
        out.answers, cov, rows, sel, plan_sel.select["threshold"], basis=answer_basis(sub)
    )
    gaps = gap_record(take_rows(out.workload, np.asarray(gm.positions)), gm, sel)
    est, var, near = guard(out.answers, np.clip(np.diag(cov), 0.0, None), est, var, rows, sel)
    near.setflags(write=False)
    if near.any():
        what += (
            f"; {int(near.sum())} row(s) selected by less than {DEFAULT_MARGIN:g} std answered from the "
            "measurement alone (flagged in near_threshold)"
        )
    std = np.sqrt(var)
    for arr in (est, std):
        arr.setflags(write=False)
    opts = dict(out.select_options)
    opts["_combined"], opts["_mechanism"] = True, sel.mechanism
    return dataclasses.replace(
        out,
        answers=est,
        std=std,
        expected_error=float(var.sum()),
        strategy_note=out.strategy_note + what,
        select_options=MappingProxyType(opts),
        measurements=out.measurements + (gaps,),
        near_threshold=near,
    )


class _EngineSource:
    """Records (a DataFrame, an Arrow table, a CSV/Parquet path, ...) read through the data
    engine with the declared Domain: marginal tables computed where the data lives."""

    def __init__(self, source, domain):
        self.source, self.domain = source, domain

    def marginal_counts(self, subsets):
        from matmech.io.engines import marginal_counts

        return marginal_counts(self.source, self.domain, subsets)


class _HistogramTables:
    """A histogram over W's product domain as a source of marginal tables (the tables route):
    the tables the plan asks for are summed out of x when it reads them, after the
    affordability check; x's length is checked against the domain up front (a shape, not data)."""

    def __init__(self, x, domain, W):
        self.sizes = tuple(as_terms(W, name="W").domain)
        self.x = x
        n = _cells(x)
        if n != math.prod(self.sizes):
            raise ValueError(
                f"shape mismatch: the workload spans {math.prod(self.sizes):,} cells "
                f"(attribute sizes {list(self.sizes)}) but x has {n:,}"
            )
        _declared_cells(domain, n)

    def marginal_counts(self, subsets):
        x = check_counts(self.x, math.prod(self.sizes)).reshape(self.sizes)
        d = len(self.sizes)
        return {tuple(s): x.sum(axis=tuple(i for i in range(d) if i not in s)) for s in subsets}


def _factored_data(x, domain):
    """The data of a factored release (records, marginal tables or a data source), or None
    when x is a histogram over the declared domain (decided from types and shapes only)."""
    if isinstance(x, Mapping) or hasattr(x, "marginal_counts"):
        return x
    if isinstance(x, np.ndarray):
        return x if x.ndim == 2 else None
    if domain is not None and hasattr(domain, "sizes") and not isinstance(x, (list, tuple)):
        return _EngineSource(x, domain)  # a table or file: the engine applies the domain
    return None


def _cells(x):
    """The number of cells of the histogram x (its declared domain size); reads no count."""
    arr = (
        x.to_numpy()
        if hasattr(x, "to_numpy") and not isinstance(x, np.ndarray)
        else np.asarray(rectangular(x, "x"))
    )
    if arr.ndim != 1:
        raise ValueError(f"x must be a 1-D vector of counts (the histogram), got shape {arr.shape}")
    return arr.shape[0]


@capped
def release(
    x: Any,
    W: LinOp | npt.ArrayLike | Sequence[tuple[int, int]],
    eps: float,
    delta: float = 0.0,
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
    the factored path (:func:`matmech.factored.release.release_factored`), which builds only
    marginal tables, never the histogram. ``domain``: the declared domain (a number of cells
    or a Domain); a histogram x must have exactly its cells, and is required when W is a
    list of intervals (the domain is never taken from len(x)).
    ``W``: a workload LinOp, or a list of inclusive 0-based (lo, hi) intervals over the
    declared domain. ``strategy``: see :func:`choose_strategy`. ``budget``: a PrivacyBudget
    charged after every check and before any noise. ``rng``: None for the OS CSPRNG
    (secure); a numpy Generator for reproducible experiments only (NOT secure).

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
    eps : float
        The total ε in [1e-4, 100].
    delta : float, default 0.0
        0 for pure ε-DP, else in [1e-100, 1).
    strategy : str or LinOp, default "auto"
        ``"auto"``, ``"identity"``, ``"hierarchical"``, ``"haar"``, ``"optimize"`` or an
        operator (e.g. from :func:`load_strategy`).
    budget : PrivacyBudget or Ledger, optional
        Charged once, before the first noise draw.
    rng : numpy.random.Generator, optional
        None (default) for the OS CSPRNG; a Generator is reproducible and NOT secure.
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
    eps, delta = check_privacy_params(eps, delta)
    check_neighbors(neighbors)
    check_budget(budget)
    max_records = check_max_records(max_records)
    noise.check_rng(rng)
    data = _factored_data(x, domain)
    if data is None and isinstance(W, LinOp) and release_route(W, strategy).name == "tables":
        data = _HistogramTables(
            x, domain, W
        )  # the route follows from W and the strategy, not from x
    if data is not None:
        _check_factored_domain(domain, W)
        if select is not None:
            check_select_options(
                select, eps
            )  # the explicit path's option rules, before anything is read
        from matmech.factored.release import release_factored

        return release_factored(
            data,
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
    n = _cells(x)
    _declared_cells(domain, n)
    W = _as_workload(W, n, domain)
    if select is not None:
        return _release_selected(
            x,
            W,
            eps,
            delta,
            strategy=strategy,
            budget=budget,
            rng=rng,
            neighbors=neighbors,
            select=select,
            max_records=max_records,
        )
    A, name, note = choose_strategy(W, eps, delta, strategy=strategy, neighbors=neighbors)
    A = as_linop(A)
    if A.shape[1] != n:
        raise ValueError(
            f"shape mismatch: the strategy has {A.shape[1]} columns but x has {n} cells"
        )
    return _release_rows(
        x,
        W,
        A,
        eps,
        delta,
        budget=budget,
        rng=rng,
        neighbors=neighbors,
        name=name,
        note=note,
        max_records=max_records,
    )
