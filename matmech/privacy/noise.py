"""Exact discrete Laplace and Gaussian noise from a secure random source.

Floating-point Laplace samplers leak the data through the low bits of their output
(Mironov, "On significance of the least significant bits for differential privacy",
CCS 2012). This module follows Canonne, Kamath & Steinke, "The Discrete Gaussian for
Differential Privacy" (NeurIPS 2020), hereafter CKS:

* the discrete Laplace distribution of CKS Alg. 2, P[k] proportional to exp(-|k|/scale),
  sampled here by exact inversion of its base-256 digits instead of the loops of
  Alg. 1 and 2 (see "Timing" below);
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

Randomness: every sampler takes ``rng``. ``None`` (the default) reads the operating
system's CSPRNG (``os.urandom``) and is the only secure choice; a fresh source is made per
call, so forked processes never share buffered bytes. A ``numpy.random.Generator`` gives
reproducible experiments and is NOT cryptographically secure. A source returned by
:func:`check_rng` may be passed on and is used as is; it is thread-safe and discards its
buffered bytes after a fork.

Timing (issue 10, finding 4). The loops of CKS Alg. 1 and 2, whose number of iterations
grows with the value drawn, are replaced by a fixed amount of work per sample with the same
output distribution:

* :func:`discrete_laplace` (hence :func:`laplace`, and all SVT noise, which goes through
  :func:`matmech.svt.grid.draw` / ``noise_chunks`` / ``NoiseBuffer``): |Z| - 1 is
  geometric and its base-256 digits are independent truncated geometrics; each digit, the
  sign/zero outcome and the "beyond the last digit" event are drawn by inverting an exact
  CDF table with one uniform: D + 3 random words per sample (D = 1 for scale <= 3.6, 3 for
  scale 2**16, at most 7) and a depth-8 branch-free search per digit, whatever the value.
* :func:`discrete_gaussian` (hence :func:`gaussian`): CKS Alg. 3 stays a rejection sampler,
  but every round costs the same (one fixed-work discrete Laplace proposal and an
  acceptance test exp(-gamma) done as an AND over the base-256 digits of gamma's
  numerator, each against a public table, L + 2 words, L <= 8). The number of rounds is
  random but independent of the accepted value, so the time is too.
* Left to a slower exact path, with probability below 2**-100 per sample (per proposal for
  the Gaussian): a uniform equal to a threshold on its first 128 bits, two uniforms of one
  sample that need more than their first word, the part of |Z| beyond the last digit
  (probability <= e**-70), a Gaussian proposal too large for int64 arithmetic. The output
  stays exact; only in those events does the time depend on the value.

Not covered: numpy's own timing (table look-ups touch value-dependent memory addresses, a
few hundred bytes to 32 KiB per table, so cache effects remain; integer ufuncs are
assumed to run in value-independent time), ``os.urandom`` and the Python interpreter
(allocation, garbage collection), the one-off table construction for a new scale (a few
ms, depends on the scale only), cost that grows with ``size`` and with the scale (D above),
and everything outside this module: :func:`uniform` redraws 0 (probability 2**-53,
independent of the output), the exponential mechanism computes in floating point, and a
caller that branches on the noise leaks through its own timing.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from matmech.privacy.randomness import RandomSource, check_rng

__all__ = [
    "RandomSource",
    "check_rng",
    "discrete_laplace",
    "discrete_gaussian",
    "laplace",
    "gaussian",
    "grid_for",
    "snap",
    "snap_sensitivity",
    "uniform",
    "discrete_laplace_variance",
    "discrete_gaussian_variance",
    "MAX_LAPLACE_SCALE",
    "MAX_SIGMA",
]

_TWO32 = 1 << 32
_INT64_MAX = (1 << 63) - 1

# Parameter limits (see the module docstring).
_EXACT_MAX = 1 << 48          # an exact fraction is used as is below this size
_LAPLACE_ROUND_BITS = 32      # numerator bound when a Laplace scale must be rounded
_GAUSS_ROUND_BITS = 40        # numerator bound when sigma**2 >= 1 must be rounded
_GAUSS_SMALL_DEN_BITS = 25    # denominator when sigma**2 < 1 must be rounded
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


def _laplace_fraction(scale, name: str = "scale") -> Fraction:
    f = _exact_positive(scale, name)
    if f > MAX_LAPLACE_SCALE:
        raise ValueError(
            f"{name} must be at most 2**48 for exact integer sampling, got {scale!r}; "
            "use laplace() with a coarser grid"
        )
    if f.numerator <= _EXACT_MAX and f.denominator <= _EXACT_MAX:
        return f
    return _round_up(f, _LAPLACE_ROUND_BITS)


@dataclass(frozen=True)
class _GaussParams:
    """sigma**2 = a/b; proposal discrete Laplace with scale lap_t/lap_s; acceptance
    gamma(y) = (|y|*P - Q)**2 * R / S (CKS Alg. 3 with a convenient proposal scale)."""

    a: int
    b: int
    lap_t: int
    lap_s: int
    P: int
    Q: int
    R: int
    S: int
    y_safe: int


def _gauss_params(sigma, name: str = "sigma") -> _GaussParams:
    s = _exact_positive(sigma, name)
    if s > MAX_SIGMA:
        raise ValueError(
            f"{name} must be at most 2**24 for exact integer sampling, got {sigma!r}; "
            "use gaussian() with a coarser grid"
        )
    f = s * s
    if f >= 1:
        if not (f.numerator <= _EXACT_MAX and f.denominator <= 1 << _GAUSS_ROUND_BITS):
            f = _round_up(f, _GAUSS_ROUND_BITS)
    elif f.denominator > 1 << _GAUSS_SMALL_DEN_BITS:
        f = Fraction(_ceil_div(f.numerator << _GAUSS_SMALL_DEN_BITS, f.denominator),
                     1 << _GAUSS_SMALL_DEN_BITS)
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
    d_max = math.isqrt(_INT64_MAX // R)
    y_safe = (d_max + Q) // P
    return _GaussParams(a, b, lap.numerator, lap.denominator, P, Q, R, S, y_safe)


# --------------------------------------------------------------------------------------
# Exact thresholds: binary expansions of exp(-a/b) and simple functions of it
# --------------------------------------------------------------------------------------
#
# Every decision below is "U < v" or "v <= U" for a uniform real U in [0, 1) read lazily
# from random words and a computable irrational threshold v. U's first word is compared
# with the first 64 bits of v; if they are equal the sample's spare word gives U's next 64
# bits and floor(v * 2**128) decides; only on a 128-bit tie (probability 2**-128) are
# further words read and compared with further bits of v (:func:`_resolve`). Thresholds
# are exact integers computed with interval arithmetic on Python ints; no floating-point
# number enters a decision.

_TBITS = 128                  # bits of U compared on the fixed-work path (word + spare)
_WORK = 256                   # working precision of the table builder
_BLOCK = 1 << 15              # samples per vectorised block (bounds memory; public)
_LAP_TAIL = 70                # Laplace digits cover Y until P[Y >= 2**(8D)] <= e**-70 < 2**-100
_GAUSS_TAIL = 89              # exp(-89) < 2**-128: such factors have threshold 0


def _exp_neg(a: int, b: int, prec: int) -> tuple[int, int]:
    """Integers lo <= exp(-a/b) * 2**prec <= hi for integers a >= 0, b >= 1 (hi - lo a few
    units): Taylor series of exp(y), y = a/(b 2**k) < 1/2, with directed rounding, then
    inverted and squared k times."""
    if a == 0:
        return 1 << prec, 1 << prec
    k = (a // b).bit_length() + 1
    p = prec + k + 32
    den = b << k
    one = 1 << p
    s_lo = s_hi = t_lo = t_hi = one
    n = 0
    while t_hi > 1:
        n += 1
        t_lo = t_lo * a // (den * n)
        t_hi = -(-t_hi * a // (den * n))
        s_lo += t_lo
        s_hi += t_hi
    s_hi += 1  # the tail after a term <= 2**-p is at most that term since y < 1/2
    lo = (one * one) // s_hi
    hi = -(-(one * one) // s_lo)
    for _ in range(k):
        lo = (lo * lo) >> p
        hi = -((-(hi * hi)) >> p)
    sh = p - prec
    return lo >> sh, -((-hi) >> sh)


def _enclose(key: tuple, prec: int) -> tuple[int, int]:
    """lo <= v * 2**prec <= hi for the threshold named by ``key`` (q = exp(-a/b)):
    ("exp", a, b): q; ("cdf", a, b, c): (1 - q**c) / (1 - q**256);
    ("neg", a, b): q / (1 + q); ("nonpos", a, b): 1 / (1 + q)."""
    kind, a, b = key[0], key[1], key[2]
    if kind == "exp":
        return _exp_neg(a, b, prec)
    p = prec + 64
    one = 1 << p
    if kind == "cdf":
        cl, ch = _exp_neg(key[3] * a, b, p)
        dl, dh = _exp_neg(256 * a, b, p)
        nl, nh, dl, dh = one - ch, one - cl, one - dh, one - dl
    else:
        ql, qh = _exp_neg(a, b, p)
        nl, nh = (ql, qh) if kind == "neg" else (one, one)
        dl, dh = one + ql, one + qh
    if dl <= 0:
        return 0, 1 << prec  # undetermined at this precision: the caller asks for more
    return (nl << prec) // dh, -(-(nh << prec) // dl)


@functools.lru_cache(maxsize=4096)
def _floor_bits(key: tuple, nbits: int) -> int:
    """floor(v * 2**nbits) exactly for the (irrational) threshold named by ``key``."""
    prec = nbits + 32
    while True:
        lo, hi = _enclose(key, prec)
        hi = min(hi, (1 << prec) - 1)  # every threshold is below 1
        sh = prec - nbits
        if lo >> sh == hi >> sh:
            return lo >> sh
        prec += prec // 2


def _resolve(keys, prefix: int, nbits: int, src: RandomSource) -> int:
    """How many thresholds in ``keys`` are <= U, where U's first ``nbits`` bits are
    ``prefix`` and equal each threshold's first bits: further words of U are read until
    every comparison is decided (the rare fallback; exact, variable time)."""
    count = 0
    keys = list(keys)
    while keys:
        prefix = (prefix << 64) | int(src.words64(1)[0])
        nbits += 64
        rest = []
        for key in keys:
            f = _floor_bits(key, nbits)
            if f < prefix:
                count += 1
            elif f == prefix:
                rest.append(key)
        keys = rest
    return count


def _bernoulli(key: tuple, src: RandomSource) -> bool:
    """Bernoulli(v) for the threshold named by ``key``, from fresh words (exact)."""
    return _resolve([key], 0, 0, src) == 0


def _split(vals) -> tuple[np.ndarray, np.ndarray]:
    """128-bit integers -> (high words, low words) as uint64 arrays."""
    m = (1 << 64) - 1
    return (np.array([v >> 64 for v in vals], dtype=np.uint64),
            np.array([v & m for v in vals], dtype=np.uint64))


def _powers(a: int, b: int) -> tuple[list, list]:
    """Enclosures (at 2**_WORK) of exp(-c a/b) for c = 0..256, by repeated products."""
    rl, rh = _exp_neg(a, b, _WORK)
    lo, hi = [1 << _WORK], [1 << _WORK]
    for _ in range(256):
        lo.append((lo[-1] * rl) >> _WORK)
        hi.append(-((-(hi[-1] * rh)) >> _WORK))
    return lo, hi


def _table_entry(lo: int, hi: int, key: tuple) -> int:
    """floor(v 2**128) from an enclosure at 2**_WORK, or exactly when it is too wide."""
    sh = _WORK - _TBITS
    hi = min(hi, (1 << _WORK) - 1)  # every threshold is below 1
    if lo >> sh == hi >> sh:
        return lo >> sh
    return _floor_bits(key, _TBITS)


@dataclass(frozen=True)
class _LaplaceTable:
    """Thresholds of the fixed-work discrete Laplace sampler at scale t/s (q = exp(-s/t)).

    Y = |Z| - 1 >= 0 is geometric, P[Y = y] ∝ q**y. Its base-256 digits are independent
    (q**y = prod_d (q**(256**d))**digit_d), digit d a geometric truncated to [0, 256)
    with ratio r_d = q**(256**d), drawn by inversion: digit = #{c >= 1 : F_d(c) <= U},
    F_d(c) = (1 - r_d**c) / (1 - r_d**256). ``vals[d][c]`` = floor(F_d(c) 2**128)
    (``vals[d][0]`` = 0 exactly). The sign/zero draw inverts (q/(1+q), 1/(1+q)):
    P[Z < 0] = q/(1+q), P[Z = 0] = (1-q)/(1+q). The part of Y above the digits is a
    geometric with ratio q**(256**D) <= e**-70, non-zero with probability below 2**-100.
    """

    t: int
    s: int
    digits: int
    vals: tuple
    th: np.ndarray
    tl: np.ndarray
    sign: tuple
    ovf: int


@functools.lru_cache(maxsize=256)
def _laplace_table(t: int, s: int) -> _LaplaceTable:
    digits = 1
    while (s << (8 * digits)) < _LAP_TAIL * t:
        digits += 1
    vals = []
    one = 1 << _WORK
    for d in range(digits):
        a = s << (8 * d)
        lo, hi = _powers(a, t)
        row = [0]
        for c in range(1, 256):
            dl, dh = one - hi[256], one - lo[256]
            if dl > 0:
                fl = ((one - hi[c]) << _WORK) // dh
                fh = -(-((one - lo[c]) << _WORK) // dl)
            else:
                fl, fh = 0, one
            row.append(_table_entry(fl, fh, ("cdf", a, t, c)))
        vals.append(tuple(row))
    th, tl = _split([v for row in vals for v in row])
    sign = (_floor_bits(("neg", s, t), _TBITS), _floor_bits(("nonpos", s, t), _TBITS))
    ovf = _floor_bits(("exp", s << (8 * digits), t), _TBITS)
    return _LaplaceTable(t, s, digits, tuple(vals), th, tl, sign, ovf)


def _le(th, tl, wh, wl) -> np.ndarray:
    """128-bit T <= W, elementwise, from (high, low) words."""
    return (th < wh) | ((th == wh) & (tl <= wl))


def _eq(th, tl, wh, wl) -> np.ndarray:
    return (th == wh) & (tl == wl)


def _dlaplace(t: int, s: int, n: int, src: RandomSource) -> np.ndarray:
    """n samples with P[k] ∝ exp(-|k| s / t), fixed work per sample (see _LaplaceTable).

    Replaces the loops of CKS Alg. 2 (and Alg. 1 inside it) by inversion of
    exactly-computed CDFs; same distribution.
    """
    out = np.empty(n, dtype=np.int64)
    if n:
        tab = _laplace_table(t, s)
        for a in range(0, n, _BLOCK):
            b = min(n, a + _BLOCK)
            out[a:b] = _dlaplace_block(tab, b - a, src)
    return out


def _dlaplace_block(tab: _LaplaceTable, n: int, src: RandomSource) -> np.ndarray:
    """Fixed work: D + 3 words per sample, a depth-8 branch-free search per digit.

    Uniform j (digits, sign/zero, tail) is the high word ``wh[j]`` followed by further bits.
    A comparison needs them only when ``wh[j]`` equals a threshold's high word; the first
    such uniform of a sample takes the shared ``spare`` word as its next 64 bits (it is
    independent of every other decision). Two such uniforms in one sample (probability
    below 2**-100) or a full 128-bit tie go to the exact path.
    """
    D = tab.digits
    k = D + 2                                   # digit words, sign/zero word, tail word
    w = src.words64((k + 1) * n).reshape(k + 1, n)
    wh, spare = w[:k], w[k]
    dh = wh[:D]
    base = np.arange(0, 256 * D, 256, dtype=np.int64)[:, None]
    # digit = #{c in 1..255 : T[c] <= W}: a fixed-depth branch-free binary search over the
    # 255 thresholds after the sentinel T[0] = 0. The steps 128 + ... + 1 = 255 reach every
    # count 0..255 (searching from T[0] instead caps the count at 255 entries including the
    # sentinel, so digit 255 never occurs: issue 21).
    pos = np.repeat(base, n, axis=1)            # base + count so far
    for h in (128, 64, 32, 16, 8, 4, 2, 1):
        i = pos + h                             # <= base + 255
        pos += _le(tab.th[i], tab.tl[i], dh, spare) * h
    digit = pos - base                          # pos: index of the largest T <= W
    th_pos = tab.th[pos]
    tie = (digit > 0) & _eq(th_pos, tab.tl[pos], dh, spare)
    hi_tie = (th_pos == dh) | (tab.th[np.minimum(pos + 1, base + 255)] == dh)
    y = digit[0] if D == 1 else (digit << np.arange(0, 8 * D, 8, dtype=np.int64)[:, None]).sum(axis=0)
    sh, oh = wh[D], wh[D + 1]
    g = [(np.uint64(v >> 64), np.uint64(v & 0xFFFFFFFFFFFFFFFF)) for v in (*tab.sign, tab.ovf)]
    sgn = _le(*g[0], sh, spare).astype(np.int64) + _le(*g[1], sh, spare) - 1
    n_hi = hi_tie.sum(axis=0) + (sh == g[0][0]) + (sh == g[1][0]) + (oh == g[2][0])
    rare = (tie.any(axis=0) | _eq(*g[0], sh, spare) | _eq(*g[1], sh, spare) | (n_hi > 1)
            | ~_le(*g[2], oh, spare) | _eq(*g[2], oh, spare))  # tail non-zero iff U < q**256**D
    z = sgn * (y + 1)
    if rare.any():  # probability below 2**-100 per sample
        for i in np.flatnonzero(rare).tolist():
            z[i] = _laplace_exact(tab, wh[:, i].tolist(), int(spare[i]), src)
    return z


def _count(vals, keys, u: int, nbits: int, src: RandomSource) -> int:
    """#{thresholds <= U}: ``vals`` their first 128 bits, ``u`` the first ``nbits`` of U."""
    sh = _TBITS - nbits
    below = sum(1 for v in vals if v >> sh < u)
    tied = [key for v, key in zip(vals, keys) if v >> sh == u]
    return below + (_resolve(tied, u, nbits, src) if tied else 0)


