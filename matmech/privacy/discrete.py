"""Exact discrete Laplace and Gaussian samplers with a fixed amount of work per draw.

The vectorised samplers behind :mod:`matmech.privacy.noise` (which validates parameters and
is the public entry point); their exact thresholds and tables are
:mod:`matmech.privacy.thresholds`. Canonne, Kamath & Steinke, "The
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
* One call may mix scales (:func:`dgauss_mixed`): draws of different σ take their rows from
  one stack of tables (:func:`matmech.privacy.thresholds.stack`), each draw at its own
  offset, so a release with thousands of σ runs one set of vectorised rounds per batch.
* Left to a slower exact path, with probability below 2**-100 per sample (per proposal for
  the Gaussian): a uniform equal to a threshold on its first 128 bits, two uniforms of one
  sample that need more than their first word, the part of |Z| beyond the last digit
  (probability <= e**-70), a Gaussian proposal too large for int64 arithmetic. The output
  stays exact; only in those events does the time depend on the value.

Not covered: numpy's own timing (look-ups touch value-dependent addresses of a 2-32 KiB
table, so cache effects remain; integer ufuncs are assumed to run in value-independent
time), the random source (AES CTR_DRBG or ``os.urandom``) and the interpreter (allocation, garbage collection), building the
tables of a new scale (about 0.7 ms, depends on the scale only; then cached in
:data:`TABLES`), cost that grows with ``size`` and with the scale (D above),
and everything outside this module: :func:`uniform` redraws 0 (probability 2**-53,
independent of the output), a tie of the exponential-mechanism selection is broken by
``randbelow`` (rejection: the number of words depends on the tie's size), and a caller that
branches on the noise leaks through its own timing.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from matmech.privacy.randomness import RandomSource
from matmech.privacy.thresholds import (
    TBITS,
    GaussTable,
    LaplaceTable,
    bernoulli,
    gauss_table,
    laplace_table,
    resolve,
    stack,
)


_INT64_MAX = (1 << 63) - 1
_BLOCK = 1 << 15  # samples per vectorised block (bounds memory; public)
_GAUSS_BLOCK = 1 << 16  # Gaussian samples per block of rejection rounds (public)
_BROADCAST = 32  # digit searches of at most this many draws compare with every threshold
_ALONE = 1 << 15  # draws of one σ in a mixed call from which it gets rounds of its own


@dataclass(frozen=True)
class GaussParams:
    """A discrete Gaussian σ² = a/b drawn by CKS Alg. 3: a discrete Laplace proposal of
    scale lap_t/lap_s, accepted with probability exp(-γ(y)), γ(y) = (A y² - B|y| + C)/S.

    Then P[y] ∝ exp(-|y| lap_s/lap_t - γ(y)) ∝ exp(-y² b/(2a)) exactly when A/S = b/(2a) and
    B/S = lap_s/lap_t; C makes γ >= 0 on the integers. Checked on construction (a wrong
    record would be a sampler of another distribution). |y| <= y_safe keeps A y² + C and
    B|y| in int64."""

    a: int
    b: int
    lap_t: int
    lap_s: int
    A: int
    B: int
    C: int
    S: int
    y_safe: int

    def __post_init__(self) -> None:
        ints = (self.a, self.b, self.lap_t, self.lap_s, self.A, self.B, self.C, self.S)
        y0 = self.B // (2 * self.A) if self.A > 0 else 0
        if (
            min(ints) < 0
            or min(self.a, self.b, self.lap_t, self.lap_s, self.A, self.S) < 1
            or self.A * 2 * self.a != self.S * self.b
            or self.B * self.lap_t != self.S * self.lap_s
            or min(self.A * y * y - self.B * y + self.C for y in (y0, y0 + 1)) < 0
            or self.A * self.y_safe**2 + self.C > _INT64_MAX
            or self.B * self.y_safe > _INT64_MAX
        ):
            raise ValueError(f"inconsistent discrete Gaussian parameters {self!r}")


def dlaplace(t: int, s: int, n: int, src: RandomSource) -> np.ndarray:
    """n samples with P[k] ∝ exp(-|k| s / t), fixed work per sample (see LaplaceTable).

    Replaces the loops of CKS Alg. 2 (and Alg. 1 inside it) by inversion of
    exactly-computed CDFs; same distribution.
    """
    return _dlaplace(laplace_table(t, s), n, src)


def _dlaplace(tabs, n: int, src: RandomSource, *, j=None) -> np.ndarray:
    """n samples, sample i from table ``tabs.tabs[j[i]]`` of the stack ``tabs`` (all from
    its one table when ``j`` is None), in blocks of ``_BLOCK``."""
    return _in_blocks(lambda m, jj: _dlaplace_block(tabs, m, src, j=jj), n, _BLOCK, j)


def _in_blocks(draw, n: int, block: int, which) -> np.ndarray:
    """``draw(m, which_slice)`` on consecutive blocks of at most ``block`` samples (a public
    size: it bounds the working arrays), concatenated; ``which`` None stays None."""
    if n <= block:
        return draw(n, which) if n else np.empty(0, np.int64)
    out = np.empty(n, dtype=np.int64)
    for a in range(0, n, block):
        out[a : a + block] = draw(
            min(block, n - a), None if which is None else which[a : a + block]
        )
    return out


@functools.lru_cache(maxsize=16)
def _steps(rows: int) -> tuple[np.ndarray, np.ndarray]:  # row starts, digit shifts (columns)
    return np.arange(0, 256 * rows, 256)[:, None], np.arange(0, 8 * rows, 8)[:, None]


def _bases(tabs, j, rows: int) -> np.ndarray:
    """Start of each digit's row: (rows, 1) for one table, (rows, n) per sample otherwise."""
    base = _steps(rows)[0]
    return base if j is None else tabs.start[j] + base


