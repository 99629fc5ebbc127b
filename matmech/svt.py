"""Sparse vector technique (SVT) and exponential-mechanism top-c selection.

The private selection step of the matmech pipeline: from a long list of
candidate values (exact query answers, row scores, counts) report *which*
candidates are large, paying privacy only for the ones reported.

References (all in ``shared/references``):

* **[LSL17]** M. Lyu, D. Su, N. Li, *Understanding the Sparse Vector Technique
  for Differential Privacy*, VLDB 2017.  Alg. 1, 2 and 7, Eq. (12), Thm. 4.7,
  Thm. 4.9 (monotonic queries), Sec. 5 (EM top-c, SVT with retraversal).
* **[DR14]** C. Dwork, A. Roth, *The Algorithmic Foundations of Differential
  Privacy*: AboveThreshold (Alg. 1) and Sparse (Alg. 2), accuracy Thm. 3.24
  (quoted in [LSL17] Sec. 5 and in R. Cummings' lecture 5 notes, Thm. 8).
* **[M18]** A. Machanavajjhala, CompSci 590.03 *The Sparse Vector Technique*
  slides, "Sparse Vector Technique: Accuracy".

Which mechanism to use
----------------------
* Stream of queries not known in advance (interactive): :class:`SparseVector`
  or :func:`sparse_vector` (Alg. 7, "SVT-S").
* All candidates known up front (non-interactive): :func:`exponential_top_c`
  is more accurate than any SVT ([LSL17] Sec. 5-6); this is what matmech's
  row selection should use.
* :func:`sparse_vector_dpbook` exists for comparison only; it is the textbook
  Alg. 2 and strictly less accurate than Alg. 7 at the same epsilon.

The non-private variants of [LSL17] Fig. 2 (Alg. 3-6) are deliberately *not*
implemented here; tests keep them as fixtures to show the privacy auditor
catches them.

Noise and exactness
-------------------
All randomness comes from :mod:`matmech.noise` (``rng=None`` means the OS
CSPRNG; pass a ``numpy.random.Generator`` only for reproducible, *not secure*,
runs).  Every comparison ``q_i + nu_i >= T_i + rho`` is done exactly, in int64
units of one power-of-two grid ``g`` shared by values, thresholds and noise
(discrete Laplace on ``g*Z``, cf. Canonne-Kamath-Steinke 2020).  Integer-typed
values are already on the grid (``g <= 1``); any other values are rounded to
the grid, which can move a neighbour's value by up to ``g`` more, so the
sensitivity used for calibration becomes ``sensitivity + g`` (``g`` is a tiny
fraction of every noise scale).  The privacy proofs of [LSL17] carry over to
discrete Laplace noise on the grid because every shift they use is a multiple
of ``g``.
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from . import noise

__all__ = [
    "SVTBudget",
    "SVTResult",
    "TopCResult",
    "SparseVector",
    "SparseVectorExhausted",
    "optimal_ratio",
    "svt_budget",
    "sparse_vector",
    "above_threshold",
    "sparse_vector_dpbook",
    "sparse_vector_retraversal",
    "exponential_top_c",
    "above_threshold_alpha",
    "sparse_alpha",
    "exponential_alpha",
]

Ratio = Union[str, float]

# Chunking of the vectorised scan: start small (c positives are often found
# early, and unused noise is wasted work), grow geometrically to bound memory.
_CHUNK_FIRST = 1 << 12
_CHUNK_MAX = 1 << 20
# From this many candidates on, query noise is drawn by two threads.
_PARALLEL_MIN = 1 << 22
# Values and thresholds are held as int64 multiples of the grid; keep a wide
# margin below 2**63 so that value + noise - threshold cannot overflow.
_MAX_UNITS = float(2**60)
# matmech.noise samples discrete Laplace scales up to 2**48 (in grid units).
_MAX_SCALE_UNITS = float(2**47)


# --------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class SVTBudget:
    """How an SVT run spends its budget (data independent; [LSL17] Alg. 7).

    ``eps_threshold`` (eps1) buys the threshold noise ``Lap(threshold_scale)``,
    ``eps_queries`` (eps2) the per-query noise ``Lap(query_scale)``,
    ``eps_answer`` (eps3) the numeric answers ``Lap(answer_scale)``
    (``answer_scale`` is None when eps3 = 0).  ``sensitivity`` is the
    sensitivity the scales were calibrated with: the nominal one, plus the
    grid step ``grid`` when values had to be rounded onto the grid.
    """

    eps: float
    eps_threshold: float
    eps_queries: float
    eps_answer: float
    c: int
    monotonic: bool
    sensitivity: float
    threshold_scale: float
    query_scale: float
    answer_scale: Optional[float]
    grid: float


@dataclass(frozen=True)
class SVTResult:
    """Output of an SVT run.

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
        The data-independent calibration, see :class:`SVTBudget`.
    """

    positions: tuple[int, ...]
    answers: Optional[tuple[float, ...]]
    eps: float
    stopped: bool
    n_processed: int
    budget: SVTBudget


@dataclass(frozen=True)
class TopCResult:
    """Output of :func:`exponential_top_c`.

    ``positions`` are the selected indices in selection order (best first);
    ``score_scale`` is the factor multiplying each value inside ``exp(.)``.
    """

    positions: tuple[int, ...]
    eps: float
    c: int
    n_candidates: int
    score_scale: float


class SparseVectorExhausted(RuntimeError):
    """Raised when a :class:`SparseVector` is asked a query after its c-th positive."""


# --------------------------------------------------------------------------
# Validation (all of it runs before any randomness is drawn)
# --------------------------------------------------------------------------
def _check_real(name: str, x, *, positive: bool = True, allow_zero: bool = False) -> float:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {x!r} ({type(x).__name__})")
    v = float(x)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {x!r}")
    if positive and (v < 0 or (v == 0 and not allow_zero)):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {x!r}")
    return v


def _check_c(c) -> int:
    if isinstance(c, (bool, np.bool_)) or not isinstance(c, numbers.Integral):
        raise TypeError(f"c (the number of positives to report) must be an integer >= 1, got {c!r}")
    if int(c) < 1:
        raise ValueError(f"c (the number of positives to report) must be >= 1, got {c!r}")
    return int(c)


def _check_eps(eps, eps_answer=0.0) -> tuple[float, float]:
    e = _check_real("eps", eps)
    e3 = _check_real("eps_answer", eps_answer, allow_zero=True)
    if e3 >= e:
        raise ValueError(
            f"eps_answer must be smaller than the total eps (eps1 + eps2 need a share), "
            f"got eps_answer={eps_answer!r} with eps={eps!r}"
        )
    return e, e3


def _check_ratio(ratio) -> Ratio:
    if isinstance(ratio, str):
        if ratio != "optimal":
            raise ValueError(f'ratio must be "optimal" or a number r > 0 (eps1:eps2 = 1:r), got {ratio!r}')
        return ratio
    return _check_real("ratio", ratio)


def _check_values(values, name: str = "values") -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of numbers, got an array of shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and arr.size and not np.isfinite(arr).all():
        # Do not echo private values or their positions in the message.
        raise ValueError(f"{name} must be finite: NaN or inf found")
    return arr


def _check_threshold(threshold, n: Optional[int]) -> np.ndarray:
    t = np.asarray(threshold)
    if t.dtype.kind not in "biuf":
        raise TypeError(f"threshold must be a real number or a sequence of them, got dtype {t.dtype}")
    if t.ndim > 1 or (t.ndim == 1 and n is None):
        raise ValueError(f"threshold must be a scalar here, got shape {t.shape}")
    if t.ndim == 1 and t.shape[0] != n:
        raise ValueError(
            f"threshold has length {t.shape[0]} but values has length {n}; "
            f"pass a scalar or one threshold per value"
        )
    bad = np.flatnonzero(~np.isfinite(np.atleast_1d(t).astype(np.float64)))
    if bad.size:
        i = int(bad[0])
        where = "" if t.ndim == 0 else f" at index {i}"
        raise ValueError(f"threshold must be finite, got {np.atleast_1d(t)[i]!r}{where}")
    return t


def _check_sensitivity(sensitivity) -> float:
    return _check_real("sensitivity", sensitivity)


# --------------------------------------------------------------------------
# Budget / calibration (no data)
# --------------------------------------------------------------------------
def optimal_ratio(c: int, *, monotonic: bool = False) -> float:
    """r in eps1:eps2 = 1:r minimising Var(Lap(D/eps1) - Lap(k c D/eps2)).

    [LSL17] Eq. (12): r = (2c)^(2/3); Sec. 4.3 for monotonic queries: r = c^(2/3).
    """
    c = _check_c(c)
    return float((c if monotonic else 2 * c) ** (2.0 / 3.0))


def _grid_for_scales(*scales: float) -> float:
    """One power-of-two grid for all noises of a run, never coarser than 1.

    ``g <= 1`` keeps integer counts exactly on the grid (no extra sensitivity).
    """
    g = 1.0
    for s in scales:
        g = min(g, float(noise.grid_for(s)))
    return g


def _split(eps12: float, ratio: Ratio, c: int, monotonic: bool) -> tuple[float, float]:
    r = optimal_ratio(c, monotonic=monotonic) if ratio == "optimal" else float(ratio)
    e1 = eps12 / (1.0 + r)
    return e1, eps12 - e1


def _make_budget(
    *,
    c: int,
    eps: float,
    eps_answer: float,
    e1: float,
    e2: float,
    sensitivity: float,
    monotonic: bool,
    exact_on_grid: bool,
    threshold_mult: float,
    query_mult: float,
) -> SVTBudget:
    """threshold scale = threshold_mult*D/e1, query scale = query_mult*D/e2."""
    nominal = [threshold_mult * sensitivity / e1, query_mult * sensitivity / e2]
    if eps_answer > 0:
        nominal.append(c * sensitivity / eps_answer)
    g = _grid_for_scales(*nominal)
    if max(nominal) / g > _MAX_SCALE_UNITS:
        raise ValueError(
            f"noise scale {max(nominal):.3g} is too large for exact sampling on the grid "
            f"(eps={eps!r}, sensitivity={sensitivity!r}, split eps1={e1:.3g}, eps2={e2:.3g}); "
            f"use a larger eps or rescale the values"
        )
    sens = sensitivity if exact_on_grid else sensitivity + g
    return SVTBudget(
        eps=eps,
        eps_threshold=e1,
        eps_queries=e2,
        eps_answer=eps_answer,
        c=c,
        monotonic=bool(monotonic),
        sensitivity=sens,
        threshold_scale=_up_to_grid(threshold_mult * sens / e1, g),
        query_scale=_up_to_grid(query_mult * sens / e2, g),
        answer_scale=_up_to_grid(c * sens / eps_answer, g) if eps_answer > 0 else None,
        grid=g,
    )


def _up_to_grid(scale: float, g: float) -> float:
    """Round a noise scale UP to a whole number of grid steps.

    More noise than the calibration asks for (relative change <= 2**-16 with
    the default grid), so privacy is unaffected; in exchange the sampler gets
    an integer scale in grid units, which is exact and faster.
    """
    return math.ceil(scale / g) * g


def svt_budget(
    *,
    c: int,
    eps: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    ratio: Ratio = "optimal",
    eps_answer: float = 0.0,
    integer_values: bool = False,
) -> SVTBudget:
    """Calibration of :func:`sparse_vector` ([LSL17] Alg. 7) without touching data.

    eps1 + eps2 = eps - eps_answer split as 1:ratio; threshold noise
    Lap(D/eps1), query noise Lap(2cD/eps2) (Lap(cD/eps2) if ``monotonic``,
    Thm. 4.9), answers Lap(cD/eps3).  ``integer_values`` says whether the
    values will arrive with an integer dtype (then no grid rounding, and D is
    not increased by the grid step).
    """
    c = _check_c(c)
    eps, eps_answer = _check_eps(eps, eps_answer)
    sensitivity = _check_sensitivity(sensitivity)
    ratio = _check_ratio(ratio)
    e1, e2 = _split(eps - eps_answer, ratio, c, monotonic)
    return _make_budget(
        c=c, eps=eps, eps_answer=eps_answer, e1=e1, e2=e2, sensitivity=sensitivity,
        monotonic=monotonic, exact_on_grid=integer_values,
        threshold_mult=1.0, query_mult=(1.0 if monotonic else 2.0) * c,
    )


# --------------------------------------------------------------------------
# Grid arithmetic
# --------------------------------------------------------------------------
def _is_integer_dtype(arr: np.ndarray) -> bool:
    return arr.dtype.kind in "biu"


def _range_check(max_abs: float, g: float, name: str) -> None:
    if max_abs / g >= _MAX_UNITS:
        raise ValueError(
            f"{name} too large in magnitude for exact grid arithmetic "
            f"(|x|/grid must stay below 2**60 with grid={g!r}); rescale the inputs"
        )


def _to_units(arr: np.ndarray, g: float) -> np.ndarray:
    """Values -> int64 multiples of the grid ``g`` (a power of two <= 1)."""
    if _is_integer_dtype(arr):
        return arr.astype(np.int64) * np.int64(round(1.0 / g))
    snapped = noise.snap(np.asarray(arr, dtype=np.float64), g)
    return np.rint(np.asarray(snapped, dtype=np.float64) / g).astype(np.int64)


def _threshold_units(t: np.ndarray, g: float) -> np.ndarray:
    """The (public) thresholds rounded to the grid; costs no privacy."""
    return _to_units(np.atleast_1d(t), g) if t.ndim else _to_units(t.reshape(1), g)


def _draw(scale: float, size: int, g: float, src) -> np.ndarray:
    """Laplace(scale) on the grid g*Z, in grid units: discrete Laplace(scale/g).

    Every scale is a whole number of grid steps (see :func:`_up_to_grid`).
    """
    return np.asarray(noise.discrete_laplace(int(round(scale / g)), size, rng=src), dtype=np.int64)


# --------------------------------------------------------------------------
# Query noise in chunks, optionally drawn by two threads
# --------------------------------------------------------------------------
def _chunk_bounds(n: int):
    """Consecutive (start, end) slices of 0..n, growing from _CHUNK_FIRST to _CHUNK_MAX."""
    pos, chunk = 0, _CHUNK_FIRST
    while pos < n:
        end = min(n, pos + chunk)
        yield pos, end
        pos = end
        chunk = min(chunk * 4, _CHUNK_MAX)


def _worker_sources(rng, src, n: int):
    """Two independent random sources for drawing query noise in parallel, or None.

    Exact sampling dominates the run time on long inputs, and it parallelises:
    the noise of different chunks is independent, so two threads may draw it
    from two independent sources.  Secure runs get two fresh OS-CSPRNG
    sources.  Seeded runs get two child Generators seeded from the caller's
    Generator, so results stay reproducible; the choice depends on ``n`` only,
    never on the machine.  Any other source is used as is, single-threaded.
    """
    if n < _PARALLEL_MIN:
        return None
    if rng is None or (isinstance(rng, noise.RandomSource) and rng.secure):
        return [noise.check_rng(None), noise.check_rng(None)]
    if isinstance(rng, np.random.Generator):
        seeds = rng.integers(0, 2**63, size=2)
        return [noise.check_rng(np.random.default_rng(int(x))) for x in seeds]
    return None


def _noise_chunks(scale_units: int, bounds, src, workers):
    """Yield discrete Laplace(scale_units) arrays of sizes end - start, in order.

    With ``workers``, chunk k is drawn by ``workers[k % 2]`` (each source is
    used by one task at a time and in order, so seeded runs are deterministic)
    while the caller scans the previous chunk.
    """
    if workers is None:
        for a, b in bounds:
            yield noise.discrete_laplace(scale_units, b - a, rng=src)
        return
    bounds = iter(bounds)
    ex = ThreadPoolExecutor(max_workers=len(workers), thread_name_prefix="matmech-svt-noise")
    try:
        pending: deque = deque()
        for w in workers:
            ab = next(bounds, None)
            if ab is None:
                break
            pending.append((ex.submit(noise.discrete_laplace, scale_units, ab[1] - ab[0], rng=w), w))
        while pending:
            fut, w = pending.popleft()
            out = fut.result()
            ab = next(bounds, None)
            if ab is not None:
                pending.append((ex.submit(noise.discrete_laplace, scale_units, ab[1] - ab[0], rng=w), w))
            yield out
    finally:
        # Stopped early (c-th positive found): drop noise nobody will read.
        ex.shutdown(wait=False, cancel_futures=True)


# --------------------------------------------------------------------------
# The scan: positives among value + noise >= threshold + rho (Alg. 7 lines 4-6)
# --------------------------------------------------------------------------
def _scan(values, index, t_units, t_scalar, rho, need, budget, src, rng):
    """Find the first ``need`` indices i (in the order of ``index``, or 0..n-1)
    with V_i + nu_i >= T_i + rho, drawing nu chunk by chunk.

    Returns (hits, n_processed): the hit indices (into ``values``) and how many
    candidates were compared (all of them, or up to and including the last hit).
    """
    n = values.shape[0] if index is None else index.shape[0]
    g = budget.grid
    bounds = list(_chunk_bounds(n))
    q_units = int(round(budget.query_scale / g))
    hits: list[int] = []
    with closing(_noise_chunks(q_units, bounds, src, _worker_sources(rng, src, n))) as chunks:
        for (pos, end), nu in zip(bounds, chunks):
            idx = None if index is None else index[pos:end]
            margin = _to_units(values[pos:end] if idx is None else values[idx], g) + nu
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


def _prepare(values, threshold):
    arr = _check_values(values)
    t = _check_threshold(threshold, arr.shape[0])
    return arr, t


def _range_checks(arr, t, g):
    if arr.size:
        _range_check(max(abs(float(arr.min())), abs(float(arr.max()))), g, "values")
    tt = np.atleast_1d(t)
    if tt.size:
        _range_check(max(abs(float(tt.min())), abs(float(tt.max()))), g, "threshold")


def _answers(arr, positions, budget, src):
    if budget.answer_scale is None:
        return None
    if not positions:
        return ()
    pos = np.asarray(positions, dtype=np.int64)
    a = _to_units(arr[pos], budget.grid) + _draw(budget.answer_scale, pos.size, budget.grid, src)
    return tuple(float(x) * budget.grid for x in a)


# --------------------------------------------------------------------------
# Public mechanisms
# --------------------------------------------------------------------------
def sparse_vector(
    values,
    threshold,
    *,
    c: int,
    eps: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    ratio: Ratio = "optimal",
    eps_answer: float = 0.0,
    rng=None,
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

    Runs in O(n) numpy work, drawing noise in chunks and stopping at the c-th
    positive.  Raises before drawing any randomness if an argument is invalid.
    """
    arr, t = _prepare(values, threshold)
    budget = svt_budget(
        c=c, eps=eps, sensitivity=sensitivity, monotonic=monotonic, ratio=ratio,
        eps_answer=eps_answer, integer_values=_is_integer_dtype(arr),
    )
    _range_checks(arr, t, budget.grid)
    src = noise.check_rng(rng)
    return _run_svt(arr, t, budget, src, rng)


