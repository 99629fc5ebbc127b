"""Private row selection on the factored path (issue 14, item 3): the sparse vector technique,
the exponential mechanism or a free-gap mechanism over the rows of a union of Kronecker
products (e.g. every cell of all 2-way marginals of 100 attributes), then a measurement of the
selected rows only — from marginal tables, never the histogram.

::

    W's terms, select options, ε, δ                          (no data)
      │ check_selection on W's entry range (row sensitivity, monotonic rule, thresholds, c);
      │ the worst case over every selection of at most c rows (sampler range, exact integers,
      │ the advised split of a gap method, threshold="auto"); memory; check_affordable
      ▼
    marginal tables of W's terms, each subset once → W x term by term, in W's row order
      ▼ budget.spend(ε, δ) once, before the first draw
    run_selection (matmech.svt.select: Lyu, Su, Li VLDB 2017; Ding et al. PVLDB 2019) → rows S
      ▼
    each selected row measured itself: row r of term j is w_j·u_r with u_r = ⊗ᵢ (row rᵢ of
    factor i) an integer rank-one Kronecker row, and

        y_r = u_r·x + Z_r,   Z_r ~ discrete Laplace(b), b·ε_m >= Δ₁(U_S)   (δ = 0)
                              Z_r ~ N_ℤ(0, σ²),  σ = gaussian_sigma(ε_m, δ, Δ₂(U_S))  (δ > 0)

    answers w_j·(P y)_r, P = U_S(U_SᵀU_S)⁺U_Sᵀ the least-squares projection (the identity
    when the rows are independent), from the Gram U_S U_Sᵀ of factor rows; covariance
    Var(Z)·(w wᵀ)∘P with the exact discrete variance (Li et al., PODS 2010), and the law of
    each answer's noise Σ_s w_r P_rs Z_s from the draws themselves (:class:`SelectedRowsLaw`:
    exact lattice quantiles when w_r P_r is integer, a binned convolution otherwise). A
    gap method's gaps or noisy values are released but never combined into the answers
    (the winner's curse: :mod:`matmech.plans.selected`).

Privacy. The selection is ε_s-DP with the row sensitivity of W (as :func:`matmech.release`).
Given the selection S (a DP output), measuring the k rows U_S with i.i.d. discrete Laplace
noise of scale b >= Δ₁/ε_m, Δ₁ the largest column L1 norm of U_S (times 2 for substitution),
is ε_m-DP on the integer lattice (Canonne, Kamath, Steinke, NeurIPS 2020); with the discrete
Gaussian it is Δ₂²/(2σ²)-zCDP, hence (ε_m, δ)-DP by :func:`~matmech.privacy.calibration.gaussian_sigma`.
Δ_p is found from the factors, never by enumerating the domain: for marginal cells it is the
largest set of pairwise consistent cells (a maximum clique, exact; past a node cap a
colouring bound), otherwise :func:`matmech.linalg.normmax.factored_sensitivity` on the k
rank-one terms (exact by branch and bound, else its certified upper bound, and never more
than the same bound for the whole terms the rows come from). By adaptive composition the
release is (ε_s + ε_m, δ)-DP; the whole (ε, δ) is charged in one spend before the
selection's first draw. Every limit of the measurement (sampler range, exact integers) is
checked before any data for the worst selection (c rows, 2c − 1 for adaptive SVT), so
nothing after the spend can fail or branch on x.

This is the same mechanism as :func:`matmech.release` with ``select=`` and ``strategy="auto"``
on the histogram whenever its advisor measures the selected rows themselves (it does for
pure ε and selected marginal cells); its error bars are exact for the noise drawn. Rows
carry their weight only in the answer (the integer row u_r is what is measured), so the
factors must be integer-valued (identity, total, prefix, 0/1 custom factors).

Modules: the data-independent plan :mod:`matmech.plans.factored_selection`, the selected rows'
sensitivity and span :mod:`matmech.plans.factored_rows`, and here the reading of W x and the
adaptive plan :class:`SelectedRowsPlan` that :func:`matmech.run.runner.run_plan` runs (names
re-exported here).
"""

from __future__ import annotations


from dataclasses import dataclass, field, replace

import numpy as np

from matmech.linalg.linop import LinOp
from matmech.privacy import noise
from matmech.privacy.calibration import gaussian_rho, neighbor_sensitivity
from matmech.privacy.events import ApproxDP, Concentrated
from matmech.plans.factored_selection import (
    FactoredSelectionPlan,
    measurement_noise,
)
from matmech.plans.factored_rows import row_basis, rows_sensitivity
from matmech.plans.plan import Draws, Estimate, check_record_count
from matmech.plans.selected import gaps_note, nothing_selected, selection_fields
from matmech.privacy.confidence import IntervalLaw, law_intervals
from matmech.measurements.record import MeasurementRecord
from matmech.measurements.selection import MeasuredChoice, SelectionRecord, split_selection
from matmech.linalg.terms import restrict
from matmech.svt.rules import take_rows
from matmech.svt.select import SelectionPlan, run_selection, selection_event


