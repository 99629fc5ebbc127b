"""The factored release of a generalised marginal strategy (issue 14, item 2).

A union of Kronecker products W over many attributes (prefix factors on numeric attributes
inside 2-way products: the adult_W2 / loans_W2 workloads of the HDMM suite) is answered by
a :class:`~matmech.optimizers.general_marginal_error.GeneralMarginalStrategy` (given, or optimised by
``optimize(method="gmarginals")``, McKenna et al., VLDB 2018, §6.3) without the histogram:

    plan (grids, per-block noise: :mod:`matmech.measurements.gmarginal`), the GLS
    variances diag(W G⁻ Wᵀ) (:mod:`matmech.estimators.gmarginal_solve`; raises if W is outside
    the row space), the memory estimate, check_affordable — all before any data is read
      ▼
    marginal tables of the measured subsets (each once) ──► record bound ──► budget.spend ──► noise
      ▼
    generalised least squares in the factored space ──► W's answers with exact std

Data-side order as every release: checks → budget → noise; nothing after the spend branches
on the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from matmech.measurements.gmarginal import measure_gmarginal, plan_gmarginal
from matmech.estimators.gmarginal_solve import GMarginalSolver
from matmech.limits import check_memory
from matmech.optimizers.general_marginal_error import GeneralMarginalStrategy
from matmech.optimizers.general_marginals import reweight_general_marginals_l2
from matmech.plans.plan import Draws, Estimate, MeasuredPlan, check_record_count
from matmech.linalg.linop import Dense, Kron, LinOp, as_linop
from matmech.measurements.record import MeasurementRecord


def gmarginal_strategy(W, eps, delta, strategy):
    """(A, name, note): the caller's GeneralMarginalStrategy, or (``strategy`` None) the one
    ``optimize(W, eps, method="gmarginals")`` finds; under δ > 0 its lattice weights are then
    re-optimised for the Gaussian (L2) error with its factors fixed
    (:func:`~matmech.optimizers.general_marginals.reweight_general_marginals_l2`, the L2 sensitivity of
    :func:`~matmech.optimizers.general_marginal_error.general_marginal_sensitivity2` that the measurement uses)."""
    if strategy is not None:
        if not isinstance(strategy, GeneralMarginalStrategy):
            raise TypeError(
                f"the strategy must be a GeneralMarginalStrategy, got {type(strategy).__name__}"
            )
        return strategy, "gmarginals", "strategy given by the caller"
    from matmech.optimizers.dispatch import optimize

    A = optimize(W, eps, 0.0, method="gmarginals").strategy
    note = "optimised by matmech.optimize(method='gmarginals')"
    if delta > 0:
        A = reweight_general_marginals_l2(W, A).strategy
        note += (
            " (factors for the pure-eps error), lattice weights re-optimised for the L2 (Gaussian) error "
            "with the factors fixed"
        )
    return A, "gmarginals", note


@dataclass(frozen=True, eq=False)
class GMarginalPlan(MeasuredPlan):
    """A generalised marginal strategy measured from the marginal tables of its subsets
    (:class:`~matmech.plans.plan.Plan`); ``measurement`` the grids and per-subset noise,
    ``solver`` the factored GLS, ``variances`` the answers' exact variances."""

    workload: LinOp = field(repr=False)
    terms: Any = field(repr=False)
    measurement: Any = field(repr=False)
    solver: Any = field(repr=False)
    variances: np.ndarray = field(repr=False)
    name: str
    note: str

    @property
    def what(self) -> str:
        return f"release {self.terms.rows} queries (gmarginals, factored)"

    @property
    def sizes(self) -> tuple:
        return tuple(self.terms.domain)

    @property
    def subsets(self) -> tuple:
        return tuple(self.measurement.subsets) + ((),)

    def check(self, tables):
        check_record_count(tables[()], self.measurement.max_records)
        return tables

    def draw(self, tables, *, rng) -> Draws:
        meas = measure_gmarginal(self.measurement, tables, rng=rng)
        return Draws(_records(self.measurement, meas))

    def estimate(self, draws: Draws) -> Estimate:
        """The generalised-marginal GLS (:mod:`matmech.estimators.gmarginal_solve`) of the
        records: one block y[S] per measured subset S (its ``attributes``), the plan's noise
        variances (data-independent, the records' own)."""
        plan, solver = self.measurement, self.solver
        y = {
            r.attributes: r.values.reshape(
                tuple(as_linop(plan.factors[i]).shape[0] for i in r.attributes)
            )
            for r in draws.records
        }
        answers = solver.answers(self.terms, solver.estimate(y, plan.variances))
        fields = dict(
            strategy=plan.measured_strategy(), strategy_name=self.name, strategy_note=self.note
        )
        return Estimate.of_variances(answers, self.variances, fields)


