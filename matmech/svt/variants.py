"""Two other correct SVTs: the textbook "Sparse" and SVT with retraversal.

* :func:`sparse_vector_dpbook`: Dwork-Roth 2014 Alg. 2 ("Sparse"; [LSL17]
  Alg. 2), kept for comparison; strictly less accurate than Alg. 7 at the same
  eps because its threshold noise scales with c ([LSL17] Sec. 3.2, Sec. 6).
* :func:`sparse_vector_retraversal`: "SVT-ReTr" ([LSL17] Sec. 5): Alg. 7 with
  the threshold raised by a multiple of the query-noise standard deviation,
  going over the unselected candidates again until c are found.

[LSL17] = Lyu, Su, Li, VLDB 2017 (in ``shared/references``).
"""

from __future__ import annotations

import math
from contextlib import closing
from typing import TYPE_CHECKING, Any

import numpy as np

from matmech.privacy.params import calibrated_eps
from matmech.svt import core
from matmech.svt.calibration import SVTCalibration, make_budget
from matmech.svt.checks import Ratio, check_eps, check_int, check_real, check_sensitivity
from matmech.svt.core import SVTResult, scan
from matmech.svt.grid import (
    CHUNK_FIRST,
    NoiseBuffer,
    chunk_bounds,
    noise_chunks,
    range_check,
    to_units,
    worker_sources,
)
from matmech.svt.opening import Opening, open_selection

if TYPE_CHECKING:  # names used only in annotations
    from matmech.privacy.randomness import Rng
    import numpy.typing as npt


def sparse_vector_dpbook(
    values: npt.ArrayLike,
    threshold: Any,
    *,
    c: int,
    eps: float,
    sensitivity: float = 1.0,
    rng: Rng = None,
) -> SVTResult:
    """SVT as in Dwork-Roth 2014 ("Sparse", [LSL17] Alg. 2): eps-DP.

    eps1 = eps2 = eps/2; threshold noise rho ~ Lap(cD/eps1), query noise
    nu_i ~ Lap(2cD/eps1), and after every positive the threshold is re-noised
    with Lap(cD/eps2) (Alg. 2 line 7).  It is c runs of AboveThreshold at eps/c
    each.  Kept for comparison: Alg. 7 (:func:`~matmech.svt.sparse_vector`) is
    more accurate at the same eps because its threshold noise does not scale
    with c ([LSL17] Sec. 3.2).  In the returned budget, ``threshold_scale`` is
    the scale of both the initial and the re-drawn threshold noise (equal
    since eps1 = eps2).

    Parameters
    ----------
    values, threshold, c, eps, sensitivity, rng
        As :func:`~matmech.svt.sparse_vector`.

    Returns
    -------
    SVTResult
        The positions found, in order.

    Raises
    ------
    ValueError, TypeError
        As :func:`~matmech.svt.sparse_vector`.

    Examples
    --------
    >>> r = sparse_vector_dpbook([3, 500, 2, 700], 100, c=2, eps=1.0, rng=np.random.default_rng(0))
    >>> r.positions, r.budget.eps_threshold == r.budget.eps_queries  # eps1 = eps2
    ((1, 3), True)
    """
    public: dict[str, Any] = dict(c=c, rng=rng, eps=eps, sensitivity=sensitivity)
    op = open_selection(values, threshold, calibrate=dpbook_calibration, **public)
    budget, g, n = op.calibration, op.grid, op.n
    c = budget.c
    t_units = op.threshold_units()
    t_scalar = t_units.shape[0] == 1
    # The initial threshold noise and every re-draw have the same scale
    # (cD/eps1 = cD/eps2): draw all that can be used (at most one per positive
    # except the last, plus the first) in one call.  Unused draws are never seen.
    rhos = op.draw(budget.threshold_scale, min(c, n + 1))
    hits: list[int] = []
    processed = n
    bounds = list(chunk_bounds(n))
    q_units = int(round(budget.query_scale / g))
    with closing(noise_chunks(q_units, bounds, op.src, worker_sources(op.rng, n))) as chunks:
        for (pos, end), nu in zip(bounds, chunks):
            margin = op.units(pos, end) + nu
            margin -= t_units[0] if t_scalar else t_units[pos:end]
            start = 0
            while len(hits) < c:
                # The query noise already drawn for later candidates is
                # independent of the threshold noise: still valid after a reset.
                found = np.flatnonzero(margin[start:] >= rhos[len(hits)])
                if found.size == 0:
                    break
                j = start + int(found[0])
                hits.append(pos + j)
                if len(hits) == c:
                    processed = pos + j + 1
                    break
                start = j + 1
            if len(hits) == c:
                break
    return SVTResult(
        positions=tuple(hits),
        answers=None,
        eps=budget.eps,
        stopped=len(hits) >= c,
        n_processed=int(processed),
        budget=budget,
    )


def dpbook_calibration(
    *, c: int, eps: float, sensitivity: float = 1.0, integer_values: bool = False, **_: Any
) -> SVTCalibration:
    """[DR14] Alg. 2's calibration: eps1 = eps2 = eps/2, threshold noise Lap(cD/eps1) (also
    every re-draw), query noise Lap(2cD/eps1); ``c`` already checked."""
    eps = check_eps(eps)[0]
    sensitivity = check_sensitivity(sensitivity)
    e1 = calibrated_eps(eps) / 2.0  # the decimal eps a caller charges (issue 21)
    e2 = calibrated_eps(eps) - e1  # exact: e1 is eps with the exponent lowered by one
    return make_budget(
        c=c,
        eps=eps,
        eps_answer=0.0,
        e1=e1,
        e2=e2,
        sensitivity=sensitivity,
        monotonic=False,
        exact_on_grid=integer_values,
        threshold_mult=float(c),
        query_mult=2.0 * c,  # e1 == e2, so 2cD/e2 == 2cD/e1
    )


