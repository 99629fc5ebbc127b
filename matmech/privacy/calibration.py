"""Noise calibration: how much Laplace or Gaussian noise a privacy target needs.

* Pure ε-DP: Laplace scale Δ₁/ε (Dwork, McSherry, Nissim, Smith 2006).
* (ε, δ)-DP with δ > 0: we sample the *discrete* Gaussian (:mod:`matmech.privacy.noise`), whose
  privacy is stated in zero-concentrated DP: with L2 sensitivity Δ₂ and parameter σ it is
  ρ-zCDP for ρ = Δ₂²/(2σ²) (Canonne, Kamath, Steinke, NeurIPS 2020, hereafter CKS).
  ρ-zCDP is converted to (ε, δ)-DP with the tight conversion of CKS Cor. 13:
  δ = inf_{α>1} exp((α−1)(αρ−ε))/(α−1) · (1−1/α)^α.
* For comparison, the analytic Gaussian mechanism (Balle & Wang, ICML 2018, Thm. 8) gives
  the smallest σ for *continuous* Gaussian noise; it is not what we sample.

This module owns the library's one calibration rule; every plan (histogram measurement,
factored tables, selections, streams) and every error figure calls it, none restates it:

* :func:`neighbor_sensitivity`: the neighbouring relation's factor on a largest column norm
  (add/remove 1, substitution 2: :data:`~matmech.privacy.params.NEIGHBORS`), with the float
  margin :data:`SENS_MARGIN` where the norm was not summed exactly;
* :func:`noise_for`: (ε, δ, Δ) → the discrete noise and its scale (Laplace b = Δ₁/ε rounded
  up for the decimal ε charged, :func:`laplace_scale_up`; Gaussian σ = :func:`gaussian_sigma`);
* :func:`measurement_variance`: the variance of that noise, discrete or continuous;
* grids: :func:`sampler_grid` (a strategy's or a stream's lattice), :func:`lattice_std` (the
  exact std on it, refused beyond the sampler's range), :func:`run_grid` and
  :func:`scale_on_grid` (one grid for all noises of a selection, scales in whole steps).

Every numerically optimised quantity is rounded in the safe direction: a returned ε or δ
is attained at some α (so it is a valid bound), and a returned σ satisfies the target.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Literal, overload

import numpy as np

from matmech.privacy import noise as _noise
from matmech.privacy.params import (
    calibrated_eps,
    check_delta,
    check_eps,
    check_neighbors,
    check_noise_delta,
    check_noise_eps,
    neighbor_factor,
    real,
)


_SAFETY = 1.0 + 1e-12  # relative margin for float rounding in the safe direction

#: A noise scale (Laplace b or Gaussian σ) must lie in this range so that its variance
#: (b², σ²) and the lattice of the exact samplers are ordinary floats.
SCALE_RANGE = (1e-150, 1e150)
_MAX_WIDEN = 400  # steps of 2 in log space: brackets spanning e^±800


# ------------------------------------------------------------------------- validation


def _check_sensitivity(sensitivity) -> float:
    s = real(sensitivity, "sensitivity")
    if not math.isfinite(s) or s < 0:
        raise ValueError(f"sensitivity must be a non-negative finite number, got {sensitivity!r}")
    return s + 0.0  # -0.0 becomes 0.0


def _usable_scale(scale: float, what: str) -> float:
    """``scale`` if it is 0 or within :data:`SCALE_RANGE`, else a ValueError naming it."""
    if scale != 0 and not SCALE_RANGE[0] <= scale <= SCALE_RANGE[1]:
        raise ValueError(
            f"{what} = {scale!r} is outside [{SCALE_RANGE[0]:g}, {SCALE_RANGE[1]:g}]: its variance "
            f"would not be a usable float; rescale the workload or the sensitivity"
        )
    return scale


def check_rho(rho) -> float:
    r = real(rho, "rho")
    if not math.isfinite(r) or r < 0:
        raise ValueError(f"rho must be a non-negative finite number, got {rho!r}")
    return r


# ------------------------------------------------------------------------- zCDP -> (ε, δ)


def minimise_over_alpha(f) -> tuple[float, float]:
    """(min over α > 1 of f(α), the α attaining it), f vectorised: a log-spaced grid in α−1,
    then bounded Brent around the best grid point. The value is attained at the returned α,
    so for a bound of the form inf_α f(α) it is a valid bound (the accountant re-evaluates it
    at that α with outward rounding, :mod:`matmech.privacy.accountant`)."""
    u = np.linspace(-25.0, 45.0, 701)  # α − 1 from 1.4e-11 to 3.5e19
    vals = f(1.0 + np.exp(u))
    vals = np.where(np.isnan(vals), np.inf, vals)
    i = int(np.argmin(vals))
    best, alpha = float(vals[i]), 1.0 + math.exp(float(u[i]))
    lo, hi = u[max(i - 1, 0)], u[min(i + 1, u.size - 1)]
    from scipy import optimize

    res = optimize.minimize_scalar(
        lambda t: float(f(1.0 + np.exp(np.array([t])))[0]),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-12},
    )
    if res.success and math.isfinite(res.fun) and float(res.fun) < best:
        best, alpha = float(res.fun), 1.0 + math.exp(float(res.x))
    return best, alpha


def _log_delta(alpha, rho, eps):
    # log of exp((α−1)(αρ−ε))/(α−1) · (1−1/α)^α   (CKS Cor. 13)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return (alpha - 1) * (alpha * rho - eps) - np.log(alpha - 1) + alpha * np.log1p(-1 / alpha)


def approx_dp_delta(rho, eps) -> float:
    """δ such that ρ-zCDP implies (ε, δ)-DP, by the tight conversion of CKS Cor. 13:
    δ = inf_{α>1} exp((α−1)(αρ−ε))/(α−1) · (1−1/α)^α, capped at 1 and, for ρ > 0, at
    least 5e-324 (never rounded down to 0). ε is 0 or in [1e-4, 100]."""
    r = check_rho(rho)
    e = check_eps(eps, allow_zero=True)
    if e > 0:
        e = check_noise_eps(e)
    if r == 0:
        return 0.0
    # a δ below the smallest float is reported as that float: rounding up keeps it a valid bound
    log_d = minimise_over_alpha(lambda a: _log_delta(a, r, e))[0]
    return 1.0 if log_d >= 0 else max(math.exp(log_d), 5e-324)


def zcdp_to_approx_dp(rho, delta) -> float:
    """ε such that ρ-zCDP implies (ε, δ)-DP (CKS Cor. 13, solved for ε):
    ε = inf_{α>1} αρ + (ln(1/δ) + (α−1) ln(1−1/α) − ln α)/(α−1)."""
    r = check_rho(rho)
    d = check_delta(delta, positive=True)
    if r == 0:
        return 0.0
    log_inv_delta = -math.log(d)  # finite for every positive float, subnormals included

    def eps_of(a):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return a * r + (log_inv_delta + (a - 1) * np.log1p(-1 / a) - np.log(a)) / (a - 1)

    return max(0.0, minimise_over_alpha(eps_of)[0])


# ------------------------------------------------------------------------- σ for (ε, δ)


@functools.lru_cache(maxsize=4096)
def _rho_for(eps: float, delta: float) -> float:
    """The largest ρ whose CKS conversion gives δ' <= delta at eps (bisection in log ρ)."""
    target = math.log(delta)

    def g(log_rho):
        return minimise_over_alpha(lambda a: _log_delta(a, math.exp(log_rho), eps))[0] - target

    # ε ≈ ρ + 2 sqrt(ρ ln(1/δ)) suggests where to start; widen until the root is bracketed
    start = math.log(eps * eps / (4.0 * (math.log(1.0 / delta) + eps)))
    lo, hi = start - 1.0, start + 1.0
    for _ in range(_MAX_WIDEN):  # a bounded search: never loops (ε, δ are range-checked)
        if g(lo) <= 0:
            break
        lo -= 2.0
    for _ in range(_MAX_WIDEN):
        if g(hi) > 0:
            break
        hi += 2.0
    if not (g(lo) <= 0 < g(hi)):
        raise ValueError(
            f"no zCDP rho converts to delta={delta!r} at eps={eps!r} (CKS Cor. 13); use eps in [1e-4, 100]"
        )
    from scipy import optimize

    root = optimize.brentq(g, lo, hi, xtol=1e-13, rtol=1e-13)
    while g(root) > 0:  # keep the feasible side of the root
        root -= 1e-12 * max(1.0, abs(root))
    return math.exp(root)


