"""Exact output distributions of the selection mechanisms on small inputs (test helper).

For pure eps-DP it suffices to compare, for every output o and both orders,
P[M(D) = o] and P[M(D') = o] on neighbouring D, D'.  The SVT family draws all
its noise from the discrete Laplace distribution on the run's grid g*Z
(:mod:`matmech.svt.grid`; Canonne, Kamath, Steinke 2020, Alg. 2), so every
output probability is a sum over the integer threshold noise rho (in grid
units) of products of discrete-Laplace tail probabilities.  With
nu ~ DLap(t), a = e^{-1/t}, P[nu = k] = tanh(1/(2t)) a^|k| and

    P[nu >= m] = a^m / (1 + a)              (m >= 1)
               = 1 - a^(1-m) / (1 + a)      (m <= 0),

so on each interval of rho between the break points (rho = 1 - d_i for a query
with q_i - T_i = -d_i units, and rho = 0 for the pmf of rho itself) the integrand
is a Laurent polynomial in x = a^rho times e^{-|rho|/t1}: a finite sum of
exponentials, summed over the interval in closed form (geometric series, also
over the two infinite tails).  Nothing is truncated; the only error is
float64 rounding.  Each factor is c0 + c1 x^{+-1} with |c1 x^{+-1}| <= 1/(1+a) < 1
on its interval, so expanding a product of k factors loses at most a factor
3^k to cancellation: relative error below 1e-11 for the k <= 12 factors used
here, far below the 1e-9 tolerance of the audit.

Models ([LSL17] = Lyu, Su, Li, VLDB 2017, in ``shared/references``):

* :func:`alg7_pmf` - Alg. 7 (``sparse_vector``, ``above_threshold``, the
  interactive ``SparseVector``): one rho, stop after the c-th top.
  Numeric answers (eps3) are exact too: see :func:`answer_loss`.
* :func:`alg2_pmf` - Alg. 2 (``sparse_vector_dpbook``): rho re-drawn after each top.
* :func:`retraversal_pmf` - Sec. 5 SVT-ReTr (``sparse_vector_retraversal``).
* :func:`em_pmf` - permute-and-flip c times without replacement (``exponential_top_c``:
  report noisy max with exponential noise; :func:`pf_round` per round, closed form).
* :func:`variant_pmf` - the paper's non-private Alg. 3, 4, 5, 6 (Fig. 2) on a grid.

Every model takes its scales from a budget produced by the SHIPPED code
(:meth:`Scales.of`), so a calibration bug changes the model; ``factor=0.5``
gives the "noise halved" mutant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations, product
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

__all__ = [
    "Scales",
    "Factor",
    "above",
    "below",
    "rho_at_most",
    "integrate",
    "dlap_pmf",
    "dlap_tail",
    "units",
    "alg7_pmf",
    "alg2_pmf",
    "retraversal_pmf",
    "em_pmf",
    "pf_round",
    "variant_pmf",
    "answer_loss",
    "privacy_loss",
    "Loss",
    "audit_pairs",
    "statdp_pairs",
    "exhaustive_pairs",
    "monotonic_pairs",
    "integrate_mixed",
    "gap_svt_pmf",
    "topc_gap_pmf",
    "gap_cases",
    "vector_top_c_pmf",
    "vector_threshold_pmf",
    "l1_pairs",
    "vector_cases",
]

INF = math.inf


# --------------------------------------------------------------------------
# Discrete Laplace in grid units
# --------------------------------------------------------------------------
def dlap_pmf(k: int, t: float) -> float:
    """P[nu = k] for nu ~ DLap(t): tanh(1/(2t)) e^{-|k|/t} (CKS 2020, Def. 28)."""
    return math.tanh(0.5 / t) * math.exp(-abs(k) / t)


def dlap_tail(m: int, t: Optional[float]) -> float:
    """P[nu >= m] (closed form above; t None means nu = 0)."""
    if t is None:
        return 1.0 if m <= 0 else 0.0
    a = math.exp(-1.0 / t)
    return math.exp(-m / t) / (1 + a) if m >= 1 else 1.0 - math.exp(-(1 - m) / t) / (1 + a)


@dataclass(frozen=True)
class Scales:
    """Noise scales of one run in grid units (t = scale / grid), as the sampler uses them."""

    threshold: float
    query: Optional[float]
    answer: Optional[float] = None
    grid: float = 1.0

    @classmethod
    def of(cls, budget, factor: float = 1.0) -> "Scales":
        """From a shipped :class:`matmech.svt.SVTCalibration`; ``factor`` multiplies every scale."""
        g = budget.grid
        return cls(
            threshold=budget.threshold_scale / g * factor,
            query=budget.query_scale / g * factor,
            answer=None if budget.answer_scale is None else budget.answer_scale / g * factor,
            grid=g,
        )


def units(values, g: float) -> list[int]:
    """Values in whole grid units; refuses values off the grid (the models do not snap)."""
    out = []
    for v in np.atleast_1d(np.asarray(values)).tolist():
        u = Fraction(v) / Fraction(g)
        if u.denominator != 1:
            raise ValueError(f"value {v!r} is not on the grid {g!r}")
        out.append(int(u))
    return out


# --------------------------------------------------------------------------
# Factors of rho and their exact sum
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Factor:
    """A function of the integer rho: ``lo`` for rho < b, ``hi`` for rho >= b.

    Each piece is (c0, c1, p): c0 + c1 * x**p with x = e^{-rho/t2}, p in {-1, 0, 1}.
    """

    b: int
    lo: tuple
    hi: tuple


def above(d: int, t2: Optional[float]) -> Factor:
    """P[q + nu >= T + rho | rho] = P[nu >= d + rho], d = T - q in units ([LSL17] Alg. 7 line 6)."""
    if t2 is None:  # no query noise (Alg. 5): 1[rho <= -d]
        return Factor(1 - d, (1.0, 0.0, 0), (0.0, 0.0, 0))
    a = math.exp(-1.0 / t2)
    return Factor(
        1 - d, (1.0, -math.exp(-(1 - d) / t2) / (1 + a), -1), (0.0, math.exp(-d / t2) / (1 + a), 1)
    )


def below(d: int, t2: Optional[float]) -> Factor:
    """1 - :func:`above`."""
    f = above(d, t2)
    return Factor(f.b, (1.0 - f.lo[0], -f.lo[1], f.lo[2]), (1.0 - f.hi[0], -f.hi[1], f.hi[2]))


def rho_at_most(k: int) -> Factor:
    """The indicator 1[rho <= k]."""
    return Factor(k + 1, (1.0, 0.0, 0), (0.0, 0.0, 0))


def _geom(lam: float, lo: float, hi: float) -> float:
    """sum_{k=lo}^{hi} e^{lam k} over integers (lo may be -inf, hi +inf), exactly in closed form."""
    if lo == -INF and hi == INF:
        raise ValueError("doubly infinite geometric sum")
    if lo == -INF:
        if lam <= 0:
            raise ValueError("divergent tail (model error)")
        return math.exp(lam * hi) / -math.expm1(-lam)
    if hi == INF:
        if lam >= 0:
            raise ValueError("divergent tail (model error)")
        return math.exp(lam * lo) / -math.expm1(lam)
    if hi < lo:
        return 0.0
    if lam == 0.0:
        return hi - lo + 1.0
    return math.exp(lam * lo) * math.expm1(lam * (hi - lo + 1)) / math.expm1(lam)


def integrate(factors: Sequence[Factor], t1: float, t2: Optional[float]) -> float:
    """sum over rho in Z of P[rho] * prod(factors)(rho), rho ~ DLap(t1), exactly (no truncation).

    The break points cut Z into intervals on which the product is a Laurent
    polynomial in x = e^{-rho/t2}; each monomial times e^{-|rho|/t1} is a
    geometric series summed in closed form (:func:`_geom`).
    """
    breaks = sorted({f.b for f in factors} | {0})
    segments = [(-INF, breaks[0] - 1)] + [
        (breaks[i], breaks[i + 1] - 1) for i in range(len(breaks) - 1)
    ]
    segments.append((breaks[-1], INF))
    inv2 = 0.0 if t2 is None else 1.0 / t2
    total = 0.0
    for lo, hi in segments:
        r = hi if lo == -INF else lo
        poly = {0: 1.0}
        for f in factors:
            c0, c1, p = f.hi if r >= f.b else f.lo
            new: dict[int, float] = {}
            for j, cj in poly.items():
                if c0:
                    new[j] = new.get(j, 0.0) + cj * c0
                if c1:
                    new[j + p] = new.get(j + p, 0.0) + cj * c1
            poly = new
            if not poly:
                break
        s = -1.0 / t1 if r >= 0 else 1.0 / t1  # P[rho] ∝ e^{-|rho|/t1}
        for j, cj in poly.items():
            if cj:
                total += cj * _geom(s - j * inv2, lo, hi)
    return math.tanh(0.5 / t1) * total


# --------------------------------------------------------------------------
# Mechanism models: output -> probability
# --------------------------------------------------------------------------
def _alg7_outputs(n: int, c: Optional[int]):
    """Outputs of a stop-after-c scan of n queries: (positions, number processed)."""
    cmax = n if c is None else min(c, n)
    for k in range(cmax + 1):
        for pos in combinations(range(n), k):
            if c is not None and k == c:
                yield pos, pos[-1] + 1
            else:
                yield pos, n


def alg7_pmf(d: Sequence[int], c: Optional[int], sc: Scales) -> dict:
    """[LSL17] Alg. 7 (and Alg. 1, 4, 6 by their scales; c None = no cutoff): positions -> P.

    ``d[i]`` = T_i - q_i in grid units.  One rho ~ DLap(sc.threshold) for the
    run; query i is top when nu_i >= d_i + rho, nu_i ~ DLap(sc.query).
    """
    out = {}
    for pos, m in _alg7_outputs(len(d), c):
        hit = set(pos)
        fs = [above(d[i], sc.query) if i in hit else below(d[i], sc.query) for i in range(m)]
        out[pos] = integrate(fs, sc.threshold, sc.query)
    return out


def alg2_pmf(d: Sequence[int], c: int, sc: Scales) -> dict:
    """[LSL17] Alg. 2 (Dwork-Roth "Sparse"; ``sparse_vector_dpbook``): positions -> P.

    rho is re-drawn (same scale) after every top, so the probability is a
    product over the c segments of independent one-threshold sums.
    """
    out = {}
    for pos, m in _alg7_outputs(len(d), c):
        p, start = 1.0, 0
        for j in pos:
            fs = [below(d[i], sc.query) for i in range(start, j)] + [above(d[j], sc.query)]
            p *= integrate(fs, sc.threshold, sc.query)
            start = j + 1
        if m > start:
            p *= integrate([below(d[i], sc.query) for i in range(start, m)], sc.threshold, sc.query)
        out[pos] = p
    return out


def _pass_outcomes(remaining: Sequence[int], need: int):
    """The outcomes of one pass over ``remaining`` needing ``need`` tops: (tops, processed)."""
    for k in range(min(need, len(remaining)) + 1):
        for sel in combinations(range(len(remaining)), k):
            m = sel[-1] + 1 if k == need else len(remaining)
            yield [remaining[i] for i in sel], list(remaining[:m])


def retraversal_pmf(d: Sequence[int], c: int, sc: Scales, max_passes: int) -> dict:
    """[LSL17] Sec. 5 "SVT-ReTr" (``sparse_vector_retraversal``): selection order -> P.

    ``d`` already includes the threshold boost.  One rho for all passes; each
    pass goes over the unselected candidates in index order with fresh query
    noise and stops at the c-th top; passes repeat until c tops, no candidate
    left, or ``max_passes``.  Different pass histories giving the same
    selection order are added.
    """
    n = len(d)
    out: dict = {}

    def walk(remaining, hits, passes, fs):
        if len(hits) == c or not remaining or passes == max_passes:
            key = tuple(hits)
            out[key] = out.get(key, 0.0) + integrate(fs, sc.threshold, sc.query)
            return
        for tops, processed in _pass_outcomes(remaining, c - len(hits)):
            top = set(tops)
            more = [above(d[i], sc.query) if i in top else below(d[i], sc.query) for i in processed]
            walk([i for i in remaining if i not in top], hits + tops, passes + 1, fs + more)

    walk(list(range(n)), [], 0, [])
    return out


def pf_round(q: Sequence[float], left: Sequence[int], i: int, rate: float) -> float:
    """P[report noisy max picks i among ``left``], noise Exp(rate) on every score ``q`` (the
    permute-and-flip round of ``exponential_top_c``; ties have probability 0).

    P = int_0^inf rate e^{-rate x} prod_{j != i} P[q_j + E_j <= q_i + x] dx; with
    y = e^{-rate x} every factor is 1 - e^{rate (q_j - q_i)} y on y <= y0 = e^{-rate d},
    d = max(0, max_j q_j - q_i), so P = y0 int_0^1 prod_j (1 - a_j s) ds with
    a_j = e^{rate (q_j - q_i)} y0 in (0, 1]: a polynomial integral, exact up to rounding.
    """
    others = [j for j in left if j != i]
    if not others:
        return 1.0
    diffs = np.array([q[j] - q[i] for j in others], dtype=np.float64)
    d = max(0.0, float(diffs.max()))
    y0 = math.exp(-rate * d)
    poly = np.array([1.0])
    for a in np.exp(rate * (diffs - d)):
        poly = np.convolve(poly, [1.0, -a])
    return y0 * float(np.sum(poly / np.arange(1, poly.size + 1)))


def em_pmf(values: Sequence[float], c: int, rate: float) -> dict:
    """``exponential_top_c``: c rounds of permute-and-flip (report noisy max with exponential
    noise of rate ``rate`` per value unit, McKenna and Sheldon 2020; Ding et al. 2021) without
    replacement. On grid scores the shipped geometric noise with uniform tie-breaking has
    exactly this law (:mod:`matmech.svt.topc`): P[i_1..i_c] = prod_r pf_round."""
    q = [float(v) for v in values]
    out = {}
    for seq in _permutations(len(q), c):
        p, left = 1.0, list(range(len(q)))
        for i in seq:
            p *= pf_round(q, left, i, rate)
            left.remove(i)
        out[seq] = p
    return out


def _permutations(n: int, c: int):
    from itertools import permutations

    return permutations(range(n), c)


def variant_pmf(
    v,
    q_units: Sequence[int],
    t_units: int,
    c: int,
    eps: float,
    grid: float,
    answers: Sequence[int] = (),
) -> dict:
    """A [LSL17] Fig. 1-2 variant ``v`` (:class:`svt_fixtures.Variant`) on the grid ``grid``, D = 1.

    Scales come from the variant's row of the paper's table; no cutoff when
    ``v.cutoff`` is False.  Alg. 3 (``v.releases``): a top releases
    q_i + nu_i; its outputs are (positions, released numbers in units), the
    numbers ranging over ``answers`` - point masses of the exact joint pmf
    (so these do not sum to 1).
    """
    one = 1.0 / grid  # D in units
    t1 = v.threshold_scale(eps, c) * one
    t2 = None if v.query_scale is None else v.query_scale(eps, c) * one
    d = [t_units - x for x in q_units]
    cut = c if v.cutoff else None
    if not v.releases:
        return alg7_pmf(d, cut, Scales(t1, t2, grid=grid))
    out = {}
    for pos, m in _alg7_outputs(len(d), cut):
        for ans in product(answers, repeat=len(pos)):
            fs = [below(d[i], t2) for i in range(m) if i not in pos]
            w = 1.0
            for i, a in zip(pos, ans):
                # nu_i = a - q_i exactly, and a >= T + rho  <=>  rho <= a - T.
                w *= dlap_pmf(a - q_units[i], t2)
                fs.append(rho_at_most(a - t_units))
            out[(pos, ans)] = w * integrate(fs, t1, t2)
    return out


# --------------------------------------------------------------------------
# Privacy loss
# --------------------------------------------------------------------------
def answer_loss(
    pos: Sequence[int], q: Sequence[int], q2: Sequence[int], t3: Optional[float]
) -> float:
    """sup over released answers of their log-likelihood ratio ([LSL17] Alg. 7 line 8).

    Given the positions, the answers a_j = q_j + DLap(t3) are independent of
    everything else, and sup_a log P[a - q]/P[a - q'] = |q - q'|/t3, attained
    (for either sign) by any a beyond both q and q'.  So the joint loss of
    (positions, answers) is the positions' loss plus this, exactly.
    """
    if t3 is None:
        return 0.0
    return sum(abs(q[i] - q2[i]) for i in pos) / t3


@dataclass(frozen=True)
class Loss:
    """The largest |log P[M(D)=o] - log P[M(D')=o]| over outputs o and the pairs audited."""

    value: float
    pair: object
    output: object
    total_mass: tuple  # (sum P[M(D)=o], sum P[M(D')=o]) at the worst pair

    def __str__(self) -> str:
        return f"loss {self.value:.6f} at pair {self.pair} output {self.output}"


def privacy_loss(p: Mapping, p2: Mapping, extra=None) -> tuple[float, object]:
    """max over outputs of |log p(o) - log p2(o)| (+ extra(o)), inf where exactly one is 0."""
    worst, arg = -INF, None
    for o in set(p) | set(p2):
        a, b = p.get(o, 0.0), p2.get(o, 0.0)
        if a == 0.0 and b == 0.0:
            continue
        loss = INF if a == 0.0 or b == 0.0 else abs(math.log(a) - math.log(b))
        if extra is not None:
            loss += extra(o)
        if loss > worst:
            worst, arg = loss, o
    return worst, arg


def audit_pairs(pmf, pairs: Iterable, extra=None) -> Loss:
    """Max privacy loss of ``pmf(data) -> {output: P}`` over neighbouring ``pairs`` (both orders).

    Inputs are hashable keys (they are cached); ``extra(output, d, d2)``
    adds an exact loss term (e.g. :func:`answer_loss`).
    """
    cache: dict = {}

    def get(key):
        if key not in cache:
            cache[key] = pmf(key)
        return cache[key]

    best = Loss(-INF, None, None, (0.0, 0.0))
    for d, d2 in pairs:
        p, p2 = get(d), get(d2)
        ex = None if extra is None else (lambda o, d=d, d2=d2: extra(o, d, d2))
        loss, o = privacy_loss(p, p2, ex)
        if loss > best.value:
            best = Loss(loss, (d, d2), o, (sum(p.values()), sum(p2.values())))
    return best


# --------------------------------------------------------------------------
# Neighbouring pairs (sensitivity 1)
# --------------------------------------------------------------------------
def statdp_pairs(n: int = 5) -> list:
    """The database pairs of StatDP (Ding, Wang, Wang, Zhang, Kifer, CCS 2018, Sec. 5):
    one above, one below, one above rest below, one below rest above, half-half,
    all above, all below, X shape; and [LSL17]'s 0^{n-1}1 vs 1^{n-1}0."""
    one = [1] * n
    h = n // 2
    return [
        (one, [2] + [1] * (n - 1)),
        (one, [0] + [1] * (n - 1)),
        (one, [2] + [0] * (n - 1)),
        (one, [0] + [2] * (n - 1)),
        (one, [2] * h + [0] * (n - h)),
        (one, [2] * n),
        (one, [0] * n),
        ([1] * h + [0] * (n - h), [0] * h + [1] * (n - h)),
        ([0] * (n - 1) + [1], [1] * (n - 1) + [0]),
    ]


def exhaustive_pairs(n: int) -> list:
    """(0^n, delta) for every delta in {-1, 0, 1}^n but 0: every pair around 0^n."""
    zero = [0] * n
    return [(zero, list(dl)) for dl in product((-1, 0, 1), repeat=n) if any(dl)]


def monotonic_pairs(n: int, base: Optional[Sequence[int]] = None) -> list:
    """(q, q + delta) for every delta in {0, 1}^n but 0 (both orders give the downward moves)."""
    q = [0] * n if base is None else list(base)
    return [(q, [x + y for x, y in zip(q, dl)]) for dl in product((0, 1), repeat=n) if any(dl)]


# --------------------------------------------------------------------------
# Audits of the shipped mechanisms
# --------------------------------------------------------------------------
# Thresholds (in units of D) at which the pairs are audited: the loss of
# Alg. 7 grows as T moves into the lower tail of the noisy answers.
THRESHOLDS = (-4, -2, 0, 1, 2, 4)


@dataclass(frozen=True)
class Model:
    """Exact model of one mechanism configuration, with its neighbouring pairs.

    ``pmf(key)`` maps an input key (threshold, values) to {output: P};
    ``pairs`` are (key, key') neighbours; ``extra(o, key, key')`` adds exact
    loss of released numbers.  ``sample(key, rng)`` runs the SHIPPED
    mechanism once and returns the output in the same format as
    ``sample_pmf`` (which defaults to ``pmf``; it also bins released answers).
    """

    eps: float
    pmf: object
    pairs: list
    sample: object
    extra: object = None
    sample_pmf: object = None


@dataclass(frozen=True)
class Case:
    """A shipped mechanism configuration: ``build(factor)`` gives its model with every
    noise scale multiplied by ``factor`` (1 = as shipped, 0.5 = the mutant)."""

    name: str
    build: object
    sample_key: object = None  # an input on which the sampling check runs


def keyed(pairs, thresholds=THRESHOLDS) -> list:
    """Pairs of value lists -> pairs of (T, values) keys at every threshold."""
    return [((t, tuple(a)), (t, tuple(b))) for t in thresholds for a, b in pairs]


def _first_run(fn):
    """Run a shipped mechanism once (seeded) to read the calibration it actually used."""
    return fn(np.random.default_rng(0))


def svt_case(
    name, *, c, eps=1.0, monotonic=False, ratio="optimal", eps_answer=0.0, dtype=np.int64, shift=0.0
) -> Case:
    """``sparse_vector`` ([LSL17] Alg. 7), scales from its returned budget."""
    from matmech import svt

    def run(key, rng):
        t, q = key
        return svt.sparse_vector(
            np.asarray(q, dtype=dtype) + shift,
            t + shift,
            c=c,
            eps=eps,
            monotonic=monotonic,
            ratio=ratio,
            eps_answer=eps_answer,
            rng=rng,
        )

    def build(factor):
        budget = _first_run(lambda r: run((0, (0, 0)), r)).budget
        return _alg7_model(budget, factor, eps, c, monotonic, run)

    return Case(name, build, (0, (-3, -1, 1, 2)))


def above_threshold_case(name, *, eps=1.0, monotonic=False) -> Case:
    """``above_threshold`` ([DR14] Alg. 1 = [LSL17] Alg. 7 with c = 1, eps1 = eps2)."""
    from matmech import svt

    def run(key, rng):
        t, q = key
        return svt.above_threshold(
            np.asarray(q, dtype=np.int64), t, eps=eps, monotonic=monotonic, rng=rng
        )

    def build(factor):
        budget = _first_run(lambda r: run((0, (0, 0)), r)).budget
        return _alg7_model(budget, factor, eps, 1, monotonic, run)

    return Case(name, build, (0, (-3, -1, 1, 2)))


def interactive_case(name, *, c, eps=1.0, monotonic=False, eps_answer=0.0) -> Case:
    """The interactive ``SparseVector`` ([LSL17] Alg. 7, one ``test`` per query)."""
    from matmech import svt

    def run(key, rng):
        t, q = key
        sv = svt.SparseVector(
            float(t), c=c, eps=eps, monotonic=monotonic, eps_answer=eps_answer, rng=rng
        )
        for v in q:
            if sv.exhausted:
                break
            sv.test(float(v))
        return sv.result()

    def build(factor):
        budget = _first_run(
            lambda r: svt.SparseVector(
                0.0, c=c, eps=eps, monotonic=monotonic, eps_answer=eps_answer, rng=r
            )
        ).budget
        return _alg7_model(budget, factor, eps, c, monotonic, run)

    return Case(name, build, (0, (-3, 1, -1, 2)))


def lyu_blocks(c: int, k: int = 3, monotonic: bool = False) -> tuple:
    """[LSL17] Thm. 4.7 tightness: 0^n vs c blocks of (k bottoms moved up, one top moved down).

    The output "bottom^k top" per block pays the threshold shift once per
    threshold noise and 2D on each top (D if monotonic: the top stays put).
    """
    block = [1] * k + [0 if monotonic else -1]
    return [0] * (c * (k + 1)), block * c


def _svt_pairs(monotonic: bool, c: int = 1) -> list:
    blocks = [lyu_blocks(c, 3, monotonic)] if c > 1 else []
    if monotonic:
        return keyed(
            monotonic_pairs(4)
            + [(a, b) for a, b in statdp_pairs(5) if all(y - x in (0, 1) for x, y in zip(a, b))]
        ) + keyed(blocks, thresholds=(-4, 0))
    return keyed(exhaustive_pairs(4) + statdp_pairs(5)) + keyed(blocks, thresholds=(-4, 0))


def _alg7_model(budget, factor, eps, c, monotonic, run) -> Model:
    sc = Scales.of(budget, factor)
    g = budget.grid

    def pmf(key):
        t, q = key
        tu = units([t], g)[0]
        return alg7_pmf([tu - x for x in units(q, g)], c, sc)

    extra = sample_pmf = None
    sample = lambda key, rng: run(key, rng).positions  # noqa: E731
    if sc.answer is not None:

        def extra(o, k, k2):
            return answer_loss(o, units(k[1], g), units(k2[1], g), sc.answer)

        def sample_pmf(key):
            """(positions, bins of answer - q): exact, the answers are DLap(t3) around q."""
            cuts = _answer_cuts(sc.answer)
            out = {}
            for pos, p in pmf(key).items():
                for bins in product(range(len(cuts) + 1), repeat=len(pos)):
                    w = p
                    for b in bins:
                        w *= _bin_mass(b, cuts, sc.answer)
                    out[(pos, bins)] = w
            return out

        def sample(key, rng):
            res = run(key, rng)
            qs = units(key[1], g)
            cuts = _answer_cuts(sc.answer)
            bins = tuple(
                int(np.searchsorted(cuts, units([a], g)[0] - qs[i], side="right"))
                for i, a in zip(res.positions, res.answers)
            )
            return (res.positions, bins)

    return Model(eps, pmf, _svt_pairs(monotonic, c), sample, extra, sample_pmf)


def _answer_cuts(t3: float) -> list:
    """Bin edges (units) for answer - q: (-inf, -t3), [-t3, 0), [0, t3), [t3, inf)."""
    k = int(round(t3))
    return [-k, 0, k]


def _bin_mass(b: int, cuts: list, t3: float) -> float:
    lo = -INF if b == 0 else cuts[b - 1]
    hi = INF if b == len(cuts) else cuts[b]
    p_lo = 1.0 if lo == -INF else dlap_tail(lo, t3)
    p_hi = 0.0 if hi == INF else dlap_tail(hi, t3)
    return p_lo - p_hi


def dpbook_case(name, *, c, eps=1.0) -> Case:
    """``sparse_vector_dpbook`` ([LSL17] Alg. 2)."""
    from matmech import svt

    def run(key, rng):
        t, q = key
        return svt.sparse_vector_dpbook(np.asarray(q, dtype=np.int64), t, c=c, eps=eps, rng=rng)

    def build(factor):
        budget = _first_run(lambda r: run((0, (0, 0)), r)).budget
        sc = Scales.of(budget, factor)
        g = budget.grid

        def pmf(key):
            tu = units([key[0]], g)[0]
            return alg2_pmf([tu - x for x in units(key[1], g)], c, sc)

        return Model(eps, pmf, _svt_pairs(False, c), lambda key, rng: run(key, rng).positions)

    return Case(name, build, (0, (-3, 1, -1, 2)))


def retraversal_case(name, *, c, eps=1.0, boost=0.5, monotonic=False, max_passes=3) -> Case:
    """``sparse_vector_retraversal`` ([LSL17] Sec. 5, SVT-ReTr) with a few passes."""
    from matmech import svt

    def run(key, rng):
        t, q = key
        return svt.sparse_vector_retraversal(
            np.asarray(q, dtype=np.int64),
            t,
            c=c,
            eps=eps,
            boost=boost,
            monotonic=monotonic,
            max_passes=max_passes,
            rng=rng,
        )

    def build(factor):
        budget = _first_run(lambda r: run((0, (0, 0)), r)).budget
        sc = Scales.of(budget, factor)
        g = budget.grid
        # The boost is a public threshold shift of boost std devs of the (shipped) query noise.
        boost_units = int(round(boost * math.sqrt(2.0) * budget.query_scale / g))

        def pmf(key):
            tu = units([key[0]], g)[0] + boost_units
            return retraversal_pmf([tu - x for x in units(key[1], g)], c, sc, max_passes)

        pairs = keyed(monotonic_pairs(3) if monotonic else exhaustive_pairs(3))
        return Model(eps, pmf, pairs, lambda key, rng: run(key, rng).positions)

    return Case(name, build, (0, (-3, 0, 2)))


def em_case(name, *, c, eps=1.0, monotonic=False, n=4) -> Case:
    """``exponential_top_c`` (permute-and-flip c times without replacement, [LSL17] Sec. 5)."""
    from matmech import svt

    def run(key, rng):
        return svt.exponential_top_c(
            np.asarray(key[1], dtype=np.int64), c, eps, monotonic=monotonic, rng=rng
        )

    def build(factor):
        # exponential noise times factor = its rate divided by factor
        scale = _first_run(lambda r: run((None, (0,) * n), r)).score_scale / factor
        base = monotonic_pairs(n) if monotonic else exhaustive_pairs(n)
        extra_pairs = [
            ([1] + [0] * (m - 1), [0] * m if monotonic else [0] + [1] * (m - 1)) for m in (n + 2,)
        ]
        pairs = keyed(base + extra_pairs, thresholds=(None,))
        return Model(
            eps,
            lambda key: em_pmf(key[1], c, scale),
            pairs,
            lambda key, rng: run(key, rng).positions,
        )

    return Case(name, build, (None, (1, 0, 0, 1)))


def _histogram_neighbours(base, neighbors):
    """(x, x') pairs around the histogram ``base``: one record added to each cell and, under
    substitution, that record taken from each other non-empty cell."""
    out = []
    for j in range(len(base)):
        up = list(base)
        up[j] += 1
        out.append((tuple(base), tuple(up)))
        if neighbors == "substitute":
            for k in range(len(base)):
                if k != j and base[k] > 0:
                    sw = list(up)
                    sw[k] -= 1
                    out.append((tuple(base), tuple(sw)))
    return out


def select_rows_case(name, *, method, c, eps=1.0, neighbors="add_remove") -> Case:
    """``matmech.svt.select.select_rows`` on a small 0/1 workload, x and x +- one record.

    A spy on the function it calls records the calibration actually used.
    """
    from matmech.run import select as selection

    W = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 1], [1, 1, 1]], dtype=np.float64)
    base = [1, 0, 2]

    def neighbours():
        return _histogram_neighbours(base, neighbors)

    def run(key, rng):
        t, x = key
        kw = {} if method == "em" else {"threshold": t}
        return selection.select_rows(
            W,
            np.asarray(x, dtype=np.int64),
            c=c,
            eps=eps,
            method=method,
            neighbors=neighbors,
            rng=rng,
            **kw,
        )

    def build(factor):
        import dataclasses

        from matmech.svt.methods import SELECTION_METHODS

        seen = {}
        entry = SELECTION_METHODS[method]  # the mechanism select_rows runs, from the registry

        def spy(opening):
            res = entry.mechanism.run(opening)
            seen["res"] = res
            return res

        SELECTION_METHODS[method] = dataclasses.replace(
            entry, mechanism=dataclasses.replace(entry.mechanism, run=spy)
        )
        try:
            sel = _first_run(lambda r: run((2, tuple(base)), r))
        finally:
            SELECTION_METHODS[method] = entry
        res = seen["res"]
        answers = lambda x: (W @ np.asarray(x, dtype=np.float64)).astype(np.int64).tolist()  # noqa: E731
        sample = lambda key, rng: tuple(int(i) for i in run(key, rng).rows)  # noqa: E731
        if method == "em":
            scale = res.score_scale / factor
            return Model(
                eps,
                lambda key: em_pmf(answers(key[1]), c, scale),
                keyed(neighbours(), thresholds=(None,)),
                sample,
            )
        budget = res.budget
        sc = Scales.of(budget, factor)
        g = budget.grid
        assert sel.sensitivity == budget.sensitivity

        def pmf(key):
            tu = units([key[0]], g)[0]
            return alg7_pmf([tu - x for x in units(answers(key[1]), g)], c, sc)

        return Model(eps, pmf, keyed(neighbours(), thresholds=(0, 1, 2, 3, 4)), sample)

    return Case(name, build, (2, tuple(base)) if method == "svt" else (None, tuple(base)))