def sparse_vector_retraversal(
    values: npt.ArrayLike,
    threshold: Any,
    *,
    c: int,
    eps: float,
    boost: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    ratio: Ratio = "optimal",
    max_passes: int = 1000,
    rng: Rng = None,
) -> SVTResult:
    """SVT with retraversal, "SVT-ReTr" ([LSL17] Sec. 5 and Sec. 6): eps-DP.

    Non-interactive use of Alg. 7: the threshold is raised by ``boost``
    standard deviations of the query noise, i.e. T_i + boost * sqrt(2) *
    query_scale ("kD" in [LSL17] Sec. 6, which evaluates boost = 1..5 and
    finds no universally best value; 5 worked well for Zipf data).  When the
    candidates run out before c positives, the candidates not yet selected are
    traversed again (fresh query noise, the *same* noisy threshold) until c
    are selected or ``max_passes`` passes have been made.  Privacy is that of
    Alg. 7 on the (adaptively chosen) concatenated stream: eps, whatever the
    number of passes.  Positions are in selection order.

    ``boost`` may be 0 (plain Alg. 7 with retraversal) or negative.
    ``n_processed`` counts every comparison over all passes.

    Parameters
    ----------
    boost : float
        Threshold raise, in standard deviations of the query noise.
    max_passes : int, default 1000
        Cap on the passes over the candidates.
    values, threshold, c, eps, sensitivity, monotonic, ratio, rng
        As :func:`~matmech.svt.sparse_vector`.

    Returns
    -------
    SVTResult
        The positions in selection order.

    Raises
    ------
    ValueError, TypeError
        A bad ``boost`` or ``max_passes``, or as :func:`~matmech.svt.sparse_vector`.

    Examples
    --------
    >>> sparse_vector_retraversal([3, 500, 2, 700], 100, c=2, eps=1.0, boost=1.0,
    ...                           rng=np.random.default_rng(0)).positions
    (1, 3)
    """
    boost = check_real("boost", boost, positive=False)
    max_passes = check_int("max_passes", max_passes, what="the most passes over the candidates")
    public: dict[str, Any] = dict(
        eps=eps, sensitivity=sensitivity, monotonic=monotonic, ratio=ratio
    )
    op = open_selection(values, threshold, c=c, calibrate=core.calibrate, rng=rng, **public)

    budget, g, n = op.calibration, op.grid, op.n
    shift = boost * math.sqrt(2.0) * budget.query_scale  # boost standard deviations of nu
    tt = np.atleast_1d(np.asarray(op.thresholds, dtype=np.float64))
    if tt.size:
        range_check(
            max(abs(float(tt.min()) + shift), abs(float(tt.max()) + shift)),
            g,
            "threshold + boost * noise std",
        )
    t_units = op.threshold_units() + int(round(shift / g))
    rho = int(op.draw(budget.threshold_scale, 1)[0])
    hits, total = scan(op, None, t_units, rho, budget.c)
    passes = 1
    if len(hits) < budget.c and passes < max_passes and len(hits) < n:
        more, processed = _retraverse(op, t_units, rho, hits, max_passes - passes)
        hits.extend(more)
        total += processed
    positions = tuple(int(i) for i in hits)
    return SVTResult(
        positions=positions,
        answers=None,
        eps=budget.eps,
        stopped=len(positions) >= budget.c,
        n_processed=int(total),
        budget=budget,
    )


def _retraverse(op: Opening, t_units, rho, hits, passes_left):
    """Further passes over the unselected candidates, in index order, with fresh
    query noise and the same noisy threshold ([LSL17] Sec. 5).

    Returns (new hits in selection order, comparisons made).  Passes over many
    candidates scan in chunks; passes over a few take their noise from a
    :class:`~matmech.svt.grid.NoiseBuffer`, so that many short passes share
    a few sampler calls.
    """
    arr, n, g, budget = op.values, op.n, op.grid, op.calibration
    need = budget.c - len(hits)
    remaining = np.setdiff1d(
        np.arange(n, dtype=np.int64), np.asarray(hits, dtype=np.int64), assume_unique=True
    )
    found: list[int] = []
    total = 0
    base = None  # units of value - threshold for the remaining candidates (small passes)
    buf = None
    while passes_left > 0 and need > 0 and remaining.size:
        if remaining.size > CHUNK_FIRST:
            more, processed = scan(op, remaining, t_units, rho, need)
            more = np.asarray(more, dtype=np.int64)
            keep = ~np.isin(remaining, more, assume_unique=True)
        else:
            if base is None or buf is None:
                t_rem = t_units if t_units.shape[0] == 1 else t_units[remaining]
                base = to_units(arr[remaining], g) - t_rem
                buf = NoiseBuffer(
                    budget.query_scale, g, op.src, first=min(4 * remaining.size, CHUNK_FIRST)
                )
            nu = buf.take(remaining.size)
            sel = np.flatnonzero(base + nu >= rho)[:need]
            more = remaining[sel]
            processed = int(sel[-1]) + 1 if sel.size == need else remaining.size
            keep = np.ones(remaining.size, dtype=bool)
            keep[sel] = False
            base = base[keep]
        found.extend(int(i) for i in more)
        need -= len(more)
        total += processed
        remaining = remaining[keep]
        passes_left -= 1
    return found, total