def _prefixes(rows, spare: int) -> list[tuple[int, int]]:
    """(first bits, their number) of each uniform: the spare word extends the first one
    whose high word equals a threshold's (``rows``: (high word, threshold values))."""
    out, used = [], False
    for w, vals in rows:
        if not used and any(v >> 64 == w for v in vals):
            out.append(((w << 64) | spare, _TBITS))
            used = True
        else:
            out.append((w, 64))
    return out


def _laplace_exact(tab: _LaplaceTable, wh: list, spare: int, src: RandomSource) -> int:
    """One sample from its fixed-path words, resolving ties and the tail exactly."""
    t, s, D = tab.t, tab.s, tab.digits
    tail_key = ("exp", s << (8 * D), t)
    rows = [(wh[d], tab.vals[d][1:]) for d in range(D)] + [(wh[D], tab.sign), (wh[D + 1], (tab.ovf,))]
    pre = _prefixes(rows, spare)
    y = 0
    for d in range(D):
        keys = [("cdf", s << (8 * d), t, c) for c in range(1, 256)]
        y += _count(tab.vals[d][1:], keys, *pre[d], src) << (8 * d)
    sgn = _count(tab.sign, [("neg", s, t), ("nonpos", s, t)], *pre[D], src) - 1
    if _count((tab.ovf,), [tail_key], *pre[D + 1], src) == 0:  # U < q**256**D: tail >= 1
        h = 1
        while _bernoulli(tail_key, src):  # memoryless: the tail is 1 + the same geometric
            h += 1
        y += h << (8 * D)
    if sgn and y >= _INT64_MAX:  # probability below exp(-2**14)
        raise OverflowError("discrete Laplace sample does not fit in int64")
    return sgn * (y + 1)