def shipped_cases() -> list:
    """Every shipped selection mechanism configuration audited (the mutation table's rows)."""
    return [
        svt_case("sparse_vector c=1", c=1),
        svt_case("sparse_vector c=2", c=2),
        svt_case("sparse_vector c=3", c=3),
        svt_case("sparse_vector monotonic c=1", c=1, monotonic=True),
        svt_case("sparse_vector monotonic c=2", c=2, monotonic=True),
        svt_case("sparse_vector c=1 ratio=1", c=1, ratio=1.0),
        svt_case("sparse_vector float values c=2", c=2, dtype=np.float64, shift=0.25),
        svt_case("sparse_vector c=1 eps_answer=0.5", c=1, eps_answer=0.5),
        svt_case("sparse_vector c=2 eps_answer=0.3", c=2, eps_answer=0.3),
        above_threshold_case("above_threshold", eps=1.0),
        above_threshold_case("above_threshold monotonic", eps=1.0, monotonic=True),
        interactive_case("SparseVector c=1", c=1),
        interactive_case("SparseVector c=2", c=2),
        interactive_case("SparseVector c=1 eps_answer=0.5", c=1, eps_answer=0.5),
        dpbook_case("sparse_vector_dpbook c=1", c=1),
        dpbook_case("sparse_vector_dpbook c=2", c=2),
        retraversal_case("sparse_vector_retraversal c=1 boost=0.5", c=1),
        retraversal_case("sparse_vector_retraversal c=2 boost=0.5", c=2),
        retraversal_case("sparse_vector_retraversal c=2 boost=0", c=2, boost=0.0),
        retraversal_case("sparse_vector_retraversal monotonic c=2", c=2, monotonic=True),
        em_case("exponential_top_c c=1", c=1),
        em_case("exponential_top_c c=2", c=2),
        em_case("exponential_top_c monotonic c=1", c=1, monotonic=True),
        em_case("exponential_top_c monotonic c=2", c=2, monotonic=True),
        select_rows_case("select_rows svt c=2", method="svt", c=2),
        select_rows_case(
            "select_rows svt substitution c=1", method="svt", c=1, neighbors="substitute"
        ),
        select_rows_case("select_rows em c=2", method="em", c=2),
    ]