def _gaussian_inputs(eps, delta, sensitivity):
    """The checked (ε, δ > 0, sensitivity) of a Gaussian calibration."""
    e = check_noise_eps(eps)
    d = check_noise_delta(check_delta(delta, positive=True))
    return e, d, _check_sensitivity(sensitivity)


def gaussian_sigma(eps: float, delta: float, sensitivity: float) -> float:
    """σ of the discrete Gaussian giving (ε, δ)-DP for L2 sensitivity Δ₂.

    Through zCDP: the (multivariate) discrete Gaussian is ρ-zCDP with ρ = Δ₂²/(2σ²) (CKS
    2020), and ρ-zCDP gives (ε, δ)-DP by CKS Cor. 13; we return the smallest σ (up to a
    1e-12 relative safety margin) whose ρ converts to δ' <= δ at ε.

    Valid range: ε in [1e-4, 100] and δ in [1e-100, 1) (:mod:`matmech.privacy.params`);
    outside it the conversion has no finite bracket (for ε ≳ 1.3e154 it used to loop) and
    a ValueError names the value.

    Parameters
    ----------
    eps : float
        ε in [1e-4, 100].
    delta : float
        δ in [1e-100, 1).
    sensitivity : float
        The L2 sensitivity Δ₂ (> 0).

    Returns
    -------
    float
        σ of the discrete Gaussian, in the units of the measurement.

    Raises
    ------
    ValueError
        ε, δ or the sensitivity out of range.
    TypeError
        Arguments that are not real numbers.

    Examples
    --------
    >>> round(gaussian_sigma(1.0, 1e-6, 1.0), 3)
    4.531
    """
    e, d, s = _gaussian_inputs(eps, delta, sensitivity)
    if s == 0:
        return 0.0
    return _usable_scale(
        s / math.sqrt(2.0 * _rho_for(e, d)) * _SAFETY, f"sigma for sensitivity {s!r}"
    )