# -- the data-independent plan ---------------------------------------------------------------


# -- reading the data: W x term by term ------------------------------------------------------


def row_values(plan, tables):
    """Unweighted integer row answers u·x of every term (a list of int64 vectors, term order,
    each row-major over the term's non-total factors: W's row order) from the marginal tables."""
    terms, out = plan.terms, []
    for j, S in enumerate(plan.subsets):
        arr = np.asarray(tables[S], dtype=np.int64)
        for k, i in enumerate(S):
            if terms.kinds[j][i] == "I":
                continue
            m = np.rint(terms.factors[j][i].dense()).astype(
                np.int64
            )  # integer factor: exact in int64
            arr = np.moveaxis(np.tensordot(m, arr, axes=([1], [k])), 0, k)
        out.append(np.ascontiguousarray(arr).reshape(-1))
    return out


def _weighted(plan, parts):
    w = plan.terms.weights
    if plan.integer_values:
        return np.concatenate([np.int64(int(wj)) * u for wj, u in zip(w, parts)])
    return np.concatenate([wj * u.astype(np.float64) for wj, u in zip(w, parts)])


# -- the measurement of the selected rows -----------------------------------------------------


def unit_rows(plan, W, rows):
    """U_S: the selected rows of W without their term weights (the integer rows measured), a
    LinOp over W's cells; W's own rows when every weight is 1."""
    weights = plan.terms.weights
    if all(float(w) == 1.0 for w in weights):
        return take_rows(W, rows)
    unit = replace(plan.terms, weights=tuple(1.0 for _ in weights))
    return take_rows(restrict(unit, range(len(plan.terms.domain))), rows)


