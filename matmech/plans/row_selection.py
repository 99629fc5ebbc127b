"""The row-selection plan: which rows of W are worth answering, chosen privately and charged once.

The plan of the public :func:`~matmech.run.select.select_rows` (issue 34: every output that
reads private data is a plan run by :func:`~matmech.run.runner.run_plan`). Built from W and
the selection's options alone (:func:`matmech.svt.select.check_selection`: every
data-independent refusal); it reads the histogram, checks it against the declared
``max_records`` and computes W x with every magnitude check of the run made from the declared
bounds (:func:`matmech.svt.select.plan_selection`), all before the one spend; its draw is the
selection mechanism (:func:`matmech.svt.select.run_selection`: the sparse vector technique,
Lyu, Su, Li, VLDB 2017, Alg. 7; the exponential mechanism; the free-gap methods of Ding et
al., PVLDB 2019). The draws are one
:class:`~matmech.measurements.selection.SelectionRecord` (no measurement is made) and the result
is its :class:`~matmech.svt.select.Selection`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from matmech.linalg.linop import LinOp
from matmech.measurements.selection import SelectionRecord, split_selection
from matmech.plans.plan import Draws
from matmech.svt.select import Selection, plan_selection, run_selection, selection_event


@dataclass(frozen=True, eq=False)
class RowSelectionPlan:
    """A checked selection of up to ``options["c"]`` rows of ``workload``
    (:class:`~matmech.plans.plan.Plan`), pure ``eps``-DP; ``options`` the keyword arguments
    of :func:`~matmech.svt.select.plan_selection` (checked by
    :func:`~matmech.svt.select.check_selection` before the plan is built)."""

    workload: LinOp = field(repr=False)
    options: Mapping[str, Any]
    max_records: int | None
    what: str

    @property
    def eps(self) -> float:
        return float(self.options["eps"])

    @property
    def delta(self) -> float:
        return 0.0

    @property
    def neighbors(self) -> str:
        return str(self.options["neighbors"])

    @property
    def events(self) -> tuple:
        """The selection's privacy event (a sparse vector run or an exponential mechanism)."""
        return (selection_event(self.options["method"], self.eps),)

    @property
    def sizes(self) -> tuple[int, ...]:
        return (int(self.workload.shape[1]),)

    @property
    def subsets(self) -> tuple[tuple[int, ...], ...]:
        return ((0,),)

    def check(self, tables):
        """W x and the calibration, every check from the declared bounds (nothing spent)."""
        return plan_selection(
            self.workload, tables[(0,)], max_records=self.max_records, **self.options
        )

    def draw(self, checked, *, rng) -> Draws:
        sel = run_selection(checked, rng=rng)
        return Draws((SelectionRecord(sel, sel.rows),))

    def estimate(self, draws: Draws) -> Selection:
        """The selection, read off its record."""
        chosen, _ = split_selection(draws.records)
        return chosen.result

    def result(self, est: Selection, *, budget_remaining) -> Selection:
        return est