def gaussian_rho(eps: float, delta: float) -> float:
    """The ρ a Gaussian calibrated to (ε, δ) by :func:`gaussian_sigma` is charged at most:
    the largest ρ whose CKS conversion (Cor. 13) gives δ' <= δ at ε. Its noise, at any
    sensitivity Δ₂, has Δ₂²/(2σ²) <= this ρ (σ carries a 1e-12 relative safety margin), so a
    plan whose strategy is chosen after the spend can be charged this ρ up front."""
    e = check_noise_eps(eps)
    d = check_noise_delta(check_delta(delta, positive=True))
    return _rho_for(e, d)


def sigma_for_rho(rho: float, sensitivity: float) -> float:
    """σ of the discrete Gaussian that is ρ-zCDP at L2 sensitivity Δ₂: Δ₂/sqrt(2ρ) (CKS 2020,
    Thm. 14), up by the same 1e-12 relative margin as :func:`gaussian_sigma`, so that the
    charged Δ₂²/(2σ²) never exceeds ``rho``."""
    r = check_rho(rho)
    if r == 0:
        raise ValueError("rho must be positive to calibrate noise, got 0")
    s = _check_sensitivity(sensitivity)
    if s == 0:
        return 0.0
    return _usable_scale(s / math.sqrt(2.0 * r) * _SAFETY, f"sigma for sensitivity {s!r}")


def _balle_wang_log_delta(sigma: float, eps: float) -> float:
    """log δ of the continuous Gaussian with sensitivity 1 (Balle & Wang 2018, Thm. 8):
    δ = Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ)."""
    from scipy import special

    lx = special.log_ndtr(0.5 / sigma - eps * sigma)
    ly = special.log_ndtr(-0.5 / sigma - eps * sigma)
    inner = -math.expm1(eps + ly - lx)
    return lx + math.log(inner) if inner > 0 else -math.inf


@functools.lru_cache(maxsize=4096)
def _analytic_sigma_unit(eps: float, delta: float) -> float:
    target = math.log(delta)

    def g(log_sigma):
        return _balle_wang_log_delta(math.exp(log_sigma), eps) - target  # decreasing in σ

    lo, hi = -1.0, 1.0
    for _ in range(_MAX_WIDEN):
        if g(lo) >= 0:
            break
        lo -= 2.0
    for _ in range(_MAX_WIDEN):
        if g(hi) <= 0:
            break
        hi += 2.0
    if not (g(lo) >= 0 >= g(hi)):
        raise ValueError(
            f"no sigma attains delta={delta!r} at eps={eps!r} (Balle-Wang Thm. 8); use eps in [1e-4, 100]"
        )
    from scipy import optimize

    root = optimize.brentq(g, lo, hi, xtol=1e-14, rtol=1e-14)
    while g(root) > 0:
        root += 1e-13 * max(1.0, abs(root))
    return math.exp(root)