def audit_model(model: Model) -> Loss:
    """The exact privacy loss of a model over its pairs."""
    return audit_pairs(model.pmf, model.pairs, model.extra)


# --------------------------------------------------------------------------
# The paper's variants (fixtures)
# --------------------------------------------------------------------------
VARIANT_GRID = 2.0**-6


def variant_model(v, *, c: int = 1, eps: float = 1.0, factor: float = 1.0) -> Model:
    """Exact model of a [LSL17] variant with the counterexample pairs of its theorem.

    Alg. 3: Thm. 9.11, 0^m 1 vs 1^m 0 (m = 6) with the released number at T or T + 1.
    Alg. 5: Thm. 3.5, (0, 1) vs (1, 0).  Alg. 6: Thm. 9.13, 0^6 vs 1^3 (-1)^3.
    All: the pairs around 0^4 and StatDP's, as for the shipped SVTs.
    """
    g = VARIANT_GRID
    scaled = type(v)(
        v.alg,
        lambda e, cc: v.threshold_scale(e, cc) * factor,
        None if v.query_scale is None else (lambda e, cc: v.query_scale(e, cc) * factor),
        v.cutoff,
        v.releases,
        v.private,
    )
    answers = (0, int(1 / g)) if v.releases else ()

    def pmf(key):
        t, q = key
        return variant_pmf(scaled, units(q, g), units([t], g)[0], c, eps, g, answers)

    pairs = [([0] * 6 + [1], [1] * 6 + [0]), ([0, 1], [1, 0]), ([0] * 6, [1] * 3 + [-1] * 3)]
    if not v.releases:
        pairs += exhaustive_pairs(4) + statdp_pairs(5)
    return Model(eps, pmf, keyed(pairs, thresholds=(-2, 0, 2)), None)


