"""Exact 128-bit thresholds and the sampler tables built from them.

Every decision of the fixed-work samplers (:mod:`matmech.privacy.discrete`) is "U < v" or
"v <= U" for a uniform real U in [0, 1) and a computable irrational threshold v: a power of
exp(-a/b), a truncated-geometric CDF (1 - r**c) / (1 - r**256), q / (1 + q) or 1 / (1 + q)
(Canonne, Kamath & Steinke, NeurIPS 2020, Alg. 1-3). Thresholds are exact integers
floor(v 2**128) computed with interval arithmetic on Python ints (no floating-point number
enters a decision); further bits are computed only on a 128-bit tie (:func:`resolve`).
Tables of a scale are built once and kept in :data:`TABLES`.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from matmech.privacy.randomness import RandomSource


# ------------- Exact thresholds: binary expansions of exp(-a/b) and simple functions of it
# Every decision below is "U < v" or "v <= U" for a uniform real U in [0, 1) read lazily
# from random words and a computable irrational threshold v. U's first word is compared
# with the first 64 bits of v; if they are equal the sample's spare word gives U's next 64
# bits and floor(v * 2**128) decides; only on a 128-bit tie (probability 2**-128) are
# further words read and compared with further bits of v (:func:`resolve`). Thresholds
# are exact integers computed with interval arithmetic on Python ints; no floating-point
# number enters a decision.

TBITS = 128  # bits of U compared on the fixed-work path (word + spare)
_WORK = 192  # working precision of the table builder (bits)
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


def resolve(keys, prefix: int, nbits: int, src: RandomSource) -> int:
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


def bernoulli(key: tuple, src: RandomSource) -> bool:  # Bernoulli(v) from fresh words, exact
    return resolve([key], 0, 0, src) == 0


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
    for i in np.flatnonzero(lo != np.minimum(hi, (1 << TBITS) - 1)).tolist():
        lo[i] = _floor_bits(key(i + 1), TBITS)
    out = np.full((255, 2), fill, dtype=np.uint64)
    out[: lo.size, 0] = (lo >> 64).astype(np.uint64)
    out[: lo.size, 1] = (lo & _M64).astype(np.uint64)
    return out


def _exp_row(a: int, S: int) -> np.ndarray:
    """floor(exp(-c a/S) 2**128), c = 1..255."""
    n = min(255, (89 * S - 1) // a)  # c a < 89 S
    lo, hi = _products(a, S, n)
    sh = 2 * _WORK - TBITS
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
    one, sh = 1 << (2 * _WORK), 2 * _WORK + _E - TBITS
    return _words(((one - hi) * inv_lo) >> sh, ((one - lo) * inv_hi) >> sh, _M64, key)


def _floor_of(lo: int, hi: int, key: tuple) -> int:  # from bounds on it; exact if they differ
    return lo if lo == min(hi, (1 << TBITS) - 1) else _floor_bits(key, TBITS)


def _stack(rows: list) -> tuple[np.ndarray, np.ndarray]:
    """Rows of (255, 2) words -> (high, low) uint64 arrays with a 0 sentinel before each row."""
    w = np.zeros((2, len(rows), 256), dtype=np.uint64)
    w[:, :, 1:] = np.moveaxis(np.asarray(rows), -1, 0)
    return w[0].ravel(), w[1].ravel()


class _Rows:
    """A table's rows of 256 entries as (high, low) words ``th``, ``tl``; ``vals``: the
    entries as Python ints, a tuple per row (for the exact path and the tests). A table is
    also a stack of one table (:class:`Stack`): ``tabs``."""

    th: np.ndarray
    tl: np.ndarray

    @property
    def tabs(self) -> tuple:
        return (self,)

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
class LaplaceTable(_Rows):
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
        return _sign_words((self,))


def laplace_table(t: int, s: int) -> LaplaceTable:
    """The table of scale t/s (built once, then from :data:`TABLES`)."""
    return TABLES.get(("laplace", t, s), lambda: _build_laplace(t, s))


def _build_laplace(t: int, s: int) -> LaplaceTable:
    digits = 1
    while (s << (8 * digits)) < _LAP_TAIL * t:
        digits += 1
    r = [_exp_neg(s << (8 * d), t, _WORK) for d in range(digits + 1)]  # q**(256**d)
    th, tl = _stack([_cdf_row(s << (8 * d), t, r[d + 1]) for d in range(digits)])
    (ql, qh), one, sh = r[0], 1 << _WORK, _WORK - TBITS
    sign = (  # q / (1 + q), 1 / (1 + q)
        _floor_of((ql << TBITS) // (one + qh), (qh << TBITS) // (one + ql), ("neg", s, t)),
        _floor_of((one << TBITS) // (one + qh), (one << TBITS) // (one + ql), ("nonpos", s, t)),
    )
    ovf = _floor_of(r[digits][0] >> sh, r[digits][1] >> sh, ("exp", s << (8 * digits), t))
    return LaplaceTable(t, s, digits, th, tl, sign, ovf)


@dataclass(frozen=True, eq=False)
class GaussTable(_Rows):
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


def gauss_table(S: int) -> GaussTable:
    """The acceptance table of exp(-N/S) (built once, then from :data:`TABLES`)."""
    return TABLES.get(("gauss", S), lambda: _build_gauss(S))


def _build_gauss(S: int) -> GaussTable:
    L = 1
    while L < 8 and (1 << (8 * L)) < _GAUSS_TAIL * S:
        L += 1
    th, tl = _stack([_exp_row(1 << (8 * d), S) for d in range(L)])
    return GaussTable(S, L, L < 8, th, tl)


def _sign_words(tabs) -> tuple:
    """(high, low) words of q/(1+q), 1/(1+q) and the tail threshold of each Laplace table:
    six uint64 arrays, one entry per table."""
    v = [(*t.sign, t.ovf) for t in tabs]
    return tuple(
        np.array([row[k] >> sh & _M64 for row in v], dtype=np.uint64)
        for k in range(3)
        for sh in (64, 0)
    )


@dataclass(frozen=True, eq=False)
class Stack:
    """Tables of one layout (equal ``digits``, or equal ``positions`` and ``high``) in one
    pair of arrays, so one vectorised pass serves draws of different scales: table k's rows
    start at entry ``start[k]``; ``words``: the Laplace sign/tail words per table."""

    tabs: tuple
    th: np.ndarray
    tl: np.ndarray
    start: np.ndarray

    @functools.cached_property
    def words(self) -> tuple:
        return _sign_words(self.tabs)


def stack(tabs) -> Stack | _Rows:
    """The tables ``tabs`` (one layout) as one :class:`Stack`; a single table as itself."""
    tabs = tuple(tabs)
    if len(tabs) == 1:
        return tabs[0]
    sizes = [t.th.size for t in tabs]
    start = np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(np.int64)
    return Stack(
        tabs, np.concatenate([t.th for t in tabs]), np.concatenate([t.tl for t in tabs]), start
    )