def analytic_gaussian_sigma(eps, delta, sensitivity) -> float:
    """σ of the analytic Gaussian mechanism (Balle & Wang, ICML 2018, Thm. 8): the smallest
    σ with Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) <= δ.

    This is the figure for *continuous* Gaussian noise, for comparison only: the library
    samples the discrete Gaussian and calibrates it with :func:`gaussian_sigma`.
    """
    e, d, s = _gaussian_inputs(eps, delta, sensitivity)
    if s == 0:
        return 0.0
    return _usable_scale(s * _analytic_sigma_unit(e, d) * _SAFETY, f"sigma for sensitivity {s!r}")


# ------------------------------------------------------------------------- Laplace


def laplace_scale(eps, sensitivity) -> float:
    """Laplace scale b = Δ₁/ε for ε-DP with L1 sensitivity Δ₁ (ε in [1e-4, 100]; a scale
    that would underflow or overflow is a ValueError, never 0.0 or inf)."""
    e = check_noise_eps(eps)
    s = _check_sensitivity(sensitivity)
    return _usable_scale(s / e, f"the Laplace scale sensitivity/eps = {s!r}/{e!r}")


def noise_variance(eps, delta=0.0, *, sensitivity) -> float:
    """Variance of the noise added to each measurement.

    ``delta == 0``: Laplace with scale Δ₁/ε, variance 2(Δ₁/ε)² (``sensitivity`` is L1).
    ``delta > 0``: discrete Gaussian with σ = :func:`gaussian_sigma`, variance σ²
    (``sensitivity`` is L2). The continuous figures are used; the discrete samplers on a
    fine grid differ by at most grid²/6 per measurement.
    """
    e = check_noise_eps(eps)
    d = check_noise_delta(delta)
    s = _check_sensitivity(sensitivity)
    if d == 0:
        return 2.0 * laplace_scale(e, s) ** 2
    return gaussian_sigma(e, d, s) ** 2


# ------------------------------------------------------------------------- the one rule

#: Relative margin on a sensitivity computed in floats (summation, sqrt): not needed for
#: integer L1 norms, which are summed exactly.
SENS_MARGIN = 1.0 + 1e-9

PRECISION_BITS = 20  # bits of the largest column norm kept when rounding A to a grid
EXACT_BITS = 52  # |A_g x| / grid stays at most 2**52: exact in float64
_LAPLACE_LIMIT_BITS = 46  # scale/grid stays below 2**46 (the sampler allows 2**48)
_GAUSS_LIMIT_BITS = 22  # sigma/grid stays below 2**22 (the sampler allows 2**24)


@overload
def neighbor_sensitivity(
    norm: float, neighbors: str = ..., *, margin: bool = ...
) -> float: ...  # pragma: no cover


@overload
def neighbor_sensitivity(
    norm: Fraction, neighbors: str = ..., *, margin: Literal[False] = ...
) -> Fraction: ...  # pragma: no cover


def neighbor_sensitivity(
    norm: float | Fraction, neighbors: str = "add_remove", *, margin: bool = False
) -> float | Fraction:
    """The sensitivity of a query whose largest column L_p norm is ``norm``, under ``neighbors``.

    Add/remove one record moves one cell of x by 1, so Δ_p = ``norm``; substitution moves two
    cells, so at most 2·``norm`` (:data:`~matmech.privacy.params.NEIGHBORS`). ``margin``:
    times :data:`SENS_MARGIN`, for a norm computed in floats (an L2 norm, grid sums).

    Parameters
    ----------
    norm : float or Fraction
        The largest column L_p norm of the measured operator (a Fraction stays exact
        without ``margin``).
    neighbors : {"add_remove", "substitute"}, default "add_remove"
        The neighbouring relation.
    margin : bool, default False
        Add the relative float margin 1e-9.

    Returns
    -------
    float or Fraction
        factor · norm (· SENS_MARGIN).

    Raises
    ------
    ValueError
        An unknown ``neighbors``.
    TypeError
        ``neighbors`` not a string.

    Examples
    --------
    >>> neighbor_sensitivity(3.0), neighbor_sensitivity(3.0, "substitute")
    (3.0, 6.0)
    """
    s = neighbor_factor(neighbors) * norm
    return s * SENS_MARGIN if margin else s


