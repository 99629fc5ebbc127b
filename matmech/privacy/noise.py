"""Exact discrete Laplace and Gaussian noise from a secure random source.

Floating-point Laplace samplers leak the data through the low bits of their output
(Mironov, "On significance of the least significant bits for differential privacy",
CCS 2012). This module follows Canonne, Kamath & Steinke, "The Discrete Gaussian for
Differential Privacy" (NeurIPS 2020), hereafter CKS:

* the discrete Laplace distribution of CKS Alg. 2, P[k] proportional to exp(-|k|/scale),
  sampled here by exact inversion of its base-256 digits instead of the loops of
  Alg. 1 and 2 (see "Timing" in :mod:`matmech.privacy.discrete`);
* the discrete Gaussian of CKS Alg. 3, P[k] proportional to exp(-k^2 / (2 sigma^2)), by
  rejection from a discrete Laplace, the Bernoulli(exp(-gamma)) test of Alg. 1 done as an
  AND of table look-ups.

Every decision compares integers: 128-bit prefixes of uniform random numbers against exact
128-bit prefixes of the (irrational) thresholds, computed once per scale with interval
arithmetic on Python ints (further bits only on a tie). No floating-point number enters a
decision. Real-valued noise is a discrete sample times a power-of-two ``grid``
(:func:`laplace`, :func:`gaussian`), which is exact in float64.

Parameters are used as exact rationals (``fractions.Fraction`` of the float). When the
fraction is too large for vectorised int64 arithmetic it is rounded UP (more noise, still
private, never less): a Laplace scale to a numerator of at most 2**32 over a power of two
(relative increase below 2**-31), sigma**2 to a numerator of at most 2**40 over a power of
two when sigma >= 1 (relative increase below 2**-39) and to a multiple of 2**-25 when
sigma < 1.

Randomness: every sampler takes ``rng``. ``None`` (the default) is secure: a fresh
AES-256 CTR_DRBG (NIST SP 800-90A) seeded from ``os.urandom`` per call, about as fast as a
seeded generator; ``rng=randomness.os_source()`` reads ``os.urandom`` itself for every refill
(:mod:`matmech.privacy.randomness`). A ``numpy.random.Generator`` gives reproducible
experiments and is NOT cryptographically secure. A source returned by :func:`check_rng` may
be passed on and is used as is; it is thread-safe and a forked child never reuses its
words.

The fixed-work samplers themselves (digit search, acceptance test, timing) live in
:mod:`matmech.privacy.discrete`, their exact thresholds and tables in
:mod:`matmech.privacy.thresholds`.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np

from matmech.privacy.discrete import GaussParams, dgauss, dgauss_mixed, dlaplace
from matmech.privacy.draws import check_shape_draws
from matmech.privacy.randomness import check_rng


_TWO32 = 1 << 32
_INT64_MAX = (1 << 63) - 1

# Parameter limits (see the module docstring).
_EXACT_MAX = 1 << 48  # an exact fraction is used as is below this size
_LAPLACE_ROUND_BITS = 32  # numerator bound when a Laplace scale must be rounded
_GAUSS_ROUND_BITS = 40  # numerator bound when sigma**2 >= 1 must be rounded
_GAUSS_SMALL_DEN_BITS = 25  # denominator when sigma**2 < 1 must be rounded
#: The exact samplers' largest discrete Laplace scale and discrete Gaussian σ (grid units).
MAX_LAPLACE_SCALE = 1 << 48
MAX_SIGMA = 1 << 24


# --------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------


def _exact_positive(x, name: str) -> Fraction:
    """``x`` as an exact positive Fraction, or a ValueError/TypeError naming it."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__}: {x!r}")
    if isinstance(x, Fraction):
        f = x
    elif isinstance(x, numbers.Integral):
        f = Fraction(int(x))
    else:
        xf = float(x)
        if not math.isfinite(xf):
            raise ValueError(f"{name} must be a positive finite number, got {x!r}")
        f = Fraction(xf)
    if f <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {x!r}")
    return f