# --------------------------------------------------------------------------
# The free-gap mechanisms (Ding, Wang, Zhang, Kifer, PVLDB 2019; matmech.svt.gap)
# --------------------------------------------------------------------------
# Outputs carry noisy gaps, so probabilities are point masses at chosen gap values
# (in grid units).  Factors may mix two noise scales t and 2t (adaptive SVT), so a
# piece is (c0, c1, k): c0 + c1 * e^{-k rho / B}, B the largest scale in units.
def _piece_tail(shift: int, t: float, m: int) -> Factor:
    """P[nu >= rho + shift], nu ~ DLap(t), t = B/m."""
    a = math.exp(-1.0 / t)
    return Factor(
        1 - shift,
        (1.0, -math.exp(-(1 - shift) / t) / (1 + a), -m),
        (0.0, math.exp(-shift / t) / (1 + a), m),
    )


def _piece_fail(shift: int, t: float, m: int) -> Factor:
    """P[nu < rho + shift] = 1 - :func:`_piece_tail`."""
    f = _piece_tail(shift, t, m)
    return Factor(f.b, (1.0 - f.lo[0], -f.lo[1], f.lo[2]), (1.0 - f.hi[0], -f.hi[1], f.hi[2]))


def _piece_point(shift: int, t: float, m: int) -> Factor:
    """P[nu = rho + shift] = tanh(1/2t) e^{-|rho + shift|/t}."""
    h = math.tanh(0.5 / t)
    return Factor(-shift, (0.0, h * math.exp(shift / t), -m), (0.0, h * math.exp(-shift / t), m))


