"""Selection then measurement on the histogram: one adaptive plan, charged once.

With ``release(x, W, ..., select=...)`` a private row selection runs first
(:func:`matmech.select_rows`: the sparse vector technique or the exponential mechanism, Lyu,
Su, Li, VLDB 2017; or a free-gap mechanism, Ding et al., PVLDB 2019). Its ε comes out of the
total and the whole (ε, δ) is charged in one atomic spend before the selection's first draw
(:func:`matmech.run.runner.run_plan`); only the selected rows are then measured and
answered. Which rows were selected is a DP output, so choosing the strategy for them
afterwards (``strategy`` "auto"/"optimize") is post-processing.

Every answer rests on the measurement alone, whatever the method: the measurement's noise is
drawn after the selection, independently of it, so given the selection each answer is
unbiased and its law (:meth:`matmech.results.release.Release.interval_law`) is that of the measurement's
own draws. A free-gap or vector selection's gaps and noisy values are released
(``Release.selection.gap``) but never combined into the answers: a row is selected *because*
its selecting draw came out high, so conditioned on the selection that draw is biased (the
winner's curse; docs/guide/selection.md measures the bias and the cost of leaving it out).

Order: every data-independent check (:func:`selected_plan`) → affordability → x read and
checked, W x computed (:func:`matmech.svt.select.plan_selection`) → one spend → the
selection's draws → the strategy for the selected rows (from the selection and W only) →
the measurement's draws. Nothing after the spend reads x except the two noisy mechanisms.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import numpy as np

from matmech import strategies as S
from matmech.advisor.choice import choose_strategy, fixed_choice, per_attribute
from matmech.error import expected_error, per_query_variance
from matmech.linalg.linop import LinOp, as_linop
from matmech.plans.strategy import measured_estimate, plan_variances
from matmech.plans.plan import Draws, Estimate
from matmech.privacy.measure import check_counts, execute, integer_valued, plan_measurement
from matmech.privacy.accountant import zcdp_epsilon
from matmech.privacy.calibration import gaussian_rho
from matmech.privacy.events import ApproxDP, Concentrated, float_down, float_up
from matmech.privacy.params import exact, rest_of
from matmech.measurements.record import strategy_record
from matmech.measurements.selection import MeasuredChoice, SelectionRecord, split_selection
from matmech.svt.options import check_select_options, selection_arguments, shown_select_options
from matmech.svt.rules import advised_select_eps, take_rows
from matmech.svt.select import check_selection, plan_selection, run_selection, selection_event
from matmech.svt.vector import VECTOR_METHODS


#: The note of a release whose selection found no row.
NOTHING_SELECTED = (
    "no row was selected, so nothing was measured (the measurement's share was reserved "
    "with the selection and is spent)"
)

#: What the note of a release adds when its selection released gaps or noisy values.
GAPS_NOT_COMBINED = (
    "; its {what} are released (selection.gap) but not combined into the answers: conditioned "
    "on being selected they are biased upwards (the winner's curse), so every answer rests on "
    "the measurement alone, drawn after the selection and independent of it"
)


def gaps_note(sel: Any) -> str:
    """The note's sentence on a selection's free gaps or noisy values ("" without them)."""
    if sel.gap is None:
        return ""
    if sel.mechanism in VECTOR_METHODS.values():
        head = (
            f"; selected by the Laplace mechanism on the whole vector ({sel.mechanism} in place "
            f"of {sel.method}, joint L1 sensitivity {sel.gap.calibration.sensitivity:g})"
        )
        return head + GAPS_NOT_COMBINED.format(what="noisy values")
    return f"; selected by {sel.mechanism}" + GAPS_NOT_COMBINED.format(what="free gaps")


def _late_plan(sub, eps_m, delta, *, strategy, neighbors, max_records, rho=None):
    """Strategy, plan and variances for the selected rows (strategy 'auto'/'optimize').

    Runs after the selection: it sees only the selected rows (a DP output) and W, never x,
    so falling back to the best fixed strategy when the choice fails is post-processing.
    """
    try:
        A, name, note = choose_strategy(sub, eps_m, delta, strategy=strategy, neighbors=neighbors)
        plan = plan_measurement(
            as_linop(A), eps_m, delta, neighbors=neighbors, max_records=max_records, rho=rho
        )
        return plan, plan_variances(sub, plan), name, note + "; chosen for the selected rows"
    except (ValueError, MemoryError, np.linalg.LinAlgError) as exc:
        A, name, note = fixed_choice(sub, eps_m, delta, neighbors)
        note += f" for the selected rows (strategy={strategy!r} failed for them: {str(exc).splitlines()[0]})"
        plan = plan_measurement(
            A, eps_m, delta, neighbors=neighbors, max_records=max_records, rho=rho
        )
        return plan, plan_variances(sub, plan), name, note


@dataclass(frozen=True, eq=False)
class SelectedPlan:
    """Everything a release with selection decides before it reads x
    (:class:`~matmech.plans.plan.Plan`). ``measurement``: the plan for the whole workload
    (None when ``late``: the strategy is chosen for the selected rows); ``var_full``: each
    row's variance under it (threshold='auto')."""

    workload: LinOp = field(repr=False)
    eps: float
    delta: float
    neighbors: str
    strategy: Any = field(repr=False)
    max_records: int
    opts: Mapping = field(repr=False)
    eps_measure: float
    select: Mapping = field(repr=False)
    late: bool
    measurement: Any = field(repr=False)
    var_full: np.ndarray | None = field(repr=False)
    name: str
    note: str
    rho_measure: float | None = None

    @property
    def events(self) -> tuple:
        """The selection's event (pure ε) and the measurement's: the noise it draws, or, when
        its strategy is chosen after the selection, the zCDP ρ (or pure ε) it is calibrated
        to (:mod:`matmech.privacy.events`)."""
        sel = selection_event(self.opts["method"], self.opts["eps"])
        if (
            self.measurement is not None and not self.late
        ):  # late: `measurement` only set the threshold
            return (sel, self.measurement.event)
        if self.delta == 0:
            return (sel, ApproxDP(self.eps_measure, 0.0))
        rho = self.rho_measure
        rho = gaussian_rho(self.eps_measure, self.delta) if rho is None else rho
        return (sel, Concentrated(rho, eps=self.eps_measure, delta=self.delta))

    @property
    def what(self) -> str:
        return (
            f"release with selection ({self.opts['method']}, up to {self.opts['c']} of "
            f"{self.workload.shape[0]} queries)"
        )

    @property
    def sizes(self) -> tuple:
        return (int(self.workload.shape[1]),)

    @property
    def subsets(self) -> tuple:
        return ((0,),)

    def check(self, tables):
        x = tables[(0,)]
        W = self.workload
        sel_plan = plan_selection(W, x, max_records=self.max_records, **self.select)
        return sel_plan, check_counts(x, W.shape[1])

    def draw(self, data, *, rng) -> Draws:
        sel_plan, x = data
        sel = run_selection(sel_plan, rng=rng)
        rows = np.sort(np.asarray(sel.rows, dtype=np.int64))
        if rows.size == 0:
            return Draws((SelectionRecord(sel, rows),))
        sub = take_rows(self.workload, rows)
        if self.late:
            mplan, var, name, note = _late_plan(
                sub,
                self.eps_measure,
                self.delta,
                strategy=self.strategy,
                neighbors=self.neighbors,
                max_records=self.max_records,
                rho=self.rho_measure,
            )
        else:
            mplan, name, note = (
                self.measurement,
                self.name,
                self.note + "; measured for the selected rows",
            )
            var = self.var_full[rows] if self.var_full is not None else plan_variances(sub, mplan)
        meas = execute(mplan, x, rng=rng)
        chosen = SelectionRecord(sel, rows, MeasuredChoice(mplan, var, name, note))
        return Draws((chosen, strategy_record(meas)))

    def estimate(self, draws: Draws) -> Estimate:
        """The least squares of the selected rows from the records alone: the
        :class:`~matmech.measurements.selection.SelectionRecord` (rows, the selection, the
        strategy chosen for its rows) and the measurement's record."""
        chosen, measured = split_selection(draws.records)
        fields = selection_fields(self.opts, chosen.rows, chosen.result)
        fields["measurements"] = measured  # the selection is listed as ``selection``
        if chosen.choice is None:
            return nothing_selected(fields)
        c = chosen.choice
        sub = take_rows(self.workload, chosen.rows)
        note = c.note + gaps_note(chosen.result)
        return measured_estimate(
            measured, c.plan, sub, c.variances, name=c.name, note=note, **fields
        )


