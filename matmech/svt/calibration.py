"""How a sparse vector run spends its budget: the eps split, noise scales and grid.

Data independent.  [LSL17] = Lyu, Su, Li, *Understanding the Sparse Vector
Technique for Differential Privacy*, VLDB 2017 (in ``shared/references``).

* Alg. 7: threshold noise Lap(D/eps1), query noise Lap(2cD/eps2) (Lap(cD/eps2)
  for monotonic queries, Sec. 4.3, Thm. 4.9), numeric answers Lap(cD/eps3).
* Eq. (12): eps1:eps2 = 1:(2c)^(2/3) minimises Var(Lap(D/eps1) - Lap(2cD/eps2));
  1:c^(2/3) for monotonic queries.

All noise of one run lives on one power-of-two grid ``g <= 1`` (discrete
Laplace on g*Z, see :mod:`matmech.privacy.noise`).  Scales are rounded UP to whole grid
steps with exact rational arithmetic, so every scale is at least its nominal
value.  Values that are not integers are snapped to the grid, which adds ``g``
to the sensitivity (:func:`matmech.privacy.noise.snap_sensitivity`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

import numpy as np

from matmech.privacy import noise
from matmech.privacy.calibration import laplace_scale, run_grid, scale_on_grid
from matmech.privacy.params import calibrated_eps
from matmech.svt.checks import (
    Ratio,
    check_c,
    check_eps,
    check_flag,
    check_int,
    check_ratio,
    check_sensitivity,
)
from matmech.svt.grid import DECLARED_UNITS, grid_for_bound

__all__ = [
    "SVTCalibration",
    "SVTBudget",
    "optimal_ratio",
    "split_eps",
    "svt_budget",
    "make_budget",
    "MAX_SCALE_UNITS",
    "MAX_SNAP_SHARE",
    "DeclarationError",
    "declared_grid",
    "GapCalibration",
    "GAP_METHODS",
    "gap_calibration",
]

# matmech.privacy.noise samples discrete Laplace scales up to 2**48 grid units; keep a margin.
MAX_SCALE_UNITS = float(2**47)


@dataclass(frozen=True)
class SVTCalibration:
    """How an SVT run spends its budget (data independent; [LSL17] Alg. 7).

    ``eps_threshold`` (eps1) buys the threshold noise ``Lap(threshold_scale)``,
    ``eps_queries`` (eps2) the per-query noise ``Lap(query_scale)``,
    ``eps_answer`` (eps3) the numeric answers ``Lap(answer_scale)``
    (``answer_scale`` is None when eps3 = 0).  ``sensitivity`` is the
    sensitivity the scales were calibrated with: the nominal one, plus the
    grid step ``grid`` when values had to be rounded onto the grid.

    Parameters
    ----------
    eps_threshold, eps_queries, eps_answer : float
        ε₁, ε₂, ε₃.
    threshold_scale, query_scale, answer_scale : float
        The Laplace scales (``answer_scale`` None when ε₃ = 0).
    sensitivity, grid : float
        The sensitivity used and the grid step.

    Returns
    -------
    SVTCalibration
        A frozen record, made by :func:`svt_budget` (``SVTBudget`` is the same class).

    Raises
    ------
    dataclasses.FrozenInstanceError
        On any attempt to change a field.

    Examples
    --------
    >>> b = svt_budget(c=2, eps=1.0)
    >>> b.eps_threshold + b.eps_queries
    1.0
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


#: The former name (it is a calibration, not a budget: see :class:`matmech.PrivacyBudget`).
SVTBudget = SVTCalibration


