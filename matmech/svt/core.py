"""Standard SVT, [LSL17] Alg. 7 ("SVT-S"), and AboveThreshold (its c = 1 case).

[LSL17] = Lyu, Su, Li, *Understanding the Sparse Vector Technique for
Differential Privacy*, VLDB 2017; [DR14] = Dwork, Roth, *The Algorithmic
Foundations of Differential Privacy*, 2014 (both quoted in ``shared/references``).

One noisy threshold T_i + rho, rho ~ Lap(D/eps1), for the whole run; each
value q_i gets fresh nu_i ~ Lap(2cD/eps2) (Lap(cD/eps2) for monotonic
queries); i is reported when q_i + nu_i >= T_i + rho (Alg. 7 lines 1-6), and
the run stops after the c-th report.  (eps1 + eps2 + eps3)-DP by Thm. 4.7.
The comparison is exact, in grid units (:mod:`matmech.svt.grid`).
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from matmech.svt.calibration import SVTCalibration, svt_budget
from matmech.svt.checks import Ratio
from matmech.svt.grid import chunk_bounds, noise_chunks, to_units, worker_sources
from matmech.svt.opening import COMMON, Opening, open_selection, taking

if TYPE_CHECKING:  # names used only in annotations
    from matmech.privacy.randomness import Rng
    import numpy.typing as npt


@dataclass(frozen=True)
class SVTResult:
    """Output of an SVT run.

    A frozen record, made by the SVT functions.

    positions
        Indices (into the input, in the order they were found) judged above
        the threshold.  This and ``answers`` are the only data-dependent fields
        released by the mechanism.  ``stopped`` and ``n_processed`` are
        functions of ``positions`` (and public inputs).
    answers
        Noisy numeric answers for ``positions`` (eps3 > 0), else None.
    eps
        Total privacy cost of the run (eps1 + eps2 + eps3).
    stopped
        True when the run hit the cutoff ``c`` and aborted.
    n_processed
        Number of comparisons made (including repeated ones in retraversal).
    budget
        The data-independent calibration, see :class:`~matmech.svt.SVTCalibration`.

    Parameters
    ----------
    positions, answers, eps, stopped, n_processed, budget
        The fields above.

    Examples
    --------
    >>> r = sparse_vector([3, 500, 2, 700], 100, c=2, eps=1.0, rng=np.random.default_rng(0))
    >>> r.answers is None, r.budget.eps_answer
    (True, 0.0)
    """

    positions: tuple[int, ...]
    answers: Optional[tuple[float, ...]]
    eps: float
    stopped: bool
    n_processed: int
    budget: SVTCalibration


#: The registry's calibration hook of [LSL17] Alg. 7 (:func:`~matmech.svt.calibration.svt_budget`).
calibrate = taking(svt_budget, *COMMON, "ratio", "eps_answer")


def run(op: Opening) -> SVTResult:
    """[LSL17] Alg. 7 from its opening: one threshold noise rho, then the scan to the c-th
    positive, then the numeric answers (eps3 > 0)."""
    budget = op.calibration
    rho = int(op.draw(budget.threshold_scale, 1)[0])
    hits, processed = scan(op, None, op.threshold_units(), rho, budget.c)
    positions = tuple(int(i) for i in hits)
    return SVTResult(
        positions=positions,
        answers=noisy_answers(op, positions),
        eps=budget.eps,
        stopped=len(positions) >= budget.c,
        n_processed=int(processed),
        budget=budget,
    )


def scan(op: Opening, index, t_units, rho, need):
    """The first ``need`` indices i (in the order of ``index``, or 0..n-1) with
    V_i + nu_i >= T_i + rho, drawing nu chunk by chunk ([LSL17] Alg. 7 lines 4-6).

    ``t_units`` holds one threshold (in grid units) or one per value.  Returns
    (hits, n_processed): the hit indices (into ``values``) and how many
    candidates were compared (all of them, or up to and including the last hit).
    """
    values, g = op.values, op.grid
    n = values.shape[0] if index is None else index.shape[0]
    bounds = list(chunk_bounds(n))
    q_units = int(round(op.calibration.query_scale / g))
    t_scalar = t_units.shape[0] == 1  # one threshold for all (exact also when n == 1)
    hits: list[int] = []
    with closing(noise_chunks(q_units, bounds, op.src, worker_sources(op.rng, n))) as chunks:
        for (pos, end), nu in zip(bounds, chunks):
            idx = None if index is None else index[pos:end]
            margin = to_units(values[pos:end] if idx is None else values[idx], g) + nu
            if t_scalar:
                margin -= t_units[0]
            else:
                margin -= t_units[pos:end] if idx is None else t_units[idx]
            found = np.flatnonzero(margin >= rho)[: need - len(hits)]
            if found.size:
                hits.extend((found + pos if idx is None else idx[found]).tolist())
                if len(hits) == need:
                    return hits, pos + int(found[-1]) + 1
    return hits, n


def noisy_answers(op: Opening, positions) -> Optional[tuple[float, ...]]:
    """q_i + Lap(cD/eps3) for the reported positions ([LSL17] Alg. 7 line 8), or None."""
    budget = op.calibration
    if budget.answer_scale is None:
        return None
    if not positions:
        return ()
    pos = np.asarray(positions, dtype=np.int64)
    a = to_units(op.values[pos], op.grid) + op.draw(budget.answer_scale, pos.size)
    return tuple(float(x) * op.grid for x in a)


def sparse_vector(
    values: npt.ArrayLike,
    threshold: Any,
    *,
    c: int,
    eps: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    ratio: Ratio = "optimal",
    eps_answer: float = 0.0,
    rng: Rng = None,
    value_bound: Optional[float] = None,
) -> SVTResult:
    """Standard SVT, [LSL17] Alg. 7 ("SVT-S"); (eps1+eps2+eps3)-DP by Thm. 4.7.

    ``values[i]`` is q_i(D) (each with sensitivity <= ``sensitivity``),
    ``threshold`` a scalar T or one T_i per value.  One threshold noise
    rho ~ Lap(D/eps1) for the whole run; each value gets fresh
    nu_i ~ Lap(2cD/eps2) (Lap(cD/eps2) if ``monotonic``: all queries move in
    the same direction between neighbours, Thm. 4.9); i is reported when
    q_i + nu_i >= T_i + rho; the run stops after the c-th report.

    eps is the total: eps3 = ``eps_answer`` pays for numeric answers
    q_i + Lap(cD/eps3) of the reported positions (Alg. 7 line 8), and
    eps1:eps2 = 1:r splits the rest with r = ``ratio``; "optimal" is
    [LSL17] Eq. (12): r = (2c)^(2/3), or c^(2/3) for monotonic queries.

    ``rng=None`` (the default) draws from the secure CTR_DRBG; a
    ``numpy.random.Generator`` gives reproducible runs that are NOT secure.
    Runs in O(n) numpy work, drawing noise in chunks and stopping at the c-th
    positive.  Raises before drawing any randomness if an argument is invalid.
    ``value_bound``: the declared bound on abs(values) the caller checked before its spend
    (:func:`matmech.svt.select.plan_selection`): the grid is chosen so that no value within it
    can overflow, and nothing here checks the values.  None: the values are range-checked
    before any draw (a direct call, with no budget).

    Parameters
    ----------
    values : array_like of float
        The query answers q_i(D) (at most ``sensitivity`` apart on neighbours).
    threshold : float or array_like
        The public threshold T, or one T_i per value.
    c : int
        Stop after c positives.
    eps : float
        The total ε of the run.
    sensitivity : float, default 1.0
        The sensitivity D of each value.
    monotonic : bool, default False
        All values move the same direction between neighbours (halves the query noise).
    ratio : float or "optimal", default "optimal"
        r in ε₁:ε₂ = 1:r.
    eps_answer : float, default 0.0
        ε₃ for noisy answers of the reported positions.
    rng : numpy.random.Generator, optional
        None (default) for the secure CTR_DRBG; a Generator is reproducible and NOT secure.
    value_bound : float, optional
        The declared bound on abs(values) checked before the spend (see above); None: the
        values are range-checked before any draw.

    Returns
    -------
    SVTResult
        The positions found, in order, and what was spent.

    Raises
    ------
    ValueError
        A bad ε, c, threshold, ratio or non-finite value; before any randomness.
    TypeError
        Arguments of the wrong kind.

    Examples
    --------
    >>> r = sparse_vector([3, 500, 2, 700], 100, c=2, eps=1.0, rng=np.random.default_rng(0))
    >>> r.positions, r.stopped, r.eps
    ((1, 3), True, 1.0)
    """
    public: dict[str, Any] = dict(
        eps=eps, sensitivity=sensitivity, monotonic=monotonic, ratio=ratio
    )
    bound: dict[str, Any] = dict(rng=rng, value_bound=value_bound, eps_answer=eps_answer)
    return run(open_selection(values, threshold, c=c, calibrate=calibrate, **public, **bound))


def above_threshold(
    values: npt.ArrayLike,
    threshold: Any,
    *,
    eps: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    rng: Rng = None,
) -> SVTResult:
    """AboveThreshold ([DR14] Alg. 1; [LSL17] Alg. 1 with c = 1): eps-DP.

    Reports the first index whose noisy value clears the noisy threshold and
    stops.  The budget is split as in the book, eps1 = eps2 = eps/2
    (rho ~ Lap(2D/eps), nu ~ Lap(4D/eps); Lap(2D/eps) if ``monotonic``), so
    that :func:`~matmech.svt.above_threshold_alpha` ([DR14] Thm. 3.24) applies verbatim.

    Parameters
    ----------
    values, threshold, eps, sensitivity, monotonic, rng
        As :func:`sparse_vector` (``c`` is 1, ``ratio`` 1).

    Returns
    -------
    SVTResult
        At most one position.

    Raises
    ------
    ValueError, TypeError
        As :func:`sparse_vector`.

    Examples
    --------
    >>> above_threshold([3, 500, 2], 100, eps=1.0, rng=np.random.default_rng(0)).positions
    (1,)
    """
    public: dict[str, Any] = dict(eps=eps, sensitivity=sensitivity, monotonic=monotonic, rng=rng)
    return sparse_vector(values, threshold, c=1, ratio=1.0, **public)