@dataclass(frozen=True)
class _GaussTable:
    """Thresholds of the fixed-work acceptance test exp(-N/S) of CKS Alg. 3.

    exp(-N/S) = prod_d exp(-N_d 256**d / S) over the base-256 digits N_d of N, so the
    test is an AND of independent Bernoulli draws with public thresholds
    ``vals[d][c]`` = floor(exp(-c 256**d / S) 2**128) (c = 0 means probability 1).
    Digits from ``positions`` on are merged into one factor whose threshold is 0
    (exp(-256**positions / S) < exp(-89) < 2**-128).
    """

    S: int
    positions: int
    high: bool
    vals: tuple
    th: np.ndarray
    tl: np.ndarray


@functools.lru_cache(maxsize=256)
def _gauss_table(S: int) -> _GaussTable:
    L = 1
    while L < 8 and (1 << (8 * L)) < _GAUSS_TAIL * S:
        L += 1
    vals = []
    for d in range(L):
        lo, hi = _powers(1 << (8 * d), S)
        vals.append((0,) + tuple(_table_entry(lo[c], hi[c], ("exp", c << (8 * d), S))
                                 for c in range(1, 256)))
    th, tl = _split([v for row in vals for v in row])
    return _GaussTable(S, L, L < 8, tuple(vals), th, tl)


