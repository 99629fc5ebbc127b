"""The plan protocol: everything a release decides before it reads data (issue 22, item 1).

A plan is a frozen record built from the workload W, the strategy, the privacy parameters
and the declared domain alone. It says

* which marginal tables to read (``sizes``: the attribute sizes; ``subsets``: the attribute
  subsets; the explicit histogram release is the plan on all attributes of a one-attribute
  domain),
* what it charges (``eps``, ``delta``, and ``what``, the line the budget records),
* how to check the tables read (:meth:`Plan.check`: the declared bounds, before the spend),
* how to draw (:meth:`Plan.draw` → :class:`Draws`, the frozen
  :class:`~matmech.measurements.record.MeasurementRecord` of every noisy measurement),
* and which estimator turns the draws into answers (:meth:`Plan.estimate` → :class:`Estimate`).

Four optional members (absent: the defaults every plan above uses):

* ``events``: the privacy events the one spend charges (:mod:`matmech.privacy.events`: the
  noise each draw uses, so the budget's accountant can compose it tightly); absent, the
  spend is an opaque (``eps``, ``delta``) (:func:`~matmech.privacy.budget.plan_events`);

* ``lazy = True``: the plan gets a checked, lazy reader instead of the tables —
  ``source.reader(sizes, subsets)`` checks everything about the data once (codes' range,
  given tables' shapes and consistency, that they cover ``subsets``), before the spend, and
  is then called ``reader(batch) → {subset: table}`` by :meth:`Plan.draw`, batch by batch;
  :meth:`Plan.check` receives the reader (e.g. to check the record count);
* ``read(data)``: the plan reads its own table from ``data`` (any object the plan documents),
  for a table that is not a marginal (e.g. the counts per value of a column,
  :class:`~matmech.plans.discovery.DiscoveryPlan`); ``data`` then need not be a
  :class:`~matmech.sources.source.DataSource`;
* ``result(estimate, *, budget_remaining)``: builds the plan's own result type from its
  estimate (e.g. :class:`~matmech.MarginalRelease`, answers reconstructed
  on demand) in place of the :class:`~matmech.results.release.Release`.

:func:`matmech.run.runner.run_plan` runs any plan the same way: affordability check → read
→ data checks → one atomic spend → draws → estimator → :class:`~matmech.results.release.Release`.
A plan's constructor raises (ValueError/TypeError, nothing spent) for anything it cannot
measure, including memory it would need beyond its limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import numpy as np

from matmech.privacy.measure import check_counts, check_records


@dataclass(frozen=True, eq=False)
class Draws:
    """What a plan's draws produced: the typed ``records`` (measurement records, the DP outputs
    a release exposes, and a selection's
    :class:`~matmech.measurements.selection.SelectionRecord`: what an estimator reads) and
    ``state``, left None by every plan whose estimator reads the records alone; the others
    (the streamed spill store, discovered categories, a picked marginal) keep their noisy
    outputs there (never data beyond them)."""

    records: tuple = ()
    state: Any = field(default=None, repr=False)


@dataclass(frozen=True, eq=False)
class Estimate:
    """An estimator's output: the ``answers``, their ``std`` and total variance
    ``expected_error``, and ``fields``, the plan-specific fields of the
    :class:`~matmech.results.release.Release` (``strategy``, ``strategy_name``, ``strategy_note``,
    ``measurement``, ``estimate``, the selection, ...)."""

    answers: np.ndarray = field(repr=False)
    std: np.ndarray = field(repr=False)
    expected_error: float
    fields: Mapping = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of_variances(
        cls,
        answers: np.ndarray,
        var: np.ndarray,
        fields: Mapping | None = None,
        *,
        overwrite_var: bool = False,
    ) -> Estimate:
        """The estimate of ``answers`` with exact variances ``var``: ``std`` = √var and
        ``expected_error`` = Σ var (the total squared error, Li et al., PODS 2010).

        Nothing is clipped: a negative, NaN or infinite variance, a non-finite answer or
        shapes that differ raise (a wrong answer with a confident error bar is the worst
        output; a site whose variances may be negative from round-off clips them itself,
        visibly). The messages carry shapes and counts only, never a value.

        Parameters
        ----------
        answers : numpy.ndarray
            The estimates, a vector (float64).
        var : numpy.ndarray
            Each estimate's variance, the same shape.
        fields : Mapping, optional
            The plan-specific :class:`~matmech.results.release.Release` fields (default: none).
        overwrite_var : bool, default False
            Take the square root in ``var``'s own buffer (one vector of the answers' size
            fewer); only for a ``var`` the caller owns and drops.

        Returns
        -------
        Estimate
            ``answers``, ``std``, ``expected_error`` and ``fields``.

        Raises
        ------
        ValueError
            ``answers`` is not a vector, ``var`` has another shape, or an entry is not finite
            (or a variance is negative).

        Examples
        --------
        >>> e = Estimate.of_variances(np.array([3.0, 5.0]), np.array([4.0, 9.0]))
        >>> e.std.tolist(), e.expected_error
        ([2.0, 3.0], 13.0)
        """
        answers = np.asarray(answers, dtype=np.float64)
        var = np.asarray(var, dtype=np.float64)
        if answers.ndim != 1:
            raise ValueError(f"the answers must be a vector, got shape {answers.shape}")
        if var.shape != answers.shape:
            raise ValueError(
                f"the variances must have one entry per answer ({answers.shape[0]}), got "
                f"shape {var.shape}"
            )
        if not np.isfinite(answers).all():
            raise ValueError("the estimator produced answers that are not finite (NaN or inf)")
        total = float(var.sum())  # finite ⇔ every variance finite, once none is negative
        if var.size and float(var.min()) < 0:
            raise ValueError(
                f"{int(np.count_nonzero(var < 0))} of {var.size} variances are negative"
            )
        if not np.isfinite(total):
            raise ValueError(
                "the variances are not all finite (NaN or inf), or their sum overflows"
            )
        std = np.sqrt(var, out=var) if overwrite_var else np.sqrt(var)
        return cls(answers, std, total, MappingProxyType({}) if fields is None else fields)


def check_record_count(count, max_records) -> None:
    """The table on no attributes (the record count) checked as counts and against the
    declared ``max_records`` (before the spend; the messages carry no value)."""
    check_records(check_counts(np.atleast_1d(count), 1, name="the record count"), max_records)


class MeasuredPlan:
    """For a plan whose ``measurement`` (a measurement plan) carries the privacy parameters:
    ``eps``, ``delta`` and ``neighbors`` are the measurement's (one source, never a copy)."""

    measurement: Any

    @property
    def eps(self) -> float:
        return self.measurement.eps

    @property
    def delta(self) -> float:
        return self.measurement.delta

    @property
    def neighbors(self) -> str:
        return self.measurement.neighbors

    @property
    def events(self) -> tuple:
        """The privacy event of the measurement (the noise it draws), when its plan names
        one; else none (an opaque (eps, delta) is charged)."""
        ev = getattr(self.measurement, "event", None)
        return () if ev is None else (ev,)