def _run_svt(arr, t, budget, src, rng, *, boost_units: int = 0, max_passes: int = 1) -> SVTResult:
    g = budget.grid
    t_units = _threshold_units(t, g) + boost_units
    t_scalar = t.ndim == 0
    n = arr.shape[0]
    rho = int(_draw(budget.threshold_scale, 1, g, src)[0])
    hits, processed = _scan(arr, None, t_units, t_scalar, rho, budget.c, budget, src, rng)
    total = processed
    passes = 1
    while len(hits) < budget.c and passes < max_passes and len(hits) < n:
        # SVT-ReTr ([LSL17] Sec. 5): keep the same noisy threshold and go over
        # the not-yet-selected candidates again, with fresh query noise.
        remaining = np.setdiff1d(np.arange(n, dtype=np.int64), np.asarray(hits, dtype=np.int64),
                                 assume_unique=True)
        more, processed = _scan(arr, remaining, t_units, t_scalar, rho, budget.c - len(hits),
                                budget, src, rng)
        hits.extend(more)
        total += processed
        passes += 1
    positions = tuple(int(i) for i in hits)
    return SVTResult(
        positions=positions,
        answers=_answers(arr, positions, budget, src),
        eps=budget.eps,
        stopped=len(positions) >= budget.c,
        n_processed=int(total),
        budget=budget,
    )


