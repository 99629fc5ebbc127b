"""One runner for every release plan (issue 22, item 1).

::

    plan (W, strategy, ε, δ, domain: no data)
      │ check_events_affordable(budget, plan events)        ← nothing read yet
      ▼
    source.marginals(plan.sizes, plan.subsets)             ← the only read of private data
      │   (a plan with ``lazy = True``: source.reader(...), every check on the data once;
      │    its draws then read batch by batch)
      ▼ plan.check(tables)                                   (declared bounds; raises, spends nothing)
    budget.spend_events(plan events)                        ← one atomic spend, before any draw
      ▼ plan.draw(data, rng=rng)                             → MeasurementRecords
    plan.estimate(draws)                                   ← post-processing
      ▼
    Release (the one place it is built; a plan with ``result`` builds its own result type
    from its estimate, e.g. :class:`~matmech.MarginalRelease`)

Nothing after the spend raises on, or branches on, the data: every magnitude check ran in
the plan's constructor (public inputs) or in :meth:`~matmech.plans.plan.Plan.check`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from matmech.plans.plan import Plan
from matmech.sources.source import DataSource
from matmech.privacy.budget import check_budget, check_events_affordable, plan_events
from matmech.privacy.randomness import check_rng
from matmech.results.release import Release

if TYPE_CHECKING:
    from matmech.privacy.budget import PrivacyBudget
    from matmech.privacy.randomness import Rng


#: The Release fields a plan's estimator may leave out.
_DEFAULTS = dict(strategy=None, strategy_name="", strategy_note="", measurement=None, estimate=None)


def run_plan(plan: Plan, data: DataSource | Any, *, budget: PrivacyBudget | None, rng: Rng) -> Any:
    """Run ``plan`` on ``data`` → :class:`~matmech.results.release.Release`.

    Affordability check → read the plan's tables from ``data`` (a plan with ``lazy = True``
    gets ``data.reader(sizes, subsets)``: the data checked once, tables read on demand) →
    the plan's data checks → one ``budget.spend_events(plan_events(plan))`` (the plan's privacy
    events, or an opaque (eps, delta) for a plan without them) → the plan's draws →
    its estimator → the Release (or ``plan.result(estimate, budget_remaining=...)`` when the
    plan has its own result type).

    Parameters
    ----------
    plan : Plan
        A plan (:class:`matmech.plans.plan.Plan`), built without the data.
    data : DataSource
        Where the tables come from (:func:`matmech.sources.source.as_source`); for a plan
        with its own ``read``, what that reads (e.g. a column source, a step's counts).
    budget : PrivacyBudget or None
        Charged once, after every check and before the first draw.
    rng : numpy.random.Generator or None
        The randomness (None: the secure CTR_DRBG).

    Returns
    -------
    Release
        The answers, their std, the measurement records and what was spent (or what the
        plan's ``result`` builds).

    Raises
    ------
    BudgetExceededError
        The budget cannot afford the plan; raised before anything is read.
    ValueError
        The data fail a check (declared bounds); nothing is spent.
    TypeError
        ``rng`` of the wrong kind, or a lazy plan on a source without a checked reader;
        nothing is read or spent.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> from matmech.plans.strategy import strategy_plan
    >>> from matmech.sources.source import HistogramSource
    >>> plan = strategy_plan(W.prefix(4), W.identity(4), 1.0)
    >>> r = run_plan(plan, HistogramSource([0, 1, 1, 3]), budget=None,
    ...              rng=np.random.default_rng(0))
    >>> r.answers.shape, r.eps
    ((4,), 1.0)
    """
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a matmech.plans.plan.Plan, got {type(plan).__name__}")
    if getattr(plan, "read", None) is None and not isinstance(data, DataSource):
        raise TypeError(
            f"data must be a matmech.sources.source.DataSource (see as_source), got {type(data).__name__}"
        )
    check_rng(rng)  # a bad rng is refused before anything is read or spent
    events = plan_events(plan)  # what the one spend charges: the plan's privacy events
    afford(budget, events, what=plan.what)
    # -- reads data from here on ---------------------------------------------------------------
    tables = _read(plan, data)
    checked = plan.check(tables)
    del tables
    if budget is not None:
        budget.spend_events(events, what=plan.what)  # the one atomic spend
    draws = plan.draw(checked, rng=rng)
    del checked
    est = plan.estimate(draws)
    remaining = None if budget is None else budget.remaining
    build = getattr(plan, "result", None)
    if build is not None:  # the plan's own result type (post-processing of its estimate)
        return build(est, budget_remaining=remaining)
    for a in (est.answers, est.std):
        if isinstance(a, np.ndarray):
            a.setflags(write=False)
    fields = {**_DEFAULTS, "measurements": draws.records, "events": events, **est.fields}
    return Release(
        answers=est.answers,
        std=est.std,
        expected_error=est.expected_error,
        workload=plan.workload,
        eps=plan.eps,
        delta=plan.delta,
        neighbors=plan.neighbors,
        budget_remaining=remaining,
        **fields,
    )


def afford(budget: PrivacyBudget | None, events: Any, *, what: str) -> None:
    """Refuse now if ``budget`` cannot pay ``events``: the check :func:`run_plan` runs before
    it reads anything, for a caller that must refuse before reading on its own (the command
    line, before it opens the data file). The spend itself is :func:`run_plan`'s.

    Raises
    ------
    BudgetExceededError
        ``budget`` cannot afford ``events`` (the message says what is left; ``what`` names
        the refused spend). Nothing is charged either way.
    TypeError
        ``budget`` is neither None nor a :class:`~matmech.privacy.budget.PrivacyBudget`.
    """
    check_events_affordable(check_budget(budget), tuple(events), what=what)


def _read(plan: Plan, data: DataSource | Any) -> Any:
    """The plan's tables (eager), the source's checked lazy reader for a plan with
    ``lazy = True``, or what a plan with its own ``read`` reads (a table that is not a
    marginal, e.g. the counts per value of a column): every check on the data runs here
    and in :meth:`~matmech.plans.plan.Plan.check`, before the spend."""
    own = getattr(plan, "read", None)
    if own is not None:
        return own(data)
    if not getattr(plan, "lazy", False):
        return data.marginals(plan.sizes, plan.subsets)
    reader = getattr(data, "reader", None)
    if reader is None:
        raise TypeError(
            f"{type(plan).__name__} reads its tables batch by batch: the data source "
            f"({type(data).__name__}) must hand out a checked reader (reader(sizes, subsets)); "
            "nothing was spent"
        )
    return reader(plan.sizes, plan.subsets)