def _gauss_accept(ay: np.ndarray, p: _GaussParams, src: RandomSource) -> np.ndarray:
    """Accept |y| with probability exp(-(|y| P - Q)^2 R / S) (CKS Alg. 3, line C), with
    the same work for every |y| (see _GaussTable; one high word per factor and a shared
    spare word, as in _dlaplace_block)."""
    tab = _gauss_table(p.S)
    m, L = ay.size, tab.positions
    k = L + tab.high
    w = src.words64((k + 1) * m).reshape(k + 1, m)
    wh, spare = w[:k], w[k]
    unsafe = ay > p.y_safe
    d = np.minimum(ay, p.y_safe) * p.P - p.Q
    num = d * d * p.R                                          # fits: |y| <= y_safe
    c = (num >> np.arange(0, 8 * L, 8, dtype=np.int64)[:, None]) & 255
    idx = c + np.arange(0, 256 * L, 256, dtype=np.int64)[:, None]
    th, tl = tab.th[idx], tab.tl[idx]
    live = c != 0                                               # c = 0: probability 1
    ok = (~live | ~_le(th, tl, wh[:L], spare)).all(axis=0)
    tie = (live & _eq(th, tl, wh[:L], spare)).any(axis=0)
    n_hi = (live & (th == wh[:L])).sum(axis=0)
    if tab.high:
        hl = (num >> (8 * L)) != 0
        ok &= ~hl
        n_hi += hl & (wh[L] == 0)
        tie |= hl & (wh[L] == 0) & (spare == 0)
    rare = unsafe | tie | (n_hi > 1)
    if rare.any():  # probability below 2**-100 per proposal
        for i in np.flatnonzero(rare).tolist():
            ok[i] = _gauss_accept_exact(int(ay[i]), p, tab, wh[:, i].tolist(), int(spare[i]), src)
    return ok