def optimal_ratio(c: int, *, monotonic: bool = False) -> float:
    """r in eps1:eps2 = 1:r minimising Var(Lap(D/eps1) - Lap(k c D/eps2)).

    [LSL17] Eq. (12): r = (2c)^(2/3); Sec. 4.3 for monotonic queries: r = c^(2/3).

    Parameters
    ----------
    c : int
        The SVT cutoff.
    monotonic : bool, default False
        Monotonic queries.

    Returns
    -------
    float
        r = (2c)^(2/3), or c^(2/3) for monotonic queries ([LSL17] Eq. 12).

    Raises
    ------
    ValueError
        c < 1.
    TypeError
        c not an integer.

    Examples
    --------
    >>> round(optimal_ratio(8), 4), round(optimal_ratio(8, monotonic=True), 4)
    (6.3496, 4.0)
    """
    c = check_c(c)
    return float((c if monotonic else 2 * c) ** (2.0 / 3.0))


def split_eps(eps12: float, ratio: Ratio, c: int, monotonic: bool) -> tuple[float, float]:
    """(eps1, eps2) with eps1:eps2 = 1:r and eps1 + eps2 <= eps12 exactly."""
    r = optimal_ratio(c, monotonic=monotonic) if ratio == "optimal" else float(ratio)
    e1 = eps12 / (1.0 + r)
    return e1, _binary_rest(eps12, e1)


def _binary_rest(total: float, part: float) -> float:
    """The largest float r >= 0 with r + part <= total exactly in binary: the split of a total
    that is already the calibrated (decimal) eps (:func:`~matmech.privacy.params.calibrated_eps`),
    so only the binary values the noise uses must add up (1:1 splits stay exact halves)."""
    r = float(Fraction(total) - Fraction(part))
    while r > 0 and Fraction(r) + Fraction(part) > Fraction(total):
        r = math.nextafter(r, 0.0)
    return max(r, 0.0)


#: One power-of-two grid for all noises of a run, never coarser than 1 (the library's rule,
#: :func:`matmech.privacy.calibration.run_grid`).
_grid_for = run_grid


class DeclarationError(ValueError):
    """A declared bound on abs(values) that no exact grid can hold; ``fits`` is the largest
    bound that can (the plan rephrases it as a max_records)."""

    def __init__(self, fits: float, message: str) -> None:
        super().__init__(message)
        self.fits = float(fits)


#: A grid coarsened for a declared bound may add at most this fraction of the sensitivity by
#: snapping non-integer values (:func:`declared_grid`).
MAX_SNAP_SHARE = 2.0**-8


def declared_grid(
    g: float, value_bound: float, sensitivity: float, exact_on_grid: bool, coords: int = 1
) -> float:
    """The calibration grid ``g`` coarsened (never refined) so that every value of magnitude
    <= ``value_bound`` (the declared bound) is at most 2**59 units (:func:`~matmech.svt.grid.grid_for_bound`).

    Integer values need a grid <= 1; snapped values add ``coords * g`` to the sensitivity, which
    must stay at most :data:`MAX_SNAP_SHARE` of it. Otherwise ValueError naming the bound and
    the largest bound that fits: raised by the plan, before anything is read or spent.
    """
    need = grid_for_bound(value_bound)
    if need <= g:
        return g
    cap = 1.0 if exact_on_grid else sensitivity * MAX_SNAP_SHARE / coords
    if need > cap:
        fits = DECLARED_UNITS * _pow2_floor_of(cap)
        raise DeclarationError(
            fits,
            f"the declared bound on |values| {value_bound:.6g} (max_records times the workload's largest |entry|) "
            f"needs a grid of {need:g}, coarser than the {cap:.3g} the exact comparison allows here; at most "
            f"{fits:.6g} fits: declare a smaller max_records",
        )
    return need


def _pow2_floor_of(v: float) -> float:
    m, e = math.frexp(v)
    return math.ldexp(1.0, e - 1)


#: mult·sensitivity/eps_part rounded up to whole grid steps
#: (:func:`matmech.privacy.calibration.scale_on_grid`).
_scale_on_grid = scale_on_grid


