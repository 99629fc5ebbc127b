"""The advisor's answer: :class:`Advice`, the ranked candidates of :func:`matmech.advise` with
the skipped ones, the lower bound and the context (analytic figures only, no data)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from matmech.advisor.compare import format_table


#: ``Advice.to_dict()`` names of the record's fields that it renames.
_ADVICE_KEYS = {"total": "total_error", "ratio_to_bound": "ratio_to_lower_bound"}


@dataclass(frozen=True)
class Advice:
    """Ranked candidates (best first), the skipped ones with reasons, and the context.

    A frozen record; :func:`advise` makes it. ``best``, ``best_row``, ``table()``,
    ``to_json()`` and ``plot()`` read it.

    Parameters
    ----------
    rows : tuple
        Ranking records, best first (``name``, ``kind``, ``strategy``, ``total``, ``rmse``,
        ``reason``, ...).
    skipped : tuple of (str, str)
        Candidates not scored, with the reason.
    eps, delta : float
        The privacy parameters.
    lower_bound : float or None
        The SVD lower bound (total).
    queries, cells : int
        The workload's shape.
    neighbors : str
        The neighbouring relation.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> advice = advise(W.prefix(16), eps=1.0, candidates="fixed")
    >>> advice.best.shape[1], advice.cells
    (16, 16)
    """

    rows: tuple
    skipped: tuple
    eps: float
    delta: float
    lower_bound: float | None
    queries: int
    cells: int
    neighbors: str = "add_remove"
    #: The wall-clock budget in seconds the ranking ran under, or None (deterministic).
    time_budget: float | None = None

    @property
    def best(self):
        """The strategy (a LinOp) of the best row that is one strategy measured on the
        histogram (``kind == "strategy"``; None when no such row is ranked). The best plan
        overall may be another kind: :attr:`best_row`, what ``strategy="auto"`` releases."""
        return next((r.strategy for r in self.rows if r.kind == "strategy"), None)

    @property
    def best_row(self):
        """The :class:`Candidate` with the lowest total error: the plan ``strategy="auto"``
        releases (a strategy, the residual plan, a generalised marginal plan or a split)."""
        return self.rows[0]

    @property
    def lower_bound_rmse(self):
        """The SVD lower bound as a per-query RMSE (None without a bound)."""
        return None if self.lower_bound is None else math.sqrt(self.lower_bound / self.queries)

    def plot(self, **kwargs):
        """Per-query RMSE bars of the candidates with the lower bound (needs matplotlib); see :func:`matmech.plot.plot_advice`."""
        from matmech.plot import plot_advice

        return plot_advice(self, **kwargs)

    def to_dict(self):
        """JSON-ready context, ranked rows and skipped candidates."""
        return {
            "eps": self.eps,
            "delta": self.delta,
            "neighbors": self.neighbors,
            "noise": "laplace (L1)" if self.delta == 0 else "gaussian (L2)",
            "queries": self.queries,
            "cells": self.cells,
            "lower_bound": self.lower_bound,
            "lower_bound_rmse": self.lower_bound_rmse,
            "best": self.rows[0].name if self.rows else None,
            "time_budget": self.time_budget,
            "deterministic": self.time_budget is None,
            "ranked": [
                {_ADVICE_KEYS.get(k, k): v for k, v in r.as_dict().items()} for r in self.rows
            ],
            "skipped": [{"name": r.name, "reason": r.skipped} for r in self.skipped],
        }

    def to_json(self, indent=2):
        return json.dumps(self.to_dict(), indent=indent)

    def table(self):
        """A plain-text table, best first, with the lower bound and the skipped candidates."""
        model = f"eps={self.eps:g}, " + (
            "pure eps-DP (Laplace, L1 sensitivity)"
            if self.delta == 0
            else f"delta={self.delta:g} (Gaussian, L2 sensitivity)"
        )
        body = format_table(
            self.rows,
            bound_total=self.lower_bound,
            bound_rmse=self.lower_bound_rmse,
            skipped=[(r.name, r.skipped) for r in self.skipped],
            detail=True,
        )
        clock = (
            ""
            if self.time_budget is None
            else (
                f"\nranked under a {self.time_budget:g} s wall-clock budget: "
                "what it skipped depends on machine load"
            )
        )
        return f"{self.queries:,} queries over {self.cells:,} cells; {model}\n{body}{clock}"
