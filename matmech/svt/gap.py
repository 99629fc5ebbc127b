"""Selection with the free gap: Noisy Top-c with Gap, Sparse Vector with Gap, Adaptive SVT.

[DWZK19] = Z. Ding, Y. Wang, D. Zhang, D. Kifer, *Free Gap Information from the
Differentially Private Sparse Vector and Noisy Max Mechanisms*, PVLDB 13(3), 2019
(journal version VLDB Journal 2022).  Their privacy proofs use *randomness alignment*: for
neighbours D, D' a map of the noise vectors that turns every run on D into a run on D' with
the SAME output and costs at most eps in density.  The released gaps are unchanged by the
alignment, which is why they come for free.

* :func:`noisy_top_c_gap` - [DWZK19] "Noisy Top-K with Gap": every score gets
  eta_i ~ Lap(2cD/eps) (Lap(cD/eps) for monotonic scores); output the c best indices
  j_1..j_c by noisy score and the gaps g_t = (q_j_t + eta_j_t) - (q_j_{t+1} + eta_j_{t+1}),
  j_{c+1} being the (unreleased) runner-up.  eps-DP: the alignment keeps the noise of
  every unselected score and shifts each selected one by q_j - q'_j + delta, delta the
  change of the best unselected noisy score (|.| <= 2D, or D for monotonic scores), so
  all gaps and the order are kept at a cost of at most eps.
* :func:`sparse_vector_gap` - [DWZK19] "Sparse Vector with Gap": [LSL17] Alg. 7 whose
  positives also return their noisy gap q_i + nu_i - (T_i + rho) >= 0.  Same scales as
  Alg. 7; eps-DP (alignment rho' = rho + D, nu'_i = nu_i + D + q_i - q'_i on positives).
* :func:`adaptive_sparse_vector` - [DWZK19] "Adaptive Sparse Vector with Gap": each query
  first tries a cheap *top branch* (noise Lap(4D/eps1), positive when the noisy margin is
  at least sigma, cost eps1/2), then the *middle branch* (noise Lap(2D/eps1), margin >= 0,
  cost eps1); the run stops when a middle positive would no longer fit in eps.  Clear
  winners cost half, so more rows are found for the same eps.  eps-DP: the alignment
  shifts the noise of the branch that fired and leaves the noise of a branch that failed
  unchanged, so the branch taken is preserved too - we release it (it says which
  variance the gap has).

Exactness and randomness are as in :mod:`matmech.svt.core`: values, thresholds, sigma and
noise live on one power-of-two grid (int64 units), noise is discrete Laplace from
:mod:`matmech.privacy.noise` with the caller's ``rng`` (None = the secure CTR_DRBG).  The proofs
carry over to the grid because every alignment shift is a whole number of grid steps.  In
Noisy Top-c ties between noisy scores are broken towards the lower index (the exact
audit in ``tests/svt`` covers the tie outputs).  These functions take no budget: callers
(:func:`matmech.svt.select.select_rows`, :func:`matmech.release`) charge it first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from matmech.svt.checks import Ratio
from matmech.svt.gap_calibration import GapCalibration, gap_calibration
from matmech.svt.grid import chunk_bounds
from matmech.svt.measurement import GapMeasurement, selected_thresholds
from matmech.svt.opening import COMMON, Opening, open_selection, taking

if TYPE_CHECKING:  # names used only in annotations
    from matmech.privacy.randomness import Rng
    import numpy.typing as npt


@dataclass(frozen=True)
class GapResult:
    """Output of a free-gap selection.

    A frozen record, made by the free-gap functions.

    ``positions``: the selected indices (Noisy Top-c: best first; SVT: in the order found).
    ``gaps``: one per position, in value units - Top-c: noisy score minus the next noisy
    score (the last one minus the unreleased runner-up); SVT: noisy value minus the noisy
    threshold (>= 0, >= sigma on the top branch).  ``branches``: "rank" (Top-c), "middle"
    or "top" (SVT).  ``eps``: the budget the run was calibrated for (the privacy cost);
    ``eps_used``: what the positives actually used of it (adaptive SVT may stop early).
    ``stopped``/``n_processed`` are functions of the output.  ``calibration`` is public.

    Parameters
    ----------
    positions : tuple of int
        The selected indices.
    gaps : tuple of float
        One noisy gap per position.
    branches : tuple of str
        ``"rank"``, ``"middle"`` or ``"top"``.
    eps, eps_used : float
        The calibrated budget and what the positives used.
    stopped : bool
        The run hit its cutoff.
    n_processed : int
        Comparisons made.
    calibration : GapCalibration
        The public calibration.

    Examples
    --------
    >>> r = noisy_top_c_gap([3, 500, 2, 700], 2, 1.0, rng=np.random.default_rng(0))
    >>> r.positions, r.branches
    ((3, 1), ('rank', 'rank'))
    """

    positions: tuple[int, ...]
    gaps: tuple[float, ...]
    branches: tuple[str, ...]
    eps: float
    eps_used: float
    stopped: bool
    n_processed: int
    calibration: GapCalibration
    mechanism: str = ""  # which mechanism ran (the registry, :mod:`matmech.svt.methods`)


#: The registry's calibration hooks of the free-gap selections
#: (:func:`~matmech.svt.gap_calibration.gap_calibration`): Noisy Top-c takes no ratio or sigma,
#: only adaptive SVT takes sigma and the number of candidates (its automatic margin).
calibrate_top_c = taking(gap_calibration, *COMMON, method="topc-gap")
calibrate_svt_gap = taking(gap_calibration, *COMMON, "ratio", method="svt-gap")
calibrate_adaptive = taking(
    gap_calibration, *COMMON, "ratio", "sigma", "n_candidates", method="adaptive-svt"
)


def top_c_order(noisy, c):
    """The c + 1 best of ``noisy`` by (value descending, index ascending): a fixed tie rule."""
    kth = -np.partition(-noisy, c)[c]
    cand = np.flatnonzero(noisy >= kth)
    return cand[np.lexsort((cand, -noisy[cand]))][: c + 1]


def noisy_top_c_gap(
    values: npt.ArrayLike,
    c: int,
    eps: float,
    *,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    rng: Rng = None,
    value_bound: float | None = None,
) -> GapResult:
    """[DWZK19] Noisy Top-K with Gap: the c largest noisy scores and the gaps between them; eps-DP.

    eta_i ~ Lap(2cD/eps) on every value (Lap(cD/eps) if ``monotonic``: all scores move in
    the same direction between neighbours), exactly on the grid; needs c < len(values)
    (the last gap is to the runner-up).  ``rng=None`` is the secure CTR_DRBG.  ``value_bound``: the
    declared bound on abs(values) checked by the caller before its spend (the grid is chosen for
    it, nothing here checks the values); None range-checks the values before any draw.

    Parameters
    ----------
    values : array_like of float
        The scores.
    c : int
        How many to select (c < len(values)).
    eps, sensitivity, monotonic, rng, value_bound
        As :func:`~matmech.svt.sparse_vector`.

    Returns
    -------
    GapResult
        The c best, best first, and their gaps.

    Raises
    ------
    ValueError, TypeError
        c >= len(values), or as :func:`~matmech.svt.sparse_vector`; before any randomness.

    Examples
    --------
    >>> r = noisy_top_c_gap([3, 500, 2, 700], 2, 1.0, rng=np.random.default_rng(0))
    >>> r.positions, len(r.gaps)
    ((3, 1), 2)
    """
    public: dict[str, Any] = dict(
        eps=eps, sensitivity=sensitivity, monotonic=monotonic, value_bound=value_bound
    )
    op = open_selection(
        values, None, c=c, calibrate=calibrate_top_c, rng=rng, **public, candidates="runner-up"
    )
    return run_top_c_gap(op)


def run_top_c_gap(op: Opening) -> GapResult:
    """[DWZK19] Noisy Top-K with Gap from its opening: one draw per score, the c + 1 best."""
    cal, c, n = op.calibration, op.c, op.n
    noisy = op.units() + op.draw(cal.query_scale, n)
    order = top_c_order(noisy, c)
    gaps = noisy[order[:-1]] - noisy[order[1:]]
    return GapResult(
        tuple(int(i) for i in order[:-1]),
        tuple(float(v) * op.grid for v in gaps),
        ("rank",) * c,
        cal.eps,
        cal.eps,
        True,
        n,
        cal,
        "noisy-top-c-gap",
    )


def top_c_law(result: Any, threshold: Any = None) -> GapMeasurement:
    """Noisy Top-c's gaps as a measurement: z_t = -(g_1 + ... + g_{t-1}), the noisy score of
    j_t minus that of j_1; d_t = Var(eta), an unknown common offset (s = inf)."""
    pos = np.asarray(result.positions, dtype=np.int64)
    gaps = np.asarray(result.gaps, dtype=np.float64)
    z = -np.concatenate([[0.0], np.cumsum(gaps[:-1])]) if pos.size else np.zeros(0)
    var = np.full(pos.size, result.calibration.gap_variance("middle"))
    return GapMeasurement(pos, z, var, math.inf)


def threshold_law(result: Any, threshold: Any = None) -> GapMeasurement:
    """SVT with gap's (and adaptive SVT's) gaps as a measurement: z_i = gap_i + T_i =
    q_i + nu_i - rho, d_i = Var(nu_i) of the branch that fired, s = Var(rho)."""
    cal = result.calibration
    pos = np.asarray(result.positions, dtype=np.int64)
    tv = selected_thresholds(threshold, pos, cal.method)
    var = np.array([cal.gap_variance(b) for b in result.branches], dtype=np.float64)
    gaps = np.asarray(result.gaps, dtype=np.float64)
    return GapMeasurement(pos, gaps + tv, var, cal.gap_variance("threshold"))


def run_svt_gap(op: Opening) -> GapResult:
    """[DWZK19] Sparse Vector with Gap, and its adaptive form when the calibration has a top
    branch, from its opening: one threshold noise, then the scan until the budget of
    positives is used up."""
    cal, g, n = op.calibration, op.grid, op.n
    t_units = op.threshold_units()
    rho = int(op.draw(cal.threshold_scale, 1)[0])
    adaptive = cal.top_scale is not None
    sigma_u = int(round(cal.sigma / g)) if adaptive else 0  # type: ignore[operator]
    limit = cal.units - 2  # stop once the units used exceed this: a middle positive would not fit
    used = 0
    pos_out: list = []
    gap_out: list = []
    br_out: list = []
    processed, stopped = n, False
    for a, b in chunk_bounds(n):
        base = op.units(a, b) - (t_units[0] if t_units.shape[0] == 1 else t_units[a:b]) - rho
        mid = base + op.draw(cal.query_scale, b - a)
        if adaptive:
            top_m = base + op.draw(cal.top_scale, b - a)
            top = top_m >= sigma_u
            hit = top | (mid >= 0)
            margin = np.where(top, top_m, mid)
            cost = np.where(top, 1, 2)
        else:
            top = np.zeros(b - a, dtype=bool)
            hit, margin, cost = mid >= 0, mid, np.full(b - a, 2)
        idx = np.flatnonzero(hit)
        if not idx.size:
            continue
        cum = used + np.cumsum(cost[idx])
        over = np.flatnonzero(cum > limit)
        if over.size:
            idx = idx[: over[0] + 1]
            stopped, processed = True, a + int(idx[-1]) + 1
        used = int(cum[idx.size - 1])
        pos_out.extend((idx + a).tolist())
        gap_out.extend((margin[idx].astype(np.float64) * g).tolist())
        br_out.extend("top" if x else "middle" for x in top[idx].tolist())
        if stopped:
            break
    eps_used = cal.eps_threshold + used * cal.eps_top
    return GapResult(
        tuple(int(i) for i in pos_out),
        tuple(gap_out),
        tuple(br_out),
        cal.eps,
        min(eps_used, cal.eps),
        stopped,
        processed,
        cal,
        "adaptive-sparse-vector" if adaptive else "sparse-vector-gap",
    )


def sparse_vector_gap(
    values: npt.ArrayLike,
    threshold: Any,
    *,
    c: int,
    eps: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    ratio: Ratio = "optimal",
    rng: Rng = None,
    value_bound: float | None = None,
) -> GapResult:
    """[DWZK19] Sparse Vector with Gap: [LSL17] Alg. 7 whose positives return their noisy gap; eps-DP.

    rho ~ Lap(D/eps0) once, nu_i ~ Lap(2D/eps1) per value (D/eps1 if ``monotonic``),
    eps1 = (eps - eps0)/c, eps0:(eps - eps0) = 1:``ratio`` ("optimal": [LSL17] Eq. (12));
    i is a positive when the gap q_i + nu_i - (T_i + rho) >= 0; stops at the c-th.
    ``value_bound``: as in :func:`noisy_top_c_gap`.

    Parameters
    ----------
    values, threshold, c, eps, sensitivity, monotonic, ratio, rng, value_bound
        As :func:`~matmech.svt.sparse_vector`.

    Returns
    -------
    GapResult
        The positives, in order, with their gaps to the noisy threshold.

    Raises
    ------
    ValueError, TypeError
        As :func:`~matmech.svt.sparse_vector`.

    Examples
    --------
    >>> r = sparse_vector_gap([3, 500, 2, 700], 100, c=2, eps=1.0, rng=np.random.default_rng(0))
    >>> r.positions, min(r.gaps) >= 0, r.branches
    ((1, 3), True, ('middle', 'middle'))
    """
    public: dict[str, Any] = dict(
        eps=eps, sensitivity=sensitivity, monotonic=monotonic, ratio=ratio
    )
    bound: dict[str, Any] = dict(rng=rng, value_bound=value_bound)
    return run_svt_gap(
        open_selection(values, threshold, c=c, calibrate=calibrate_svt_gap, **public, **bound)
    )


def adaptive_sparse_vector(
    values: npt.ArrayLike,
    threshold: Any,
    *,
    c: int,
    eps: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    ratio: Ratio = "optimal",
    sigma="auto",
    rng: Rng = None,
    value_bound: float | None = None,
) -> GapResult:
    """[DWZK19] Adaptive Sparse Vector with Gap; eps-DP, at least c and up to 2c - 1 positives.

    As :func:`sparse_vector_gap`, but each value first tries the top branch (noise
    Lap(4D/eps1), Lap(2D/eps1) monotonic; positive when the gap is >= ``sigma``, cost
    eps1/2), then the middle branch (Lap(2D/eps1), gap >= 0, cost eps1).  The run stops
    when what is left of eps - eps0 is less than eps1.  ``sigma="auto"``: top-branch scale
    times max(2*sqrt(2), ln n) for n candidates (see :func:`~matmech.svt.gap_calibration.gap_calibration`;
    our default, [DWZK19] leave sigma to the user).  ``value_bound``: as in :func:`noisy_top_c_gap`.

    Parameters
    ----------
    c : int
        The cutoff at the middle-branch price.
    sigma : float or "auto", default "auto"
        The top-branch margin.
    values, threshold, eps, sensitivity, monotonic, ratio, rng, value_bound
        As :func:`~matmech.svt.sparse_vector`.

    Returns
    -------
    GapResult
        The positives with their gaps and branches.

    Raises
    ------
    ValueError, TypeError
        A bad ``sigma``, or as :func:`~matmech.svt.sparse_vector`.

    Examples
    --------
    >>> r = adaptive_sparse_vector([3, 500, 2, 700], 100, c=2, eps=1.0,
    ...                            rng=np.random.default_rng(0))
    >>> r.positions, r.branches
    ((1, 3), ('top', 'top'))
    """
    public: dict[str, Any] = dict(
        eps=eps, sensitivity=sensitivity, monotonic=monotonic, ratio=ratio, sigma=sigma
    )
    bound: dict[str, Any] = dict(rng=rng, value_bound=value_bound)
    return run_svt_gap(
        open_selection(values, threshold, c=c, calibrate=calibrate_adaptive, **public, **bound)
    )