def _digit_search(th, tl, base, wh, wl) -> np.ndarray:
    """base + #{c in 1..255 : T[base + c] <= W} for each row's table T (T[base] = 0 is a
    sentinel) and 128-bit W = (wh, wl): a fixed-depth, branch-free binary search (``take``:
    twice as fast as fancy indexing). Its steps 128 + ... + 1 = 255 reach every count 0..255
    (from the sentinel the count is one short, digit 255 never drawn: issue 21). At most
    ``_BROADCAST`` draws (a public size) are compared with all 255: the same count.
    ``base``: (digits, 1) (one table) or (digits, n) (a row per sample)."""
    n = wh.shape[-1]
    if n <= _BROADCAST:
        rows = base // 256
        a = th.reshape(-1, 256)[rows][..., 1:]
        b = tl.reshape(-1, 256)[rows][..., 1:]
        w = wh[..., None]
        return base + ((a < w) | ((a == w) & (b <= wl[:, None]))).sum(axis=2)
    pos = np.repeat(base, n, axis=1) if base.shape[1] == 1 else base.copy()
    for h in (128, 64, 32, 16, 8, 4, 2, 1):
        i = pos + h  # <= base + 255
        a = th.take(i)
        pos += ((a < wh) | ((a == wh) & (tl.take(i) <= wl))) * h
    return pos


def _dlaplace_block(tabs, n: int, src: RandomSource, *, j=None) -> np.ndarray:
    """Fixed work: D + 3 words per sample, a depth-8 branch-free search per digit.

    ``tabs``: a Laplace table, or a stack of tables with equal ``digits`` D and ``j`` the
    table of each sample. Uniform k (digits, sign/zero, tail) is the high word ``wh[k]``
    followed by further bits. A comparison needs them only when ``wh[k]`` equals a
    threshold's high word; the first such uniform of a sample takes the shared ``spare``
    word as its next 64 bits (it is independent of every other decision). Two such uniforms
    in one sample (probability below 2**-100) or a full 128-bit tie go to the exact path.
    """
    D = tabs.tabs[0].digits
    k = D + 2  # digit words, sign/zero word, tail word
    w = src.words64((k + 1) * n).reshape(k + 1, n)
    wh, spare = w[:k], w[k]
    dh = wh[:D]
    shifts = _steps(D)[1]
    base = _bases(tabs, j, D)
    pos = _digit_search(tabs.th, tabs.tl, base, dh, spare)  # index of the largest T <= W
    digit = pos - base
    eq = tabs.th.take(pos) == dh  # the found threshold's high word: a tie if all 128 bits
    tie = eq & (digit > 0) & (tabs.tl.take(pos) == spare)
    hi_tie = eq | (tabs.th.take(np.minimum(pos + 1, base + 255)) == dh)
    y = digit[0] if D == 1 else (digit << shifts).sum(axis=0)
    sh, oh = wh[D], wh[D + 1]
    g0h, g0l, g1h, g1l, oth, otl = tabs.words if j is None else (v[j] for v in tabs.words)
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
            tab = tabs.tabs[0 if j is None else int(j[i])]
            z[i] = _laplace_exact(tab, wh[:, i].tolist(), int(spare[i]), src)
    return z


def _count(vals, keys, u: int, nbits: int, src: RandomSource) -> int:
    """#{thresholds <= U}: ``vals`` their first 128 bits, ``u`` the first ``nbits`` of U."""
    sh = TBITS - nbits
    below = sum(1 for v in vals if v >> sh < u)
    tied = [key for v, key in zip(vals, keys) if v >> sh == u]
    return below + (resolve(tied, u, nbits, src) if tied else 0)


