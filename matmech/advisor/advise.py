"""Rank every plan a release can run for a workload: the ranked table of the one planner.

Every figure is analytic; nothing touches data. The rows (:mod:`matmech.advisor.planner`,
:mod:`matmech.advisor.split`): the fixed strategies (the identity, the hierarchy of least
exact error with and without its root, Haar; per attribute on a product domain), the
workload itself, one row per optimiser family that fits W (measured on the histogram of W's
support, or from marginal tables for generalised marginal strategies), the tables route's
residual plan for a union of marginals, and split plans (W's blocks in parts measured
separately, the budget divided optimally). A candidate that cannot answer the workload, that
a release cannot measure, or that a cheap bound shows cannot win is skipped with the reason,
never raised. ``strategy="auto"`` releases the best row, ``strategy="optimize"`` the best
optimiser-family row (:mod:`matmech.advisor.choice`), so the three never disagree.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from matmech.advisor.advice import Advice
from matmech.advisor.compare import Candidate
from matmech.advisor.planner import (
    Context,
    single_rows,
    target_of,
)
from matmech.advisor.split import split_rows
from matmech.error import lower_bound
from matmech.limits import steady
from matmech.privacy.params import check_neighbors, check_privacy_params
from matmech.linalg.linop import LinOp, as_linop
from matmech.linalg.terms import MarginalWorkload
from matmech.optimizers.blas import capped
from matmech.validate import linear
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:  # names used only in annotations
    from matmech.privacy.randomness import Rng
    import numpy.typing as npt


#: Candidate families, in the order they are evaluated: the fixed strategies, W itself, the
#: optimiser families, the tables route's residual plan, and split plans.
CANDIDATES = ("identity", "hierarchical", "haar", "workload", "optimized", "tables", "split")
#: The default wall-clock budget: none. A time limit makes the ranking (and the strategy
#: ``strategy="auto"`` releases with) depend on machine load (issue 22: the flights 2-way RMSE
#: was 19.18 or 16.33, a dep_delay prefix 8.88 or 7.85, by load), so by default the work is
#: bounded in work units instead (:data:`DEFAULT_PIDENTITY_N`, the optimisers' iteration caps)
#: and the result depends only on W, ε, δ and ``rng``. A number of seconds is an explicit
#: option, recorded in :attr:`Advice.time_budget` with what it skipped.
DEFAULT_TIME_BUDGET = None
#: The SVD lower bound's dense eigendecomposition runs up to this many cells (0.1 s; 4096
#: cells took 15 s on a busy core); structured workloads get it in closed form at any size.
BOUND_DENSE_N = 1024


@dataclass(frozen=True)
class _Budget:
    """The wall-clock budget (None: unlimited) and progress callable of one advise() call."""

    seconds: float | None
    start: float
    progress: Callable[[float, str], object] | None = None

    def left(self):
        return None if self.seconds is None else self.seconds - (time.perf_counter() - self.start)

    def report(self, fraction, message):
        if self.progress is not None:
            self.progress(min(max(fraction, 0.0), 1.0), message)


def _wanted(candidates):
    """The candidate families named by advise()'s ``candidates`` argument."""
    if candidates == "all":
        return CANDIDATES
    if candidates == "fixed":
        return tuple(c for c in CANDIDATES if c != "optimized")
    if isinstance(candidates, str):
        raise ValueError(
            f"candidates must be 'all', 'fixed' or an iterable of names from {CANDIDATES}, got {candidates!r}"
        )
    if isinstance(candidates, bytes) or not hasattr(candidates, "__iter__"):
        raise TypeError(
            f"candidates must be 'all', 'fixed' or an iterable of names from {CANDIDATES}, "
            f"got {type(candidates).__name__}: {candidates!r}"
        )
    wanted = tuple(candidates)
    if not all(isinstance(c, str) for c in wanted):
        raise TypeError(
            f"candidates must be names (strings) from {CANDIDATES}, got {list(wanted)!r}"
        )
    unknown = [c for c in wanted if c not in CANDIDATES]
    if unknown or not wanted:
        raise ValueError(f"unknown candidate names {unknown}; choose from {CANDIDATES}")
    return wanted


def _check_options(time_budget, progress, neighbors):
    if time_budget is not None and not (
        isinstance(time_budget, (int, float)) and time_budget > 0 and math.isfinite(time_budget)
    ):
        raise ValueError(f"time_budget must be a positive number of seconds, got {time_budget!r}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable(fraction, message) or None, got {progress!r}")
    check_neighbors(neighbors)


#: Rows whose totals agree to this relative difference are ties, broken by their kind in the
#: order of :data:`TIE_ORDER` (the tables route's residual plan first: the route a union of
#: marginals always took; a split last: more parts, the same error).
TIE = 1e-8
TIE_ORDER = ("residual", "strategy", "gmarginal", "split")