@functools.lru_cache(maxsize=512, typed=True)  # typed: True / 1 / 1.0 are distinct keys
def make_budget(
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
    value_bound: float = 0.0,
) -> SVTCalibration:
    """Budget with threshold scale threshold_mult*D/e1 and query scale query_mult*D/e2.

    Arguments must already be valid.  Raises ValueError when a scale is too
    large for exact sampling.  Cached: runs with the same parameters share one
    (immutable) record.
    """
    nominal = [
        laplace_scale(e1, threshold_mult * sensitivity),
        laplace_scale(e2, query_mult * sensitivity),
    ]
    if eps_answer > 0:
        nominal.append(laplace_scale(eps_answer, c * sensitivity))
    g = declared_grid(_grid_for(*nominal), value_bound, sensitivity, exact_on_grid)
    if max(nominal) / g > MAX_SCALE_UNITS:
        raise ValueError(
            f"noise scale {max(nominal):.3g} is too large for exact sampling on the grid "
            f"(eps={eps!r}, sensitivity={sensitivity!r}, split eps1={e1:.3g}, eps2={e2:.3g}); "
            f"use a larger eps or rescale the values"
        )
    sens = sensitivity if exact_on_grid else noise.snap_sensitivity(sensitivity, g)
    return SVTCalibration(
        eps=eps,
        eps_threshold=e1,
        eps_queries=e2,
        eps_answer=eps_answer,
        c=c,
        monotonic=bool(monotonic),
        sensitivity=sens,
        threshold_scale=_scale_on_grid(threshold_mult, sens, e1, g),
        query_scale=_scale_on_grid(query_mult, sens, e2, g),
        answer_scale=_scale_on_grid(c, sens, eps_answer, g) if eps_answer > 0 else None,
        grid=g,
    )


def svt_budget(
    *,
    c: int,
    eps: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    ratio: Ratio = "optimal",
    eps_answer: float = 0.0,
    integer_values: bool = False,
    value_bound: float = 0.0,
) -> SVTCalibration:
    """Calibration of :func:`~matmech.svt.sparse_vector` ([LSL17] Alg. 7) without touching data.

    eps1 + eps2 = eps - eps_answer split as 1:ratio; threshold noise
    Lap(D/eps1), query noise Lap(2cD/eps2) (Lap(cD/eps2) if ``monotonic``,
    Thm. 4.9), answers Lap(cD/eps3).  ``integer_values`` says whether the
    values will arrive with an integer dtype (then no grid rounding, and D is
    not increased by the grid step).

    Parameters
    ----------
    c : int
        The cutoff.
    eps : float
        The total ε.
    sensitivity : float, default 1.0
        Sensitivity of each value.
    monotonic : bool, default False
        Monotonic queries.
    ratio : float or "optimal", default "optimal"
        r in ε₁:ε₂ = 1:r.
    eps_answer : float, default 0.0
        ε₃ for numeric answers.
    integer_values : bool, default False
        Values already on the integer grid (no rounding allowance).
    value_bound : float, default 0.0
        A declared bound on abs(values) (0 = none); the grid is coarsened so that no value
        within it can overflow (:func:`declared_grid`).

    Returns
    -------
    SVTCalibration
        The split and the noise scales.

    Raises
    ------
    ValueError
        Bad ε, c, ratio or a scale too large for exact sampling.
    TypeError
        Arguments of the wrong kind.

    Examples
    --------
    >>> b = svt_budget(c=2, eps=1.0)
    >>> b.query_scale > b.threshold_scale
    True
    """
    c = check_c(c)
    eps, eps_answer = check_eps(eps, eps_answer)
    sensitivity = check_sensitivity(sensitivity)
    ratio = check_ratio(ratio)
    monotonic = check_flag("monotonic", monotonic)
    # calibrated for the decimal eps the budget charges (issue 21): parts add up to at most it
    e1, e2 = split_eps(_binary_rest(calibrated_eps(eps), eps_answer), ratio, c, monotonic)
    return make_budget(
        c=c,
        eps=eps,
        eps_answer=eps_answer,
        e1=e1,
        e2=e2,
        sensitivity=sensitivity,
        monotonic=bool(monotonic),
        exact_on_grid=bool(integer_values),
        threshold_mult=1.0,
        query_mult=(1.0 if monotonic else 2.0) * c,
        value_bound=float(value_bound),
    )


