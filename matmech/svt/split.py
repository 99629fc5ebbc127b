"""How a selection splits its ε and which grid a declared bound needs (data independent).

[LSL17] = Lyu, Su, Li, *Understanding the Sparse Vector Technique for Differential Privacy*,
VLDB 2017 (in ``shared/references``). Eq. (12): ε₁:ε₂ = 1:(2c)^(2/3) minimises
Var(Lap(Δ/ε₁) − Lap(2cΔ/ε₂)); 1:c^(2/3) for monotonic queries. Splits are exact in binary
(the parts add up to at most the calibrated ε, :func:`~matmech.privacy.params.calibrated_eps`).
A declared bound on |values| coarsens the grid of the exact sampler (:func:`declared_grid`,
:func:`scales_grid`); the grid and scale rules themselves are
:mod:`matmech.privacy.calibration`'s. :func:`top_c_noise` is the one noise calibration two
mechanisms share (the exponential mechanism and Noisy Top-c with Gap).

"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from matmech.privacy import noise
from matmech.privacy.calibration import laplace_scale, run_grid, scale_on_grid
from matmech.privacy.params import calibrated_eps
from matmech.svt.checks import Ratio, check_c
from matmech.svt.grid import DECLARED_UNITS, grid_for_bound
from matmech.validate import flag


# matmech.privacy.noise samples discrete Laplace scales up to 2**48 grid units; keep a margin.
MAX_SCALE_UNITS = float(2**47)


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
    return float((c if flag(monotonic, "monotonic") else 2 * c) ** (2.0 / 3.0))


def split_eps(eps12: float, ratio: Ratio, c: int, monotonic: bool) -> tuple[float, float]:
    """(eps1, eps2) with eps1:eps2 = 1:r and eps1 + eps2 <= eps12 exactly."""
    r = optimal_ratio(c, monotonic=monotonic) if ratio == "optimal" else float(ratio)
    e1 = eps12 / (1.0 + r)
    return e1, binary_rest(eps12, e1)


def binary_rest(total: float, part: float) -> float:
    """The largest float r >= 0 with r + part <= total exactly in binary: the split of a total
    that is already the calibrated (decimal) eps (:func:`~matmech.privacy.params.calibrated_eps`),
    so only the binary values the noise uses must add up (1:1 splits stay exact halves)."""
    r = float(Fraction(total) - Fraction(part))
    while r > 0 and Fraction(r) + Fraction(part) > Fraction(total):
        r = math.nextafter(r, 0.0)
    return max(r, 0.0)


def floor_div(total: float, c: int) -> float:
    """The largest float e with c * e <= total exactly."""
    f = Fraction(total) / c
    e = float(f)
    while Fraction(e) * c > Fraction(total):
        e = math.nextafter(e, 0.0)
    return e


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
        fits = DECLARED_UNITS * pow2_floor_of(cap)
        raise DeclarationError(
            fits,
            f"the declared bound on |values| {value_bound:.6g} (max_records times the workload's largest |entry|) "
            f"needs a grid of {need:g}, coarser than the {cap:.3g} the exact comparison allows here; at most "
            f"{fits:.6g} fits: declare a smaller max_records",
        )
    return need


def pow2_floor_of(v: float) -> float:
    """The largest power of two <= v (v > 0)."""
    m, e = math.frexp(v)  # v = m * 2**e, 0.5 <= m < 1
    return math.ldexp(1.0, e - 1)


def snapped_sensitivity(
    sensitivity: float, g: float, exact_on_grid: bool, *, coords: int = 1
) -> float:
    """The sensitivity the noise is calibrated to: ``sensitivity`` when the values are exact
    on the grid ``g``, else that of the snapped values (:func:`matmech.privacy.noise.snap_sensitivity`,
    ``coords`` values that can differ between neighbours)."""
    return sensitivity if exact_on_grid else noise.snap_sensitivity(sensitivity, g, coords=coords)


def check_value_bound(value_bound) -> float:
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


def scales_grid(scales, value_bound, sensitivity, exact_on_grid, inputs: str) -> float:
    """The run's grid for the nominal noise ``scales``, coarsened for the declared bound
    (:func:`declared_grid`); ValueError when a scale needs more than :data:`MAX_SCALE_UNITS`
    grid steps (``inputs``: the public inputs, named in the message)."""
    g = declared_grid(run_grid(*scales), value_bound, sensitivity, exact_on_grid)
    if max(scales) / g > MAX_SCALE_UNITS:
        raise ValueError(
            f"noise scale {max(scales):.3g} is too large for exact sampling on the grid "
            f"({inputs}); use a larger eps or rescale the values"
        )
    return g


def top_c_noise(eps, c, sensitivity, monotonic, integer_values, value_bound):
    """``(sensitivity, grid, scale)`` of a top-c selection's noise on every score: 2cD/ε
    (cD/ε ``monotonic``) on its grid, for the decimal ε charged (the exponential mechanism,
    :mod:`matmech.svt.topc`, and Noisy Top-c with Gap, :mod:`matmech.svt.gap_calibration`)."""
    k = 1.0 if monotonic else 2.0
    nominal = laplace_scale(eps, k * c * sensitivity)  # the grid's scale (validates eps)
    inputs = f"eps={eps!r}, sensitivity={sensitivity!r}"
    g = scales_grid([nominal], value_bound, sensitivity, integer_values, inputs)
    sens = snapped_sensitivity(sensitivity, g, integer_values)
    return sens, g, scale_on_grid(k * c, sens, calibrated_eps(eps), g)
