"""The planner's rows as runnable plans: what ``strategy="auto"`` / ``"optimize"`` release.

:func:`matmech.advise` ranks every plan a release can run for W from W, ε, δ and the
neighbour relation alone (:mod:`matmech.advisor.planner`, :mod:`matmech.advisor.split`);
each row carries a ``recipe``. :func:`build_plan` turns a row into its
:class:`~matmech.plans.plan.Plan` (a registry by the row's ``kind``: a strategy on the
histogram of the support, the residual plan, a generalised marginal plan, a split plan) and
:func:`choose_plan` is the release's view: the best row that builds (``"auto"``), or the best
optimiser-family row (``"optimize"``). Nothing here reads data.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from matmech.advisor.choice import PLANNED, planned, refusal, view
from matmech.advisor.split import shares_for
from matmech.plans.gmarginal import gmarginal_plan
from matmech.measurements.residual import DEFAULT_SCALE_BITS
from matmech.measurements.residual import MAX_MEMORY
from matmech.plans.residual import residual_plan
from matmech.plans.split import Part, split_plan
from matmech.plans.strategy import strategy_plan


def _strategy(row, eps, delta, *, neighbors, max_records):
    t, note = row.recipe["target"], row.recipe["note"]
    if t.terms is not None and len(t.sizes) > 1:  # the marginal on the support (any data form)
        return strategy_plan(
            t.fit,
            row.strategy,
            eps,
            delta,
            neighbors=neighbors,
            max_records=max_records,
            name=row.name,
            note=note
            + ("" if not t.local else f"; measured on the marginal of attributes {list(t.U)}"),
            sizes=t.sizes,
            attributes=t.U,
            workload=t.W,
        )
    return strategy_plan(
        t.W,
        row.strategy,
        eps,
        delta,
        neighbors=neighbors,
        max_records=max_records,
        name=row.name,
        note=note,
    )


def _residual(row, eps, delta, *, neighbors, max_records):
    t = row.recipe["target"]
    return residual_plan(
        t.W,
        t.terms,
        eps,
        delta,
        neighbors=neighbors,
        max_records=max_records,
        objective="sum",
        max_memory=MAX_MEMORY,
        scale_bits=DEFAULT_SCALE_BITS,
        search=row.recipe["search"],
    )


def _gmarginal(row, eps, delta, *, neighbors, max_records):
    t = row.recipe["target"]
    return gmarginal_plan(
        t.W,
        t.terms,
        row.strategy,
        eps,
        delta,
        neighbors=neighbors,
        max_records=max_records,
        max_memory=MAX_MEMORY,
        scale_bits=DEFAULT_SCALE_BITS,
        name="gmarginals",
        note=row.recipe["note"],
    )


def _split(row, eps, delta, *, neighbors, max_records):
    r = row.recipe
    shares, _ = shares_for(eps, delta, r["errors"])
    parts = [
        Part(build_plan(part, e, d, neighbors=neighbors, max_records=max_records), rows, label)
        for (label, rows, part), (e, d) in zip(r["parts"], shares)
    ]
    return split_plan(
        r["workload"], parts, eps, delta, neighbors=neighbors, shares=shares, note=r["note"]
    )


#: Plan builders by the row's kind: ``builder(row, eps, delta, *, neighbors, max_records)``.
BUILDERS: dict[str, Callable[..., Any]] = {
    "strategy": _strategy,
    "residual": _residual,
    "gmarginal": _gmarginal,
    "split": _split,
}


def build_plan(row, eps, delta, *, neighbors="add_remove", max_records=None):
    """The :class:`~matmech.plans.plan.Plan` of a ranked row of :func:`matmech.advise` at
    (ε, δ) (data-independent; raises ValueError/MemoryError, nothing spent, when the plan
    cannot be built, e.g. over its memory limit)."""
    if not row.recipe:
        raise ValueError(f"the row {row.name!r} carries no recipe (it was only ranked)")
    return BUILDERS[row.kind](row, eps, delta, neighbors=neighbors, max_records=max_records)


def choose_plan(
    W,
    eps,
    delta=0.0,
    *,
    strategy="auto",
    neighbors="add_remove",
    max_records=None,
    search="auto",
    covers=None,
    max_cells=None,
):
    """The plan a release runs for ``strategy`` "auto" (the planner's best row) or "optimize"
    (its best optimiser-family row): rows are tried best first and the first whose plan
    builds (with ``covers(subset)``, whose tables are all available; with ``max_cells``, whose
    strategy is measured on a table of at most that many cells: the factored route of records
    and engines) is returned, its note saying why. Reads no data; ValueError when no row
    gives a plan."""
    if strategy not in PLANNED:
        raise ValueError(f"choose_plan decides strategy 'auto' or 'optimize', got {strategy!r}")
    advice = planned(W, eps, delta, neighbors=neighbors, search=search)
    tried = []
    for row in view(advice, strategy):
        if max_cells is not None and row.kind == "strategy" and row.strategy.shape[1] > max_cells:
            tried.append((row.name, f"measured on the marginal of more than {max_cells:,} cells"))
            continue
        try:
            plan = build_plan(row, eps, delta, neighbors=neighbors, max_records=max_records)
        except (ValueError, MemoryError) as exc:
            tried.append((row.name, str(exc)))
            continue
        if covers is not None and not all(covers(tuple(s)) for s in plan.subsets):
            tried.append((row.name, "the given marginal tables do not cover the tables it reads"))
            continue
        how = "matmech.advise" if strategy == "auto" else "the optimiser families of matmech.advise"
        why = (
            f"chosen by {how}: {row.name}, ranked {advice.rows.index(row) + 1} of "
            f"{len(advice.rows)} by exact expected error"
        )
        if row.reason:
            why += f" ({row.reason})"
        if tried:
            why += "; better rows not buildable: " + ", ".join(name for name, _ in tried)
        changes: dict = {"note": f"{why}; {plan.note}" if getattr(plan, "note", "") else why}
        if row.kind == "strategy":
            changes["name"] = "auto" if strategy == "auto" else "optimized"
        return replace(plan, **changes)
    raise ValueError(refusal(strategy, W, advice, tried))