def integrate_mixed(factors: Sequence[Factor], t1: float, base: float) -> float:
    """sum over rho of DLap(t1)(rho) * prod(factors)(rho), factors in (c0, c1, k) pieces (exact)."""
    breaks = sorted({f.b for f in factors} | {0})
    segments = [(-INF, breaks[0] - 1)] + [
        (breaks[i], breaks[i + 1] - 1) for i in range(len(breaks) - 1)
    ]
    segments.append((breaks[-1], INF))
    total = 0.0
    for lo, hi in segments:
        r = hi if lo == -INF else lo
        poly = {0: 1.0}
        for f in factors:
            c0, c1, k = f.hi if r >= f.b else f.lo
            new: dict = {}
            for j, cj in poly.items():
                if c0:
                    new[j] = new.get(j, 0.0) + cj * c0
                if c1:
                    new[j + k] = new.get(j + k, 0.0) + cj * c1
            poly = new
            if not poly:
                break
        s = -1.0 / t1 if r >= 0 else 1.0 / t1
        for j, cj in poly.items():
            if cj:
                total += cj * _geom(s - j / base, lo, hi)
    return math.tanh(0.5 / t1) * total


def _gap_svt_outputs(n: int, limit: int, adaptive: bool):
    """(positions, branches, processed) of a gap SVT: a positive costs 1 (top) or 2 (middle)
    units and the run stops at the positive that takes the units used above ``limit``."""

    def rec(i, pos, br, used):
        if i == n:
            yield pos, br, n
            return
        yield from rec(i + 1, pos, br, used)
        for b in ("top", "middle") if adaptive else ("middle",):
            u = used + (1 if b == "top" else 2)
            if u > limit:
                yield pos + (i,), br + (b,), i + 1
            else:
                yield from rec(i + 1, pos + (i,), br + (b,), u)

    yield from rec(0, (), (), 0)


