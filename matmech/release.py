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
is charged, so a failure spends nothing and draws nothing.

With ``select=`` a private row selection runs first (:func:`matmech.select_rows`, the sparse
vector technique or the exponential mechanism; Lyu, Su, Li, VLDB 2017). It reads x too, so
it is charged its own ε (taken out of the total) before its noise; only the selected rows
are then measured and answered. Which rows were selected is itself a DP output, so choosing
the strategy for them afterwards is post-processing. Error bars are the exact
Matrix-Mechanism variances σ²·diag(W (A_gᵀA_g)⁺ Wᵀ) (Li et al., PODS 2010) for the matrix
actually measured and the variance of the discrete noise actually drawn; the 95% intervals
are the normal approximation answer ± 1.96·std (coverage can be slightly below 95% for an
answer that rests on very few Laplace draws).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import scipy.sparse as sp

from matmech.privacy import noise
from matmech import strategies as S
from matmech.error import MAX_VARIANCE_ROWS, expected_error, measured_variances
from matmech.inference import least_squares
from matmech.linalg.intervals import Intervals
from matmech.advisor.choice import choose_strategy, fixed_choice, per_attribute
from matmech.linalg.linop import LinOp, as_linop
from matmech.privacy.budget import check_affordable, check_budget
from matmech.privacy.params import check_neighbors, check_privacy_params, positive_real, rest_of
from matmech.privacy.measure import (
    Measurement,
    check_counts,
    check_max_records,
    check_records,
    execute,
    plan_measurement,
)
from matmech.svt.select import METHODS as SELECT_METHODS
from matmech.svt.select import Selection, check_selection, plan_selection, run_selection, take_rows
from matmech.workloads import ranges

__all__ = ["Release", "release", "release_table", "choose_strategy", "Z95", "SELECT_OPTIONS", "DEFAULT_TARGET_REL_ERROR"]

#: Two-sided 95% normal quantile.
Z95 = 1.959963984540054
#: Keys of release's ``select`` dict (the rest of select_rows' options come from release).
SELECT_OPTIONS = ("method", "eps", "c", "threshold", "target_rel_error", "monotonic", "ratio")
#: threshold="auto" answers a row when its std is at most this fraction of its count.
DEFAULT_TARGET_REL_ERROR = 0.1