# --------------------------------------------------------------------------
# The free-gap mechanisms (Ding, Wang, Zhang, Kifer, PVLDB 13(3) 2019)
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class GapCalibration:
    """How a free-gap selection spends its budget (data independent; :mod:`matmech.svt.gap`).

    ``method``: ``"topc-gap"`` (Noisy Top-K with Gap: every score gets Lap(query_scale),
    2cD/eps, cD/eps for monotonic scores), ``"svt-gap"`` (Sparse Vector with Gap) or
    ``"adaptive-svt"`` (Adaptive Sparse Vector with Gap).  For the two SVTs:
    ``eps_threshold`` (eps0) buys the threshold noise Lap(``threshold_scale`` = D/eps0);
    a positive from the middle branch costs ``eps_middle`` (eps1 = (eps - eps0)/c, noise
    Lap(``query_scale`` = 2D/eps1, D/eps1 monotonic)), one from the top branch (adaptive
    only) ``eps_top`` = eps1/2 with noise Lap(``top_scale`` = 2 * query_scale) and margin
    ``sigma``.  ``units`` is the query budget eps - eps0 in whole multiples of eps_top (a run
    stops when fewer than two are left, i.e. when a middle positive would not fit).  All
    scales are whole multiples of the one power-of-two ``grid``; ``sensitivity`` includes
    the grid step when values must be snapped to it.

    Parameters
    ----------
    method : str
        ``"topc-gap"``, ``"svt-gap"`` or ``"adaptive-svt"``.
    eps : float
        The total ε.
    c : int
        The cutoff.
    monotonic : bool
        Monotonic noise.
    sensitivity, grid, query_scale : float
        Sensitivity used, grid step, per-score noise scale.
    threshold_scale, top_scale, sigma : float or None
        SVT threshold noise, adaptive top-branch noise and margin.
    eps_threshold, eps_middle, eps_top : float
        The budget split.
    units : int
        Query budget in multiples of ``eps_top``.

    Returns
    -------
    GapCalibration
        A frozen record, made by :func:`gap_calibration`.

    Raises
    ------
    dataclasses.FrozenInstanceError
        On any attempt to change a field.

    Examples
    --------
    >>> gap_calibration("svt-gap", c=2, eps=1.0).threshold_scale is not None
    True
    """

    method: str
    eps: float
    c: int
    monotonic: bool
    sensitivity: float
    grid: float
    query_scale: float
    threshold_scale: Optional[float] = None
    top_scale: Optional[float] = None
    sigma: Optional[float] = None
    eps_threshold: float = 0.0
    eps_middle: float = 0.0
    eps_top: float = 0.0
    units: int = 0

    def gap_variance(self, branch: str = "middle") -> float:
        """Exact variance of the discrete noise in one released noisy value of ``branch``
        ("middle", "top", or "threshold"): the variance of DLap(scale/grid) times grid**2."""
        scale = {
            "middle": self.query_scale,
            "top": self.top_scale,
            "threshold": self.threshold_scale,
        }[branch]
        if scale is None:
            raise ValueError(f"{self.method} has no {branch!r} noise")
        return noise.discrete_laplace_variance(int(round(scale / self.grid))) * self.grid**2


GAP_METHODS = ("topc-gap", "svt-gap", "adaptive-svt")


def _floor_div(total: float, c: int) -> float:
    """The largest float e with c * e <= total exactly."""
    f = Fraction(total) / c
    e = float(f)
    while Fraction(e) * c > Fraction(total):
        e = math.nextafter(e, 0.0)
    return e


def _gap_sens(sensitivity: float, g: float, exact_on_grid: bool) -> float:
    return sensitivity if exact_on_grid else noise.snap_sensitivity(sensitivity, g)