@dataclass(frozen=True)
class GapScales:
    """Scales of a gap mechanism in grid units (from a shipped GapCalibration)."""

    threshold: Optional[float]
    query: float
    top: Optional[float]
    sigma: int
    limit: int
    grid: float

    @classmethod
    def of(cls, cal, factor: float = 1.0) -> "GapScales":
        g = cal.grid
        return cls(
            None if cal.threshold_scale is None else cal.threshold_scale / g * factor,
            cal.query_scale / g * factor,
            None if cal.top_scale is None else cal.top_scale / g * factor,
            0 if cal.sigma is None else int(round(cal.sigma / g)),
            cal.units - 2,
            g,
        )


def gap_svt_pmf(d: Sequence[int], sc: GapScales, gap_values=None) -> dict:
    """Sparse Vector with Gap / Adaptive SVT: (positions, branches, gaps) -> P.

    ``d[i]`` = T_i - q_i in units.  Middle positive i with gap a: nu_i = a + d_i + rho
    (point mass) and, adaptive, the top branch failed: xi_i < sigma + d_i + rho; top positive:
    xi_i = a + d_i + rho with a >= sigma; negative: both fail.  ``gap_values`` None integrates
    the gaps out (then gaps are None and the pmf sums to 1); else a dict branch -> gap values.
    """
    adaptive = sc.top is not None
    base = sc.top if adaptive else sc.query
    mq = int(round(base / sc.query))
    out = {}
    for pos, br, m in _gap_svt_outputs(len(d), sc.limit, adaptive):
        hit = dict(zip(pos, br))
        common = []
        for i in range(m):
            if i not in hit:
                common.append(_piece_fail(d[i], sc.query, mq))
                if adaptive:
                    common.append(_piece_fail(d[i] + sc.sigma, sc.top, 1))
        if gap_values is None:
            fs = list(common)
            for i, b in hit.items():
                if b == "top":
                    fs.append(_piece_tail(d[i] + sc.sigma, sc.top, 1))
                else:
                    fs.append(_piece_tail(d[i], sc.query, mq))
                    if adaptive:
                        fs.append(_piece_fail(d[i] + sc.sigma, sc.top, 1))
            out[(pos, br, None)] = integrate_mixed(fs, sc.threshold, base)
            continue
        for gaps in product(*[gap_values[b] for b in br]):
            fs = list(common)
            for (i, b), a in zip(hit.items(), gaps):
                if b == "top":
                    fs.append(_piece_point(a + d[i], sc.top, 1))
                else:
                    fs.append(_piece_point(a + d[i], sc.query, mq))
                    if adaptive:
                        fs.append(_piece_fail(d[i] + sc.sigma, sc.top, 1))
            out[(pos, br, gaps)] = integrate_mixed(fs, sc.threshold, base)
    return out


