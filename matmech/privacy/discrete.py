"""Exact discrete Laplace and Gaussian samplers with a fixed amount of work per draw.

The thresholds, tables and vectorised samplers behind :mod:`matmech.privacy.noise` (which
validates parameters and is the public entry point). Canonne, Kamath & Steinke, "The
Discrete Gaussian for Differential Privacy" (NeurIPS 2020), hereafter CKS: Alg. 2 (discrete
Laplace) by exact inversion of its base-256 digits, Alg. 3 (discrete Gaussian) by rejection
with the Bernoulli(exp(-gamma)) test of Alg. 1 done as an AND of table look-ups.

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

Not covered: numpy's own timing (look-ups touch value-dependent addresses of a 2-32 KiB
table, so cache effects remain; integer ufuncs are assumed to run in value-independent
time), ``os.urandom`` and the interpreter (allocation, garbage collection), building the
tables of a new scale (about 0.7 ms, depends on the scale only; then cached in
:data:`TABLES`), cost that grows with ``size`` and with the scale (D above),
and everything outside this module: :func:`uniform` redraws 0 (probability 2**-53,
independent of the output), the exponential mechanism computes in floating point, and a
caller that branches on the noise leaks through its own timing.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from matmech.privacy.randomness import RandomSource

__all__ = ["GaussParams", "dlaplace", "dgauss"]

_INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class GaussParams:
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


# ------------- Exact thresholds: binary expansions of exp(-a/b) and simple functions of it
# Every decision below is "U < v" or "v <= U" for a uniform real U in [0, 1) read lazily
# from random words and a computable irrational threshold v. U's first word is compared
# with the first 64 bits of v; if they are equal the sample's spare word gives U's next 64
# bits and floor(v * 2**128) decides; only on a 128-bit tie (probability 2**-128) are
# further words read and compared with further bits of v (:func:`_resolve`). Thresholds
# are exact integers computed with interval arithmetic on Python ints; no floating-point
# number enters a decision.

_TBITS = 128  # bits of U compared on the fixed-work path (word + spare)
_WORK = 192  # working precision of the table builder (bits)
_BLOCK = 1 << 15  # samples per vectorised block (bounds memory; public)
_GAUSS_BLOCK = 1 << 16  # Gaussian samples per block of rejection rounds (public)
_BROADCAST = 32  # digit searches of at most this many draws compare with every threshold
_LAP_TAIL = 70  # Laplace digits cover Y until P[Y >= 2**(8D)] <= e**-70 < 2**-100
_GAUSS_TAIL = 89  # exp(-89) < 2**-128: such factors have threshold 0


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


def _bernoulli(key: tuple, src: RandomSource) -> bool:  # Bernoulli(v) from fresh words, exact
    return _resolve([key], 0, 0, src) == 0


# ---------------------------------------- Tables: a whole row of thresholds at once
# A row is floor(v_c 2**128), c = 1..255, v_c = r**c (a Gaussian factor) or
# (1 - r**c) / (1 - r**256) (a Laplace digit's CDF), r = exp(-a/b). Enclosures of r**c,
# c = 16 i + j: exact products of W-bit enclosures of r**j and r**(16 i) (W = _WORK), one
# numpy outer product of Python ints per row; the quotient: a product with an enclosure of
# 1 / (1 - r**256). An entry is the floor both bounds agree on, else computed exactly
# (_floor_bits): the exact floor whatever W (tests: bit for bit the former builder, 100-digit
# Decimals). Not computed: r**c <= e**-89 < 2**-128 gives 0 (a factor); r**c <= e**-90
# gives 2**128 - 1 (a CDF, c < 256: 0 < 1 - F(c) < 2 e**-90 < 2**-128).

_M64 = (1 << 64) - 1
_E = 192  # bits of 1 / (1 - r**256) beyond the point: its rounding moves an entry < 2**-64


def _chain(lo: int, hi: int, n: int) -> tuple[list, list]:
    """Enclosures at 2**_WORK of x**k, k = 0..n, from lo <= x 2**_WORK <= hi."""
    pl, ph = [1 << _WORK], [1 << _WORK]
    for _ in range(n):
        pl.append((pl[-1] * lo) >> _WORK)
        ph.append(-((-(ph[-1] * hi)) >> _WORK))
    return pl, ph


def _products(a: int, b: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Object arrays (Python ints) lo_c <= exp(-c a/b) 2**(2 _WORK) <= hi_c, c = 1..n."""
    lo, hi = _exp_neg(a, b, _WORK)
    pl, ph = _chain(lo, min(hi, 1 << _WORK), 16)  # r**j, j = 0..16
    ql, qh = _chain(pl[16], ph[16], n // 16)  # r**(16 i)
    lo_c, hi_c = (
        np.multiply.outer(np.array(q, dtype=object), np.array(p[:16], dtype=object)).ravel()
        for p, q in ((pl, ql), (ph, qh))
    )
    return lo_c[1 : n + 1], hi_c[1 : n + 1]


def _words(lo: np.ndarray, hi: np.ndarray, fill: int, key) -> np.ndarray:
    """(255, 2) words (high, low) of floor(v_c 2**128), c = 1..255, from object arrays
    lo_c <= v_c 2**128 <= hi_c for c = 1..n (v_c < 1), ``fill`` for the rest; where the
    bounds disagree, exactly (``key(c)`` names v_c for _floor_bits)."""
    for i in np.flatnonzero(lo != np.minimum(hi, (1 << _TBITS) - 1)).tolist():
        lo[i] = _floor_bits(key(i + 1), _TBITS)
    out = np.full((255, 2), fill, dtype=np.uint64)
    out[: lo.size, 0] = (lo >> 64).astype(np.uint64)
    out[: lo.size, 1] = (lo & _M64).astype(np.uint64)
    return out


def _exp_row(a: int, S: int) -> np.ndarray:
    """floor(exp(-c a/S) 2**128), c = 1..255."""
    n = min(255, (89 * S - 1) // a)  # c a < 89 S
    lo, hi = _products(a, S, n)
    sh = 2 * _WORK - _TBITS
    return _words(lo >> sh, hi >> sh, 0, lambda c: ("exp", c * a, S))


def _cdf_row(a: int, t: int, r256: tuple[int, int]) -> np.ndarray:
    """floor(F(c) 2**128), F(c) = (1 - r**c) / (1 - r**256), r = exp(-a/t), c = 1..255,
    given ``r256``, an enclosure of r**256 at 2**_WORK."""
    n = min(255, (90 * t - 1) // a)  # c a < 90 t
    lo, hi = _products(a, t, n)
    den_lo, den_hi = (1 << _WORK) - r256[1], (1 << _WORK) - r256[0]  # (1 - r**256) 2**W

    def key(c: int) -> tuple:
        return ("cdf", a, t, c)

    if den_lo <= 0:  # never at scales up to 2**48 (1 - r**256 >= 2**-41)
        return _words(np.zeros(n, dtype=object), np.ones(n, dtype=object) << 128, _M64, key)
    inv_lo = (1 << (_WORK + _E)) // den_hi
    inv_hi = -(-(1 << (_WORK + _E)) // den_lo)
    one, sh = 1 << (2 * _WORK), 2 * _WORK + _E - _TBITS
    return _words(((one - hi) * inv_lo) >> sh, ((one - lo) * inv_hi) >> sh, _M64, key)


def _floor_of(lo: int, hi: int, key: tuple) -> int:  # from bounds on it; exact if they differ
    return lo if lo == min(hi, (1 << _TBITS) - 1) else _floor_bits(key, _TBITS)


def _stack(rows: list) -> tuple[np.ndarray, np.ndarray]:
    """Rows of (255, 2) words -> (high, low) uint64 arrays with a 0 sentinel before each row."""
    w = np.zeros((2, len(rows), 256), dtype=np.uint64)
    w[:, :, 1:] = np.moveaxis(np.asarray(rows), -1, 0)
    return w[0].ravel(), w[1].ravel()


class _Rows:
    """A table's rows of 256 entries as (high, low) words ``th``, ``tl``; ``vals``: the
    entries as Python ints, a tuple per row (for the exact path and the tests)."""

    th: np.ndarray
    tl: np.ndarray

    @functools.cached_property
    def vals(self) -> tuple:
        v = (self.th.astype(object) << 64) | self.tl
        return tuple(map(tuple, v.reshape(-1, 256).tolist()))

    @property
    def nbytes(self) -> int:
        return self.th.nbytes + self.tl.nbytes


class _TableCache:
    """Tables by exact scale; the least recently used are dropped beyond ``max_bytes``
    (thread-safe; ``nbytes`` is the total held)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes, self.nbytes = max_bytes, 0
        self._tabs: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple, build):
        with self._lock:
            tab = self._tabs.get(key)
            if tab is not None:
                self._tabs.move_to_end(key)
                return tab
        tab = build()  # outside the lock: tables depend on the key only
        with self._lock:
            if key not in self._tabs:
                self._tabs[key] = tab
                self.nbytes += tab.nbytes
                while self.nbytes > self.max_bytes and len(self._tabs) > 1:
                    self.nbytes -= self._tabs.popitem(last=False)[1].nbytes
        return tab

    def clear(self) -> None:
        with self._lock:
            self._tabs.clear()
            self.nbytes = 0

    def __len__(self) -> int:  # tables held
        return len(self._tabs)


#: Sampler tables of recent scales (4 KiB per row, at most 32 KiB a table), shared by all
#: calls and keyed by the exact scale: ("laplace", t, s) and ("gauss", S).
TABLES = _TableCache(64 << 20)


@dataclass(frozen=True, eq=False)
class _LaplaceTable(_Rows):
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
    th: np.ndarray
    tl: np.ndarray
    sign: tuple
    ovf: int

    @functools.cached_property
    def words(self) -> tuple:  # (high, low) words of the sign/zero and tail thresholds
        return tuple((np.uint64(v >> 64), np.uint64(v & _M64)) for v in (*self.sign, self.ovf))


def _laplace_table(t: int, s: int) -> _LaplaceTable:
    """The table of scale t/s (built once, then from :data:`TABLES`)."""
    return TABLES.get(("laplace", t, s), lambda: _build_laplace(t, s))


def _build_laplace(t: int, s: int) -> _LaplaceTable:
    digits = 1
    while (s << (8 * digits)) < _LAP_TAIL * t:
        digits += 1
    r = [_exp_neg(s << (8 * d), t, _WORK) for d in range(digits + 1)]  # q**(256**d)
    th, tl = _stack([_cdf_row(s << (8 * d), t, r[d + 1]) for d in range(digits)])
    (ql, qh), one, sh = r[0], 1 << _WORK, _WORK - _TBITS
    sign = (  # q / (1 + q), 1 / (1 + q)
        _floor_of((ql << _TBITS) // (one + qh), (qh << _TBITS) // (one + ql), ("neg", s, t)),
        _floor_of((one << _TBITS) // (one + qh), (one << _TBITS) // (one + ql), ("nonpos", s, t)),
    )
    ovf = _floor_of(r[digits][0] >> sh, r[digits][1] >> sh, ("exp", s << (8 * digits), t))
    return _LaplaceTable(t, s, digits, th, tl, sign, ovf)


def dlaplace(t: int, s: int, n: int, src: RandomSource) -> np.ndarray:
    """n samples with P[k] ∝ exp(-|k| s / t), fixed work per sample (see _LaplaceTable).

    Replaces the loops of CKS Alg. 2 (and Alg. 1 inside it) by inversion of
    exactly-computed CDFs; same distribution.
    """
    if n <= _BLOCK:
        return _dlaplace_block(_laplace_table(t, s), n, src) if n else np.empty(0, np.int64)
    tab = _laplace_table(t, s)
    return np.concatenate(
        [_dlaplace_block(tab, min(_BLOCK, n - a), src) for a in range(0, n, _BLOCK)]
    )


@functools.lru_cache(maxsize=16)
def _steps(rows: int) -> tuple[np.ndarray, np.ndarray]:  # row starts, digit shifts (columns)
    return np.arange(0, 256 * rows, 256)[:, None], np.arange(0, 8 * rows, 8)[:, None]


def _digit_search(th, tl, base, wh, wl) -> np.ndarray:
    """base + #{c in 1..255 : T[base + c] <= W} for each row's table T (T[base] = 0 is a
    sentinel) and 128-bit W = (wh, wl): a fixed-depth, branch-free binary search (``take``:
    twice as fast as fancy indexing). Its steps 128 + ... + 1 = 255 reach every count 0..255
    (from the sentinel the count is one short, digit 255 never drawn: issue 21). At most
    ``_BROADCAST`` draws (a public size) are compared with all 255: the same count."""
    if wh.shape[-1] <= _BROADCAST:  # (base: the start of every row, in order)
        a, b, w = th.reshape(-1, 1, 256)[..., 1:], tl.reshape(-1, 1, 256)[..., 1:], wh[..., None]
        return base + ((a < w) | ((a == w) & (b <= wl[:, None]))).sum(axis=2)
    pos = np.repeat(base, wh.shape[-1], axis=1)
    for h in (128, 64, 32, 16, 8, 4, 2, 1):
        i = pos + h  # <= base + 255
        a = th.take(i)
        pos += ((a < wh) | ((a == wh) & (tl.take(i) <= wl))) * h
    return pos


def _dlaplace_block(tab: _LaplaceTable, n: int, src: RandomSource) -> np.ndarray:
    """Fixed work: D + 3 words per sample, a depth-8 branch-free search per digit.

    Uniform j (digits, sign/zero, tail) is the high word ``wh[j]`` followed by further bits.
    A comparison needs them only when ``wh[j]`` equals a threshold's high word; the first
    such uniform of a sample takes the shared ``spare`` word as its next 64 bits (it is
    independent of every other decision). Two such uniforms in one sample (probability
    below 2**-100) or a full 128-bit tie go to the exact path.
    """
    D = tab.digits
    k = D + 2  # digit words, sign/zero word, tail word
    w = src.words64((k + 1) * n).reshape(k + 1, n)
    wh, spare = w[:k], w[k]
    dh = wh[:D]
    base, shifts = _steps(D)
    pos = _digit_search(tab.th, tab.tl, base, dh, spare)  # index of the largest T <= W
    digit = pos - base
    eq = tab.th.take(pos) == dh  # the found threshold's high word: a tie if all 128 bits
    tie = eq & (digit > 0) & (tab.tl.take(pos) == spare)
    hi_tie = eq | (tab.th.take(np.minimum(pos + 1, base + 255)) == dh)
    y = digit[0] if D == 1 else (digit << shifts).sum(axis=0)
    sh, oh = wh[D], wh[D + 1]
    (g0h, g0l), (g1h, g1l), (oth, otl) = tab.words
    e0, e1, eo = sh == g0h, sh == g1h, oh == oth  # high-word ties
    sgn = ((g0h < sh) | (e0 & (g0l <= spare))).astype(np.int64)  # thresholds <= U
    sgn += (g1h < sh) | (e1 & (g1l <= spare))
    sgn -= 1
    n_hi = hi_tie.sum(axis=0) + e0 + e1 + eo
    rare = tie.any(axis=0) | (n_hi > 1) | (e0 & (g0l == spare)) | (e1 & (g1l == spare))
    rare |= (oh < oth) | (eo & (spare <= otl))  # tail non-zero iff U < q**256**D; or a tie
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
    rows = [(wh[d], tab.vals[d][1:]) for d in range(D)] + [
        (wh[D], tab.sign),
        (wh[D + 1], (tab.ovf,)),
    ]
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


@dataclass(frozen=True, eq=False)
class _GaussTable(_Rows):
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
    th: np.ndarray
    tl: np.ndarray


def _gauss_table(S: int) -> _GaussTable:
    """The acceptance table of exp(-N/S) (built once, then from :data:`TABLES`)."""
    return TABLES.get(("gauss", S), lambda: _build_gauss(S))


def _build_gauss(S: int) -> _GaussTable:
    L = 1
    while L < 8 and (1 << (8 * L)) < _GAUSS_TAIL * S:
        L += 1
    th, tl = _stack([_exp_row(1 << (8 * d), S) for d in range(L)])
    return _GaussTable(S, L, L < 8, th, tl)


def _gauss_accept(ay: np.ndarray, p: GaussParams, src: RandomSource) -> np.ndarray:
    """Accept |y| with probability exp(-(|y| P - Q)^2 R / S) (CKS Alg. 3, line C), with
    the same work for every |y|. A proposal too large for int64 arithmetic (|y| > y_safe)
    takes a fresh exact draw instead of its fixed-path words."""
    unsafe = np.flatnonzero(ay > p.y_safe).tolist()
    d = np.minimum(ay, p.y_safe)
    d = (d * p.P if p.P != 1 else d) - p.Q
    huge = {i: (int(ay[i]) * p.P - p.Q) ** 2 * p.R for i in unsafe}
    num = d * d * p.R if p.R != 1 else d * d  # fits: |y| <= y_safe
    return _exp_accept(num, _gauss_table(p.S), src, huge=huge)


def _exp_accept(num: np.ndarray, tab: _GaussTable, src: RandomSource, *, huge=None) -> np.ndarray:
    """Bernoulli(exp(-num/S)) for each int64 ``num``, fixed work (see _GaussTable): one
    high word per factor and a shared spare word, as in _dlaplace_block. ``huge`` maps
    positions to exact Python-int numerators that did not fit; those draw afresh."""
    m, L = num.size, tab.positions
    k = L + tab.high
    w = src.words64((k + 1) * m).reshape(k + 1, m)
    wh, spare = w[:k], w[k]
    base, shifts = _steps(L)
    c = (num >> shifts) & 255
    idx = c + base
    th, tl, u = tab.th.take(idx), tab.tl.take(idx), wh[:L]
    live = c != 0  # c = 0: probability 1
    eq = (th == u) & live
    # a live factor rejects iff its threshold <= U
    ok = ~(((th < u) & live) | (eq & (tl <= spare))).any(axis=0)
    tie = (eq & (tl == spare)).any(axis=0)
    n_hi = eq.sum(axis=0)
    if tab.high:
        hl = (num >> (8 * L)) != 0
        ok &= ~hl
        n_hi += hl & (wh[L] == 0)
        tie |= hl & (wh[L] == 0) & (spare == 0)
    rare = tie | (n_hi > 1)
    huge = huge or {}
    rare[list(huge)] = True
    if rare.any():  # probability below 2**-100 per proposal
        for i in np.flatnonzero(rare).tolist():
            if i in huge:  # the fixed-path words never looked at: a fresh exact draw
                ok[i] = _bernoulli(("exp", huge[i], tab.S), src)
            else:
                ok[i] = _exp_accept_exact(int(num[i]), tab, wh[:, i].tolist(), int(spare[i]), src)
    return ok


def _exp_accept_exact(num: int, tab: _GaussTable, wh: list, spare: int, src: RandomSource) -> bool:
    """The acceptance test for one numerator from its fixed-path words, ties resolved
    exactly with further words."""
    L = tab.positions
    digits = [(num >> (8 * d)) & 255 for d in range(L)] + ([num >> (8 * L)] if tab.high else [])
    rows = [(wh[d], (tab.vals[d][c] if d < L else 0,) if c else ()) for d, c in enumerate(digits)]
    pre = _prefixes(rows, spare)
    for d, c in enumerate(digits):
        if c and _count(rows[d][1], [("exp", c << (8 * d), tab.S)], *pre[d], src):
            return False  # threshold <= U: this factor rejects
    return True


def dgauss(p: GaussParams, n: int, src: RandomSource) -> np.ndarray:
    """n samples of CKS Alg. 3, in blocks of ``_GAUSS_BLOCK`` so the working arrays of
    the rejection rounds stay a few MiB whatever n (only the int64 output grows with n)."""
    if n <= _GAUSS_BLOCK:
        return _dgauss_block(p, n, src)
    out = np.empty(n, dtype=np.int64)
    for a in range(0, n, _GAUSS_BLOCK):
        out[a : a + _GAUSS_BLOCK] = _dgauss_block(p, min(_GAUSS_BLOCK, n - a), src)
    return out


def _dgauss_block(p: GaussParams, n: int, src: RandomSource) -> np.ndarray:
    """CKS Alg. 3: discrete Laplace proposals accepted with probability exp(-gamma(y)).
    Each round costs the same for every proposal, and the number of rounds is independent
    of the accepted values, so the running time does not depend on the output."""
    out = np.empty(n, dtype=np.int64)
    todo = None
    m = n
    while m:
        y = dlaplace(p.lap_t, p.lap_s, m, src)
        ok = _gauss_accept(np.abs(y), p, src)
        if todo is None:
            out[:] = y  # rejected entries are overwritten below
            todo = np.flatnonzero(~ok)
        else:
            out[todo[ok]] = y[ok]
            todo = todo[~ok]
        m = todo.size
    return out
