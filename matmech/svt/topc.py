"""Top-c selection by the exponential mechanism's exact replacement, permute-and-flip.

[LSL17] (Lyu, Su, Li, VLDB 2017, Sec. 5 and Sec. 6) recommend picking the c best of a known
workload by a private selection run c times without replacement, each round spending ε/c.
The round here is **permute-and-flip** (McKenna and Sheldon, NeurIPS 2020), which Ding,
Kifer, Saghaian, Steinke, Wang, Xiao and Zhang (arXiv 2105.07260, 2021) show is exactly
*report noisy max with exponential noise*: add E_i ~ Exp(scale β) to every score q_i and
report the argmax, β = 2D/ε_r for scores of sensitivity D (D/ε_r when every score moves in
the same direction between neighbours). Its expected score is never below the exponential
mechanism's at the same ε_r, and it has the same tail bound, P(q* − q_pick ≥ β(ln n + s)) ≤ e^{−s}
(each candidate is picked with probability at most e^{−(q* − q_i)/β}).

Privacy of one round (pointwise in the other candidates' noise): candidate i wins when
E_i > m − q_i, m the best other noisy score, with probability min(1, e^{−(m − q_i)/β});
between neighbours m and q_i each move by at most D, so the ratio is at most e^{2D/β} = e^{ε_r}
(monotonic scores: m and q_i move the same way, e^{D/β}). c rounds compose to ε.

**Exact on the grid.** Scores are held as int64 multiples of a power-of-two grid g
(:mod:`matmech.svt.grid`: integers as they are, other values snapped at a cost of g in
sensitivity) and β is a whole number t of grid steps. For an integer score u and E ~ Exp(t)
in grid units, floor(E) is geometric, P(floor E ≥ k) = e^{−k/t}, and the fractional part of E
is independent of it (memorylessness) and continuous. So the argmax of u_i + E_i is the
argmax of u_i + floor(E_i), ties broken by i.i.d. continuous fractional parts: uniformly at
random. The run therefore draws, per round and candidate, a geometric G = Z if Z ≥ 0 else
−Z − 1 from one exact discrete Laplace Z ~ DLap(t) (P(G = k) = P(Z = k) + P(Z = −k − 1) =
(1 − e^{−1/t}) e^{−k/t}; Canonne, Kamath, Steinke, NeurIPS 2020, through
:func:`matmech.privacy.noise.discrete_laplace`), takes the largest u_i + G_i exactly in
integers and breaks a tie with an exact uniform index (:meth:`RandomSource.randbelow`).
Nothing is computed in floating point after the scores are on the grid.

Cost: c rounds of one exact draw per candidate (fixed work, whatever the data): c·n draws,
by two threads from :data:`~matmech.svt.grid.PARALLEL_MIN` candidates on.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from matmech.privacy import noise
from matmech.svt.checks import check_c, check_eps, check_flag, check_sensitivity
from matmech.svt.grid import chunk_bounds, grid_for_bound, noise_chunks, worker_sources
from matmech.svt.opening import COMMON, Opening, open_selection, taking
from matmech.svt.split import MAX_SCALE_UNITS, top_c_noise
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # names used only in annotations
    from matmech.privacy.randomness import Rng
    import numpy.typing as npt


_TAKEN = np.iinfo(np.int64).min  # below every score in units (|units| < 2**60)


@dataclass(frozen=True)
class EMCalibration:
    """How :func:`exponential_top_c` spends ε (data independent): each of the ``c`` rounds
    adds exponential noise of ``scale`` β (value units, a whole number of steps of the
    power-of-two ``grid``) to every score: β = 2cD/ε (cD/ε for ``monotonic`` scores), D the
    ``sensitivity`` (plus the grid step when values are snapped to it).

    A frozen record, made by :func:`em_calibration`.

    Parameters
    ----------
    eps : float
        The total ε.
    c : int
        Rounds (picks).
    monotonic : bool
        Monotonic scores.
    sensitivity, grid, scale : float
        Sensitivity used, grid step, exponential noise scale β.

    Examples
    --------
    >>> em_calibration(c=2, eps=1.0, integer_values=True).scale
    4.0
    """

    eps: float
    c: int
    monotonic: bool
    sensitivity: float
    grid: float
    scale: float

    @property
    def units(self) -> int:
        """β in grid steps: the scale t of the discrete Laplace draws."""
        return int(round(self.scale / self.grid))


def em_calibration(
    *,
    c: int,
    eps: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    integer_values: bool = False,
    value_bound: float = 0.0,
) -> EMCalibration:
    """The calibration of :func:`exponential_top_c` without touching data.

    ``integer_values``: the scores are integers (already on every grid ≤ 1); ``value_bound``:
    a declared bound on abs(scores) (0 = none) the grid is coarsened to hold
    (:func:`~matmech.svt.split.declared_grid`: a :class:`~matmech.svt.split.DeclarationError`
    when no exact grid can).

    Parameters
    ----------
    c : int
        Rounds.
    eps : float
        The total ε.
    sensitivity : float, default 1.0
        D.
    monotonic : bool, default False
        Monotonic scores.
    integer_values : bool, default False
        Scores exact on the integers.
    value_bound : float, default 0.0
        A declared bound on abs(scores).

    Returns
    -------
    EMCalibration
        The grid and the noise scale.

    Raises
    ------
    ValueError
        Bad ε, c or sensitivity, or a scale too large for exact sampling.
    TypeError
        Arguments of the wrong kind.

    Examples
    --------
    >>> em_calibration(c=2, eps=1.0, monotonic=True, integer_values=True).scale
    2.0
    """
    c = check_c(c)
    eps, _ = check_eps(eps)
    sensitivity = check_sensitivity(sensitivity)
    monotonic = check_flag("monotonic", monotonic)
    integer_values = check_flag("integer_values", integer_values)
    grid_for_bound(value_bound)  # validates the bound (a ValueError naming it)
    return _em_calibration(c, eps, sensitivity, monotonic, integer_values, float(value_bound))


@functools.lru_cache(maxsize=256)
def _em_calibration(c, eps, sensitivity, monotonic, integer_values, value_bound) -> EMCalibration:
    """The cached body of :func:`em_calibration` (every option checked: a cache keyed by
    equality must not take ``eps=True`` for an earlier 1.0)."""
    sens, g, scale = top_c_noise(eps, c, sensitivity, monotonic, integer_values, value_bound)
    return EMCalibration(eps, c, monotonic, sens, g, scale)


@dataclass(frozen=True)
class TopCResult:
    """Output of :func:`exponential_top_c`.

    A frozen record, made by :func:`exponential_top_c`.

    ``positions`` are the selected indices in selection order (round by round);
    ``score_scale`` is 1/β, the rate of the exponential noise per value unit;
    ``calibration`` the public :class:`EMCalibration`.

    Parameters
    ----------
    positions : tuple of int
        The picks, in order.
    eps : float
        The total ε.
    c, n_candidates : int
        Picks and candidates.
    score_scale : float
        1/β.
    calibration : EMCalibration
        The grid and the noise scale.

    Examples
    --------
    >>> t = exponential_top_c([3, 500, 2, 700], 2, 1.0, rng=np.random.default_rng(0))
    >>> t.c, t.n_candidates, t.score_scale
    (2, 4, 0.25)
    """

    positions: tuple[int, ...]
    eps: float
    c: int
    n_candidates: int
    score_scale: float
    calibration: EMCalibration | None = None

    @property
    def stopped(self) -> bool:
        """Always True: the c rounds always pick c candidates."""
        return True


#: The registry's calibration hook of :func:`exponential_top_c` (:func:`em_calibration`).
calibrate = taking(em_calibration, *COMMON)


def geometric(t: int, size: int, *, rng: Rng = None) -> np.ndarray:
    """``size`` exact geometric draws, P(G = k) = (1 − e^{−1/t}) e^{−k/t} for k ≥ 0, as int64:
    G = Z if Z ≥ 0 else −Z − 1 from Z ~ DLap(t) (:func:`matmech.privacy.noise.discrete_laplace`),
    since P(Z = k) + P(Z = −k − 1) ∝ e^{−k/t} + e^{−(k+1)/t}."""
    return _fold(noise.discrete_laplace(int(t), size, rng=rng))


def _fold(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.int64)
    return np.where(z >= 0, z, -z - 1)


def exponential_top_c(
    values: npt.ArrayLike,
    c: int,
    eps: float,
    *,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    rng: Rng = None,
    value_bound: float | None = None,
) -> TopCResult:
    """Top-c by c rounds of permute-and-flip without replacement, each ε/c; ε-DP (module docstring).

    Each round reports the argmax of q_i + E_i over the candidates not yet picked, E_i
    exponential of scale 2cD/ε (cD/ε for ``monotonic`` scores: all scores move in the same
    direction between neighbours), drawn exactly on the grid (module docstring). Requires
    c <= len(values). ``rng=None`` (default) is the secure CTR_DRBG. ``value_bound``: the
    declared bound on abs(values) checked by the caller before its spend (the grid is chosen
    for it, nothing here checks the values); None range-checks the values before any draw.
    From :data:`~matmech.svt.grid.PARALLEL_MIN` candidates on, each round's draws are made
    by two threads from two independent sources (fresh CSPRNG sources, or
    ``Generator.spawn`` children), as in the SVT scan.

    Parameters
    ----------
    values : array_like of float
        The scores.
    c : int
        How many to pick (c <= len(values)).
    eps, sensitivity, monotonic, rng, value_bound
        As :func:`~matmech.svt.sparse_vector`.

    Returns
    -------
    TopCResult
        The picks, in order.

    Raises
    ------
    ValueError, TypeError
        c > len(values), or as :func:`~matmech.svt.sparse_vector`; before any randomness.

    Examples
    --------
    >>> t = exponential_top_c([3, 500, 2, 700], 2, 1.0, rng=np.random.default_rng(0))
    >>> sorted(t.positions)
    [1, 3]
    """
    public: dict[str, Any] = dict(
        eps=eps, sensitivity=sensitivity, monotonic=monotonic, candidates="pick"
    )
    bound: dict[str, Any] = dict(rng=rng, value_bound=value_bound)
    return run(open_selection(values, None, c=c, calibrate=calibrate, **public, **bound))


def run(op: Opening) -> TopCResult:
    """c rounds of permute-and-flip without replacement from the opening (module docstring)."""
    cal, n = op.calibration, op.n
    units = op.units()
    workers = worker_sources(op.rng, n)
    picks: list[int] = []
    for _ in range(op.c):
        if picks:
            units[picks[-1]] = _TAKEN
        picks.append(_round(units, cal.units, op.src, workers))
    return TopCResult(
        positions=tuple(picks),
        eps=cal.eps,
        c=op.c,
        n_candidates=n,
        score_scale=1.0 / cal.scale,
        calibration=cal,
    )


def report_noisy_max(units: npt.ArrayLike, t: int, *, rng: Rng = None) -> int:
    """One exact round of :func:`exponential_top_c` on integer scores ``units`` (grid units):
    the index of the largest units + G, G geometric with P(G ≥ k) = e^{−k/t} drawn fresh for
    every candidate, a tie broken uniformly at random — report noisy max with exponential
    noise of scale t, i.e. permute-and-flip (module docstring). No budget is taken here.

    Raises
    ------
    ValueError
        Empty ``units``, entries beyond ±2**60, or t not a positive integer.
    """
    u = np.asarray(units)
    if u.ndim != 1 or u.size == 0 or u.dtype.kind not in "iu":
        raise ValueError("units must be a non-empty 1-D array of integers (scores in grid units)")
    if np.abs(u).max() >= 2**60:
        raise ValueError("units must stay below 2**60 in magnitude (exact int64 arithmetic)")
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 1 <= t <= MAX_SCALE_UNITS:
        raise ValueError(
            f"t must be an integer in [1, 2**47] (the noise scale in grid units), got {t!r}"
        )
    return _round(u.astype(np.int64), int(t), noise.check_rng(rng), None)


def _round(units: np.ndarray, t: int, src, workers) -> int:
    """One report-noisy-max round: the index of the largest ``units`` + G (G geometric of
    scale t, fresh for every candidate), a tie broken uniformly at random; candidates
    already taken hold :data:`_TAKEN` and never win (every round draws for all n)."""
    n = units.shape[0]
    best, ties = _TAKEN, []
    bounds = [(0, n)] if workers is None and n <= 1 << 20 else list(chunk_bounds(n))
    chunks = noise_chunks(t, bounds, src, workers)
    try:
        for (a, b), z in zip(bounds, chunks):
            v = units[a:b] + _fold(z)
            v[units[a:b] == _TAKEN] = _TAKEN
            m = int(v.max())
            if m == _TAKEN:  # every candidate of this chunk was picked before
                continue
            if m > best:
                best, ties = m, [np.flatnonzero(v == m) + a]
            elif m == best:
                ties.append(np.flatnonzero(v == m) + a)
    finally:
        chunks.close()
    at = np.concatenate(ties)
    return int(at[0] if at.size == 1 else at[src.randbelow(int(at.size))])