@runtime_checkable
class Plan(Protocol):
    """The protocol :func:`~matmech.run.runner.run_plan` runs (module docstring)."""

    @property
    def what(self) -> str:
        """The line the budget records for the spend."""
        ...

    @property
    def eps(self) -> float:
        """The ε the one spend charges."""
        ...

    @property
    def delta(self) -> float:
        """The δ the one spend charges."""
        ...

    @property
    def neighbors(self) -> str:
        """The neighbouring relation."""
        ...

    @property
    def workload(self) -> Any:
        """The workload the release answers (its rows)."""
        ...

    @property
    def sizes(self) -> tuple[int, ...]:
        """The attribute sizes of the domain the tables are read over."""
        ...

    @property
    def subsets(self) -> tuple[tuple[int, ...], ...]:
        """The attribute subsets whose marginal tables the plan reads."""
        ...

    def check(self, tables: Mapping[tuple[int, ...], np.ndarray] | Any) -> Any:
        """Data checks on the tables read (or what the plan's own ``read`` read) (the declared bounds); returns what :meth:`draw`
        needs. Runs before the spend; raises without revealing a value of the data."""
        ...

    def draw(self, data: Any, *, rng: Any) -> Draws:
        """The noisy draws (after the one spend); nothing here branches on the data."""
        ...

    def estimate(self, draws: Draws) -> Estimate | Any:
        """Post-processing: the answers and their variances from the draws (an
        :class:`Estimate`; with a ``result`` member, whatever that builder takes)."""
        ...
