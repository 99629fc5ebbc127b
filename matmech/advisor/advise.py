"""Rank candidate strategies for a workload: the fixed classics and the optimisers.

Every figure is analytic (:func:`matmech.advisor.compare.evaluate`); nothing touches data.
Candidates: the identity, the hierarchical strategy (branching searched by exact error over
:func:`matmech.advisor.compare.family_branchings`, with and without the root), the Haar
wavelet (all from :func:`matmech.advisor.compare.fixed_family`, the family ``matmech compare``
lists), the workload itself, and :func:`matmech.optimize`. On a multi-attribute (Kronecker)
domain each fixed candidate is a Kronecker product of per-attribute strategies, the
hierarchical branching and the best fixed 1-D strategy being chosen attribute by attribute.
A candidate that cannot answer the workload, or is too big to evaluate, is skipped with the
reason recorded, never raised.

Stages: :func:`_fixed_candidates` builds, :class:`_Scorer` scores under a :class:`_Budget`
(time and progress), :func:`_rank` orders into an :class:`Advice`. The record is
:mod:`matmech.advisor.advice`, the candidates' construction :mod:`matmech.advisor.candidates`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

from matmech.advisor.advice import Advice
from matmech.advisor.candidates import _attributes, _fixed_candidates, _workload_candidate
from matmech.advisor.compare import Candidate, evaluate
from matmech.error import lower_bound
from matmech.privacy.params import check_neighbors, check_privacy_params
from matmech.linalg.linop import MAX_DENSE_ROUNDING, Kron, LinOp, Scaled, as_linop
from matmech.linalg.structured import MAX_DENSE_N
from matmech.optimizers.blas import blas_threads, capped
from matmech.optimizers.dispatch import optimize
from matmech.validate import linear
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:  # names used only in annotations
    from matmech.privacy.randomness import Rng
    from matmech.linalg.linop import LinOp
    import numpy.typing as npt

__all__ = ["advise", "Advice", "Candidate", "CANDIDATES", "optimize_for_histogram", "unmeasurable"]

#: Candidate families, in the order they are evaluated.
CANDIDATES = ("identity", "hierarchical", "haar", "workload", "optimized")
#: The default wall-clock budget: none. A time limit makes the ranking (and the strategy
#: ``strategy="auto"`` releases with) depend on machine load (issue 22: the flights 2-way RMSE
#: was 19.18 or 16.33, a dep_delay prefix 8.88 or 7.85, by load), so by default the work is
#: bounded in work units instead (:data:`DEFAULT_PIDENTITY_N`, the optimisers' iteration caps)
#: and the result depends only on W, ε, δ and ``rng``. A number of seconds is an explicit
#: option, recorded in :attr:`Advice.time_budget` with what it skipped.
DEFAULT_TIME_BUDGET = None
#: Without a time budget, the pure-ε optimiser of a 1-D workload runs up to this many cells
#: (a work rule, not a clock: at 8192 one start alone took 50-80 s on a busy two-core machine
#: and lost to the best hierarchy); above it the exact hierarchy search is the answer.
DEFAULT_PIDENTITY_N = 4096
#: The fixed families among :data:`CANDIDATES`.
FIXED = ("identity", "hierarchical", "haar")

# -- timing and scoring -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Budget:
    """The wall-clock budget (None: unlimited) and progress callable of one advise() call."""

    seconds: float | None
    start: float
    progress: object = None

    def left(self):
        return None if self.seconds is None else self.seconds - (time.perf_counter() - self.start)

    def exhausted(self):
        left = self.left()
        return left is not None and left <= 0

    def report(self, fraction, message):
        if self.progress is not None:
            self.progress(min(max(fraction, 0.0), 1.0), message)


def unmeasurable(A):
    """Why :func:`matmech.release` cannot measure strategy A on the histogram, or None.

    A real-valued strategy is measured rounded to a power-of-two grid
    (:mod:`matmech.privacy.measure`); the rounding keeps the structure of Kronecker factors
    and of a scaled integer matrix, and otherwise gives a plain matrix, whose gram is
    inverted densely: refused past :data:`~matmech.linalg.structured.MAX_DENSE_N` cells (or
    past :data:`~matmech.linalg.linop.MAX_DENSE_ROUNDING` entries without a structured
    rounding). Data-independent; conservative (a refusal names the limit)."""
    if isinstance(A, Kron):
        return next((why for why in map(unmeasurable, A.factors) if why), None)
    if A.integer_valued() or (isinstance(A, Scaled) and A.base.integer_valued()):
        return None
    if (
        getattr(A, "rounded_operator", None) is not None
    ):  # rounds to a structured operator (marginals)
        return None
    m, n = A.shape
    if n > MAX_DENSE_N:
        return (
            f"release measures a real-valued strategy rounded to a grid, and the rounded matrix over {n:,} cells "
            f"has no structured inverse (dense limit {MAX_DENSE_N:,} cells)"
        )
    if type(A).rounded_matrix is LinOp.rounded_matrix and m * n > MAX_DENSE_ROUNDING:
        return f"release cannot round this real-valued strategy to a grid without materialising {m * n:,} entries"
    return None


def optimize_for_histogram(W: LinOp, eps: float, delta: float) -> tuple[Any, str]:
    """(result, note): :func:`matmech.optimize` over the families whose strategy a release can
    measure on the histogram of W's columns, decided before optimising
    (:func:`matmech.optimizers.families.histogram_refusal`); the note names the families left
    out. ValueError, before any optimisation, when every family that fits W is left out."""
    from matmech.optimizers.families import _candidates, histogram_refusal

    tried = _candidates(W, delta)
    refused = {f: histogram_refusal(f, W, delta) for f in tried}
    keep = [f for f in tried if refused[f] is None]
    why = "; ".join(r for r in refused.values() if r)
    if not keep:
        raise ValueError(
            f"strategy='optimize': release measures the optimised strategy on the histogram of W's "
            f"{W.shape[1]:,} cells, and no optimiser family that fits W gives one it can measure "
            f"there ({why}); use strategy='auto' (marginal tables for a union of marginals) or a "
            "structured strategy (identity, hierarchical, Haar)"
        )
    # keep is _candidates(W, delta) filtered in order: with nothing left out optimize tries
    # the same families in the same order as without families=
    res = optimize(W, eps, delta, families=keep)
    note = "optimised by matmech.optimize"
    if len(keep) < len(tried):
        note += f" over the families a histogram release can measure (left out: {why})"
    return res, note


def _skip(name, params, reason, seconds=0.0):
    return Candidate(name=name, params=params, seconds=seconds, skipped=reason)


@dataclass(frozen=True)
class _Scorer:
    """Scores candidate strategies for one workload and privacy setting."""

    W: object
    eps: float
    delta: float
    bound: float | None
    neighbors: str

    def score(self, name, params, build, budget, *, seconds=None, always=False):
        """A ranked :class:`Candidate` (``build``: a strategy or a callable making one), or a
        skipped one when the budget is spent (unless ``always``: the fixed candidates, so that
        advice always has an answer) or the strategy fails; ``seconds`` overrides the time
        charged."""
        t0 = time.perf_counter()
        if budget.exhausted() and not always:
            return _skip(name, params, "time budget exhausted")
        try:
            A = build() if callable(build) else build
            row = evaluate(
                self.W,
                A,
                self.eps,
                self.delta,
                name=name,
                bound=self.bound,
                neighbors=self.neighbors,
                params=params,
            )
        except (ValueError, MemoryError, np.linalg.LinAlgError) as exc:
            return _skip(name, params, str(exc), time.perf_counter() - t0)
        why = unmeasurable(row.strategy)  # advise ranks only what release can measure (issue 22)
        if why is not None:
            return _skip(name, params, why, time.perf_counter() - t0)
        return replace(row, seconds=time.perf_counter() - t0 if seconds is None else seconds)


def _is_wanted(name, fixed_wanted):
    family = "hierarchical" if name.startswith("hierarchical") else name
    return family in fixed_wanted or (
        name == "best fixed per attribute" and len(fixed_wanted) == len(FIXED)
    )


def _score_fixed(scorer, fixed_wanted, budget):
    """Candidates for the wanted fixed families (one BLAS thread: many small dense solves,
    and OpenBLAS threads spinning against other processes made this 10× slower on a busy
    two-core machine)."""
    budget.report(0.0, "fixed candidates")
    with blas_threads(1):
        try:
            fixed = _fixed_candidates(scorer.W, scorer.delta)
        except (ValueError, MemoryError) as exc:
            return [_skip("fixed candidates", {}, str(exc))]
        return [
            scorer.score(name, params, A, budget, always=True)
            for name, params, A in fixed
            if _is_wanted(name, fixed_wanted)
        ]


def _optimizer_params(res):
    params = {"method": res.method}
    if res.gap is not None:
        params["gap"] = res.gap
    params.update(
        {key: res.params[key] for key in ("p", "init", "iterations", "rounds") if key in res.params}
    )
    return params


#: A candidate within this relative distance of the SVD lower bound attains it (the bound
#: holds for every strategy, so the optimiser cannot improve on it).
BOUND_ATTAINED = 1e-9


def _attains_bound(results, bound):
    return bool(bound) and any(
        r.skipped is None and r.total <= bound * (1 + BOUND_ATTAINED) for r in results
    )


def _score_optimized(scorer, budget, rng, *, at, step):
    """The optimiser's candidate, given what is left of the budget; progress from ``at`` to ``at + step``."""
    budget.report(at, "optimising")
    remaining = budget.left()
    if remaining is not None and remaining <= 0:
        return _skip("optimized", {}, "time budget exhausted")
    t0 = time.perf_counter()
    try:
        res = optimize(
            scorer.W,
            scorer.eps,
            scorer.delta,
            "auto",
            rng=rng,
            restarts=2 if rng is not None else 1,
            time_limit=remaining,
            bound=False,
            progress=(lambda f, m: budget.report(at + f * step, m))
            if budget.progress is not None
            else False,
        )
    except (ValueError, MemoryError, np.linalg.LinAlgError) as exc:
        return _skip("optimized", {}, str(exc), time.perf_counter() - t0)
    # the optimiser's own time; the error evaluation is not charged to the budget
    return scorer.score(
        f"optimized ({res.method})",
        _optimizer_params(res),
        res.strategy,
        budget,
        seconds=time.perf_counter() - t0,
    )