def selection_fields(opts: Mapping, rows: np.ndarray, sel: Any) -> dict:
    """The selection's Release fields of a release with selection: ``selected``,
    ``selection``, ``eps_select``, ``select_options`` (the shown options)."""
    return dict(
        selected=rows,
        selection=sel,
        eps_select=float(opts["eps"]),
        select_options=MappingProxyType(shown_select_options(opts)),
    )


def nothing_selected(fields: dict) -> Estimate:
    """The estimate of a release whose selection found no row: nothing measured, no answer."""
    fields.update(strategy_name="none", strategy_note=NOTHING_SELECTED)
    return Estimate.of_variances(np.zeros(0), np.zeros(0), fields)


def _advised_select_eps(W, eps, delta, opts, *, strategy, neighbors):
    """The selection's share of ``eps`` for a gap method when the user gives none
    (:func:`matmech.svt.combine.advise_split`): data independent (W, the strategy, ε, δ, c).

    The strategy is the one chosen for the whole workload at the full ε (the share does
    not change which strategy is best, only its noise scale)."""
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


def selected_plan(
    W: LinOp,
    eps: float,
    delta: float,
    *,
    strategy: Any,
    neighbors: str,
    select: Mapping,
    max_records: int,
    rho: float | None = None,
) -> SelectedPlan:
    """The data-independent part of a release with selection → :class:`SelectedPlan`:
    options, thresholds and, where the strategy is known in advance, its plan (it must
    answer every row of W).

    Parameters
    ----------
    W : LinOp
        The workload (over the histogram's cells).
    eps, delta : float
        The release's total privacy parameters (checked).
    strategy : str or LinOp
        As :func:`matmech.release`.
    neighbors : str
        The neighbouring relation.
    select : dict
        The options of ``release(..., select=...)``.
    max_records : int
        The declared bound on the number of records (checked).
    rho : float, optional
        A zCDP share's ρ (``eps``, ``delta`` then the guarantee it implies): the selection
        (pure ``select['eps']``, ρ = ε²/2) and the measurement split it in ρ.

    Returns
    -------
    SelectedPlan
        The plan; :func:`matmech.run.runner.run_plan` runs it.

    Raises
    ------
    ValueError
        Bad options or a strategy that cannot answer W; nothing is spent.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> p = selected_plan(W.identity(8), 1.0, 0.0, strategy="identity",
    ...                   neighbors="add_remove", select=dict(method="em", c=2, eps=0.5),
    ...                   max_records=2**32)
    >>> p.eps, p.eps_measure, p.what
    (1.0, 0.5, 'release with selection (em, up to 2 of 8 queries)')
    """
    opts = check_select_options(select, eps)
    if opts["eps"] is None:
        opts["eps"] = _advised_select_eps(
            W, eps, delta, opts, strategy=strategy, neighbors=neighbors
        )
        opts["_advised"] = True
    rho_m = None
    if rho is not None:  # a share in ρ: the selection takes ε_s²/2, the measurement the rest
        if opts.get("_advised"):
            raise ValueError(
                "a release calibrated to a share's rho needs select['eps'] (the selection's pure "
                "eps; its rho eps**2/2 comes out of the share)"
            )
        rest = Fraction(rho) - Fraction(float_up(exact(opts["eps"]) ** 2 / 2))
        if rest <= 0:
            raise ValueError(
                f"select eps = {opts['eps']!r} costs rho = eps**2/2 = {float(exact(opts['eps']) ** 2 / 2)!r}, "
                f"not less than the share's rho = {rho!r}: nothing would be left to measure"
            )
        rho_m = float_down(rest)
        eps_m = zcdp_epsilon(rho_m, delta)
    else:
        eps_m = rest_of(eps, opts["eps"])
    late = isinstance(strategy, str) and strategy in ("auto", "optimize")
    auto_thr = isinstance(opts["threshold"], str)
    mplan = var_full = None
    name = note = ""
    if not late or auto_thr:
        A, name, note = choose_strategy(W, eps_m, delta, strategy=strategy, neighbors=neighbors)
        A = as_linop(A)
        if A.shape[1] != W.shape[1]:
            raise ValueError(
                f"shape mismatch: the strategy has {A.shape[1]} columns but x has {W.shape[1]} cells"
            )
        mplan = plan_measurement(
            A, eps_m, delta, neighbors=neighbors, max_records=max_records, rho=rho_m
        )
        if auto_thr:
            var_full = plan_variances(W, mplan)
        else:
            expected_error(W, A, eps_m, delta, neighbors=neighbors)  # raises if A cannot answer W
    if late:  # the fallback for the selected rows must work whatever is selected
        plan_measurement(
            per_attribute(W, S.identity),
            eps_m,
            delta,
            neighbors=neighbors,
            max_records=max_records,
            rho=rho_m,
        )
    threshold = opts["threshold"]
    if auto_thr:
        # answer row i only if std_i <= target · count_i, i.e. count_i >= std_i / target
        threshold = np.sqrt(np.asarray(var_full)) / opts["target_rel_error"]
    sel = selection_arguments(opts, c=opts["c"], threshold=threshold, neighbors=neighbors)
    check_selection(W, **sel)
    return SelectedPlan(
        W,
        eps,
        delta,
        neighbors,
        strategy,
        max_records,
        MappingProxyType(opts),
        eps_m,
        MappingProxyType(sel),
        late,
        mplan,
        var_full,
        name,
        note,
        rho_m,
    )