@dataclass(frozen=True, eq=False)
class SelectedRowsPlan:
    """Selection then measurement of the selected rows from marginal tables: one adaptive
    plan charged once (:class:`~matmech.plans.plan.Plan`) around a
    :class:`FactoredSelectionPlan` ``plan``; ``workload`` the Release's W."""

    plan: FactoredSelectionPlan = field(repr=False)
    workload: LinOp = field(repr=False)

    @property
    def eps(self) -> float:
        return self.plan.eps

    @property
    def delta(self) -> float:
        return self.plan.delta

    @property
    def neighbors(self) -> str:
        return self.plan.neighbors

    @property
    def events(self) -> tuple:
        """The selection's event (pure ε) and the measurement's: the measured rows are known
        only after the selection, so it is charged what its noise is calibrated to: the
        zCDP ρ of a Gaussian at (ε_m, δ), or ε_m (:mod:`matmech.privacy.events`)."""
        p = self.plan
        sel = selection_event(p.opts["method"], p.opts["eps"])
        if p.delta == 0:
            return (sel, ApproxDP(p.eps_measure, 0.0))
        rho = gaussian_rho(p.eps_measure, p.delta)
        return (sel, Concentrated(rho, eps=p.eps_measure, delta=p.delta))

    @property
    def what(self) -> str:
        return (
            f"release with selection ({self.plan.opts['method']}, up to {self.plan.select['c']} "
            f"of {self.plan.rows} queries, factored)"
        )

    @property
    def sizes(self) -> tuple:
        return tuple(self.plan.terms.domain)

    @property
    def subsets(self) -> tuple:
        return tuple(self.plan.subsets) + ((),)

    def check(self, tables):
        """The declared bound on the records, then W x term by term (exact integers)."""
        plan = self.plan
        check_record_count(tables[()], plan.max_records)
        parts = row_values(plan, tables)
        return parts, _weighted(plan, parts)

    def draw(self, data, *, rng) -> Draws:
        plan, W = self.plan, self.workload
        parts, values = data
        del data
        sel = run_selection(
            SelectionPlan(
                values=values,
                threshold=plan.select["threshold"],
                thr=plan.thr,
                method=plan.select["method"],
                c=int(plan.select["c"]),
                eps=float(plan.opts["eps"]),
                sensitivity=plan.sensitivity,
                monotonic=plan.monotonic,
                ratio=plan.select["ratio"],
                n_rows=plan.rows,
                sigma=plan.select["sigma"],
                mechanism=plan.mechanism,
                joint_sensitivity=plan.joint_sensitivity,
                value_bound=plan.value_bound,
            ),
            rng=rng,
        )
        del values
        rows = np.sort(np.asarray(sel.rows, dtype=np.int64))
        if rows.size == 0:
            return Draws((SelectionRecord(sel, rows),))
        # -- measure the selected rows: depends on the selection (a DP output) and W only ------
        p = 1 if plan.delta == 0 else 2
        value, exact, how = rows_sensitivity(plan, rows, p)
        sens = neighbor_sensitivity(value, plan.neighbors, margin=p == 2)
        if rows.size <= plan.max_selected:  # the worst case bounds this selection (and was checked)
            sens = min(sens, plan.worst_sensitivity)
        kind, scale, nvar = measurement_noise(sens, plan.eps_measure, plan.delta)
        terms = np.searchsorted(plan.offsets, rows, side="right") - 1
        u = np.array(
            [int(parts[j][r - plan.offsets[j]]) for r, j in zip(rows.tolist(), terms.tolist())],
            dtype=np.int64,
        )
        del parts
        if kind == "discrete_laplace":
            z = noise.discrete_laplace(scale, rows.size, rng=rng)
        else:
            z = noise.discrete_gaussian(scale, rows.size, rng=rng)
        y = (u + z).astype(np.float64)  # the released integers; below: post-processing
        norm = "L1" if p == 1 else "L2"
        note = (
            f"the {rows.size} selected rows measured themselves, answers by least squares on them "
            f"(exact {kind.replace('_', ' ')}, scale {scale:.6g}, {norm} sensitivity {sens:.6g} of the "
            f"selected rows, {'exact' if exact else 'certified upper bound'} ({how}) from the "
            f"factors); measurement eps {plan.eps_measure:.6g}"
        )
        secure = rng is None or bool(getattr(rng, "secure", False))  # as check_rng reads it
        # the record of the integer rows U_S measured (their weights are W's, known): y itself
        record = MeasurementRecord(
            query=unit_rows(plan, W, rows),
            values=y,
            variance=nvar,
            event={
                "mechanism": "selected rows",
                "eps": plan.eps_measure,
                "delta": plan.delta,
                "noise": kind,
                "scale": scale,
                "sensitivity": sens,
                "neighbors": plan.neighbors,
                "secure": secure,
            },
        )
        choice = MeasuredChoice(None, None, "selected rows", note)
        return Draws((SelectionRecord(sel, rows, choice), record))

    def estimate(self, draws: Draws) -> Estimate:
        """The least squares of the selected rows from the records alone: the
        :class:`~matmech.measurements.selection.SelectionRecord` and the record of U_S's
        measurement (y, its variance, its noise)."""
        plan = self.plan
        chosen, measured = split_selection(draws.records)
        fields = selection_fields(plan.opts, chosen.rows, chosen.result)
        fields["measurements"] = measured  # the selection is listed as ``selection``
        if chosen.choice is None:
            return nothing_selected(fields)
        rows, (rec,) = chosen.rows, measured
        y, ev = rec.values, rec.event
        nvar = float(rec.variance[0])
        terms = np.searchsorted(plan.offsets, rows, side="right") - 1
        w = np.asarray(plan.terms.weights, dtype=np.float64)[terms]
        B = row_basis(plan, rows)
        P = B @ B.T  # least squares: y projected on the range of U_S
        answers, cov = w * (P @ y), nvar * np.outer(w, w) * P
        fields.update(
            strategy_name="selected rows",
            strategy_note=chosen.choice.note + gaps_note(chosen.result),
            noise_law=SelectedRowsLaw(w[:, None] * P, ev["noise"], ev["scale"]),
            measured={  # what was measured, for to_dict: no data in it
                "strategy": {"type": "selected rows", "rows": int(rows.size)},
                "noise": {
                    "distribution": ev["noise"],
                    "scale": ev["scale"],
                    "std": float(np.sqrt(nvar)),
                    "grid": 1.0,
                    "sensitivity": ev["sensitivity"],
                    "secure_randomness": ev["secure"],
                },
            },
        )
        var = np.clip(np.diag(cov), 0.0, None)  # P a projection: round-off below 0 only
        return Estimate.of_variances(answers, var, fields)


@dataclass(frozen=True, eq=False)
class SelectedRowsLaw:
    """The noise law of the answers of a factored selection: answer r's error is
    Σ_s ``weights[r, s]``·Z_s, the Z_s the i.i.d. integer draws (``noise``, ``scale`` on the
    lattice of the integers) of the selected rows' measurement; data-independent (W, the
    selection, the calibration). :meth:`intervals` is
    :func:`~matmech.privacy.confidence.law_intervals` on those weights: exact lattice
    quantiles when a row of weights is integer (independent rows of integer weight: the
    answer is w·y_r), a binned convolution for the few draws of dependent rows."""

    weights: np.ndarray = field(repr=False)
    noise: str
    scale: float

    def intervals(self, level: float, std: np.ndarray) -> IntervalLaw:
        """Half-width, coverage and method of every answer at ``level`` (``std`` unused: the
        law is that of the draws)."""
        return law_intervals(self.weights, self.noise, self.scale, 1.0, level)