@dataclass(frozen=True, eq=False)
class Release:
    """Noisy answers to a workload with their analytic error bars.

    ``answers`` = W x̂ for the answered rows; ``std`` the standard deviation of each answer;
    ``expected_error`` their total variance Σ std² (squared counts); ``strategy`` the
    matrix actually measured, chosen as ``strategy_name`` (``strategy_note`` says how);
    ``eps``/``delta`` what this release spent in total; ``budget_remaining`` what is left of
    the budget passed (or None).

    Without selection every row of ``workload`` is answered, in order, and ``selected`` is
    None. With selection (``release(..., select=...)``) ``answers``/``std`` cover only the
    selected rows: ``selected`` holds their row indices in W (ascending), ``answered`` is
    the boolean mask over W's rows, ``selection`` the :class:`~matmech.svt.select.Selection`
    record and ``eps_select`` its share of ``eps``. The other rows have no answer at all —
    never a NaN in ``answers`` — and :func:`release_table` marks them (below threshold, not
    examined, or not among the top c). ``full(fill=...)`` spreads the answers over all rows
    with a fill value the caller must choose. When nothing is selected nothing is measured:
    ``answers`` is empty, ``measurement``/``strategy`` are None and only ``eps_select`` is spent.
    """

    answers: np.ndarray
    std: np.ndarray
    expected_error: float
    workload: LinOp = field(repr=False)
    strategy: LinOp | None = field(repr=False)
    strategy_name: str
    strategy_note: str
    eps: float
    delta: float
    neighbors: str
    budget_remaining: tuple | None
    measurement: Measurement | None = field(repr=False)
    estimate: np.ndarray | None = field(repr=False)
    selected: np.ndarray | None = None
    selection: Selection | None = field(default=None, repr=False)
    eps_select: float = 0.0
    select_options: Mapping | None = field(default=None, repr=False)

    @property
    def spent(self):
        """(ε, δ) spent by this release (selection included)."""
        return (self.eps, self.delta)

    @property
    def answered(self):
        """Boolean mask over the rows of the workload: True where there is an answer."""
        mask = np.zeros(self.workload.shape[0], dtype=bool)
        mask[slice(None) if self.selected is None else self.selected] = True
        return mask

    def full(self, *, fill):
        """Answers as a vector over all rows of the workload, ``fill`` where there is none.

        ``fill`` has no default on purpose: choose 0, NaN or a sentinel knowingly.
        """
        out = np.full(self.workload.shape[0], fill, dtype=np.float64)
        out[slice(None) if self.selected is None else self.selected] = self.answers
        return out

    def interval(self, level=0.95):
        """(lower, upper) normal-approximation intervals answer ∓ z·std (answered rows)."""
        z = _z(level)
        return self.answers - z * self.std, self.answers + z * self.std

    def plot(self, **kwargs):
        """Bars of the answers with their intervals (needs matplotlib); see :func:`matmech.plot.plot_release`."""
        from matmech.plot import plot_release

        return plot_release(self, **kwargs)

    def _selection_dict(self):
        sel, opts = self.selection, dict(self.select_options)
        out = {
            "method": sel.method,
            "eps": self.eps_select,
            "eps_measure": None if self.measurement is None else self.measurement.eps,
            "c": sel.c,
            "threshold": opts["threshold"] if sel.method == "svt" else None,
            "selected": int(self.selected.size),
            "candidates": sel.n_candidates,
            "stopped_at_c": sel.stopped,
            "monotonic": sel.monotonic,
            "row_sensitivity": sel.sensitivity,
        }
        if opts["threshold"] == "auto":
            out["target_rel_error"] = opts["target_rel_error"]
            out["threshold_rule"] = "row i is tested against std_i / target_rel_error"
        return out

    def to_dict(self, *, labels=None, include_estimate=False):
        """A JSON-ready dict: the privacy spent, strategy, noise, selection, one row per query."""
        m = self.measurement
        n_ans = self.answers.size
        out = {
            "eps": self.eps,
            "delta": self.delta,
            "neighbors": self.neighbors,
            "budget_remaining": None if self.budget_remaining is None else list(self.budget_remaining),
            "expected_error": self.expected_error,
            "rmse": math.sqrt(self.expected_error / n_ans) if n_ans else None,
            "answered": n_ans,
            "queries_total": self.workload.shape[0],
            "strategy": None
            if m is None
            else {
                "name": self.strategy_name,
                "note": self.strategy_note,
                "type": type(self.strategy).__name__,
                "shape": list(self.strategy.shape),
                "rounded_to_grid": m.rounded,
            },
            "noise": None
            if m is None
            else {
                "distribution": m.noise,
                "scale": m.scale,
                "std": m.std,
                "grid": m.grid,
                "sensitivity": m.sensitivity,
                "secure_randomness": m.secure,
            },
            "selection": None if self.selection is None else self._selection_dict(),
            "queries": release_table(self, labels),
        }
        if include_estimate and self.estimate is not None:
            out["estimate"] = self.estimate.tolist()
        return out

    def to_json(self, *, labels=None, include_estimate=False, **json_kwargs):
        """:meth:`to_dict` as a JSON string (keyword arguments go to ``json.dumps``)."""
        return json.dumps(self.to_dict(labels=labels, include_estimate=include_estimate), **json_kwargs)

    def __repr__(self):
        m = self.answers.size
        rmse = f"{math.sqrt(self.expected_error / m):.4g}" if m else "-"
        sel = "" if self.selected is None else f" of {self.workload.shape[0]} (selected by {self.selection.method})"
        return (
            f"Release({m} answers{sel}, strategy={self.strategy_name!r}, eps={self.eps:g}, delta={self.delta:g}, "
            f"rmse={rmse})"
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


def _unanswered_notes(release):
    """Why each row of W has no answer: SVT examines rows in order and stops at the c-th hit."""
    sel = release.selection
    m = release.workload.shape[0]
    if sel.method == "em":
        return np.full(m, "not among the top c", dtype=object)
    notes = np.full(m, "below threshold", dtype=object)
    if sel.stopped and sel.rows.size:
        notes[int(sel.rows.max()) + 1 :] = "not examined (c rows already found)"
    return notes


def release_table(release, labels=None, *, level=0.95):
    """One dict per query of the workload: ``query`` (label), ``answer``, ``std``, ``lower``, ``upper``.

    ``labels`` (one per row of the workload) defaults to ``"[lo, hi]"`` for interval
    workloads and ``"q<i>"`` otherwise; the interval is answer ∓ z·std at ``level`` (normal
    approximation; default 95%). For a release with selection every row of the workload is
    listed with ``selected`` (True/False) and ``status``: ``"answered"``, ``"below
    threshold"``, ``"not examined (c rows already found)"`` or ``"not among the top c"``;
    unanswered rows have ``None`` for answer, std and interval.
    """
    if not isinstance(release, Release):
        raise TypeError(f"expected a Release, got {type(release).__name__}")
    m = release.workload.shape[0]
    labels = _default_labels(release.workload) if labels is None else list(labels)
    if len(labels) != m:
        raise ValueError(f"got {len(labels)} labels for {m} queries")
    lower, upper = release.interval(level)
    if release.selected is None:
        return [
            {"query": str(q), "answer": float(a), "std": float(s), "lower": float(lo), "upper": float(hi)}
            for q, a, s, lo, hi in zip(labels, release.answers, release.std, lower, upper)
        ]
    notes = _unanswered_notes(release)
    rows = [
        {"query": str(q), "selected": False, "status": note, "answer": None, "std": None, "lower": None, "upper": None}
        for q, note in zip(labels, notes)
    ]
    for i, a, s, lo, hi in zip(release.selected.tolist(), release.answers, release.std, lower, upper):
        rows[i].update(selected=True, status="answered", answer=float(a), std=float(s), lower=float(lo), upper=float(hi))
    return rows


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


def _answer_variances(W, plan):
    """Per-answer variances for the measured strategy and the discrete noise actually used."""
    return measured_variances(W, plan.strategy, plan.std**2)


def _record(meas, answered, W, var, *, budget, name, note, neighbors, eps=None, delta=None, **record):
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


def _check_select(select, eps):
    """The validated ``select`` options (defaults filled in); raises before anything is spent."""
    if not isinstance(select, Mapping):
        raise TypeError(
            "select must be a dict of select_rows options, e.g. dict(method='svt', threshold=2000, c=50, eps=0.3), "
            f"got {type(select).__name__}: {select!r}"
        )
    unknown = sorted(str(k) for k in select if k not in SELECT_OPTIONS)
    if unknown:
        raise ValueError(
            f"unknown select option(s) {unknown}: expected keys from {list(SELECT_OPTIONS)} "
            "(neighbors, budget and rng are release's own arguments)"
        )
    for key in ("eps", "c"):
        if key not in select:
            raise ValueError(f"select needs {key!r} (got keys {sorted(map(str, select))})")
    opts = dict(method="svt", threshold=None, target_rel_error=None, monotonic="auto", ratio="optimal")
    opts.update(select)
    if opts["method"] not in SELECT_METHODS:
        raise ValueError(f"select method must be one of {SELECT_METHODS}, got {opts['method']!r}")
    opts["eps"] = positive_real(opts["eps"], "select eps")
    if opts["eps"] >= eps:
        raise ValueError(
            f"select eps = {opts['eps']!r} must be less than release's total eps = {eps!r}: "
            "the selection's eps comes out of the total and the rest measures the selected rows"
        )
    thr = opts["threshold"]
    is_auto = isinstance(thr, str) and thr == "auto"
    if opts["method"] == "svt":
        if thr is None or (isinstance(thr, str) and not is_auto):
            raise ValueError(f"select method='svt' needs a threshold: a number, one number per row, or 'auto'; got {thr!r}")
    elif thr is not None:
        raise ValueError(f"select method='em' picks the c largest rows and takes no threshold; got threshold={thr!r}")
    if is_auto:
        t = DEFAULT_TARGET_REL_ERROR if opts["target_rel_error"] is None else opts["target_rel_error"]
        opts["target_rel_error"] = positive_real(t, "select target_rel_error")
    elif opts["target_rel_error"] is not None:
        raise ValueError(f"select target_rel_error is only used with threshold='auto' (threshold is {thr!r})")
    return opts


def _shown_options(opts):
    """The select options for the record: a per-row threshold array is summarised."""
    out = dict(opts)
    thr = out["threshold"]
    if thr is not None and not isinstance(thr, str):
        out["threshold"] = float(thr) if np.ndim(thr) == 0 else "one per row"
    return MappingProxyType(out)


def _late_plan(sub, eps_m, delta, *, strategy, neighbors, max_records):
    """Strategy, plan and variances for the selected rows (strategy 'auto'/'optimize').

    Runs after the selection: it sees only the selected rows (a DP output) and W, never x,
    so falling back to the best fixed strategy when the choice fails is post-processing.
    """
    try:
        A, name, note = choose_strategy(sub, eps_m, delta, strategy=strategy, neighbors=neighbors)
        plan = plan_measurement(as_linop(A), eps_m, delta, neighbors=neighbors, max_records=max_records)
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


def _plan_selected(W, eps, delta, *, strategy, neighbors, select, max_records):
    """The data-independent part of a release with selection: options, thresholds and, where
    the strategy is known in advance, its plan (it must answer every row of W)."""
    opts = _check_select(select, eps)
    eps_m = rest_of(eps, opts["eps"])
    late = isinstance(strategy, str) and strategy in ("auto", "optimize")
    auto_thr = isinstance(opts["threshold"], str)
    plan = var_full = None
    name = note = ""
    if not late or auto_thr:
        A, name, note = choose_strategy(W, eps_m, delta, strategy=strategy, neighbors=neighbors)
        A = as_linop(A)
        if A.shape[1] != W.shape[1]:
            raise ValueError(f"shape mismatch: the strategy has {A.shape[1]} columns but x has {W.shape[1]} cells")
        plan = plan_measurement(A, eps_m, delta, neighbors=neighbors, max_records=max_records)
        if auto_thr:
            var_full = _answer_variances(W, plan)
        else:
            expected_error(W, A, eps_m, delta, neighbors=neighbors)  # raises if A cannot answer W
    if late:  # the fallback for the selected rows must work whatever is selected
        plan_measurement(per_attribute(W, S.identity), eps_m, delta, neighbors=neighbors, max_records=max_records)
    threshold = opts["threshold"]
    if auto_thr:
        # answer row i only if std_i <= target · count_i, i.e. count_i >= std_i / target
        threshold = np.sqrt(var_full) / opts["target_rel_error"]
    sel = dict(c=opts["c"], eps=opts["eps"], threshold=threshold, method=opts["method"],
               monotonic=opts["monotonic"], ratio=opts["ratio"], neighbors=neighbors)
    check_selection(W, **sel)
    return _SelectedPlan(MappingProxyType(opts), eps_m, MappingProxyType(sel), late, plan, var_full, name, note)


def _nothing_selected(W, eps, delta, *, budget, neighbors, record):
    empty = np.zeros(0)
    empty.setflags(write=False)
    return Release(
        answers=empty, std=empty, expected_error=0.0, workload=W, strategy=None, strategy_name="none",
        strategy_note="no row was selected, so nothing was measured (the measurement's share was reserved "
        "with the selection and is spent)", eps=eps, delta=delta,
        neighbors=neighbors, budget_remaining=None if budget is None else budget.remaining,
        measurement=None, estimate=None, **record,
    )


def _release_selected(x, W, eps, delta, *, strategy, budget, rng, neighbors, select, max_records):
    """release(..., select=...): select rows privately, then measure and answer only those.

    Order: every data-independent check (:func:`_plan_selected`, the rng, the budget) → x is
    checked → the whole (ε, δ) is charged in one atomic spend → the selection draws its noise
    → the strategy for the selected rows (from the selection and W only) → the measurement
    draws its noise. Nothing after the spend reads x except the two noisy mechanisms, and
    nothing branches on x.
    """
    plan_sel = _plan_selected(W, eps, delta, strategy=strategy, neighbors=neighbors, select=select,
                         max_records=max_records)
    noise.check_rng(rng)
    what = f"release with selection ({plan_sel.opts['method']}, up to {plan_sel.opts['c']} of {W.shape[0]} queries)"
    check_affordable(budget, eps, delta, what=what)
    # -- reads x from here on ---------------------------------------------------------------
    sel_plan = plan_selection(W, x, max_records=max_records, **plan_sel.select)  # checks x and the declared bound
    x = check_counts(x, W.shape[1])
    if budget is not None:
        budget.spend(eps, delta, what=what)  # selection and measurement, reserved at once
    sel = run_selection(sel_plan, rng=rng)
    rows = np.sort(np.asarray(sel.rows, dtype=np.int64))
    rows.setflags(write=False)
    record = dict(selected=rows, selection=sel, eps_select=plan_sel.opts["eps"], select_options=_shown_options(plan_sel.opts))
    if rows.size == 0:
        return _nothing_selected(W, eps, delta, budget=budget, neighbors=neighbors, record=record)
    sub = take_rows(W, rows)
    if plan_sel.late:
        plan, var, name, note = _late_plan(sub, plan_sel.eps_measure, delta, strategy=strategy, neighbors=neighbors,
                                           max_records=max_records)
    else:
        plan, name, note = plan_sel.plan, plan_sel.name, plan_sel.note + "; measured for the selected rows"
        var = plan_sel.var_full[rows] if plan_sel.var_full is not None else _answer_variances(sub, plan)
    meas = execute(plan, x, rng=rng)
    return _record(meas, sub, W, var, budget=budget, name=name, note=note, neighbors=neighbors,
                   eps=eps, delta=delta, **record)


def _cells(x):
    """The number of cells of the histogram x (its declared domain size); reads no count."""
    arr = x.to_numpy() if hasattr(x, "to_numpy") and not isinstance(x, np.ndarray) else np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"x must be a 1-D vector of counts (the histogram), got shape {arr.shape}")
    return arr.shape[0]