def topc_gap_pmf(q: Sequence[int], c: int, t: float, gap_values: Sequence[int]) -> dict:
    """Noisy Top-c with Gap (ties to the lower index): (ordered positions, gaps) -> P.

    rho = eta_{j_1}; the selected noisy scores are v_t = q_{j_1} + rho - (g_1 + ... + g_{t-1})
    (point masses); the runner-up s is the lowest unselected index with noisy score
    m = v_c - g_c: unselected i < s score below m, i > s at most m, and each gap 0 needs the
    lower index first.  Each of the c gaps ranges over ``gap_values``.
    """
    from itertools import permutations

    n = len(q)
    out = {}
    for J in permutations(range(n), c):
        rest = [i for i in range(n) if i not in J]
        for gaps in product(gap_values, repeat=c):
            if any(gaps[k] == 0 and J[k] > J[k + 1] for k in range(c - 1)):
                out[(J, gaps)] = 0.0
                continue
            S = np.cumsum((0,) + tuple(gaps)).tolist()
            point = [_piece_point(q[J[0]] - q[J[k]] - S[k], t, 1) for k in range(1, c)]
            base_m = q[J[0]] - S[c]  # runner-up score m = rho + base_m
            total = 0.0
            for s in rest:
                if gaps[-1] == 0 and J[-1] > s:
                    continue
                fs = list(point) + [_piece_point(base_m - q[s], t, 1)]
                for i in rest:
                    if i < s:  # eta_i <= m - q_i - 1, i.e. not >= rho + (base_m - q_i)
                        fs.append(_piece_fail(base_m - q[i], t, 1))
                    elif i > s:  # eta_i <= m - q_i
                        fs.append(_piece_fail(base_m - q[i] + 1, t, 1))
                total += integrate_mixed(fs, t, t)
            out[(J, gaps)] = total
    return out


def gap_case(name, *, method, c, eps=1.0, monotonic=False, n=None) -> Case:
    """A shipped free-gap mechanism (matmech.svt.gap) with its exact model."""
    from matmech.svt import gap as gapmod

    def run(key, rng):
        t, q = key
        arr = np.asarray(q, dtype=np.int64)
        if method == "topc-gap":
            return gapmod.noisy_top_c_gap(arr, c, eps, monotonic=monotonic, rng=rng)
        fn = gapmod.sparse_vector_gap if method == "svt-gap" else gapmod.adaptive_sparse_vector
        return fn(arr, t, c=c, eps=eps, monotonic=monotonic, rng=rng)

    def build(factor):
        cal = _first_run(lambda r: run((0, (0, 0, 0)), r)).calibration
        sc = GapScales.of(cal, factor)
        g = cal.grid
        u = int(round(1 / g))
        if method == "topc-gap":
            gv = (0, 1, u, 3 * u, 12 * u, 40 * u)

            def pmf(key):
                return topc_gap_pmf(units(key[1], g), c, sc.query, gv)

            m = n or 3
            base = monotonic_pairs(m) if monotonic else exhaustive_pairs(m)
            pairs = keyed(
                base + [([0] * m, [1] + [0] * (m - 1)), ([1, 0, 0], [0, 1, 0])], thresholds=(None,)
            )

            def sample(key, rng):
                res = run(key, rng)
                return res.positions

            return Model(eps, pmf, pairs, sample)
        gvals = {
            "middle": (0, u, 4 * u, sc.sigma + u, 60 * u),
            "top": (sc.sigma, sc.sigma + 4 * u, sc.sigma + 60 * u),
        }

        def pmf(key):
            tu = units([key[0]], g)[0]
            return gap_svt_pmf([tu - x for x in units(key[1], g)], sc, gvals)

        def sample_pmf(key):
            tu = units([key[0]], g)[0]
            return {
                k[:2]: p
                for k, p in gap_svt_pmf([tu - x for x in units(key[1], g)], sc, None).items()
            }

        def sample(key, rng):
            res = run(key, rng)
            return (res.positions, res.branches)

        m = n or 3
        base = monotonic_pairs(m) if monotonic else exhaustive_pairs(m)
        # [LSL17] Thm. 4.7 blocks (bottoms up, tops down), one bottom per block
        blocks = [lyu_blocks(c, 1, monotonic)] + ([lyu_blocks(c, 2, monotonic)] if c == 1 else [])
        pairs = keyed(base, thresholds=(-2, 0, 2)) + keyed(blocks, thresholds=(-4, -2, 0, 2))
        return Model(eps, pmf, pairs, sample, None, sample_pmf)

    key = (None, (2, 0, 1)) if method == "topc-gap" else (0, (-1, 1, 2))
    return Case(name, build, key)


def gap_cases() -> list:
    """Every shipped free-gap configuration audited."""
    return [
        gap_case("topc_gap c=1", method="topc-gap", c=1),
        gap_case("topc_gap c=2", method="topc-gap", c=2, n=4),
        gap_case("topc_gap monotonic c=2", method="topc-gap", c=2, monotonic=True),
        gap_case("svt_gap c=1", method="svt-gap", c=1),
        gap_case("svt_gap c=2", method="svt-gap", c=2),
        gap_case("svt_gap monotonic c=2", method="svt-gap", c=2, monotonic=True),
        gap_case("adaptive_svt c=1", method="adaptive-svt", c=1),
        gap_case("adaptive_svt c=2", method="adaptive-svt", c=2),
        gap_case("adaptive_svt monotonic c=2", method="adaptive-svt", c=2, monotonic=True),
    ]


# --------------------------------------------------------------------------
# The vector selections (Laplace mechanism on the whole vector; matmech.svt.vector)
# --------------------------------------------------------------------------
# Released noisy values are point masses: no threshold noise, so every output's
# probability is a finite product of discrete Laplace masses and tails (no sum over rho).
def _dlap_cdf(m: int, t: float) -> float:
    """P[nu <= m] for nu ~ DLap(t)."""
    return 1.0 - dlap_tail(m + 1, t)