def _shape(size) -> tuple:
    shape: tuple[int, ...]
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        shape = (int(size),)
    elif isinstance(size, tuple) and all(
        isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in size
    ):
        shape = tuple(int(s) for s in size)
    else:
        raise TypeError(f"size must be a non-negative int or a tuple of them, got {size!r}")
    if any(s < 0 for s in shape):
        raise ValueError(f"size must be non-negative, got {size!r}")
    return shape


def _check_grid(grid) -> Fraction:
    if isinstance(grid, bool) or not isinstance(grid, numbers.Real):
        raise TypeError(f"grid must be a power of two, got {type(grid).__name__}: {grid!r}")
    g = float(grid)
    if not (math.isfinite(g) and g > 0 and math.frexp(g)[0] == 0.5 and g == grid):
        raise ValueError(f"grid must be a positive power of two (e.g. 2.0**-10), got {grid!r}")
    return Fraction(g)


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _round_up(f: Fraction, num_bits: int, max_k: int = 62) -> Fraction:
    """The smallest ``c / 2**k >= f`` with ``c <= max(2**num_bits, ceil(f))``, ``k`` as
    large as possible in ``[0, max_k]``: the rounded-up rational described above."""
    bound = max(1 << num_bits, _ceil_div(f.numerator, f.denominator))
    k = max(0, min(max_k, num_bits - (f.numerator.bit_length() - f.denominator.bit_length()) - 2))
    while k < max_k and _ceil_div(f.numerator << (k + 1), f.denominator) <= bound:
        k += 1
    while k > 0 and _ceil_div(f.numerator << k, f.denominator) > bound:
        k -= 1
    return Fraction(_ceil_div(f.numerator << k, f.denominator), 1 << k)


def _exact_at_most(value, name, most, most_text, grid_sampler) -> Fraction:
    """``value`` as an exact positive Fraction at most ``most`` (``most_text``); above it, a
    ValueError pointing to ``grid_sampler()`` with a coarser grid."""
    f = _exact_positive(value, name)
    if f > most:
        raise ValueError(
            f"{name} must be at most {most_text} for exact integer sampling, got {value!r}; "
            f"use {grid_sampler}() with a coarser grid"
        )
    return f


def _laplace_fraction(scale, name: str = "scale") -> Fraction:
    f = _exact_at_most(scale, name, MAX_LAPLACE_SCALE, "2**48", "laplace")
    if f.numerator <= _EXACT_MAX and f.denominator <= _EXACT_MAX:
        return f
    return _round_up(f, _LAPLACE_ROUND_BITS)


