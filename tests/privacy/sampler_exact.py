"""What the exact samplers of :mod:`matmech.privacy.noise` do with every random input.

Each digit of a discrete Laplace draw, its sign/zero outcome, its "beyond the last digit"
event, and each factor of the discrete Gaussian's acceptance test are decided by comparing
a 128-bit uniform W (a high word, then the shared spare word) with a public table of
128-bit thresholds. Every comparison the fixed-work code makes is ``T[i] <= W`` or
``T[i] == W`` for table entries T[i], so its output is constant on each interval between
consecutive thresholds (and on each threshold itself). Running the code on both ends of
every such interval, and on every threshold, therefore covers every one of the 2**128
inputs: the helpers here *enumerate* the random input in that sense, with a scripted random
source, and read off the distribution the implementation really has.

A tie (W equal to a threshold on all 128 bits) reads further words and is settled exactly by
``thresholds.resolve``; it has probability 2**-128 and can go either way, which the pmf bounds
below allow for.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
from scipy import stats

from matmech.privacy import discrete, thresholds
from matmech.privacy.randomness import RandomSource, check_rng

__all__ = [
    "ScriptedSource",
    "digit_classes",
    "digit_outputs",
    "laplace_digit_pmfs",
    "sign_outputs",
    "laplace_loss_bound",
    "accept_outputs",
    "chi2_p",
    "oracle_laplace_vals",
    "oracle_gauss_vals",
    "TWO128",
]

TWO128 = 1 << 128
M64 = (1 << 64) - 1


class ScriptedSource(RandomSource):
    """Hands out ``first`` for the first request (its size must match), then seeded words."""

    __slots__ = ("first", "inner", "extra", "fill")

    def __init__(self, first, seed: int = 0, fill=None) -> None:
        super().__init__()
        self.first = np.asarray(first, dtype=np.uint64)
        self.inner = check_rng(np.random.default_rng(seed))
        self.extra = 0
        self.fill = fill  # a constant for every later word instead of seeded ones

    def words64(self, n):
        if self.first is not None:
            w, self.first = self.first, None
            if w.size != n:
                raise RuntimeError(f"scripted {w.size} words, asked for {n}")
            return w
        self.extra += n
        if self.fill is not None:
            return np.full(n, self.fill, dtype=np.uint64)
        return self.inner.words64(n)


def _quiet_digit0_word(tab, d: int) -> int:
    """A 64-bit word that makes digit ``d`` zero with no high-word tie (no spare word used)."""
    h1 = tab.vals[d][1] >> 64
    w = h1 // 2
    if not 0 < w < h1:
        raise RuntimeError("table too coarse for a quiet digit-0 word")
    return w


def digit_classes(thresholds) -> tuple[list, list]:
    """Interior points of every interval between consecutive thresholds (with the digit
    they must give) and the thresholds themselves (ties), for thresholds T[1..255] after
    the sentinel T[0] = 0, with T[256] = 2**128."""
    T = [0, *thresholds, TWO128]
    points, ties = [], []
    for c in range(256):
        lo = T[c] + (1 if c else 0)
        hi = T[c + 1] - 1
        if lo > hi:
            continue
        mid = ((T[c] >> 64) + 1) << 64  # a high word strictly inside, if there is one
        for w in {lo, hi, mid} if lo < mid < hi else {lo, hi}:
            points.append((w, c))
        if c:
            ties.append((T[c], c))
    return points, ties


def _digit_rows(tab, d: int, words128) -> np.ndarray:
    """Fixed-path words (uniforms x samples) with digit ``d``'s uniform set to
    ``words128`` and every other uniform fixed: digits 0, sign positive, no tail."""
    D, n = tab.digits, len(words128)
    if (tab.sign[1] >> 64) == M64 or (tab.ovf >> 64) == M64:
        raise RuntimeError("sign or tail threshold too close to 1 for the fixed words")
    rows = np.empty((D + 3, n), dtype=np.uint64)
    for j in range(D):
        rows[j] = _quiet_digit0_word(tab, j)
    rows[d] = [w >> 64 for w in words128]
    rows[D] = M64  # U >= 1/(1+q): positive
    rows[D + 1] = M64  # U >= q**(256**D): no tail
    rows[D + 2] = [w & M64 for w in words128]
    return rows


def digit_outputs(tab, d: int, words128, via=None) -> np.ndarray:
    """|Z| - 1 digit ``d`` produced by the fixed-work block when digit ``d``'s uniform is
    each of ``words128`` (every other uniform as in :func:`_digit_rows`); ``via=(stack,
    k)``: drawn through a stack of tables whose table ``k`` is ``tab``."""
    n = len(words128)
    src = ScriptedSource(_digit_rows(tab, d, words128).ravel())
    if via is None:
        z = discrete._dlaplace_block(tab, n, src)
    else:
        z = discrete._dlaplace_block(via[0], n, src, j=np.full(n, via[1]))
    if np.any(z <= 0):
        raise AssertionError("the fixed words must give a positive draw")
    y = z - 1
    others = y & ~(255 << (8 * d))
    if np.any(others != 0):
        raise AssertionError("a digit other than the enumerated one changed")
    return (y >> (8 * d)) & 255


def _exact_thresholds(a: int, t: int) -> list:
    """2**128 F(c), c = 0..256, for the digit CDF F(c) = (1 - r**c) / (1 - r**256),
    r = exp(-a/t), as Fractions accurate to ~60 significant digits of 1 - F(c) (Decimal:
    independent of the interval arithmetic that built the tables)."""
    with localcontext() as ctx:
        ctx.prec = 60
        r = (-Decimal(a) / Decimal(t)).exp()
        r256 = r**256
        return [TWO128 - Fraction((r**c - r256) / (1 - r256)) * TWO128 for c in range(257)]


def laplace_digit_pmfs(tab) -> list[list]:
    """For each digit position: 2**128 * P[digit = c] *as implemented*, read off by
    running the fixed-work block on every input class.

    An interval strictly between two table entries counts for the digit the code returns
    on it. A table entry itself (a tie: W equals floor(2**128 F(c)) on all 128 bits) is
    settled by the exact path against the exact thresholds, so its unit of mass splits
    between the digits whose exact CDF intervals overlap it (checked separately: ties give
    a neighbouring digit, ``test_fallback_resolves_ties_and_the_tail_exactly``). With every
    interval mapped to its own digit this is exactly 2**128 (F(c+1) - F(c)); a defect in the
    search shows as mass moved to the wrong digit."""
    out = []
    for d in range(tab.digits):
        points, ties = digit_classes(tab.vals[d][1:])
        got = digit_outputs(tab, d, [w for w, _ in points])
        T = [0, *tab.vals[d][1:], TWO128]
        E = _exact_thresholds(tab.s << (8 * d), tab.t)
        pmf = [Fraction(0)] * 256
        by_interval = {}
        for (w, c), g in zip(points, got):
            by_interval.setdefault(c, set()).add(int(g))
        for c, outs in by_interval.items():
            if len(outs) != 1:
                raise AssertionError(f"digit {d}: interval {c} is not mapped to one output")
            pmf[outs.pop()] += T[c + 1] - T[c] - (1 if c else 0)
        # a tie point either is decided on its 128 bits (its unit of mass goes to that
        # output) or reads further words: the exact path, settled against the exact thresholds
        for tie in sorted({T[c] for c in range(1, 256)}):
            src = ScriptedSource(_digit_rows(tab, d, [tie]).ravel(), fill=0)
            g = int(discrete._dlaplace_block(tab, 1, src)[0])
            if not src.extra:
                pmf[((g - 1) >> (8 * d)) & 255] += 1
                continue
            for j in range(256):  # overlap of [tie, tie + 1) with [E[j], E[j+1])
                lo, hi = max(E[j], tie), min(E[j + 1], tie + 1)
                if hi > lo:
                    pmf[j] += hi - lo
        out.append(pmf)
    return out


def sign_outputs(tab, words128, via=None) -> np.ndarray:
    """sign(Z) for each sign/zero uniform in ``words128`` (digits 0, no tail); ``via`` as
    in :func:`digit_outputs`."""
    D, n = tab.digits, len(words128)
    rows = np.empty((D + 3, n), dtype=np.uint64)
    for j in range(D):
        rows[j] = _quiet_digit0_word(tab, j)
    rows[D] = [w >> 64 for w in words128]
    rows[D + 1] = M64
    rows[D + 2] = [w & M64 for w in words128]
    src = ScriptedSource(rows.ravel())
    if via is None:
        return np.sign(discrete._dlaplace_block(tab, n, src))
    return np.sign(discrete._dlaplace_block(via[0], n, src, j=np.full(n, via[1])))


def _ln(v) -> float:
    """Natural log of a positive int or Fraction, without float underflow."""
    v = Fraction(v)
    return math.log(v.numerator) - math.log(v.denominator)


def _lr(x, y) -> float:
    """log(x / y) for positive ints/Fractions, accurate also when x / y is close to 1."""
    r = Fraction(x) / Fraction(y)
    return math.log1p(float(r - 1)) if Fraction(1, 2) < r < 2 else _ln(r)


def laplace_loss_bound(tab, shift: int) -> float:
    """An upper bound on max_z |log P[Z = z] - log P[Z = z + shift]| for the discrete
    Laplace *as implemented* (digit pmfs from :func:`laplace_digit_pmfs`, sign/zero and
    tail probabilities from the table, each entry within 2**-128 of the exact threshold).

    Consecutive values y, y + 1 of Y = |Z| - 1 differ by a carry through j digits: the
    ratio is prod_{i<j} p_i(255)/p_i(0) * p_j(a)/p_j(a + 1). A window of ``shift``
    consecutive pairs crosses at most ceil(shift / 256**j) carries of level j, and the zero
    crossing (-1, 0, 1) at most once, so the sum of the worst pair losses per level bounds
    the loss of the shift. The ideal bound is shift * s / t."""
    pmfs = laplace_digit_pmfs(tab)
    D = tab.digits
    level = []
    carry_up, carry_down = 0.0, 0.0  # log prod_{i<j} p_i(255)/p_i(0), both directions
    for j in range(D):
        p = pmfs[j]
        if any(v == 0 for v in p):
            return math.inf
        worst = 0.0
        for a in range(255):
            step = _lr(p[a], p[a + 1])
            worst = max(worst, abs(step + carry_up), abs(-step + carry_down))
        level.append(worst)
        carry_up += _lr(p[255], p[0])
        carry_down += _lr(p[0], p[255])
    # the sign/zero draw and the "beyond the last digit" event: exact thresholds (their
    # input classes are checked by the sign and tail tests; ties are settled exactly),
    # then an exact geometric with ratio q**(256**D) beyond the digits
    with localcontext() as ctx:
        ctx.prec = 60
        q = Fraction((-Decimal(tab.s) / Decimal(tab.t)).exp())
        q_D = Fraction((-Decimal(tab.s << (8 * D)) / Decimal(tab.t)).exp())
    t0, t1 = 1 - q_D, q_D * (1 - q_D)  # P[tail = 0], P[tail = 1]
    last = max(abs(_lr(t0, t1) + carry_up), abs(_lr(t1, t0) + carry_down))
    p_side, p_zero = q / (1 + q), (1 - q) / (1 + q)
    y0 = math.prod(Fraction(p[0], TWO128) for p in pmfs) * t0  # P[Y = 0]
    zero = abs(_lr(p_zero, p_side * y0))
    # every pair costs at most level[0]; carries, the last digit and the zero crossing
    # add what they cost beyond it
    base = level[0]
    total = shift * base
    total += sum(math.ceil(shift / 256**j) * max(level[j] - base, 0.0) for j in range(1, D))
    total += math.ceil(shift / 256**D) * max(last - base, 0.0)
    return total + 2 * max(zero - base, 0.0)


def accept_outputs(tab, nums, words128, d: int, via=None) -> np.ndarray:
    """The discrete Gaussian acceptance test (``discrete._exp_accept``) for numerators
    ``nums`` when factor ``d``'s uniform is ``words128`` (every other factor's uniform 2**-64:
    below every live threshold, so it accepts); ``via=(stack, k)`` as in
    :func:`digit_outputs`."""
    k = tab.positions + tab.high
    n = len(nums)
    rows = np.ones((k + 1, n), dtype=np.uint64)
    rows[d] = [w >> 64 for w in words128]
    rows[k] = [w & M64 for w in words128]
    num, src = np.asarray(nums, dtype=np.int64), ScriptedSource(rows.ravel())
    if via is None:
        return discrete._exp_accept(num, tab, src)
    return discrete._exp_accept(num, via[0], src, j=np.full(n, via[1]))


def chi2_p(counts, expected):
    """Chi-square p-value; cells with expected count < 5 are pooled, and the pool joins the
    smallest kept cell when it is still below 5 (a lone rare draw must not dominate)."""
    counts, expected = np.asarray(counts, float), np.asarray(expected, float)
    keep = expected >= 5
    c, e = list(counts[keep]), list(expected[keep])
    pc, pe = counts[~keep].sum(), expected[~keep].sum()
    if pe >= 5:
        c.append(pc)
        e.append(pe)
    elif pe > 0 or pc > 0:
        j = int(np.argmin(e))
        c[j] += pc
        e[j] += pe
    c, e = np.array(c), np.array(e)
    stat = np.sum((c - e) ** 2 / e)
    return float(stats.chi2.sf(stat, max(len(c) - 1, 1)))


# ------------------------------------------------------- the Python-int table builder
# The builder the samplers used before the packed one (issue 24): every entry from its own
# 256-bit enclosure by repeated products and one division, with Python ints only. Kept as
# the oracle the packed builder must match bit for bit.


_ORACLE_WORK = 256


def _oracle_powers(a: int, b: int) -> tuple[list, list]:
    W = _ORACLE_WORK
    rl, rh = thresholds._exp_neg(a, b, W)
    lo, hi = [1 << W], [1 << W]
    for _ in range(256):
        lo.append((lo[-1] * rl) >> W)
        hi.append(-((-(hi[-1] * rh)) >> W))
    return lo, hi


def _oracle_entry(lo: int, hi: int, key: tuple) -> int:
    sh = _ORACLE_WORK - 128
    hi = min(hi, (1 << _ORACLE_WORK) - 1)
    if lo >> sh == hi >> sh:
        return lo >> sh
    return thresholds._floor_bits(key, 128)


def oracle_laplace_vals(t: int, s: int, digits: int) -> tuple:
    """``vals`` of the discrete Laplace table at scale t/s, Python ints only."""
    one = 1 << _ORACLE_WORK
    out = []
    for d in range(digits):
        a = s << (8 * d)
        lo, hi = _oracle_powers(a, t)
        dl, dh = one - hi[256], one - lo[256]
        row = [0]
        for c in range(1, 256):
            if dl > 0:
                fl = ((one - hi[c]) << _ORACLE_WORK) // dh
                fh = -(-((one - lo[c]) << _ORACLE_WORK) // dl)
            else:
                fl, fh = 0, one
            row.append(_oracle_entry(fl, fh, ("cdf", a, t, c)))
        out.append(tuple(row))
    return tuple(out)


def oracle_gauss_vals(S: int, positions: int) -> tuple:
    """``vals`` of the discrete Gaussian acceptance table exp(-N/S), Python ints only."""
    out = []
    for d in range(positions):
        lo, hi = _oracle_powers(1 << (8 * d), S)
        keys = [("exp", c << (8 * d), S) for c in range(1, 256)]
        out.append((0, *(_oracle_entry(lo[c], hi[c], k) for c, k in zip(range(1, 256), keys))))
    return tuple(out)