def above_threshold(
    values,
    threshold,
    *,
    eps: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    rng=None,
) -> SVTResult:
    """AboveThreshold ([DR14] Alg. 1; [LSL17] Alg. 1 with c = 1): eps-DP.

    Reports the first index whose noisy value clears the noisy threshold and
    stops.  The budget is split as in the book, eps1 = eps2 = eps/2
    (rho ~ Lap(2D/eps), nu ~ Lap(4D/eps); Lap(2D/eps) if ``monotonic``), so
    that :func:`above_threshold_alpha` ([DR14] Thm. 3.24) applies verbatim.
    """
    return sparse_vector(values, threshold, c=1, eps=eps, sensitivity=sensitivity,
                         monotonic=monotonic, ratio=1.0, rng=rng)


def sparse_vector_dpbook(
    values,
    threshold,
    *,
    c: int,
    eps: float,
    sensitivity: float = 1.0,
    rng=None,
) -> SVTResult:
    """SVT as in Dwork-Roth 2014 ("Sparse", [LSL17] Alg. 2): eps-DP.

    eps1 = eps2 = eps/2; threshold noise rho ~ Lap(cD/eps1), query noise
    nu_i ~ Lap(2cD/eps1), and after every positive the threshold is re-noised
    with Lap(cD/eps2).  It is c runs of AboveThreshold at eps/c each.  Kept
    for comparison: Alg. 7 (:func:`sparse_vector`) is more accurate at the
    same eps because its threshold noise does not scale with c ([LSL17] Sec. 3.2).
    In the returned budget, ``threshold_scale`` is the scale of both the
    initial and the re-drawn threshold noise (equal since eps1 = eps2).
    """
    arr, t = _prepare(values, threshold)
    c = _check_c(c)
    eps, _ = _check_eps(eps)
    sensitivity = _check_sensitivity(sensitivity)
    e1 = eps / 2.0
    e2 = eps - e1
    budget = _make_budget(
        c=c, eps=eps, eps_answer=0.0, e1=e1, e2=e2, sensitivity=sensitivity,
        monotonic=False, exact_on_grid=_is_integer_dtype(arr),
        threshold_mult=float(c), query_mult=2.0 * c,  # e1 == e2, so 2cD/e2 == 2cD/e1
    )
    _range_checks(arr, t, budget.grid)
    src = noise.check_rng(rng)

    g = budget.grid
    t_units = _threshold_units(t, g)
    t_scalar = t.ndim == 0
    reset_scale = _up_to_grid(c * budget.sensitivity / e2, g)  # Alg. 2 line 7
    n = arr.shape[0]
    rho = int(_draw(budget.threshold_scale, 1, g, src)[0])
    hits: list[int] = []
    processed = n
    bounds = list(_chunk_bounds(n))
    q_units = int(round(budget.query_scale / g))
    with closing(_noise_chunks(q_units, bounds, src, _worker_sources(rng, src, n))) as chunks:
        for (pos, end), nu in zip(bounds, chunks):
            margin = _to_units(arr[pos:end], g) + nu
            margin -= t_units[0] if t_scalar else t_units[pos:end]
            start = 0
            while len(hits) < c:
                found = np.flatnonzero(margin[start:] >= rho)
                if found.size == 0:
                    break
                j = start + int(found[0])
                hits.append(pos + j)
                if len(hits) == c:
                    processed = pos + j + 1
                    break
                # The query noise already drawn for later candidates is
                # independent of the threshold noise: still valid after the reset.
                rho = int(_draw(reset_scale, 1, g, src)[0])
                start = j + 1
            if len(hits) == c:
                break
    return SVTResult(
        positions=tuple(hits), answers=None, eps=eps, stopped=len(hits) >= c,
        n_processed=int(processed), budget=budget,
    )