def gap_calibration(
    method: str,
    *,
    c: int,
    eps: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    ratio: Ratio = "optimal",
    sigma: object = "auto",
    integer_values: bool = False,
    n_candidates: int = 0,
    value_bound: float = 0.0,
) -> GapCalibration:
    """Calibration of a free-gap selection (:mod:`matmech.svt.gap`) without touching data.

    ``topc-gap``: Lap(2cD/eps) on every score, Lap(cD/eps) if ``monotonic`` (Ding et al.
    2019, Noisy Top-K with Gap).  ``svt-gap`` / ``adaptive-svt``: eps0:(eps - eps0) = 1:r
    with r = ``ratio`` ("optimal" = [LSL17] Eq. (12), (2c)^(2/3) or c^(2/3) monotonic);
    eps1 = (eps - eps0)/c, rounded down so that eps0 + c*eps1 <= eps exactly; query noise
    Lap(2D/eps1) (D/eps1 monotonic).  ``adaptive-svt`` adds the top branch Lap(2 * that)
    costing eps1/2, taken when the noisy margin is at least ``sigma`` (value units;
    "auto" = top_scale * max(2*sqrt(2), ln(n_candidates)): at least two standard deviations
    of the top-branch noise, and large enough that a row AT the threshold takes the top
    branch with probability <= 1/(2n), so the n candidates give at most about one false
    top positive in expectation.  Our default (n is public); the paper leaves sigma to the user).

    Every option is checked before the cache of the calibrations: a cache keyed by
    equality would take ``eps=True`` or ``monotonic=1`` for the 1.0 / True of an earlier
    valid call (issue 23).

    Parameters
    ----------
    method : str
        ``"topc-gap"``, ``"svt-gap"`` or ``"adaptive-svt"``.
    c : int
        The cutoff.
    eps : float
        The total ε.
    sensitivity : float, default 1.0
        D.
    monotonic : bool, default False
        Monotonic queries.
    ratio : float or "optimal", default "optimal"
        SVT's ε₁:ε₂ (not for top-c).
    sigma : float or "auto", default "auto"
        Adaptive SVT's margin.
    integer_values : bool, default False
        Values already on the integer grid.
    n_candidates : int, default 0
        Number of candidates (adaptive SVT's automatic margin).
    value_bound : float, default 0.0
        A declared bound on abs(values) (0 = none); the grid is coarsened so that no value
        within it can overflow (:func:`declared_grid`).

    Returns
    -------
    GapCalibration
        The noise scales and the split.

    Raises
    ------
    ValueError
        An unknown method, options it does not take, or bad ε, c, sigma.
    TypeError
        Arguments of the wrong kind.

    Examples
    --------
    >>> gap_calibration("topc-gap", c=2, eps=1.0).method
    'topc-gap'
    """
    if not isinstance(method, str) or method not in GAP_METHODS:
        raise ValueError(f"method must be one of {GAP_METHODS}, got {method!r}")
    c = check_c(c)
    eps, _ = check_eps(eps)
    sensitivity = check_sensitivity(sensitivity)
    monotonic = check_flag("monotonic", monotonic)
    integer_values = check_flag("integer_values", integer_values)
    ratio = check_ratio(ratio)
    if isinstance(sigma, str):
        if sigma != "auto":
            raise ValueError(f"sigma must be a positive number or 'auto', got {sigma!r}")
    else:
        from matmech.svt.checks import check_real

        sigma = check_real("sigma", sigma)
    n_candidates = check_int(
        "n_candidates", n_candidates, what="the number of candidate rows", minimum=0
    )
    value_bound = _check_value_bound(value_bound)
    return _gap_calibration(
        method,
        c=c,
        eps=eps,
        sensitivity=sensitivity,
        monotonic=monotonic,
        ratio=ratio,
        sigma=sigma,
        integer_values=integer_values,
        n_candidates=n_candidates,
        value_bound=value_bound,
    )


def _check_value_bound(value_bound) -> float:
    """A declared bound on abs(values) (0 = none) as a float, or a TypeError/ValueError."""
    if isinstance(value_bound, bool) or not isinstance(
        value_bound, (int, float, np.integer, np.floating)
    ):
        raise TypeError(
            f"value_bound must be a non-negative number, got {type(value_bound).__name__}"
        )
    v = float(value_bound)
    if not (math.isfinite(v) and v >= 0.0):
        raise ValueError(f"value_bound must be a non-negative finite number, got {value_bound!r}")
    return v