def row_sensitivity(lo: float, hi: float, neighbors: str = "add_remove") -> float:
    """The sensitivity of one query row with entries in [``lo``, ``hi``] (and 0): a record
    moves the row's answer by one entry (add/remove: max(|lo|, |hi|)) or by the difference
    of two entries (substitution: hi − lo), the rule of private selection's per-row noise
    (:mod:`matmech.svt.select`)."""
    if check_neighbors(neighbors) == "add_remove":
        return max(abs(lo), abs(hi))
    return hi - lo


def laplace_scale_up(eps: float, sens: float) -> float:
    """Δ₁/ε rounded up so that the float scale b satisfies b·ε >= Δ₁ exactly, for the decimal
    ε the budget charges (:func:`~matmech.privacy.params.calibrated_eps`, issue 21)."""
    e = calibrated_eps(eps)
    b = laplace_scale(eps, sens)  # validates eps; rounded up below for the calibrated e <= eps
    while Fraction(b) * Fraction(e) < Fraction(sens):
        b = math.nextafter(b, math.inf)
    return b


def noise_for(
    eps: float, delta: float, sensitivity: float, *, rho: float | None = None
) -> tuple[str, float]:
    """(noise, scale) of a measurement with sensitivity Δ (neighbour factor and margin
    included, :func:`neighbor_sensitivity`): δ = 0 → ``("discrete_laplace", b)``,
    b = :func:`laplace_scale_up` (Δ₁/ε for the decimal ε charged); δ > 0 →
    ``("discrete_gaussian", σ)``, σ = :func:`gaussian_sigma` (zCDP, CKS 2020).

    Parameters
    ----------
    eps : float
        ε in [1e-4, 100].
    delta : float
        0 (pure ε) or in [1e-100, 1).
    sensitivity : float
        Δ₁ (δ = 0) or Δ₂ (δ > 0).
    rho : float, optional
        Calibrate the discrete Gaussian to this zCDP ρ (:func:`sigma_for_rho`) instead of
        (ε, δ), which then only describe the guarantee it implies.

    Returns
    -------
    tuple of (str, float)
        The noise name and its scale (Laplace b or σ), in the units of the measurement.

    Raises
    ------
    ValueError
        ε, δ or the sensitivity out of range.

    Examples
    --------
    >>> noise_for(1.0, 0.0, 2.0)
    ('discrete_laplace', 2.0)
    """
    if rho is not None:  # a zCDP share: σ calibrated to ρ itself (its (ε, δ) only records it)
        return "discrete_gaussian", sigma_for_rho(rho, sensitivity)
    if delta == 0:
        return "discrete_laplace", laplace_scale_up(eps, sensitivity)
    return "discrete_gaussian", gaussian_sigma(eps, delta, sensitivity)


def measurement_variance(
    eps: float, delta: float, sensitivity: float, *, discrete: bool = True
) -> float:
    """Per-entry noise variance of a unit-weight measurement at sensitivity Δ.

    ``discrete=True``: what a release on the integers draws, the discrete Laplace at
    t = Δ₁/ε (2e^{-1/t}/(1−e^{-1/t})², 1.841 at t = 1, not 2) or the discrete Gaussian at
    σ (Canonne, Kamath, Steinke 2020); ``discrete=False`` (and Δ = 0): the continuous
    2Δ₁²/ε² or σ² of :func:`noise_variance`."""
    cont = noise_variance(eps, delta, sensitivity=sensitivity)
    if not discrete or sensitivity == 0:
        return cont
    if delta == 0:
        return _noise.discrete_laplace_variance(sensitivity / eps)
    return _noise.discrete_gaussian_variance(math.sqrt(cont))


def pow2_at_least(v: float) -> float:
    """The smallest power of two >= v (v > 0)."""
    m, e = math.frexp(v)
    return math.ldexp(1.0, e - 1) if m == 0.5 else math.ldexp(1.0, e)