def gmarginal_plan(
    W, wt, A, eps, delta, *, neighbors, max_records, max_memory, scale_bits, name, note
) -> GMarginalPlan:
    """The :class:`GMarginalPlan` of the GeneralMarginalStrategy ``A`` for W (its terms
    ``wt``): grids, noise, memory (refused above ``max_memory``), the GLS variances (raises
    if W is outside the row space); data-independent."""
    if tuple(A.domain_sizes) != tuple(wt.domain):
        raise ValueError(
            f"the strategy's attribute sizes {A.domain_sizes} differ from the workload's {wt.domain}"
        )
    plan = plan_gmarginal(
        A, eps, delta, neighbors=neighbors, max_records=max_records, scale_bits=scale_bits
    )
    solver = GMarginalSolver(plan.gls_strategy(), plan.subsets)
    rows = wt.rows
    need = solver.memory(wt) + 8 * 3 * sum(math.prod(wt.domain[i] for i in S) for S in plan.subsets)
    if need > max_memory:
        raise ValueError(
            f"the generalised marginal release would use about {need / 2**30:.1f} GiB (> max_memory "
            f"{max_memory / 2**30:.1f} GiB): {rows:,} answers, {len(plan.subsets):,} measured subsets, "
            f"{len(solver.classes):,} classes"
        )
    check_memory(
        need,
        f"the generalised marginal release ({rows:,} answers, {len(plan.subsets):,} measured subsets)",
        after="; nothing was spent",
    )
    var = solver.variances(wt)  # raises if W is outside the row space
    kind = "discrete Gaussian" if plan.noise == "discrete_gaussian" else "discrete Laplace"
    sens = "L2" if plan.noise == "discrete_gaussian" else "L1"
    grids = (
        f"non-identity factors rounded to power-of-two grids keeping {plan.bits} bits"
        if plan.bits is not None
        else "integer factors, no rounding"
    )
    note += (
        f"; {len(plan.subsets)} attribute subsets measured from their marginal tables through per-attribute "
        f"factors ({grids}), exact {kind} per subset, {sens} sensitivity {plan.sensitivity:.6g}; generalised "
        f"least squares over {len(solver.classes)} lattice classes in the factored space"
    )
    return GMarginalPlan(W, wt, plan, solver, var, name, note)


def _records(plan, meas):
    """One :class:`~matmech.measurements.record.MeasurementRecord` per measured subset S: y[S] = Q'_S t_S + noise."""
    event = {
        "mechanism": "generalised marginals",
        "eps": plan.eps,
        "delta": plan.delta,
        "noise": plan.noise,
        "sensitivity": plan.sensitivity,
        "neighbors": plan.neighbors,
    }
    return tuple(
        MeasurementRecord(
            query=Kron(*[as_linop(plan.factors[i]) for i in S]) if S else Dense(np.ones((1, 1))),
            values=np.asarray(meas.y[S]).reshape(-1),
            variance=float(v),
            event=event,
            domain=tuple(plan.domain),
            attributes=tuple(S),
        )
        for S, v in zip(plan.subsets, plan.variances.tolist())
    )
