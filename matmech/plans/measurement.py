"""The plain-measurement plan: one strategy A measured on the histogram, nothing estimated.

The plan of the public :func:`~matmech.run.measure.measure` (issue 34: every output that reads
private data is a plan run by :func:`~matmech.run.runner.run_plan`). It reads the histogram
(the one table on all attributes of a one-attribute domain of ``A.shape[1]`` cells), checks it
against the declared ``max_records``, draws y = A_g x + z with the exact noise of its
calibrated :class:`~matmech.privacy.measure.MeasurementPlan` and returns the
:class:`~matmech.privacy.measure.Measurement` itself (Li et al., PODS 2010: the measurement
step of the Matrix Mechanism, without the least-squares inference).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from matmech.measurements.record import strategy_record
from matmech.plans.plan import Draws, MeasuredPlan
from matmech.privacy.measure import (
    Measurement,
    MeasurementPlan,
    check_records,
    execute,
    measurement_of,
)


@dataclass(frozen=True, eq=False)
class PlainMeasurementPlan(MeasuredPlan):
    """A strategy's measurement of the histogram (:class:`~matmech.plans.plan.Plan`), whose
    result is the :class:`~matmech.privacy.measure.Measurement` (``measurement``: the
    calibrated measurement plan, built without data; ``what``: the line the budget records)."""

    measurement: MeasurementPlan = field(repr=False)
    what: str

    @property
    def workload(self):
        return self.measurement.strategy

    @property
    def sizes(self) -> tuple[int, ...]:
        return (int(self.measurement.strategy.shape[1]),)

    @property
    def subsets(self) -> tuple[tuple[int, ...], ...]:
        return ((0,),)

    def check(self, tables):
        x = tables[(0,)]  # checked counts (the source checks them as it reads them)
        check_records(x, self.measurement.max_records)  # the message never carries the total
        return x

    def draw(self, x, *, rng) -> Draws:
        meas = execute(self.measurement, x, rng=rng)
        return Draws((strategy_record(meas),))

    def estimate(self, draws: Draws) -> Measurement:
        (rec,) = draws.records  # the Measurement, read back from its record
        return measurement_of(self.measurement, rec.values, secure=rec.event["secure"])

    def result(self, est: Measurement, *, budget_remaining) -> Measurement:
        return est