def _prefixes(rows, spare: int) -> list[tuple[int, int]]:
    """(first bits, their number) of each uniform: the spare word extends the first one
    whose high word equals a threshold's (``rows``: (high word, threshold values))."""
    out, used = [], False
    for w, vals in rows:
        if not used and any(v >> 64 == w for v in vals):
            out.append(((w << 64) | spare, TBITS))
            used = True
        else:
            out.append((w, 64))
    return out


def _laplace_exact(tab: LaplaceTable, wh: list, spare: int, src: RandomSource) -> int:
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
        while bernoulli(tail_key, src):  # memoryless: the tail is 1 + the same geometric
            h += 1
        y += h << (8 * D)
    if sgn and y >= _INT64_MAX:  # probability below exp(-2**14)
        raise OverflowError("discrete Laplace sample does not fit in int64")
    return sgn * (y + 1)


@dataclass(frozen=True, eq=False)
class _Part:
    """Parameters whose proposals share one layout of Laplace tables (``digits``) and whose
    acceptance tests share one layout (``positions``, ``high``): one stack of each, the
    table of each parameter in them (``lap_j``, ``acc_j``; None when a stack holds one
    table) and its integer coefficients ``coef`` (int64 arrays A, B, C, y_safe)."""

    lap: object
    acc: object
    lap_j: np.ndarray | None
    acc_j: np.ndarray | None
    coef: tuple


def _parts(params: tuple, alone=()) -> tuple[tuple, np.ndarray, np.ndarray]:
    """The :class:`_Part` s of ``params`` (in order of first use), and each parameter's part
    and position in it; a parameter whose position is in ``alone`` gets a part of its own
    (single tables: no per-draw table offsets)."""
    groups: dict = {}
    for i, p in enumerate(params):
        lap, acc = laplace_table(p.lap_t, p.lap_s), gauss_table(p.S)
        key = ("alone", i) if i in alone else (lap.digits, acc.positions, acc.high)
        groups.setdefault(key, []).append((i, lap, acc))
    parts, part_of, local = [], np.empty(len(params), np.int64), np.empty(len(params), np.int64)
    for g, members in enumerate(groups.values()):
        lap, lap_j = _stacked([m[1] for m in members])
        acc, acc_j = _stacked([m[2] for m in members])
        coef = tuple(
            np.array([getattr(params[m[0]], f) for m in members], dtype=np.int64)
            for f in ("A", "B", "C", "y_safe")
        )
        parts.append(_Part(lap, acc, lap_j, acc_j, coef))
        for k, m in enumerate(members):
            part_of[m[0]], local[m[0]] = g, k
    return tuple(parts), part_of, local


def _stacked(tabs: list) -> tuple:
    """One stack of the distinct ``tabs`` (tables hash by identity) and each entry's table in
    it (None when there is one table)."""
    at = {t: k for k, t in enumerate(dict.fromkeys(tabs))}
    return stack(at), None if len(at) == 1 else np.array([at[t] for t in tabs], np.int64)


def _gauss_accept(ay: np.ndarray, p: GaussParams, src: RandomSource) -> np.ndarray:
    """Accept each |y| with probability exp(-γ(y)) of ``p`` (CKS Alg. 3, line C)."""
    return _accept(_parts((p,))[0][0], ay, None, src)


def _accept(part: _Part, ay: np.ndarray, w, src: RandomSource) -> np.ndarray:
    """Accept |y| with probability exp(-(A y² - B|y| + C)/S) of the part's parameters ``w``
    (None: its only one) (CKS Alg. 3, line C), with the same work for every |y|. A proposal
    too large for int64 arithmetic (|y| > y_safe) takes a fresh exact draw instead of its
    fixed-path words."""
    A, B, C, ys = (v[0] for v in part.coef) if w is None else (v[w] for v in part.coef)
    unsafe = np.flatnonzero(ay > ys).tolist()
    d = np.minimum(ay, ys)
    num = (d * A - B) * d + C  # fits: |y| <= y_safe
    exact = {}  # exact Python-int numerators of the proposals beyond y_safe
    for i in unsafe:
        a, b, c = (int(v if w is None else v[i]) for v in (A, B, C))
        exact[i] = (a * int(ay[i]) - b) * int(ay[i]) + c
    j = None if part.acc_j is None or w is None else part.acc_j[w]
    return _exp_accept(num, part.acc, src, j=j, huge=exact)