def sampler_grid(
    sens1: float, scale0: float, gaussian: bool, max_records: int, *, integer_exact: bool = False
) -> float:
    """The lattice a real-valued strategy is rounded to (data independent): the smallest
    power of two keeping ~20 bits of Δ₁, the exact sampler's range (scale/grid below 2**46
    Laplace, 2**22 Gaussian) and A_g x exact in float64 for every histogram of at most
    ``max_records`` records (Σx·Δ₁/g <= 2**52). ``integer_exact``: the caller computes A_g x
    in exact integers for any counts (a stream, :mod:`matmech.stream.exact`), so only the
    sampler's range bounds g and ``sens1``, ``max_records`` are not used."""
    limit = _GAUSS_LIMIT_BITS if gaussian else _LAPLACE_LIMIT_BITS
    g = scale0 * 2.0**-limit
    if not integer_exact:
        g = max(sens1 * 2.0**-PRECISION_BITS, g, sens1 * max_records * 2.0**-EXACT_BITS)
    return pow2_at_least(g)


def lattice_std(noise: str, scale: float, grid: float, *, remedy: str) -> float:
    """The exact std of ``noise`` (``"discrete_laplace"``/``"discrete_gaussian"``) of
    ``scale`` on the lattice grid·ℤ: grid times the std of the discrete distribution at
    scale/grid (CKS 2020). A ValueError ending in ``remedy`` when scale/grid is beyond the
    exact sampler's range (:data:`~matmech.privacy.noise.MAX_LAPLACE_SCALE`, ``MAX_SIGMA``)."""
    return math.sqrt(lattice_variance(noise, scale, grid, remedy=remedy))


def lattice_variance(noise: str, scale: float, grid: float, *, remedy: str) -> float:
    """The exact variance of :func:`lattice_std`'s noise: grid² times the variance of the
    discrete distribution at scale/grid (the grid a power of two: its square root is
    :func:`lattice_std` bit for bit)."""
    if noise not in ("discrete_laplace", "discrete_gaussian"):
        raise ValueError(f"noise must be discrete_laplace or discrete_gaussian, got {noise!r}")
    gaussian = noise == "discrete_gaussian"
    ratio, limit = scale / grid, float(_noise.MAX_SIGMA if gaussian else _noise.MAX_LAPLACE_SCALE)
    if ratio > limit:
        raise ValueError(
            f"the noise scale {scale:.6g} is {ratio:.3g} times the lattice spacing {grid:g}, beyond "
            f"the exact sampler's limit {limit:.3g}; {remedy}"
        )
    var = _noise.discrete_gaussian_variance if gaussian else _noise.discrete_laplace_variance
    return var(ratio) * grid * grid


def lattice_bits(top: float, reach: float, scale0: float, gaussian: bool, max_records: int) -> int:
    """The bits B a Kronecker strategy's real factors may keep between them (data independent).

    Factor i is rounded to the grid 2^(Eᵢ − bᵢ), 2^Eᵢ the power of two at or above the bound
    on its entries, ``top`` = Π 2^Eᵢ, B = Σ bᵢ; the lattice of A_g x is then ``top``·2^−B.
    ``reach``: the product of the integer factors' L1 column norms. The rule of
    :func:`sampler_grid`, per factor: the exact sampler's range (scale/lattice below 2**46
    Laplace, 2**22 Gaussian) and A_g x exact in float64 for every histogram of at most
    ``max_records`` records (max_records·reach·2^B <= 2**52: every partial sum of a factor-wise
    Kronecker product is a multiple of the lattice bounded by Σx·reach·Π 2^bᵢ·lattice).
    Never negative: 0 when even the coarsest grid is at the limits."""
    limit = _GAUSS_LIMIT_BITS if gaussian else _LAPLACE_LIMIT_BITS
    b = 0
    while (
        b < 64 * PRECISION_BITS
        and float(max_records) * reach * 2.0 ** (b + 1) <= 2.0**EXACT_BITS
        and math.ldexp(top, -(b + 1)) >= scale0 * 2.0**-limit
    ):
        b += 1
    return b


def run_grid(*scales: float) -> float:
    """One power-of-two grid for all noises of a selection run, never coarser than 1 (so
    integer values stay exactly on it): the finest :func:`matmech.privacy.noise.grid_for`."""
    return min([1.0] + [_noise.grid_for(s) for s in scales])


def scale_on_grid(mult: float, sensitivity: float, eps_part: float, g: float) -> float:
    """mult · sensitivity / eps_part rounded UP to a whole number of grid steps, exactly
    (Fractions): never less noise than calibrated, an integer scale in grid units for the
    exact sampler."""
    units = Fraction(mult) * Fraction(sensitivity) / (Fraction(eps_part) * Fraction(g))
    return math.ceil(units) * g
