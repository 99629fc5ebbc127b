"""How a free-gap selection spends its budget (Ding, Wang, Zhang, Kifer, PVLDB 13(3) 2019).

Data independent. Noisy Top-c with Gap, Sparse Vector with Gap and Adaptive Sparse Vector
with Gap: the ε split ([LSL17] Eq. (12) ratio, :mod:`matmech.svt.split`), the noise scales
rounded up to whole steps of one power-of-two grid (:mod:`matmech.privacy.calibration`), and
the exact variance of every released gap.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from matmech.privacy import noise
from matmech.privacy.calibration import laplace_scale, scale_on_grid
from matmech.privacy.params import calibrated_eps
from matmech.svt.checks import (
    Ratio,
    check_c,
    check_eps,
    check_flag,
    check_int,
    check_ratio,
    check_real,
    check_sensitivity,
)
from matmech.validate import choice
from matmech.svt.split import (
    binary_rest,
    check_value_bound,
    floor_div,
    snapped_sensitivity,
    optimal_ratio,
    scales_grid,
    top_c_noise,
)


#: The free-gap selections :func:`gap_calibration` calibrates ([DWZK19]).
GAP_CALIBRATIONS = ("topc-gap", "svt-gap", "adaptive-svt")


@dataclass(frozen=True)
class GapCalibration:
    """How a free-gap selection spends its budget (data independent; :mod:`matmech.svt.gap`).

    A frozen record, made by :func:`gap_calibration`.

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
    ratio : float or "optimal", default "optimal"
        SVT's ε₁:ε₂ (not for top-c).
    sigma : float or "auto", default "auto"
        Adaptive SVT's margin.
    n_candidates : int, default 0
        Number of candidates (adaptive SVT's automatic margin).
    c, eps, sensitivity, monotonic, integer_values, value_bound
        As :func:`~matmech.svt.svt_budget`.

    Returns
    -------
    GapCalibration
        The noise scales and the split.

    Raises
    ------
    ValueError, TypeError
        An unknown method, options it does not take, bad ε, c, sigma, or of the wrong kind.


    Examples
    --------
    >>> gap_calibration("topc-gap", c=2, eps=1.0).method
    'topc-gap'
    """
    choice(method, "method", GAP_CALIBRATIONS)
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
        sigma = check_real("sigma", sigma)
    n_candidates = check_int(
        "n_candidates", n_candidates, what="the number of candidate rows", minimum=0
    )
    value_bound = check_value_bound(value_bound)
    return _gap_calibration(
        method,
        c,
        eps,
        sensitivity,
        monotonic,
        ratio,
        sigma,
        integer_values,
        n_candidates,
        value_bound,
    )


@functools.lru_cache(maxsize=256)
def _gap_calibration(
    method, c, eps, sensitivity, monotonic, ratio, sigma, integer_values, n_candidates, value_bound
) -> GapCalibration:
    """The cached body of :func:`gap_calibration`, its options in the order of the signature
    there (every one already checked)."""
    k = 1.0 if monotonic else 2.0
    ec = calibrated_eps(eps)  # the decimal eps the budget charges (issue 21)
    if method == "topc-gap":
        if sigma != "auto" or ratio != "optimal":
            raise ValueError(
                f"topc-gap takes no ratio or sigma (got ratio={ratio!r}, sigma={sigma!r})"
            )
        sens, g, scale = top_c_noise(eps, c, sensitivity, monotonic, integer_values, value_bound)
        return GapCalibration(method, eps, c, bool(monotonic), sens, g, scale)
    r = optimal_ratio(c, monotonic=monotonic) if ratio == "optimal" else float(ratio)
    e0 = ec / (1.0 + r)
    e1 = floor_div(binary_rest(ec, e0), c)
    e_top = e1 / 2.0  # exact: a power-of-two division
    scales = [laplace_scale(e0, sensitivity), laplace_scale(e1, k * sensitivity)]
    if method == "adaptive-svt":
        scales.append(laplace_scale(e_top, k * sensitivity))
    inputs = f"eps={eps!r}, sensitivity={sensitivity!r}"
    g = scales_grid(scales, value_bound, sensitivity, integer_values, inputs)
    sens = snapped_sensitivity(sensitivity, g, integer_values)
    q_scale = scale_on_grid(k, sens, e1, g)
    top = sig = None
    if method == "adaptive-svt":
        top = 2.0 * q_scale  # = the scale for eps1/2, still a whole number of grid steps
        sig = (
            max(2.0 * math.sqrt(2.0), math.log(max(n_candidates, 1))) * top
            if sigma == "auto"
            else float(sigma)  # already a checked float
        )
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
        threshold_scale=scale_on_grid(1.0, sens, e0, g),
        top_scale=top,
        sigma=sig,
        eps_threshold=e0,
        eps_middle=e1,
        eps_top=e_top,
        units=units,
    )