def _exp_accept(num: np.ndarray, tabs, src: RandomSource, *, j=None, huge=None) -> np.ndarray:
    """Bernoulli(exp(-num/S)) for each int64 ``num``, fixed work (see GaussTable): one
    high word per factor and a shared spare word, as in _dlaplace_block. ``tabs``: an
    acceptance table, or a stack of tables of one layout with ``j`` the table (hence S) of
    each numerator. ``huge`` maps positions to exact Python-int numerators that did not
    fit; those draw afresh."""
    tab0 = tabs.tabs[0]
    m, L = num.size, tab0.positions
    k = L + tab0.high
    w = src.words64((k + 1) * m).reshape(k + 1, m)
    wh, spare = w[:k], w[k]
    shifts = _steps(L)[1]
    c = (num >> shifts) & 255
    idx = c + _bases(tabs, j, L)
    th, tl, u = tabs.th.take(idx), tabs.tl.take(idx), wh[:L]
    live = c != 0  # c = 0: probability 1
    eq = (th == u) & live
    # a live factor rejects iff its threshold <= U
    ok = ~(((th < u) & live) | (eq & (tl <= spare))).any(axis=0)
    tie = (eq & (tl == spare)).any(axis=0)
    n_hi = eq.sum(axis=0)
    if tab0.high:
        hl = (num >> (8 * L)) != 0
        ok &= ~hl
        n_hi += hl & (wh[L] == 0)
        tie |= hl & (wh[L] == 0) & (spare == 0)
    rare = tie | (n_hi > 1)
    huge = huge or {}
    rare[list(huge)] = True
    if rare.any():  # probability below 2**-100 per proposal
        for i in np.flatnonzero(rare).tolist():
            tab = tabs.tabs[0 if j is None else int(j[i])]
            if i in huge:  # the fixed-path words never looked at: a fresh exact draw
                ok[i] = bernoulli(("exp", huge[i], tab.S), src)
            else:
                ok[i] = _exp_accept_exact(int(num[i]), tab, wh[:, i].tolist(), int(spare[i]), src)
    return ok


def _exp_accept_exact(num: int, tab: GaussTable, wh: list, spare: int, src: RandomSource) -> bool:
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
    """n samples of CKS Alg. 3 at ``p``."""
    return _dgauss(_parts((p,))[0][0], None, n, src)


def dgauss_mixed(params: tuple, which: np.ndarray, src: RandomSource) -> np.ndarray:
    """Sample i of CKS Alg. 3 at ``params[which[i]]``: the parameters sharing table layouts
    in one set of rejection rounds (their tables stacked), so many σ cost about what one
    does. Which draw takes which words depends on ``which`` only (public), never on a
    value drawn."""
    which = np.asarray(which, dtype=np.int64)
    counts = np.bincount(which, minlength=len(params))
    parts, part_of, local = _parts(tuple(params), set(np.flatnonzero(counts >= _ALONE).tolist()))

    def run(part, sub):  # the draws of one part, ``sub`` their parameters (one σ: scalars)
        return _dgauss(part, None if part.coef[0].size == 1 else local[sub], sub.size, src)

    if len(parts) == 1:
        return run(parts[0], which)
    key = part_of.astype(np.uint8 if len(parts) <= 256 else np.int64)[which]
    order = np.argsort(key, kind="stable")  # each part's draws together, in sample order
    # (a stable sort of 8-bit keys is a radix sort)
    ends = np.cumsum(np.bincount(key, minlength=len(parts)))
    out = np.empty(which.size, dtype=np.int64)
    for g, part in enumerate(parts):
        idx = order[(ends[g - 1] if g else 0) : ends[g]]
        out[idx] = run(part, which[idx])
    return out


def _dgauss(part: _Part, which, n: int, src: RandomSource) -> np.ndarray:
    """In blocks of ``_GAUSS_BLOCK`` so the working arrays of the rejection rounds stay a few
    MiB whatever n (only the int64 output grows with n)."""
    return _in_blocks(lambda m, w: _dgauss_block(part, w, m, src), n, _GAUSS_BLOCK, which)


def _dgauss_block(part: _Part, which, n: int, src: RandomSource) -> np.ndarray:
    """CKS Alg. 3: discrete Laplace proposals accepted with probability exp(-γ(y)).
    Each round costs the same for every proposal, and the number of rounds is independent
    of the accepted values, so the running time does not depend on the output."""
    out = np.empty(n, dtype=np.int64)
    todo = None
    m = n
    while m:
        w = which if todo is None or which is None else which[todo]
        j = None if part.lap_j is None or w is None else part.lap_j[w]
        y = _dlaplace(part.lap, m, src, j=j)
        ok = _accept(part, np.abs(y), w, src)
        if todo is None:
            out[:] = y  # rejected entries are overwritten below
            todo = np.flatnonzero(~ok)
        else:
            out[todo[ok]] = y[ok]
            todo = todo[~ok]
        m = todo.size
    return out