# -- the advisor ---------------------------------------------------------------------------------


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


def _rank(results, scorer, time_budget=None):
    """The :class:`Advice`: scored candidates best first, skipped ones in the order met."""
    rows = sorted((r for r in results if r.skipped is None), key=lambda r: r.total)
    skipped = tuple(r for r in results if r.skipped is not None)
    if not rows:
        raise ValueError(
            "no candidate strategy can answer this workload: "
            + "; ".join(f"{r.name}: {r.skipped}" for r in skipped)
        )
    W = scorer.W
    return Advice(
        tuple(rows),
        skipped,
        scorer.eps,
        scorer.delta,
        scorer.bound,
        W.shape[0],
        W.shape[1],
        scorer.neighbors,
        time_budget,
    )


@capped
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
) -> Advice:
    """Rank strategies for W by expected total error under ε-DP (δ = 0) or (ε, δ)-DP.

    ``candidates``: "all", "fixed" (no optimiser) or an iterable of names from
    :data:`CANDIDATES`. ``time_budget``: None (default; ``"default"`` is the same) runs no
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
    W : LinOp or array_like
        The workload.
    eps : float, default 1.0
        ε in [1e-4, 100].
    delta : float, default 0.0
        0 for pure ε-DP, else in [1e-100, 1).
    candidates : "all", "fixed" or iterable of str, default "all"
        Which candidates to rank.
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
    W = as_linop(linear(W, "W"))
    wanted = _wanted(candidates)
    if isinstance(time_budget, str) and time_budget == "default":
        time_budget = DEFAULT_TIME_BUDGET
    default_budget = time_budget is None  # the work rules below replace a clock
    _check_options(time_budget, progress, neighbors)
    budget = _Budget(time_budget, time.perf_counter(), progress)
    try:
        bound = lower_bound(W, eps, delta, neighbors=neighbors)
    except ValueError:
        bound = None
    scorer = _Scorer(W, eps, delta, bound, neighbors)
    fixed_wanted = [c for c in wanted if c in FIXED]
    n_steps = len(wanted) + 1
    results = _score_fixed(scorer, fixed_wanted, budget) if fixed_wanted else []
    if "workload" in wanted:
        budget.report(len(fixed_wanted) / n_steps, "workload as strategy")
        results.append(scorer.score("workload", {}, lambda: _workload_candidate(W), budget))
    if "optimized" in wanted:
        if _attains_bound(
            results, scorer.bound
        ):  # nothing can do better: skip the (slow) optimiser
            results.append(
                _skip("optimized", {}, "a candidate already attains the SVD lower bound")
            )
        elif (
            default_budget
            and delta == 0
            and len(_attributes(W) or [W]) == 1
            and W.shape[1] > DEFAULT_PIDENTITY_N
        ):
            results.append(
                _skip(
                    "optimized",
                    {},
                    f"the pure-eps optimiser on {W.shape[1]:,} > {DEFAULT_PIDENTITY_N:,} "
                    "cells takes minutes; call optimize(W, eps) to run it",
                )
            )
        else:
            results.append(
                _score_optimized(scorer, budget, rng, at=(n_steps - 2) / n_steps, step=1 / n_steps)
            )
    budget.report(1.0, "done")
    return _rank(results, scorer, time_budget)