def _gauss_accept_exact(ay: int, p: _GaussParams, tab: _GaussTable, wh: list, spare: int,
                        src: RandomSource) -> bool:
    """The acceptance test for one proposal with Python integers (ties, huge |y|)."""
    num = (ay * p.P - p.Q) ** 2 * p.R
    if ay > p.y_safe:  # the fixed-path words never looked at: a fresh exact draw
        return _bernoulli(("exp", num, p.S), src)
    L = tab.positions
    digits = [(num >> (8 * d)) & 255 for d in range(L)] + ([num >> (8 * L)] if tab.high else [])
    rows = [(wh[d], (tab.vals[d][c] if d < L else 0,) if c else ()) for d, c in enumerate(digits)]
    pre = _prefixes(rows, spare)
    for d, c in enumerate(digits):
        if c and _count(rows[d][1], [("exp", c << (8 * d), p.S)], *pre[d], src):
            return False  # threshold <= U: this factor rejects
    return True


def _dgauss(p: _GaussParams, n: int, src: RandomSource) -> np.ndarray:
    """CKS Alg. 3: discrete Laplace proposals accepted with probability exp(-gamma(y)).
    Each round costs the same for every proposal, and the number of rounds is independent
    of the accepted values, so the running time does not depend on the output."""
    out = np.empty(n, dtype=np.int64)
    todo = None
    m = n
    while m:
        y = _dlaplace(p.lap_t, p.lap_s, m, src)
        ok = _gauss_accept(np.abs(y), p, src)
        if todo is None:
            out[:] = y  # rejected entries are overwritten below
            todo = np.flatnonzero(~ok)
        else:
            out[todo[ok]] = y[ok]
            todo = todo[~ok]
        m = todo.size
    return out