def vector_top_c_pmf(q: Sequence[int], c: int, t: float, value_points: Sequence[int]) -> dict:
    """Vector top-c (ties to the lower index): (ordered positions, selected values, runner-up value) -> P.

    y_i = q_i + DLap(t), i.i.d.; the selected noisy values v_1 >= ... >= v_c are point
    masses, the runner-up value m = max of the unselected y_i; a tie needs the lower index
    first (v_t = v_{t+1}: j_t < j_{t+1}; m = v_c: every unselected i scoring m has i > j_c).
    Values range over ``value_points`` (grid units).
    """
    from itertools import permutations

    n = len(q)
    pts = sorted(set(value_points))
    out = {}
    for J in permutations(range(n), c):
        rest = [i for i in range(n) if i not in J]
        for vals in product(pts, repeat=c):
            if any(
                vals[k] < vals[k + 1] or (vals[k] == vals[k + 1] and J[k] > J[k + 1])
                for k in range(c - 1)
            ):
                continue
            head = math.prod(dlap_pmf(v - q[j], t) for j, v in zip(J, vals))
            vc = vals[-1]
            for m in pts:
                if m > vc:
                    continue
                if m < vc:
                    tail = math.prod(_dlap_cdf(m - q[i], t) for i in rest) - math.prod(
                        _dlap_cdf(m - 1 - q[i], t) for i in rest
                    )
                else:
                    lo = [i for i in rest if i < J[-1]]
                    hi = [i for i in rest if i > J[-1]]
                    tail = math.prod(_dlap_cdf(m - 1 - q[i], t) for i in lo) * (
                        math.prod(_dlap_cdf(m - q[i], t) for i in hi)
                        - math.prod(_dlap_cdf(m - 1 - q[i], t) for i in hi)
                    )
                out[(J, vals, m)] = head * tail
    return out


def vector_threshold_pmf(
    q: Sequence[int], thr: int, c: int, t: float, value_points: Sequence[int]
) -> dict:
    """Vector threshold: (positions, their noisy values) -> P; the first c rows (in order)
    with y_i >= thr, y_i = q_i + DLap(t); rows after the c-th positive are not examined."""
    pts = [v for v in sorted(set(value_points)) if v >= thr]
    out = {}
    for pos, m in _alg7_outputs(len(q), c):
        hit = set(pos)
        neg = math.prod(_dlap_cdf(thr - 1 - q[i], t) for i in range(m) if i not in hit)
        for vals in product(pts, repeat=len(pos)):
            out[(pos, vals)] = neg * math.prod(dlap_pmf(v - q[i], t) for i, v in zip(pos, vals))
    return out


def l1_pairs(n: int, sens: int) -> list:
    """(0^n, delta) for every integer delta with 0 < ||delta||_1 <= sens (both orders are audited)."""
    zero = [0] * n
    return [
        (zero, list(dl))
        for dl in product(range(-sens, sens + 1), repeat=n)
        if 0 < sum(map(abs, dl)) <= sens
    ]


def _vector_model(run_first, method, c, eps, factor, pairs, values_of):
    """Exact model of a shipped vector selection; ``values_of(key)`` the true values in value units."""
    res = run_first()
    cal = res.calibration
    g = cal.grid
    u = int(round(1 / g))
    t = cal.scale / g * factor
    pts = (-2 * u, 0, 1, u, 2 * u, 3 * u, 8 * u)

    if method == "vector-top-c":

        def pmf(key):
            return vector_top_c_pmf(units(values_of(key), g), c, t, pts)
    else:

        def pmf(key):
            return vector_threshold_pmf(units(values_of(key), g), units([key[0]], g)[0], c, t, pts)

    # no sampling check (values are point masses on a grid of ~2**16 steps per scale unit):
    # test_vector_runs_match_the_model_moments checks seeded runs by their moments instead
    return Model(eps, pmf, pairs, None)


def vector_case(name, *, method, c, eps=1.0, sensitivity=2, n=3) -> Case:
    """:func:`matmech.svt.vector.noisy_vector_top_c` / ``noisy_vector_threshold`` with L1
    sensitivity ``sensitivity``, on every pair around 0^n moving the vector by at most that in L1."""
    from matmech.svt import vector as vec

    def run(key, rng):
        t, q = key
        arr = np.asarray(q, dtype=np.int64)
        if method == "vector-top-c":
            return vec.noisy_vector_top_c(arr, c, eps, sensitivity=sensitivity, rng=rng)
        return vec.noisy_vector_threshold(arr, t, c=c, eps=eps, sensitivity=sensitivity, rng=rng)

    def build(factor):
        thresholds = (None,) if method == "vector-top-c" else (-1, 0, 1, 2)
        pairs = keyed(l1_pairs(n, sensitivity), thresholds=thresholds)
        return _vector_model(
            lambda: _first_run(lambda r: run((0, (0,) * n), r)),
            method,
            c,
            eps,
            factor,
            pairs,
            lambda key: key[1],
        )

    return Case(name, build)


def select_vector_case(name, *, method, c, eps=1.0, neighbors="add_remove") -> Case:
    """``select_rows`` (topc-gap / svt-gap) on a workload whose cells touch few rows, so that
    the vector selection runs with the joint sensitivity the library derives from W; x and
    its neighbours (one record added/removed, or substituted)."""
    from matmech.run import select as selection

    W = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]], dtype=np.float64)
    base = [1, 0, 2]

    def neighbours():
        return _histogram_neighbours(base, neighbors)

    def run(key, rng):
        t, x = key
        kw = {} if method == "topc-gap" else {"threshold": t}
        return selection.select_rows(
            W,
            np.asarray(x, dtype=np.int64),
            c=c,
            eps=eps,
            method=method,
            neighbors=neighbors,
            rng=rng,
            **kw,
        )

    def build(factor):
        sel = _first_run(lambda r: run((2, tuple(base)), r))
        assert sel.mechanism in ("vector-top-c", "vector-threshold"), sel.mechanism
        thresholds = (None,) if method == "topc-gap" else (0, 1, 2, 3, 4)
        answers = lambda key: (W @ np.asarray(key[1], dtype=np.float64)).astype(np.int64).tolist()  # noqa: E731
        return _vector_model(
            lambda: sel.gap,
            sel.mechanism,
            c,
            eps,
            factor,
            keyed(neighbours(), thresholds=thresholds),
            answers,
        )

    return Case(name, build)


def vector_cases() -> list:
    """Every vector-selection configuration audited."""
    return [
        vector_case("vector_top_c c=1 sens=2", method="vector-top-c", c=1),
        vector_case("vector_top_c c=2 sens=2", method="vector-top-c", c=2),
        vector_case("vector_threshold c=1 sens=2", method="vector-threshold", c=1),
        vector_case("vector_threshold c=2 sens=2", method="vector-threshold", c=2),
        select_vector_case("select_rows topc-gap vector c=2", method="topc-gap", c=2),
        select_vector_case(
            "select_rows topc-gap vector substitution c=2",
            method="topc-gap",
            c=2,
            neighbors="substitute",
        ),
        select_vector_case("select_rows svt-gap vector c=2", method="svt-gap", c=2),
        select_vector_case(
            "select_rows svt-gap vector substitution c=2",
            method="svt-gap",
            c=2,
            neighbors="substitute",
        ),
    ]
