"""Exact discrete Laplace and Gaussian noise from a secure random source.

Floating-point Laplace samplers leak the data through the low bits of their output
(Mironov, "On significance of the least significant bits for differential privacy",
CCS 2012). This module follows Canonne, Kamath & Steinke, "The Discrete Gaussian for
Differential Privacy" (NeurIPS 2020), hereafter CKS:

* CKS Alg. 1: Bernoulli(exp(-gamma)) for a rational gamma;
* CKS Alg. 2: the discrete Laplace distribution, P[k] proportional to exp(-|k|/scale);
* CKS Alg. 3: the discrete Gaussian, P[k] proportional to exp(-k^2 / (2 sigma^2)),
  by rejection from a discrete Laplace.

Every accept/reject decision compares integers drawn uniformly from random 64-bit words;
no floating-point number enters a decision. Real-valued noise is a discrete sample times
a power-of-two ``grid`` (:func:`laplace`, :func:`gaussian`), which is exact in float64.

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

Not covered: the running time of rejection sampling depends on the noise drawn (CKS
discuss such timing channels); batching many samples per call blurs but does not
remove it.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import threading
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

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
]

_TWO32 = 1 << 32
_INT64_MAX = (1 << 63) - 1
_MASK32 = np.uint32(0xFFFFFFFF)

# Parameter limits (see the module docstring).
_EXACT_MAX = 1 << 48          # an exact fraction is used as is below this size
_LAPLACE_ROUND_BITS = 32      # numerator bound when a Laplace scale must be rounded
_GAUSS_ROUND_BITS = 40        # numerator bound when sigma**2 >= 1 must be rounded
_GAUSS_SMALL_DEN_BITS = 25    # denominator when sigma**2 < 1 must be rounded
_MAX_LAPLACE_SCALE = 1 << 48
_MAX_SIGMA = 1 << 24
_CHUNK_WORDS = 1 << 13        # 64 KiB: the smallest read from the underlying generator


# --------------------------------------------------------------------------------------
# Random sources
# --------------------------------------------------------------------------------------


class RandomSource:
    """Uniform random integers drawn exactly from a stream of random 64-bit words.

    Made by :func:`check_rng`; do not construct directly. ``secure`` says whether the
    words come from the operating system's CSPRNG.
    """

    __slots__ = ("_buf", "_pos", "_pid", "_lock")
    secure = False

    def __init__(self) -> None:
        self._buf = np.empty(0, dtype=np.uint64)
        self._pos = 0
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _generate(self, n: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    # raw words ---------------------------------------------------------------------
    def words64(self, n: int) -> np.ndarray:
        """``n`` independent uniform 64-bit words (a read-only uint64 array)."""
        if n >= _CHUNK_WORDS:
            return self._generate(n)
        with self._lock:  # two threads must never be handed the same buffered words
            pid = os.getpid()
            if self._pos + n > self._buf.size or pid != self._pid:  # nor two forked processes
                self._buf = self._generate(_CHUNK_WORDS)
                self._pos, self._pid = 0, pid
            out = self._buf[self._pos:self._pos + n]
            self._pos += n
        return out

    def words32(self, n: int) -> np.ndarray:
        """``n`` independent uniform 32-bit words (uint32 array)."""
        return self.words64((n + 1) // 2).view(np.uint32)[:n]

    def bits(self, n: int) -> np.ndarray:
        """``n`` independent fair bits as a bool array."""
        raw = self.words64((n + 63) // 64).view(np.uint8)
        return np.unpackbits(raw, count=n).view(bool)

    # uniform integers --------------------------------------------------------------
    def integers(self, d: int, n: int) -> np.ndarray:
        """``n`` uniform integers in ``[0, d)`` as int64, exactly, for ``1 <= d < 2**63``.

        Power-of-two ``d`` masks the word; ``d <= 2**32`` uses Lemire's multiply-and-reject
        method on 32-bit words ("Fast random integer generation in an interval", ACM TOMS
        2019); larger ``d`` rejects 64-bit words at or above the largest multiple of ``d``.
        """
        d = int(d)
        if not 1 <= d <= _INT64_MAX:
            raise ValueError(f"d must be an integer in [1, 2**63), got {d!r}")
        if d == 1:
            return np.zeros(n, dtype=np.int64)
        if d & (d - 1) == 0:
            if d <= _TWO32:
                return (self.words32(n) & np.uint32(d - 1)).astype(np.int64)
            return (self.words64(n) & np.uint64(d - 1)).view(np.int64)
        if d <= _TWO32:
            return self._lemire32(d, n)
        return self._modulo64(d, n)

    def _lemire32(self, d: int, n: int) -> np.ndarray:
        dd = np.uint64(d)
        threshold = np.uint32(_TWO32 % d)
        prod = self.words32(n).astype(np.uint64) * dd
        out = (prod >> np.uint64(32)).view(np.int64)
        bad = prod.astype(np.uint32) < threshold
        if bad.any():
            idx = np.flatnonzero(bad)
            out[idx] = self._lemire32(d, idx.size)
        return out

    def _modulo64(self, d: int, n: int) -> np.ndarray:
        limit = np.uint64(((1 << 64) // d) * d)
        w = self.words64(n)
        out = (w % np.uint64(d)).view(np.int64)
        bad = w >= limit
        if bad.any():
            idx = np.flatnonzero(bad)
            out[idx] = self._modulo64(d, idx.size)
        return out

    def randbelow(self, d: int) -> int:
        """One uniform Python int in ``[0, d)`` for any integer ``d >= 1`` (exact)."""
        d = int(d)
        if d < 1:
            raise ValueError(f"d must be a positive integer, got {d!r}")
        nbits = (d - 1).bit_length()
        if nbits == 0:
            return 0
        nwords = (nbits + 63) // 64
        while True:
            x = int.from_bytes(self.words64(nwords).tobytes(), "little")
            x >>= 64 * nwords - nbits
            if x < d:
                return x


class _SecureSource(RandomSource):
    __slots__ = ()
    secure = True

    def _generate(self, n: int) -> np.ndarray:
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)

    def __repr__(self) -> str:
        return "RandomSource(os.urandom, secure=True)"


class _GeneratorSource(RandomSource):
    __slots__ = ("_rng",)

    def __init__(self, rng: np.random.Generator) -> None:
        super().__init__()
        self._rng = rng

    def _generate(self, n: int) -> np.ndarray:
        return self._rng.integers(0, 1 << 64, size=n, dtype=np.uint64)

    def __repr__(self) -> str:
        return f"RandomSource({self._rng!r}, secure=False)"


def check_rng(rng=None) -> RandomSource:
    """Turn an ``rng`` argument into a :class:`RandomSource`.

    ``None`` -> a fresh source reading ``os.urandom`` (secure); a
    ``numpy.random.Generator`` -> a reproducible source that is NOT secure; a
    ``RandomSource`` -> itself. Anything else raises ``TypeError``.
    """
    if rng is None:
        return _SecureSource()
    if isinstance(rng, RandomSource):
        return rng
    if isinstance(rng, np.random.Generator):
        return _GeneratorSource(rng)
    raise TypeError(
        "rng must be None (secure OS randomness), a numpy.random.Generator "
        f"(reproducible, not secure) or a RandomSource, got {type(rng).__name__}: {rng!r}"
    )


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
    if f > _MAX_LAPLACE_SCALE:
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
    if s > _MAX_SIGMA:
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
# Exact Bernoulli(exp(-gamma)) -- CKS Alg. 1, vectorised
# --------------------------------------------------------------------------------------

_LMAX = 12


@functools.lru_cache(maxsize=4096)
def _plan(den: int, k0: int):
    """How many steps of CKS Alg. 1 (starting at step k0) one uniform draw decides.

    Steps k0..k0+L-1 all pass with probability prod_i gamma/i. Drawing W uniform in
    [0, M), M = den^L * prod_i i, step k0+j-1 is passed iff W < num^j * coefs[j-1]; the
    thresholds are nested, so this is an exact coupling of the L Bernoulli draws.
    Returns (L, M, coefs), or None when even one step does not fit in 63 bits.
    """

    def longest(limit):
        L, M = 0, 1
        while L < _LMAX and M * den * (k0 + L) <= limit:
            M *= den * (k0 + L)
            L += 1
        return L, M

    L32, M32 = longest(_TWO32)
    L64, M64 = longest(_INT64_MAX)
    L, M = (L32, M32) if L32 >= 1 and 2 * L32 >= L64 else (L64, M64)
    if L == 0:
        return None
    coefs = tuple(den ** (L - j) * math.prod(range(k0 + j, k0 + L)) for j in range(1, L + 1))
    return L, M, coefs


def _bern_exp_unit(num: np.ndarray, den: int, src: RandomSource) -> np.ndarray:
    """Bernoulli(exp(-num/den)) entrywise, for int64 ``0 <= num <= den`` (CKS Alg. 1).

    Alg. 1: K = 1; while Bernoulli(gamma/K): K += 1; return K odd.
    """
    n = num.size
    out = np.empty(n, dtype=bool)
    idx = np.arange(n)
    cur = num
    k0 = 1
    while idx.size:
        m = idx.size
        plan = _plan(den, k0)
        if plan is None:
            # den*k0 overflows: Bernoulli(num/(den k0)) = Bernoulli(num/den) AND Bernoulli(1/k0)
            L = 1
            steps = ((src.integers(den, m) < cur) & (src.integers(k0, m) == 0)).astype(np.int64)
        else:
            L, M, coefs = plan
            w = src.integers(M, m)
            steps = (w < cur * coefs[0]).astype(np.int64)
            power = cur
            for c in coefs[1:]:
                power = power * cur
                steps += w < power * c
        stop = steps < L
        out[idx[stop]] = ((k0 + steps[stop]) & 1) == 1
        keep = ~stop
        idx, cur = idx[keep], cur[keep]
        k0 += L
    return out


# Bernoulli(exp(-1)): steps 1..11 of Alg. 1 with gamma = 1 from one draw in [0, 11!).
_E1_M = math.factorial(11)
_E1_THRESH = np.array([_E1_M // math.factorial(j) for j in range(11, 0, -1)], dtype=np.int64)


def _bern_exp_minus_one(n: int, src: RandomSource) -> np.ndarray:
    """``n`` independent Bernoulli(exp(-1)) draws (CKS Alg. 1 with gamma = 1)."""
    w = src.integers(_E1_M, n)
    # steps passed = #{j in 1..11 : w < 11!/j!}; the thresholds ascend in _E1_THRESH
    steps = 11 - np.searchsorted(_E1_THRESH, w, side="right")
    out = (steps & 1) == 0  # stopped at step K = steps + 1; success iff K odd
    rest = np.flatnonzero(steps == 11)
    if rest.size:  # w == 0: all 11 steps passed; continue Alg. 1 at step 12
        ones = np.ones(rest.size, dtype=np.int64)
        out[rest] = _bern_exp_from(ones, 1, 12, src)
    return out


def _bern_exp_from(num, den, k0, src):
    """Alg. 1 continued from step k0 (the rare tail of _bern_exp_minus_one)."""
    out = np.empty(num.size, dtype=bool)
    for i, v in enumerate(num.tolist()):
        k = k0
        while src.randbelow(den * k) < v:
            k += 1
        out[i] = k & 1 == 1
    return out


def _bern_exp(num: np.ndarray, den: int, src: RandomSource) -> np.ndarray:
    """Bernoulli(exp(-num/den)) entrywise for int64 ``num >= 0`` (CKS Alg. 1, gamma > 1:
    floor(gamma) Bernoulli(exp(-1)) draws must all succeed, then the fractional part)."""
    q, r = np.divmod(num, den)
    alive = np.ones(num.size, dtype=bool)
    idx = np.flatnonzero(q > 0)
    j = 0
    while idx.size:
        ok = _bern_exp_minus_one(idx.size, src)
        alive[idx[~ok]] = False
        j += 1
        idx = idx[ok]
        idx = idx[q[idx] > j]
    out = np.zeros(num.size, dtype=bool)
    live = np.flatnonzero(alive)
    out[live] = _bern_exp_unit(r[live], den, src)
    return out


def _bern_exp_scalar(num: int, den: int, src: RandomSource) -> bool:
    """Bernoulli(exp(-num/den)) with Python integers of any size (overflow fallback)."""
    q, r = divmod(num, den)
    for _ in range(q):
        k = 1
        while src.randbelow(k) == 0:  # Bernoulli(1/k); step 1 passes surely for gamma = 1
            k += 1
        if k & 1 == 0:
            return False
    k = 1
    while src.randbelow(den * k) < r:
        k += 1
    return k & 1 == 1


# --------------------------------------------------------------------------------------
# Discrete Laplace and Gaussian (CKS Alg. 2 and 3)
# --------------------------------------------------------------------------------------


def _geometric(t: int, n: int, src: RandomSource) -> np.ndarray:
    """X >= 0 with P[X = x] proportional to exp(-x/t) (CKS Alg. 2, lines U, D, V)."""
    if t == 1:
        u = np.zeros(n, dtype=np.int64)
    else:
        # U uniform in [0, t) kept with probability exp(-U/t): a truncated geometric.
        u = src.integers(t, n)
        bad = np.flatnonzero(~_bern_exp_unit(u, t, src))
        while bad.size:
            cand = src.integers(t, bad.size)
            ok = _bern_exp_unit(cand, t, src)
            u[bad[ok]] = cand[ok]
            bad = bad[~ok]
    # V: the number of Bernoulli(exp(-1)) successes before the first failure.
    v = np.zeros(n, dtype=np.int64)
    idx = np.arange(n)
    while idx.size:
        idx = idx[_bern_exp_minus_one(idx.size, src)]
        v[idx] += 1
    if v.size and int(v.max()) > (_INT64_MAX - t) // t:  # probability below exp(-2**14)
        raise OverflowError("discrete Laplace sample does not fit in int64")
    return u + t * v


def _dlaplace(t: int, s: int, n: int, src: RandomSource) -> np.ndarray:
    """n samples with P[k] proportional to exp(-|k| s / t) (CKS Alg. 2)."""
    out = np.empty(n, dtype=np.int64)
    todo = None
    m = n
    while m:
        y = _geometric(t, m, src)
        if s != 1:
            y //= s
        neg = src.bits(m)
        redo = neg & (y == 0)  # B = 1 and Y = 0 is rejected so that 0 is not counted twice
        np.negative(y, out=y, where=neg)
        if todo is None:
            out[:] = y
            todo = np.flatnonzero(redo)
        else:
            out[todo] = y
            todo = todo[redo]
        m = todo.size
    return out


def _gauss_accept(ay: np.ndarray, p: _GaussParams, src: RandomSource) -> np.ndarray:
    """Accept |y| with probability exp(-(|y| P - Q)^2 R / S) (CKS Alg. 3, line C)."""
    safe = ay <= p.y_safe
    if safe.all():
        return _gauss_accept_safe(ay, p, src)
    out = np.empty(ay.size, dtype=bool)
    idx = np.flatnonzero(safe)
    out[idx] = _gauss_accept_safe(ay[idx], p, src)
    for i in np.flatnonzero(~safe).tolist():  # astronomically rare: exact big integers
        d = int(ay[i]) * p.P - p.Q
        out[i] = _bern_exp_scalar(d * d * p.R, p.S, src)
    return out


def _gauss_accept_safe(ay, p, src):
    d = ay * p.P - p.Q if p.P != 1 else ay - p.Q
    num = d * d
    if p.R != 1:
        num *= p.R
    return _bern_exp(num, p.S, src)


def _dgauss(p: _GaussParams, n: int, src: RandomSource) -> np.ndarray:
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
    if ratio > _MAX_LAPLACE_SCALE:
        raise ValueError(f"scale/grid must be at most 2**48, got scale={scale!r}, grid={grid!r};"
                         " use a coarser grid such as grid_for(scale)")
    k = discrete_laplace(ratio, size, rng=rng)
    return k.astype(np.float64) * float(grid)


def gaussian(sigma, size, *, grid, rng=None) -> np.ndarray:
    """Gaussian-like noise on the grid ``grid·Z``: ``grid * discrete_gaussian(sigma/grid)``."""
    ratio = _grid_ratio(sigma, grid, "sigma")
    if ratio > _MAX_SIGMA:
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