def _gauss_params(sigma, name: str = "sigma") -> GaussParams:
    s = _exact_at_most(sigma, name, MAX_SIGMA, "2**24", "gaussian")
    f = s * s
    if f >= 1:
        if not (f.numerator <= _EXACT_MAX and f.denominator <= 1 << _GAUSS_ROUND_BITS):
            f = _round_up(f, _GAUSS_ROUND_BITS)
    elif f.denominator > 1 << _GAUSS_SMALL_DEN_BITS:
        f = Fraction(
            _ceil_div(f.numerator << _GAUSS_SMALL_DEN_BITS, f.denominator),
            1 << _GAUSS_SMALL_DEN_BITS,
        )
    a, b = f.numerator, f.denominator
    if a >= b:
        # Proposal scale tau = sigma^2 / mu with integer mu = round(sigma) >= 1, so that
        # gamma = (|y| - mu)^2 / (2 sigma^2) = (|y| - mu)^2 * b / (2a) stays integral.
        mu = max(1, (math.isqrt(4 * a // b) + 1) // 2)
        lap = Fraction(a, b * mu)
        P, Q, R, S = 1, mu, b, 2 * a
    else:
        # sigma < 1: proposal scale 1 as in CKS (t = floor(sigma) + 1), mu = sigma^2:
        # gamma = (|y| - a/b)^2 / (2a/b) = (|y| b - a)^2 / (2ab).
        lap = Fraction(1)
        P, Q, R, S = b, a, 1, 2 * a * b
    g = math.gcd(R, S)
    R, S = R // g, S // g
    A, B, C = R * P * P, 2 * R * P * Q, R * Q * Q  # (|y| P - Q)^2 R, expanded
    return GaussParams(a, b, lap.numerator, lap.denominator, A, B, C, S, _y_safe(A, B, C))


def _y_safe(A: int, B: int, C: int) -> int:
    """The largest |y| with A y^2 + C and B |y| in int64 (the vectorised acceptance test)."""
    return min(math.isqrt((_INT64_MAX - C) // A), _INT64_MAX // B if B else _INT64_MAX)


#: Largest power-of-two denominator S of a dyadic acceptance exponent: its numerators stay
#: below 89 S < 2**62 wherever the acceptance probability exceeds 2**-128.
_DYADIC_MAX_S = 1 << 55


def _dyadic_params(m: int, K: int) -> GaussParams | None:
    """σ² = 2**(K-1)/m, i.e. 1/(2σ²) = m/2**K, so the acceptance exponent has a power-of-two
    denominator S and every σ with the same S shares one acceptance table; the proposal's
    scale 2**u/p (a 4-bit p, within 6.25% of σ) is shared by every σ it is closest to.
    γ(y) = y²/(2σ²) - |y| p/2**u + C/S with C/S the largest |y| p/2**u - y²/(2σ²) over the
    integers (so max exp(-γ) = 1). None when S would exceed :data:`_DYADIC_MAX_S`."""
    s2 = Fraction(1 << (K - 1), m) if K >= 1 else Fraction(1, m << (1 - K))
    f, e = math.frexp(math.sqrt(2.0 * m) * 2.0 ** (-K / 2))  # 1/σ = f 2**e, f in [1/2, 1)
    p, u = round(f * 16), 4 - e  # 1/scale = p / 2**u
    k = max(K, u, 0)
    S = 1 << k
    if S > _DYADIC_MAX_S:
        return None
    A, B = m << (k - K), p << (k - u)  # A/S = 1/(2σ²), B/S = 1/scale
    y0 = B // (2 * A)
    C = max(B * y - A * y * y for y in (y0, y0 + 1))
    lap = Fraction(1 << u, p) if u >= 0 else Fraction(1, p << -u)
    return GaussParams(
        s2.numerator, s2.denominator, lap.numerator, lap.denominator, A, B, C, S, _y_safe(A, B, C)
    )


def gaussian_grid(tau, *, bits, shared=True):
    """Discrete Gaussian parameters with σ >= τ for an array of τ, few distinct tables.

    With ``bits`` an integer and ``shared`` (the default), 1/(2σ²) is 1/(2τ²) rounded down
    to ``bits`` significant bits (σ² grows by less than 2**(1-bits) relative), so its
    acceptance exponent has a power-of-two denominator: every σ of one octave shares one
    acceptance table and every σ near a 4-bit proposal scale one proposal table (CKS 2020,
    Alg. 3 with a proposal and a constant of our choosing), at the price of about one more
    base-256 digit in the acceptance test. Past σ ≈ 2**23 (with 9 bits) the exponent's
    numerators would leave int64; those τ keep σ = τ. ``shared=False``: σ is τ rounded up to
    ``bits`` significant bits, with tables of its own (σ² grows by less than 2**(2-bits)):
    cheaper per draw when few σ serve many draws. ``bits=None``: σ = τ exactly (one table
    per distinct τ).

    Parameters
    ----------
    tau : array_like of float
        The least σ of each entry (grid units), positive, at most :data:`MAX_SIGMA`.
    bits : int or None
        Significant bits of 1/(2σ²) (of σ when not ``shared``), in [2, 40]; None for σ = τ.
    shared : bool
        Round on the grid whose σ share their sampler tables (default), or round σ itself.

    Returns
    -------
    params : tuple of GaussParams
        The distinct parameters, in ascending σ.
    index : numpy.ndarray
        For each entry of ``tau`` (same shape), the position of its parameters.

    Raises
    ------
    ValueError
        If a τ is not positive and finite or exceeds :data:`MAX_SIGMA`, or ``bits`` is
        out of range.

    Examples
    --------
    >>> params, index = gaussian_grid([30.0, 30.01, 500.0], bits=9)
    >>> len(params), index.tolist()
    (2, [0, 0, 1])
    >>> all(Fraction(p.a, p.b) >= 30.01**2 for p in params[:1])
    True
    """
    t = np.asarray(tau, dtype=np.float64)
    if t.size and not (np.all(np.isfinite(t)) and t.min() > 0 and t.max() <= MAX_SIGMA):
        raise ValueError(f"tau must be positive, finite and at most 2**24, got {tau!r}")
    if bits is not None and (
        isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or not 2 <= int(bits) <= 40
    ):
        raise ValueError(f"bits must be None or an integer in [2, 40], got {bits!r}")
    if bits is None or not shared:
        if bits is not None:  # σ = τ rounded up to bits significant bits (exact in floats)
            f, e = np.frexp(t)
            t = np.ldexp(np.ceil(np.ldexp(f, int(bits))), e - int(bits))
        uniq, inv = np.unique(t, return_inverse=True)
        return tuple(_gauss_params(float(v), "tau") for v in uniq.tolist()), inv.reshape(t.shape)
    # 1/(2τ²) nudged down by 2**-50 (more than the float error of the division), then
    # floored to bits significant bits: σ >= τ exactly
    f, e = np.frexp(0.5 / (t * t) * (1.0 - 2.0**-50))
    m = np.floor(np.ldexp(f, int(bits))).astype(np.int64)
    K = int(bits) - e.astype(np.int64)
    # one int64 key per τ, ascending in σ² = 2**(K-1)/m: K ascending, then m descending
    keys, inv = np.unique(((K << 41) - m).reshape(-1), return_inverse=True)  # m < 2**40
    tmax = np.full(keys.size, -np.inf)  # the largest τ of each key (for σ = τ past the grid)
    np.maximum.at(tmax, inv, t.reshape(-1))
    params = []
    for k, key in enumerate(keys.tolist()):
        p = _dyadic_params(-key % (1 << 41), -(-key >> 41))
        params.append(p if p is not None else _gauss_params(float(tmax[k]), "tau"))
    return tuple(params), inv.reshape(t.shape)


def discrete_gaussian_mixed(params, which, *, rng=None) -> np.ndarray:
    """Exact discrete Gaussian samples of many σ at once: sample i from ``params[which[i]]``.

    One set of vectorised rejection rounds serves every σ (CKS 2020, Alg. 3; tables of one
    layout stacked), so thousands of σ cost about what one does. Which random words a
    sample uses depends on ``which`` only (public), never on a value drawn.

    Parameters
    ----------
    params : sequence of GaussParams
        From :func:`gaussian_grid`.
    which : array_like of int
        For each sample, the position of its parameters in ``params``.
    rng : None, numpy.random.Generator or RandomSource
        None (default): the secure AES-256 CTR_DRBG seeded from ``os.urandom``; a
        Generator is reproducible and NOT secure.

    Returns
    -------
    numpy.ndarray
        int64 samples, one per entry of ``which`` (its shape).

    Raises
    ------
    TypeError
        If ``params`` holds something other than GaussParams.
    ValueError
        If ``which`` is not integral or holds a position outside ``params``.

    Examples
    --------
    >>> import numpy as np
    >>> params, index = gaussian_grid([1.0, 1000.0], bits=9)
    >>> z = discrete_gaussian_mixed(params, [0, 1, 1], rng=np.random.default_rng(0))
    >>> z.shape, z.dtype
    ((3,), dtype('int64'))
    """
    params = tuple(params)
    if not params or not all(isinstance(p, GaussParams) for p in params):
        raise TypeError("params must be a non-empty sequence of GaussParams (from gaussian_grid)")
    w = np.asarray(which)
    if w.size and (w.dtype.kind not in "iu" or w.min() < 0 or w.max() >= len(params)):
        raise ValueError(f"which must hold integer positions in [0, {len(params)}), got {which!r}")
    check_shape_draws(w.shape, "gaussian")
    src = check_rng(rng)
    flat = w.reshape(-1).astype(np.int64)
    return dgauss_mixed(params, flat, src).reshape(w.shape)


def gaussian_variances(params) -> np.ndarray:
    """Exact variance of the discrete Gaussian of each of ``params`` (σ² = a/b).

    Parameters
    ----------
    params : sequence of GaussParams
        From :func:`gaussian_grid`.

    Returns
    -------
    numpy.ndarray
        One float64 variance per parameters (grid units squared).

    Examples
    --------
    >>> params, _ = gaussian_grid([1000.0], bits=9)
    >>> bool(abs(gaussian_variances(params)[0] / 1000.0**2 - 1) < 2**-8)
    True
    """
    return np.array([_s2_variance(p.a / p.b) for p in params], dtype=np.float64)


def discrete_laplace(scale, size, *, rng=None) -> np.ndarray:
    """Exact discrete Laplace samples: int64 array with P[k] ∝ exp(-|k|/scale) (CKS Alg. 2).

    ``scale`` is used as an exact rational; if its fraction is too large it is rounded up
    (see the module docstring). Must be at most 2**48.
    """
    f = _laplace_fraction(scale)
    shape = _shape(size)
    check_shape_draws(shape, "laplace")
    src = check_rng(rng)
    n = math.prod(shape)
    return dlaplace(f.numerator, f.denominator, n, src).reshape(shape)


def discrete_gaussian(sigma, size, *, rng=None) -> np.ndarray:
    """Exact discrete Gaussian samples: int64 array with P[k] ∝ exp(-k²/(2σ²)) (CKS Alg. 3).

    σ² is used as an exact rational, rounded up where needed (module docstring).
    ``sigma`` must be at most 2**24.
    """
    p = _gauss_params(sigma)
    shape = _shape(size)
    check_shape_draws(shape, "gaussian")
    src = check_rng(rng)
    return dgauss(p, math.prod(shape), src).reshape(shape)


def _grid_ratio(value, grid, name: str) -> Fraction:
    f = _exact_positive(value, name)
    g = _check_grid(grid)
    return f / g


def laplace(scale, size, *, grid, rng=None) -> np.ndarray:
    """Laplace-like noise on the grid ``grid·Z``: ``grid * discrete_laplace(scale/grid)``.

    ``grid`` must be a power of two so the result is exact in float64; the noise then
    satisfies the usual Laplace guarantee for values on the grid (see :func:`snap`).
    """
    return _on_grid(discrete_laplace, "scale", scale, grid, size, rng, MAX_LAPLACE_SCALE, "2**48")


def gaussian(sigma, size, *, grid, rng=None) -> np.ndarray:
    """Gaussian-like noise on the grid ``grid·Z``: ``grid * discrete_gaussian(sigma/grid)``."""
    return _on_grid(discrete_gaussian, "sigma", sigma, grid, size, rng, MAX_SIGMA, "2**24")


def _on_grid(sampler, what, value, grid, size, rng, most, most_text) -> np.ndarray:
    """``grid * sampler(value/grid)``, ``value/grid`` at most ``most`` (``most_text``)."""
    ratio = _grid_ratio(value, grid, what)
    if ratio > most:
        raise ValueError(
            f"{what}/grid must be at most {most_text}, got {what}={value!r}, grid={grid!r};"
            f" use a coarser grid such as grid_for({what})"
        )
    return sampler(ratio, size, rng=rng).astype(np.float64) * float(grid)


def grid_for(scale) -> float:
    """The default grid for a noise scale: the largest power of two <= scale * 2**-16.

    Discretising to this grid changes the noise by a negligible ~2**-16 relative amount.
    """
    f = _exact_positive(scale, "scale")
    e = f.numerator.bit_length() - f.denominator.bit_length()  # floor(log2 f) or one more
    if Fraction(2) ** e > f:
        e -= 1
    grid = math.ldexp(1.0, e - 16)
    if grid == 0.0:
        raise ValueError(f"scale is too small for a float64 grid, got {scale!r}")
    return grid


def snap(values, grid) -> np.ndarray:
    """Round ``values`` to the nearest multiple of the power-of-two ``grid`` (ties to even).

    Sensitivity rule: snapping moves each coordinate by at most grid/2, and coordinates
    whose exact values agree on neighbouring datasets snap identically. So if at most
    ``c`` coordinates can differ between neighbours, add ``c * grid`` to the L1
    sensitivity and ``sqrt(c) * grid`` to the L2 sensitivity (just ``grid`` for one value);
    :func:`snap_sensitivity` does this. Values already on the grid need nothing added.
    """
    g = float(_check_grid(grid))
    arr = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(  # no position: values may be computed from private data
            "values must be finite to snap to a grid, got NaN or inf"
        )
    return np.rint(arr / g) * g


def snap_sensitivity(sensitivity, grid, *, coords=1, norm="l1") -> float:
    """Sensitivity of snapped values: ``sensitivity + coords*grid`` (L1) or
    ``sensitivity + sqrt(coords)*grid`` (L2), ``coords`` the most coordinates that can
    differ between neighbouring datasets. See :func:`snap`."""
    g = float(_check_grid(grid))
    if (
        isinstance(sensitivity, bool)
        or not isinstance(sensitivity, numbers.Real)
        or not math.isfinite(float(sensitivity))
        or float(sensitivity) < 0
    ):
        raise ValueError(f"sensitivity must be a non-negative finite number, got {sensitivity!r}")
    if isinstance(coords, bool) or not isinstance(coords, numbers.Integral) or coords < 1:
        raise ValueError(f"coords must be a positive integer, got {coords!r}")
    if norm == "l1":
        return float(sensitivity) + int(coords) * g
    if norm == "l2":
        return float(sensitivity) + math.sqrt(int(coords)) * g
    raise ValueError(f"norm must be 'l1' or 'l2', got {norm!r}")


def uniform(size, *, rng=None) -> np.ndarray:
    """Uniform float64 in the open interval (0, 1): k * 2**-53 for k uniform in
    [1, 2**53), from 53 random bits of the source (0 is redrawn)."""
    shape = _shape(size)
    check_shape_draws(shape, "uniform")
    src = check_rng(rng)
    n = math.prod(shape)
    k = src.words64(n) >> np.uint64(11)
    zero = np.flatnonzero(k == 0)
    if zero.size:
        k = k.copy()
        while zero.size:
            k[zero] = src.words64(zero.size) >> np.uint64(11)
            zero = zero[k[zero] == 0]
    return (k.astype(np.float64) * 2.0**-53).reshape(shape)


# --------------------------------------------------------------------------------------
# Exact variances
# --------------------------------------------------------------------------------------


def discrete_laplace_variance(scale) -> float:
    """Variance of :func:`discrete_laplace` at ``scale`` t: 2e^{-1/t} / (1 - e^{-1/t})^2
    (for the scale actually used, i.e. after any rounding up)."""
    t = float(_laplace_fraction(scale))
    return 2.0 * math.exp(-1.0 / t) / math.expm1(-1.0 / t) ** 2


def discrete_gaussian_variance(sigma) -> float:
    """Variance of :func:`discrete_gaussian` at ``sigma`` (for σ² actually used).

    Direct sum of k² e^{-k²/2σ²} for σ <= 8; for larger σ the Poisson-summation dual
    series σ²(1 + 2Σ(1 - 4π²σ²j²)e^{-2π²σ²j²}) / (1 + 2Σe^{-2π²σ²j²}), which converges
    in one or two terms (CKS 2020, Sec. 2.4)."""
    p = _gauss_params(sigma)
    return _s2_variance(p.a / p.b)


def _s2_variance(s2: float) -> float:
    if s2 <= 64.0:
        kmax = int(math.ceil(40.0 * math.sqrt(s2))) + 2
        k = np.arange(1, kmax + 1, dtype=np.float64)
        w = np.exp(-k * k / (2.0 * s2))
        return float(2.0 * np.sum(k * k * w) / (1.0 + 2.0 * np.sum(w)))
    return _dual_gaussian_variance(s2)


def _dual_gaussian_variance(s2: float) -> float:
    num, den = 1.0, 1.0
    for j in range(1, 6):
        e = math.exp(-2.0 * math.pi**2 * s2 * j * j)
        num += 2.0 * (1.0 - 4.0 * math.pi**2 * s2 * j * j) * e
        den += 2.0 * e
    return s2 * num / den