def sparse_vector_retraversal(
    values,
    threshold,
    *,
    c: int,
    eps: float,
    boost: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    ratio: Ratio = "optimal",
    max_passes: int = 1000,
    rng=None,
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
    """
    arr, t = _prepare(values, threshold)
    boost = _check_real("boost", boost, positive=False)
    if isinstance(max_passes, (bool, np.bool_)) or not isinstance(max_passes, numbers.Integral):
        raise TypeError(f"max_passes must be an integer >= 1, got {max_passes!r}")
    if int(max_passes) < 1:
        raise ValueError(f"max_passes must be >= 1, got {max_passes!r}")
    budget = svt_budget(
        c=c, eps=eps, sensitivity=sensitivity, monotonic=monotonic, ratio=ratio,
        integer_values=_is_integer_dtype(arr),
    )
    _range_checks(arr, t, budget.grid)
    shift = boost * math.sqrt(2.0) * budget.query_scale  # boost standard deviations of nu
    tt = np.atleast_1d(t).astype(np.float64)
    if tt.size:
        _range_check(max(abs(float(tt.min()) + shift), abs(float(tt.max()) + shift)), budget.grid,
                     "threshold + boost * noise std")
    boost_units = int(round(shift / budget.grid))
    src = noise.check_rng(rng)
    return _run_svt(arr, t, budget, src, rng, boost_units=boost_units, max_passes=int(max_passes))


def exponential_top_c(
    values,
    c: int,
    eps: float,
    *,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    rng=None,
) -> TopCResult:
    """Top-c by the exponential mechanism, c rounds without replacement ([LSL17] Sec. 5).

    Each round spends eps/c and picks i with probability proportional to
    exp(eps * q_i / (2 c D)) (exp(eps * q_i / (c D)) for monotonic scores)
    among the candidates not yet picked; eps-DP by sequential composition.
    Implemented in one pass with the Gumbel-max trick: the top c of
    q_i * scale + G_i, G_i = -log(-log U_i), U_i from ``noise.uniform``, is
    distributed exactly as c sequential EM draws without replacement.
    Requires c <= len(values).

    Caveat: unlike the SVT comparisons, the scores and the Gumbel transform are
    computed in floating point (53-bit uniforms), so the guarantee holds for
    the idealised real-number mechanism; a bit-exact EM would need a
    randomised-rounding or base-2 construction (Ilvento, CCS 2020).
    """
    arr = _check_values(values)
    c = _check_c(c)
    eps, _ = _check_eps(eps)
    sensitivity = _check_sensitivity(sensitivity)
    n = arr.shape[0]
    if c > n:
        raise ValueError(f"c must be at most the number of candidates ({n}), got c={c}")
    scale = eps / ((1.0 if monotonic else 2.0) * c * sensitivity)
    src = noise.check_rng(rng)
    u = np.asarray(noise.uniform(n, rng=src), dtype=np.float64)
    score = arr.astype(np.float64) * scale - np.log(-np.log(u))
    if c < n:
        top = np.argpartition(-score, c - 1)[:c]
    else:
        top = np.arange(n)
    top = top[np.argsort(-score[top], kind="stable")]
    return TopCResult(positions=tuple(int(i) for i in top), eps=eps, c=c,
                      n_candidates=n, score_scale=scale)


# --------------------------------------------------------------------------
# Interactive form
# --------------------------------------------------------------------------
class SparseVector:
    """Interactive SVT ([LSL17] Alg. 7): answer a stream of queries one at a time.

    >>> sv = SparseVector(100, c=2, eps=1.0, rng=np.random.default_rng(0))  # doctest: +SKIP
    >>> sv.test(3)      # q_1(D) = 3  -> almost surely False      # doctest: +SKIP

    The threshold noise is drawn at construction; each :meth:`test` draws
    fresh query noise.  After the c-th positive the object refuses further
    queries (:class:`SparseVectorExhausted`).  Queries may be chosen
    adaptively.  ``threshold`` may be overridden per query.

    Values arrive one at a time with unknown types, so the calibration always
    assumes grid rounding (sensitivity + grid step, see the module notes).
    """

    def __init__(
        self,
        threshold,
        *,
        c: int,
        eps: float,
        sensitivity: float = 1.0,
        monotonic: bool = False,
        ratio: Ratio = "optimal",
        eps_answer: float = 0.0,
        rng=None,
    ) -> None:
        t = _check_threshold(threshold, None)
        self._budget = svt_budget(
            c=c, eps=eps, sensitivity=sensitivity, monotonic=monotonic, ratio=ratio,
            eps_answer=eps_answer, integer_values=False,
        )
        _range_check(abs(float(t)), self._budget.grid, "threshold")
        self._threshold = float(t)
        self._src = noise.check_rng(rng)
        self._rho = int(_draw(self._budget.threshold_scale, 1, self._budget.grid, self._src)[0])
        self._positions: list[int] = []
        self._answers: list[float] = []
        self._n = 0

    # -- state ------------------------------------------------------------
    @property
    def budget(self) -> SVTBudget:
        return self._budget

    @property
    def eps(self) -> float:
        """Privacy cost of the whole interaction (paid once, whatever is asked)."""
        return self._budget.eps

    @property
    def c(self) -> int:
        return self._budget.c

    @property
    def positions(self) -> tuple[int, ...]:
        """0-based indices (in the stream) of the queries answered True."""
        return tuple(self._positions)

    @property
    def answers(self) -> Optional[tuple[float, ...]]:
        """Noisy numeric answers of the positives (eps_answer > 0), else None."""
        return tuple(self._answers) if self._budget.answer_scale is not None else None

    @property
    def n_processed(self) -> int:
        return self._n

    @property
    def remaining(self) -> int:
        """How many more positives may be reported."""
        return self._budget.c - len(self._positions)

    @property
    def exhausted(self) -> bool:
        return self.remaining == 0

    def result(self) -> SVTResult:
        return SVTResult(
            positions=self.positions, answers=self.answers, eps=self.eps,
            stopped=self.exhausted, n_processed=self._n, budget=self._budget,
        )

    # -- the mechanism ----------------------------------------------------
    def test(self, value, *, threshold=None) -> bool:
        """Is q_i(D) = ``value`` above the threshold (noisily)?  Alg. 7 lines 5-13."""
        if self.exhausted:
            raise SparseVectorExhausted(
                f"SparseVector already reported its c={self._budget.c} positives after "
                f"{self._n} queries; no further queries can be answered with this budget"
            )
        v = _check_real("value", value, positive=False)
        g = self._budget.grid
        _range_check(abs(v), g, "value")
        if threshold is None:
            t = self._threshold
        else:
            t = float(_check_threshold(threshold, None))
            _range_check(abs(t), g, "threshold")
        vu = int(_to_units(np.array([v]), g)[0])
        tu = int(_to_units(np.array([t]), g)[0])
        nu = int(_draw(self._budget.query_scale, 1, g, self._src)[0])
        index = self._n
        self._n += 1
        if vu + nu - tu >= self._rho:
            self._positions.append(index)
            if self._budget.answer_scale is not None:
                a = vu + int(_draw(self._budget.answer_scale, 1, g, self._src)[0])
                self._answers.append(float(a) * g)
            return True
        return False

    def __repr__(self) -> str:
        return (f"SparseVector(c={self._budget.c}, eps={self._budget.eps}, "
                f"n_processed={self._n}, positives={len(self._positions)})")


# --------------------------------------------------------------------------
# Accuracy (alpha for a given beta)
# --------------------------------------------------------------------------
def _check_beta(beta) -> float:
    b = _check_real("beta", beta)
    if not 0.0 < b < 1.0:
        raise ValueError(f"beta must be in (0, 1), got {beta!r}")
    return b


def _check_k(k) -> int:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral) or int(k) < 1:
        raise ValueError(f"k (the number of queries) must be an integer >= 1, got {k!r}")
    return int(k)


def above_threshold_alpha(beta: float, *, k: int, eps: float, sensitivity: float = 1.0) -> float:
    """alpha = 8 D (ln k + ln(2/beta)) / eps for :func:`above_threshold`.

    [DR14] Thm. 3.24, as quoted in [LSL17] Sec. 5 and Cummings' lecture 5
    notes (Thm. 8), scaled by the sensitivity D: for k queries of which only
    the last may be >= T - alpha, with probability >= 1 - beta AboveThreshold
    does not halt before the k-th query, every reported query has
    q >= T - alpha and every rejected one q <= T + alpha.
    """
    beta = _check_beta(beta)
    k = _check_k(k)
    eps = _check_real("eps", eps)
    d = _check_sensitivity(sensitivity)
    return 8.0 * d * (math.log(k) + math.log(2.0 / beta)) / eps


def sparse_alpha(
    beta: float,
    *,
    k: int,
    c: int,
    eps: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    ratio: Ratio = "optimal",
) -> float:
    """alpha for a given beta for :func:`sparse_vector` over k queries.

    [M18] "Sparse Vector Technique: Accuracy": if max_i |nu_i| + |rho| <= alpha
    then every positive has q_i >= T - alpha, every negative q_i < T + alpha,
    and queries below T - alpha are all negative (so with at most c queries
    >= T - alpha the run does not abort early).  Bounding
    P(|rho| > alpha/2) = beta/2 and P(max |nu_i| > alpha/2) <= k e^{-alpha/(2 b2)} = beta/2
    gives alpha = 2 max(b1 ln(2/beta), b2 ln(2k/beta)) with b1, b2 the threshold
    and query noise scales of :func:`sparse_vector` with the same ``c``, ``eps``,
    ``monotonic`` and ``ratio`` (defaults match it).  With the slides' noise
    (``monotonic=True, ratio=1``: b1 = 2D/eps, b2 = 2cD/eps) this is exactly
    their alpha = 4cD (ln k + ln(2/beta)) / eps; ``monotonic=False, ratio=1``
    doubles b2, hence 8cD(...)/eps, which for c = 1 is [DR14] Thm. 3.24.
    Computed for continuous Laplace noise at the nominal scales; the grid
    (scales rounded up by <= 2**-16, discrete tails) moves beta by a relative
    amount of order 2**-15.
    """
    beta = _check_beta(beta)
    k = _check_k(k)
    c = _check_c(c)
    eps = _check_real("eps", eps)
    d = _check_sensitivity(sensitivity)
    ratio = _check_ratio(ratio)
    e1, e2 = _split(eps, ratio, c, monotonic)
    b1 = d / e1
    b2 = (1.0 if monotonic else 2.0) * c * d / e2
    return 2.0 * max(b1 * math.log(2.0 / beta), b2 * (math.log(k) + math.log(2.0 / beta)))


def exponential_alpha(beta: float, *, k: int, eps: float, sensitivity: float = 1.0) -> float:
    """alpha_EM = D (ln(k-1) + ln((1-beta)/beta)) / eps, [LSL17] Sec. 5.

    For :func:`exponential_top_c` with c = 1 (non-monotonic scores): given k-1
    candidates <= T - alpha and one >= T + alpha, the top one is selected with
    probability >= 1 - beta (with equality at the boundary).  Requires k >= 2.
    """
    beta = _check_beta(beta)
    k = _check_k(k)
    if k < 2:
        raise ValueError(f"k must be >= 2 for a selection to be wrong, got {k!r}")
    eps = _check_real("eps", eps)
    d = _check_sensitivity(sensitivity)
    return d * (math.log(k - 1) + math.log((1.0 - beta) / beta)) / eps