def _rank(results, ctx, W, time_budget=None):
    """The :class:`Advice`: scored candidates best first, skipped ones in the order met."""
    rows = sorted(
        (r for r in results if r.skipped is None),
        key=lambda r: r.total * (1 + TIE * TIE_ORDER.index(r.kind)),
    )
    skipped = tuple(r for r in results if r.skipped is not None)
    if not rows:
        raise ValueError(
            "no candidate strategy can answer this workload: "
            + "; ".join(f"{r.name}: {r.skipped}" for r in skipped)
        )
    return Advice(
        tuple(rows),
        skipped,
        ctx.eps,
        ctx.delta,
        ctx.bound,
        W.shape[0],
        W.shape[1],
        ctx.neighbors,
        time_budget,
    )


@capped
@steady
def advise(
    W: LinOp | npt.ArrayLike,
    eps: float = 1.0,
    delta: float = 0.0,
    *,
    candidates: str | Iterable[str] = "all",
    time_budget: Any = None,
    rng: Rng = None,
    progress: Callable[[float, str], Any] | None = None,
    neighbors: str = "add_remove",
    search: str = "auto",
) -> Advice:
    """Rank strategies for W by expected total error under ε-DP (δ = 0) or (ε, δ)-DP.

    ``candidates``: "all", "fixed" (no optimiser) or an iterable of names from
    :data:`CANDIDATES` ("tables": the residual plan of a union of marginals; "split": W's
    blocks in parts, each planned with the other wanted names). ``search``: the pure-ε
    residual table search ("auto", "lattice", "all"). ``time_budget``: None (default; ``"default"`` is the same) runs no
    clock: the work is bounded in work units (the pure-ε optimiser of a 1-D workload up to
    :data:`DEFAULT_PIDENTITY_N` cells, the optimisers' iteration caps), so the ranking
    depends only on W, ε, δ and ``rng``, whatever the machine load. A number of seconds caps
    the whole call: the optimiser gets what is left after the fixed candidates, candidates
    not reached are skipped with that reason, and :attr:`Advice.time_budget` records it (a
    time-limited run is not reproducible bit for bit).
    ``progress``: a callable(fraction, message) or None.
    ``neighbors``: "add_remove" (default) or "substitute" (doubles every sensitivity, so
    the ranking is the same and every error four times larger).
    Returns an :class:`Advice`; ``advice.best`` is the winning strategy.

    Parameters
    ----------
    W, eps, delta : LinOp or array_like, float, float
        The workload, ε (default 1.0) and δ (default 0.0), as :func:`~matmech.error.expected_error`.
    candidates : "all", "fixed" or iterable of str, default "all"
        Which candidates to rank.
    search : {"auto", "lattice", "all"}, default "auto"
        The pure-ε residual plan's table search.
    time_budget : float, None or "default"
        Seconds for the whole call (default 30; None: no limit).
    rng : numpy.random.Generator, optional
        Random restarts for the optimiser.
    progress : callable, optional
        Receives (fraction, message).
    neighbors : {"add_remove", "substitute"}, default "add_remove"
        The neighbouring relation.

    Returns
    -------
    Advice
        The ranking, best first; ``advice.best`` is the winning strategy.

    Raises
    ------
    ValueError
        ε/δ out of range, an unknown candidate name, or a bad ``time_budget``.
    TypeError
        Arguments of the wrong kind.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> advice = advise(W.prefix(16), eps=1.0, candidates="fixed")
    >>> advice.best_row.name
    'hierarchical, no root'
    """
    eps, delta = check_privacy_params(eps, delta)
    if not isinstance(W, MarginalWorkload):  # described by its subsets: any domain size
        W = as_linop(linear(W, "W"))
    wanted = _wanted(candidates)
    if isinstance(time_budget, str) and time_budget == "default":
        time_budget = DEFAULT_TIME_BUDGET
    default_budget = time_budget is None  # the work rules replace a clock
    _check_options(time_budget, progress, neighbors)
    budget = _Budget(time_budget, time.perf_counter(), progress)
    try:  # a cheap bound: structured closed forms, or a dense spectrum up to BOUND_DENSE_N
        bound = lower_bound(W, eps, delta, neighbors=neighbors, max_dense_n=BOUND_DENSE_N)
    except ValueError:
        bound = None
    ctx = Context(eps, delta, neighbors, bound, search)
    whole = target_of(W)
    step = 0.8 if "split" in wanted else 1.0
    results = single_rows(
        ctx,
        whole,
        wanted,
        rng=rng,
        time_left=budget.left,
        report=lambda f, m: budget.report(step * f, m),
        default_budget=default_budget,
    )
    joint = delta > 0 and any(r.skipped is None and r.family is not None for r in results)
    if "split" in wanted and joint:
        results.append(
            Candidate(
                name="split",
                skipped="under (eps, delta) a split is the stack of its parts' strategies in one "
                "Gaussian mechanism, answered part by part: a joint optimiser row is ranked",
                kind="split",
            )
        )
    elif "split" in wanted:
        budget.report(step, "split plans")
        part_ctx = replace(ctx, bound=None, part=True)
        part_wanted = tuple(c for c in wanted if c != "split")

        def plan_part(t):
            rows = single_rows(
                part_ctx,
                t,
                part_wanted,
                rng=rng,
                time_left=budget.left,
                default_budget=default_budget,
            )
            return sorted((r for r in rows if r.skipped is None), key=lambda r: r.total)

        results += split_rows(ctx, W, plan_part)
    budget.report(1.0, "done")
    return _rank(results, ctx, W, time_budget)
