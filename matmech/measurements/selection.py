"""The frozen record of a private row selection (the sparse vector technique, the exponential
mechanism or a free-gap mechanism: :mod:`matmech.svt`), drawn before the measurement of the
rows it selected: what a release with selection's estimator reads besides the measurement's
:class:`~matmech.measurements.record.MeasurementRecord`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class SelectionRecord:
    """A selection's DP output: ``result`` (:class:`matmech.svt.select.Selection`: its rows,
    gaps or noisy values, mechanism) and ``rows`` (the selected rows, sorted, read-only).

    ``choice`` is what was decided from the selection and W alone before the selected rows
    were measured (post-processing: the strategy's measurement plan for those rows, the
    answers' exact variances under it, its name and note); None when nothing was selected or
    the measurement's record carries it all."""

    result: Any = field(repr=False)
    rows: np.ndarray = field(repr=False)
    choice: Any = field(default=None, repr=False)

    def __post_init__(self):
        rows = np.sort(np.asarray(self.rows, dtype=np.int64))
        rows.setflags(write=False)
        object.__setattr__(self, "rows", rows)

    def __repr__(self):
        return f"SelectionRecord({self.rows.size} rows, {getattr(self.result, 'mechanism', '?')})"


@dataclass(frozen=True, eq=False)
class MeasuredChoice:
    """The measurement chosen for a selection's rows (:attr:`SelectionRecord.choice`): its
    ``plan`` (:class:`~matmech.privacy.measure.MeasurementPlan`), the answers' exact
    ``variances`` under it (data-independent), the strategy's ``name`` and ``note`` (the
    factored path's rows measure themselves: no plan, the variances from the record)."""

    plan: Any = field(repr=False)
    variances: np.ndarray | None = field(repr=False)
    name: str
    note: str


def split_selection(records: tuple) -> tuple[SelectionRecord, tuple]:
    """The one :class:`SelectionRecord` among ``records`` and the others (the measurements),
    in order; raises ``ValueError`` unless there is exactly one."""
    sels = [r for r in records if isinstance(r, SelectionRecord)]
    if len(sels) != 1:
        raise ValueError(
            f"expected exactly one selection record among the records, got {len(sels)}"
        )
    return sels[0], tuple(r for r in records if not isinstance(r, SelectionRecord))