def release(x, W, eps, delta=0.0, *, strategy="auto", budget=None, rng=None, neighbors="add_remove", select=None,
            max_records=None):
    """Answer workload W on counts x under (ε, δ)-DP with the Matrix Mechanism → :class:`Release`.

    ``x``: the histogram (non-negative integer counts; see :func:`matmech.histogram`).
    ``W``: a workload LinOp, or a list of inclusive 0-based (lo, hi) intervals over the
    cells of x. ``strategy``: see :func:`choose_strategy`. ``budget``: a PrivacyBudget
    charged after every check and before any noise. ``rng``: None for the OS CSPRNG
    (secure); a numpy Generator for reproducible experiments only (NOT secure).

    ``select``: None (answer every row) or a dict of :func:`matmech.select_rows` options
    choosing the rows worth answering first: ``eps`` (required; comes out of the total
    ``eps``, which must be larger), ``c`` (required; at most c rows), ``method`` ("svt",
    default, or "em"), ``threshold`` (svt: a number, one number per row, or ``"auto"``),
    ``target_rel_error`` (with ``"auto"``, default 0.1), ``monotonic`` ("auto", True,
    False), ``ratio``. ``threshold="auto"`` tests row i against std_i / target_rel_error,
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
    """
    eps, delta = check_privacy_params(eps, delta)
    check_neighbors(neighbors)
    check_budget(budget)
    max_records = check_max_records(max_records)
    noise.check_rng(rng)
    n = _cells(x)
    W = _as_workload(W, n)
    if select is not None:
        return _release_selected(x, W, eps, delta, strategy=strategy, budget=budget, rng=rng, neighbors=neighbors,
                                 select=select, max_records=max_records)
    A, name, note = choose_strategy(W, eps, delta, strategy=strategy, neighbors=neighbors)
    A = as_linop(A)
    if A.shape[1] != n:
        raise ValueError(f"shape mismatch: the strategy has {A.shape[1]} columns but x has {n} cells")
    return _release_rows(x, W, A, eps, delta, budget=budget, rng=rng, neighbors=neighbors, name=name, note=note,
                         max_records=max_records)