@functools.lru_cache(maxsize=256)
def _gap_calibration(
    method: str,
    *,
    c: int,
    eps: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    ratio: Ratio = "optimal",
    sigma: object = "auto",
    integer_values: bool = False,
    n_candidates: int = 0,
    value_bound: float = 0.0,
) -> GapCalibration:
    """The cached body of :func:`gap_calibration` (every option already checked)."""
    if method not in GAP_METHODS:
        raise ValueError(f"method must be one of {GAP_METHODS}, got {method!r}")
    c = check_c(c)
    eps, _ = check_eps(eps)
    sensitivity = check_sensitivity(sensitivity)
    monotonic = check_flag("monotonic", monotonic)
    k = 1.0 if monotonic else 2.0
    ec = calibrated_eps(eps)  # the decimal eps the budget charges (issue 21)
    if method == "topc-gap":
        if sigma != "auto" or ratio != "optimal":
            raise ValueError(
                f"topc-gap takes no ratio or sigma (got ratio={ratio!r}, sigma={sigma!r})"
            )
        nominal = laplace_scale(eps, k * c * sensitivity)  # the grid's scale (validates eps)
        g = declared_grid(_grid_for(nominal), value_bound, sensitivity, integer_values)
        if nominal / g > MAX_SCALE_UNITS:
            raise ValueError(
                f"noise scale {nominal:.3g} is too large for exact sampling on the grid (eps={eps!r}, "
                f"sensitivity={sensitivity!r}); use a larger eps or rescale the values"
            )
        sens = _gap_sens(sensitivity, g, integer_values)
        return GapCalibration(
            method, eps, c, bool(monotonic), sens, g, _scale_on_grid(k * c, sens, ec, g)
        )
    ratio = check_ratio(ratio)
    r = optimal_ratio(c, monotonic=monotonic) if ratio == "optimal" else float(ratio)
    e0 = ec / (1.0 + r)
    e1 = _floor_div(_binary_rest(ec, e0), c)
    e_top = e1 / 2.0  # exact: a power-of-two division
    scales = [laplace_scale(e0, sensitivity), laplace_scale(e1, k * sensitivity)]
    if method == "adaptive-svt":
        scales.append(laplace_scale(e_top, k * sensitivity))
    g = declared_grid(_grid_for(*scales), value_bound, sensitivity, integer_values)
    if max(scales) / g > MAX_SCALE_UNITS:
        raise ValueError(
            f"noise scale {max(scales):.3g} is too large for exact sampling on the grid "
            f"(eps={eps!r}, sensitivity={sensitivity!r}); use a larger eps or rescale the values"
        )
    sens = _gap_sens(sensitivity, g, integer_values)
    q_scale = _scale_on_grid(k, sens, e1, g)
    top = sig = None
    if method == "adaptive-svt":
        top = 2.0 * q_scale  # = the scale for eps1/2, still a whole number of grid steps
        if isinstance(sigma, str):
            if sigma != "auto":
                raise ValueError(f"sigma must be a positive number or 'auto', got {sigma!r}")
            sig = max(2.0 * math.sqrt(2.0), math.log(max(int(n_candidates), 1))) * top
        else:
            from matmech.svt.checks import check_real

            sig = check_real("sigma", sigma)
        sig = math.ceil(Fraction(sig) / Fraction(g)) * g  # on the grid, rounded up
    elif sigma != "auto":
        raise ValueError(
            f"sigma is an option of adaptive-svt only, got sigma={sigma!r} for {method!r}"
        )
    units = int((Fraction(ec) - Fraction(e0)) / Fraction(e_top))
    return GapCalibration(
        method,
        eps,
        c,
        bool(monotonic),
        sens,
        g,
        q_scale,
        threshold_scale=_scale_on_grid(1.0, sens, e0, g),
        top_scale=top,
        sigma=sig,
        eps_threshold=e0,
        eps_middle=e1,
        eps_top=e_top,
        units=units,
    )