def discrete_laplace(scale, size, *, rng=None) -> np.ndarray:
    """Exact discrete Laplace samples: int64 array with P[k] ∝ exp(-|k|/scale) (CKS Alg. 2).

    ``scale`` is used as an exact rational; if its fraction is too large it is rounded up
    (see the module docstring). Must be at most 2**48.
    """
    f = _laplace_fraction(scale)
    shape = _shape(size)
    src = check_rng(rng)
    n = math.prod(shape)
    return _dlaplace(f.numerator, f.denominator, n, src).reshape(shape)


def discrete_gaussian(sigma, size, *, rng=None) -> np.ndarray:
    """Exact discrete Gaussian samples: int64 array with P[k] ∝ exp(-k²/(2σ²)) (CKS Alg. 3).

    σ² is used as an exact rational, rounded up where needed (module docstring).
    ``sigma`` must be at most 2**24.
    """
    p = _gauss_params(sigma)
    shape = _shape(size)
    src = check_rng(rng)
    return _dgauss(p, math.prod(shape), src).reshape(shape)


def _grid_ratio(value, grid, name: str) -> Fraction:
    f = _exact_positive(value, name)
    g = _check_grid(grid)
    return f / g


def laplace(scale, size, *, grid, rng=None) -> np.ndarray:
    """Laplace-like noise on the grid ``grid·Z``: ``grid * discrete_laplace(scale/grid)``.

    ``grid`` must be a power of two so the result is exact in float64; the noise then
    satisfies the usual Laplace guarantee for values on the grid (see :func:`snap`).
    """
    ratio = _grid_ratio(scale, grid, "scale")
    if ratio > MAX_LAPLACE_SCALE:
        raise ValueError(f"scale/grid must be at most 2**48, got scale={scale!r}, grid={grid!r};"
                         " use a coarser grid such as grid_for(scale)")
    k = discrete_laplace(ratio, size, rng=rng)
    return k.astype(np.float64) * float(grid)


