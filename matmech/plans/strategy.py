"""The Matrix Mechanism plan: a strategy A measured on the histogram of W's support.

``strategy_plan(W, A, ε, δ)`` with no ``attributes`` is the explicit release of
:func:`matmech.release` (A and W over the cells of x); with ``attributes`` U and the domain's
attribute ``sizes`` it is the factored Kronecker path (:mod:`matmech.plans.factored`):
every term of W and A is a total outside U, so A x = A_U x_U with x_U the marginal of x on U,
and the plan reads only that table. Either way: the grid, the exact discrete noise
(:func:`matmech.privacy.measure.plan_measurement`), y = A_g x + z, the least squares x̂ and
the exact variances σ²·diag(W (A_gᵀA_g)⁺ Wᵀ) (Li et al., PODS 2010, Eq. 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from matmech.error import measured_variances
from matmech.estimators.gls import estimate
from matmech.linalg.linop import LinOp
from matmech.plans.plan import Draws, Estimate, MeasuredPlan
from matmech.privacy.measure import (
    MeasurementPlan,
    check_counts,
    check_records,
    execute,
    measurement_of,
    plan_measurement,
)
from matmech.measurements.record import MeasurementRecord, strategy_record


def plan_variances(W, mplan):
    """Exact per-answer variances of W from a measurement plan's strategy and the discrete
    noise it draws (raises if the strategy cannot answer W)."""
    return measured_variances(W, mplan.strategy, mplan.std**2)


@dataclass(frozen=True, eq=False)
class StrategyPlan(MeasuredPlan):
    """A strategy's measurement of the histogram of the attributes ``subsets[0]``
    (:class:`~matmech.plans.plan.Plan`). ``answered``: the rows answered over the measured
    cells (W, or W_U on the factored path); ``workload``: the Release's W; ``variances``:
    each answer's exact variance; ``attributes``: U for a marginal (None: the whole histogram)."""

    workload: LinOp = field(repr=False)
    answered: LinOp = field(repr=False)
    measurement: MeasurementPlan = field(repr=False)
    variances: np.ndarray = field(repr=False)
    name: str
    note: str
    sizes: tuple
    subsets: tuple
    attributes: tuple | None = None

    @property
    def what(self) -> str:
        where = "" if self.attributes is None else ", factored"
        return f"release {self.answered.shape[0]} queries ({self.name}{where})"

    def check(self, tables):
        x = check_counts(tables[self.subsets[0]].reshape(-1), self.answered.shape[1])
        check_records(x, self.measurement.max_records)  # the message never carries the total
        return x

    def draw(self, x, *, rng) -> Draws:
        meas = execute(self.measurement, x, rng=rng)
        if self.attributes is None:
            rec = strategy_record(meas)
        else:
            rec = strategy_record(meas, domain=self.sizes, attributes=self.attributes)
        return Draws((rec,))

    def estimate(self, draws: Draws) -> Estimate:
        extra = {} if self.attributes is None else {"answered_workload": self.answered}
        return measured_estimate(
            draws.records,
            self.measurement,
            self.answered,
            self.variances,
            name=self.name,
            note=self.note,
            **extra,
        )


def measured_estimate(
    records: tuple[MeasurementRecord, ...],
    mplan: MeasurementPlan,
    answered: LinOp,
    var: np.ndarray,
    *,
    name: str,
    note: str,
    **fields: Any,
) -> Estimate:
    """The least-squares estimate from the ``records`` of one strategy measurement (made by
    ``mplan``): x̂ = A⁺ y (Li et al., PODS 2010; :func:`matmech.estimators.gls.estimate`
    over the cells the records measure: the histogram, or the marginal on their
    ``attributes``; read-only), the answers ``answered`` x̂ with the exact variances ``var``
    (data-independent: the plan's, diag(W (AᵀA)⁺ Wᵀ)·σ²), and the Release fields
    ``strategy``, ``strategy_name`` (``name``), ``strategy_note`` (``note``, plus the grid
    rounding when the measurement rounded A), ``measurement`` (read back from the record) and
    ``estimate`` after the plan's own ``fields`` (the one estimator of :class:`StrategyPlan`
    and :class:`~matmech.plans.selected.SelectedPlan`)."""
    own = tuple(replace(r, domain=None, attributes=None) for r in records)  # over their cells
    xhat = np.array(estimate(own, variances=False).values, dtype=np.float64)
    answers = answered.matvec(xhat)
    xhat.setflags(write=False)
    (rec,) = records
    meas = measurement_of(mplan, rec.values, secure=rec.event["secure"])
    rounded = "; entries rounded to a power-of-two grid" if meas.rounded else ""
    fields.update(
        strategy=meas.strategy,
        strategy_name=name,
        strategy_note=note + rounded,
        measurement=meas,
        estimate=xhat,
    )
    return Estimate.of_variances(answers, var, fields)


def strategy_plan(
    W: LinOp,
    A: LinOp,
    eps: float,
    delta: float = 0.0,
    *,
    neighbors: str = "add_remove",
    max_records: int | None = None,
    name: str = "given",
    note: str = "strategy given by the caller",
    sizes: tuple | None = None,
    attributes: tuple | None = None,
    workload: Any = None,
    rho: float | None = None,
) -> StrategyPlan:
    """The plan measuring ``A`` to answer ``W`` (data-independent) → :class:`StrategyPlan`.

    Parameters
    ----------
    W : LinOp
        The rows to answer, over the cells A measures.
    A : LinOp
        The strategy.
    eps, delta : float
        The measurement's privacy parameters.
    neighbors : str, default "add_remove"
        The neighbouring relation.
    max_records : int, optional
        The declared bound on the number of records.
    name, note : str
        How the strategy was chosen (for the Release).
    sizes : tuple, optional
        The domain's attribute sizes (default: one attribute of W's columns).
    attributes : tuple, optional
        U, when A and W act on the marginal of x on those attributes of ``sizes``.
    workload : LinOp, optional
        The Release's workload (default W).
    rho : float, optional
        Calibrate the Gaussian noise to this zCDP ρ (a share); (eps, delta) then record
        the guarantee it implies.

    Returns
    -------
    StrategyPlan
        The plan; :func:`matmech.run.runner.run_plan` runs it.

    Raises
    ------
    ValueError
        A cannot answer W, or the noise cannot be sampled exactly; nothing is spent.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> plan = strategy_plan(W.prefix(4), W.identity(4), 1.0)
    >>> plan.subsets, plan.what
    (((0,),), 'release 4 queries (given)')
    """
    mplan = plan_measurement(A, eps, delta, neighbors=neighbors, max_records=max_records, rho=rho)
    var = plan_variances(W, mplan)  # raises if A cannot answer W
    if attributes is None:
        sizes, subsets = (int(W.shape[1]),), ((0,),)
    elif sizes is None:
        raise ValueError("strategy_plan: attributes need the domain's attribute sizes (sizes=)")
    else:
        sizes, subsets = tuple(sizes), (tuple(attributes),)
    return StrategyPlan(
        W if workload is None else workload,
        W,
        mplan,
        var,
        name,
        note,
        sizes,
        subsets,
        None if attributes is None else tuple(attributes),
    )