def gaussian(sigma, size, *, grid, rng=None) -> np.ndarray:
    """Gaussian-like noise on the grid ``grid·Z``: ``grid * discrete_gaussian(sigma/grid)``."""
    ratio = _grid_ratio(sigma, grid, "sigma")
    if ratio > MAX_SIGMA:
        raise ValueError(f"sigma/grid must be at most 2**24, got sigma={sigma!r}, grid={grid!r};"
                         " use a coarser grid such as grid_for(sigma)")
    k = discrete_gaussian(ratio, size, rng=rng)
    return k.astype(np.float64) * float(grid)


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
        raise ValueError("values must be finite to snap to a grid, got NaN or inf "
                         f"at positions {np.argwhere(~np.isfinite(arr)).tolist()[:5]}")
    return np.rint(arr / g) * g


def snap_sensitivity(sensitivity, grid, *, coords=1, norm="l1") -> float:
    """Sensitivity of snapped values: ``sensitivity + coords*grid`` (L1) or
    ``sensitivity + sqrt(coords)*grid`` (L2), ``coords`` the most coordinates that can
    differ between neighbouring datasets. See :func:`snap`."""
    g = float(_check_grid(grid))
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, numbers.Real) \
            or not math.isfinite(float(sensitivity)) or float(sensitivity) < 0:
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
    s2 = p.a / p.b
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
