"""Confidence intervals from the law of the noise actually drawn, not from a normal curve.

A Matrix-Mechanism answer is ``truth + grid·Σⱼ cⱼ zⱼ``: ``zⱼ`` the independent integer noise
draws of the measurement (discrete Laplace with pmf ∝ e^{−|k|/t}, or discrete Gaussian
∝ e^{−k²/2σ²}; Canonne, Kamath, Steinke, NeurIPS 2020) and ``c = w (AᵀA)⁺Aᵀ`` the answer's
noise weights (Li et al., PODS 2010). ``answer ± 1.96·std`` is only the normal
approximation: a single Laplace draw has heavier tails (continuous Laplace: 93.7%) and on
the integer lattice a half-width just below 1 misses every ±1 error. Three methods, best
first (:func:`law_intervals`):

* ``"exact"``: integer weights (identity strategy, 0/1 rows): the pmf of Σ cⱼ zⱼ on the
  integers from its characteristic function Πⱼ φ(cⱼ ω) on an FFT grid wider than the support
  (tails below 1e-16). The half-width is the smallest integer r with P(|error| ≤ r) ≥ level;
  the returned coverage is that probability (≥ level, as tight as the lattice allows).
* ``"convolution"``: a few (≤ :data:`MAX_TERMS`) non-integer weights: each term cⱼ zⱼ is
  binned on a grid h from the exact CDF of zⱼ (|term − bin| ≤ h/2), the bins convolved by FFT;
  the half-width is widened by (terms)·h/2 = 0.01 std, so the returned coverage is a lower
  bound. Its FFT work per release is capped (:data:`MAX_WORK`).
* ``"normal"`` / ``"cornish-fisher"``: many draws. The Edgeworth term of the fourth cumulant
  estimates the normal interval's coverage error φ(z)(z³−3z)κ₄/12; within
  :data:`NORMAL_TOLERANCE` the normal quantile is kept, else the Cornish–Fisher quantile
  z + κ₄(z³−3z)/24. Their coverage is that Edgeworth estimate (:func:`edgeworth_coverage`:
  level − φ(z)(z³−3z)κ₄/12 for the normal quantile, the level for Cornish–Fisher, whose
  quantile removes that term), never a NaN; the method says it is an estimate.
* ``"chebyshev"`` (:func:`chebyshev_intervals`): std/√(1 − level), coverage ≥ level for any
  law; where no law is computed and the normal one is not justified (large (ε, δ)
  residual releases with draws of σ below 3, :mod:`matmech.estimators.answer_noise`).

A row of weights may also stand for a weight profile: ``counts`` says how many independent
draws carry each weight and ``scale`` may differ per term (κ₄ = Σ count·c⁴·κ₄(z) adds over
the terms; the lattice pmf multiplies each scale's φ). The pure-ε residual answers use
this (:mod:`matmech.estimators.answer_noise`: a few weight classes, thousands of draws).
"""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np
from scipy.special import ndtr, ndtri

from matmech.privacy.noise import discrete_gaussian_variance, discrete_laplace_variance


#: Largest estimated coverage error (absolute) for which the normal quantile is used; above
#: it the Cornish–Fisher quantile. 0.0005: at 0.005 the "normal" pure-ε residual answers
#: of all ≤3-way marginals of 8 × 3 values covered 94.76 ± 0.04% at 95% (Cornish–Fisher:
#: 95.06 ± 0.04%).
NORMAL_TOLERANCE = 0.0005
#: Most draws an answer may rest on for the binned convolution.
MAX_TERMS = 256
#: Largest FFT grid of the exact lattice method.
MAX_LATTICE = 1 << 21
#: Distinct weight profiles evaluated exactly per release (the rest fall back to moments).
MAX_PROFILES = 256
#: FFT work (grid points × weight groups) the binned convolutions of one release may spend
#: (a few seconds); answers beyond it fall back to moments, and say so in their method.
MAX_WORK = 1 << 24
#: Most answers whose law is evaluated one by one; larger releases use the normal quantile.
MAX_ROWS = 200_000
METHODS = ("exact", "convolution", "normal", "cornish-fisher", "chebyshev")
#: Bytes of interval laws :func:`cached_law` keeps (least recently used out first).
MAX_CACHED_BYTES = 64 << 20
_TAIL = 37.0  # e^-37 < 1e-16: Laplace support radius in units of t


class IntervalLaw:
    """Per-answer half-widths at ``level``: ``half`` (answer units), ``coverage`` (the exact
    coverage for "exact"; a lower bound for "convolution" and "chebyshev"; the Edgeworth
    estimate for "normal" and "cornish-fisher": never NaN) and ``method`` (one of
    :data:`METHODS` per answer)."""

    __slots__ = ("coverage", "half", "level", "method")

    def __init__(self, level: float, half: np.ndarray, coverage: np.ndarray, method: np.ndarray):
        self.level, self.half, self.coverage, self.method = level, half, coverage, method
        for a in (half, coverage, method):
            a.setflags(write=False)

    def counts(self) -> dict:
        """{method: number of answers}."""
        names, k = np.unique(self.method, return_counts=True)
        return {str(a): int(b) for a, b in zip(names, k)}

    @property
    def nbytes(self) -> int:
        """Memory held by the three arrays (the method names are shared strings)."""
        return int(self.half.nbytes + self.coverage.nbytes + self.method.nbytes)


_LAWS: OrderedDict = OrderedDict()
_LAWS_LOCK = threading.Lock()


def cached_law(key: Hashable, compute: Callable[[], IntervalLaw]) -> IntervalLaw:
    """``compute()``, kept under ``key`` and reused while it fits in :data:`MAX_CACHED_BYTES`.

    An interval law depends only on the answers' noise weights (the workload rows and the
    strategy) and the noise's kind, scale, grid and level, never on the data: the key must
    say all of them (:meth:`matmech.results.release.Release.interval_law` keys on fingerprints of the
    rows and the strategy, :func:`matmech.linalg.storage.fingerprint`). A law larger than the
    whole budget is computed and not kept. Laws are read-only, so callers share them."""
    with _LAWS_LOCK:
        law = _LAWS.get(key)
        if law is not None:
            _LAWS.move_to_end(key)
            return law
    law = compute()
    if law.nbytes <= MAX_CACHED_BYTES:
        with _LAWS_LOCK:
            _LAWS[key] = law
            while sum(v.nbytes for v in _LAWS.values()) > MAX_CACHED_BYTES:
                _LAWS.popitem(last=False)
    return law


def cached_bytes() -> int:
    """Bytes the cached interval laws hold now (at most :data:`MAX_CACHED_BYTES`)."""
    with _LAWS_LOCK:
        return sum(v.nbytes for v in _LAWS.values())


def clear_laws() -> None:
    """Forget every cached interval law."""
    with _LAWS_LOCK:
        _LAWS.clear()


def _check(noise: str, t: float) -> None:
    if noise not in ("discrete_laplace", "discrete_gaussian"):
        raise ValueError(f"noise must be 'discrete_laplace' or 'discrete_gaussian', got {noise!r}")
    if not (isinstance(t, float) and math.isfinite(t) and t > 0):
        raise ValueError(
            f"the noise scale in lattice units must be a positive finite float, got {t!r}"
        )


def _radius(noise: str, t: float) -> int:
    return math.ceil(_TAIL * t) + 1 if noise == "discrete_laplace" else math.ceil(9.0 * t) + 1


def noise_pmf(noise: str, t: float) -> tuple[np.ndarray, np.ndarray]:
    """(k, pmf) of one integer draw on k = −K..K (tail mass beyond K below 1e-16)."""
    _check(noise, t)
    K = _radius(noise, t)
    k = np.arange(-K, K + 1)
    w = np.exp(-np.abs(k) / t) if noise == "discrete_laplace" else np.exp(-(k * k) / (2.0 * t * t))
    return k, w / w.sum()


def noise_cdf(noise: str, t: float, k: np.ndarray) -> np.ndarray:
    """P(z ≤ k) for integer k (vectorised; closed form for Laplace; for Gaussian the pmf
    sum when σ < 8, else Φ((k+½)/σ), whose error is of order e^{−2π²σ²})."""
    _check(noise, t)
    k = np.asarray(k, dtype=np.float64)
    if noise == "discrete_laplace":
        lp = -math.log1p(math.exp(-1.0 / t))  # log 1/(1+p)
        neg = np.exp(np.minimum(k, 0.0) / t + lp)  # p^{-k}/(1+p), k <= 0
        pos = -np.expm1(-(np.maximum(k, 0.0) + 1.0) / t + lp)  # 1 − p^{k+1}/(1+p), k >= 0
        return np.where(k < 0, neg, pos)
    if t >= 8.0:
        return ndtr((k + 0.5) / t)
    kk, pmf = noise_pmf(noise, t)
    cdf = np.cumsum(pmf)
    idx = np.clip(k, kk[0] - 1, kk[-1]).astype(np.int64) - kk[0]
    return np.where(idx < 0, 0.0, cdf[np.clip(idx, 0, None)])


@functools.lru_cache(maxsize=1024)
def _variance(noise: str, t: float) -> float:
    return (
        discrete_laplace_variance(t)
        if noise == "discrete_laplace"
        else discrete_gaussian_variance(t)
    )


def excess_kurtosis(noise: str, t: float) -> float:
    """κ₄/σ⁴ of one draw (Laplace → 3, Gaussian → 0 as t grows)."""
    _check(noise, t)
    return _kurtosis(noise, t)


@functools.lru_cache(maxsize=1024)
def _kurtosis(noise: str, t: float) -> float:
    if t > 2000.0:
        return 3.0 if noise == "discrete_laplace" else 0.0
    k, pmf = noise_pmf(noise, t)
    m2, m4 = float((k * k * pmf).sum()), float((k**4 * pmf).sum())
    return m4 / (m2 * m2) - 3.0


def _groups(weights, t, counts):
    """(|weight|, scale, count) of every distinct nonzero term, weights rounded to 12 digits."""
    a = np.abs(np.asarray(weights, dtype=np.float64)).reshape(-1)
    tt = np.broadcast_to(np.asarray(t, dtype=np.float64), a.shape).reshape(-1)
    n = (
        np.ones(a.size, dtype=np.int64)
        if counts is None
        else np.broadcast_to(np.asarray(counts, dtype=np.int64), a.shape).reshape(-1)
    )
    keep = (a > 0) & (n > 0)
    a, tt, n = np.round(a[keep], 12), tt[keep], n[keep]
    order = np.lexsort((a, tt))  # by scale, then weight
    a, tt, n = a[order], tt[order], n[order]
    new = np.ones(a.size, dtype=bool)
    new[1:] = (a[1:] != a[:-1]) | (tt[1:] != tt[:-1])
    at = np.flatnonzero(new)
    return a[at], tt[at], np.add.reduceat(n, at) if at.size else n[:0]


def sum_pmf(
    noise: str, t, weights, *, counts: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(k, pmf) of Σ cⱼ zⱼ for integer weights cⱼ, from Πⱼ φ(cⱼ ω) on an FFT grid.

    ``t``: the scale of every draw on the integers, one float or one per weight;
    ``counts``: how many independent draws share each weight (default one each)."""
    a, tt, n = _groups(np.rint(np.asarray(weights, dtype=np.float64)), t, counts)
    a = a.astype(np.int64)
    span = int(sum(x * k * _radius(noise, s) for x, k, s in zip(a, n, tt.tolist())))
    N = 1 << max(4, (2 * span + 1).bit_length())
    if N > MAX_LATTICE:
        raise ValueError(f"the lattice law needs an FFT of {N:,} points (limit {MAX_LATTICE:,})")
    idx = np.arange(N)
    spec = np.ones(N)
    phis: dict = {}
    for x, k, s in zip(a.tolist(), n.tolist(), tt.tolist()):
        if s not in phis:
            kk, pmf = noise_pmf(noise, s)
            base = np.zeros(N)
            base[kk % N] = pmf
            phis[s] = np.fft.fft(base).real  # symmetric pmf: real spectrum
        spec *= phis[s][(x * idx) % N] ** k
    out = np.clip(np.fft.ifft(spec).real, 0.0, None)
    kk = np.arange(-span, span + 1)
    return kk, out[kk % N]


def _central(pmf_of_r, level):
    """Smallest r with P(|R| ≤ r) ≥ level for a pmf indexed −S..S; (r, P)."""
    S = (pmf_of_r.size - 1) // 2
    mass = np.concatenate([[pmf_of_r[S]], pmf_of_r[S + 1 :] + pmf_of_r[S - 1 :: -1]])
    cum = np.cumsum(mass)
    r = int(np.searchsorted(cum, level * (1 - 1e-15)))  # guard only against float round-off in cum
    r = min(r, S)
    return r, float(min(cum[r], 1.0))


def _grid_size(B):
    return 1 << (2 * B + 1).bit_length()


def _convolution_work(a, n):
    """Grid points × distinct terms of :func:`_convolution` for terms (a, ·, n)."""
    return _grid_size(math.ceil(20.0 * int(n.sum()) / 0.02)) * a.size


def _convolution(noise, a, tt, n, sd, level):
    """Half-width (lattice units) and a lower bound on its coverage, binned on h."""
    P = int(n.sum())
    h = 0.02 * sd / P  # total binning error P·h/2 = 0.01 sd
    B = math.ceil(20.0 * sd / h)
    N = _grid_size(B)
    b = np.arange(-B, B + 1)
    spec = np.ones(N // 2 + 1, dtype=np.complex128)
    edges = (
        np.arange(-B - 1, B + 1) + 0.5
    )  # bin b is (b − ½, b + ½]·h: edges[b + B], edges[b + B + 1]
    for x, s, k in zip(a.tolist(), tt.tolist(), n.tolist()):
        cdf = noise_cdf(noise, s, np.ceil(edges * h / x) - 1)  # once per edge, shared by two bins
        binned = np.zeros(N)
        binned[b % N] = np.clip(cdf[1:] - cdf[:-1], 0.0, None)
        spec *= np.fft.rfft(binned) ** k
    pmf = np.clip(np.fft.irfft(spec, N), 0.0, None)
    r, cov = _central(pmf[b % N], level)
    return (r + P / 2.0) * h, cov


def edgeworth_error(excess: float, level: float) -> float:
    """|φ(z)(z³−3z)κ₄/12|: the Edgeworth estimate of the normal interval's coverage error
    at ``level`` for a law of excess kurtosis ``excess`` (κ₄/σ⁴)."""
    z = float(ndtri(0.5 + _check_level(level) / 2))
    return abs(math.exp(-z * z / 2) / math.sqrt(2 * math.pi) * (z**3 - 3 * z) * excess / 12.0)


def edgeworth_coverage(excess: float, level: float) -> float:
    """The Edgeworth estimate of the coverage of the normal interval ±z·std at ``level`` for a
    symmetric law of excess kurtosis ``excess`` (κ₄/σ⁴): level − φ(z)(z³−3z)·excess/12
    (below the level for heavy tails, e.g. 0.926 for one Laplace draw, whose exact coverage
    is 0.937), clipped to [0, 1]."""
    level = _check_level(level)
    z = float(ndtri(0.5 + level / 2))
    err = math.exp(-z * z / 2) / math.sqrt(2 * math.pi) * (z**3 - 3 * z) * float(excess) / 12.0
    return min(1.0, max(0.0, level - err))


def chebyshev_intervals(std, level: float = 0.95) -> IntervalLaw:
    """std/√(1 − level) for every answer: by Chebyshev's inequality its coverage is at
    least ``level`` whatever the law (returned as that lower bound, method "chebyshev")."""
    level = _check_level(level)
    std = np.asarray(std, dtype=np.float64)
    return IntervalLaw(
        level,
        std / math.sqrt(1.0 - level),
        np.full(std.size, level),
        np.full(std.size, "chebyshev", dtype=object),
    )


def _moments(noise, a, tt, n, level):
    """Normal quantile, or Cornish–Fisher when the Edgeworth error exceeds the tolerance;
    κ₄ = Σ n·a⁴·κ₄(z) over the terms (cumulants of independent draws add) → (half-width,
    the Edgeworth estimate of its coverage, method)."""
    z = float(ndtri(0.5 + level / 2))
    var, kurt = _per_scale(noise, tt)
    s2 = float((n * a * a * var).sum())
    k4 = float((n * a**4 * kurt * var * var).sum()) / (s2 * s2)
    if edgeworth_error(k4, level) <= NORMAL_TOLERANCE:
        return z * math.sqrt(s2), edgeworth_coverage(k4, level), "normal"
    return (z + k4 * (z**3 - 3 * z) / 24.0) * math.sqrt(s2), level, "cornish-fisher"


def _check_level(level) -> float:
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    return float(level)


def normal_intervals(
    std, level: float = 0.95, *, method: str = "normal", excess: float = 0.0
) -> IntervalLaw:
    """The normal approximation z·std for every answer (when no noise law is evaluated),
    its coverage the Edgeworth estimate (:func:`edgeworth_coverage`) for a law of excess
    kurtosis ``excess``: callers pass the largest their answers can have (a weighted sum of
    i.i.d. draws has at most the excess kurtosis of one draw, Σc⁴ ≤ (Σc²)²)."""
    level = _check_level(level)
    std = np.asarray(std, dtype=np.float64)
    z = float(ndtri(0.5 + level / 2))
    return IntervalLaw(
        level,
        z * std,
        np.full(std.size, edgeworth_coverage(excess, level)),
        np.full(std.size, method, dtype=object),
    )


def law_intervals(
    weights: np.ndarray,
    noise: str,
    scale,
    grid: float,
    level: float = 0.95,
    *,
    counts: np.ndarray | None = None,
) -> IntervalLaw:
    """Half-widths at ``level`` for answers with noise ``grid·Σⱼ weights[i, j] zⱼ``.

    ``weights``: the m×p noise weights (:func:`matmech.error.noise_weights`), ``noise``/
    ``scale``/``grid`` those of the measurement (``scale`` in answer units, so zⱼ has scale
    t = scale/grid on the integers). Answers with the same multiset of |weights| share one
    computation; at most :data:`MAX_PROFILES` distinct ones are evaluated exactly.

    Keyword-only: ``counts`` (m×p, default ones) says how many independent draws carry
    weight ``weights[i, j]``, and ``scale`` may be an array broadcastable to m×p (each
    term's own scale), so a row can stand for a weight profile with multiplicities — the
    pure-ε residual answers (:mod:`matmech.estimators.answer_noise`).
    """
    level = _check_level(level)
    C = np.asarray(weights, dtype=np.float64)
    T = np.broadcast_to(np.asarray(scale, dtype=np.float64) / float(grid), C.shape)
    for s in np.unique(T).tolist():
        _check(noise, s)
    K = None if counts is None else np.broadcast_to(np.asarray(counts, dtype=np.int64), C.shape)
    m = C.shape[0]
    if K is None and np.asarray(scale).ndim == 0:  # one scale, one draw per weight
        half, cov, method = _plain(C, noise, float(T.flat[0]) if T.size else 1.0, level)
        return IntervalLaw(level, half * grid, cov, method)
    half, cov = np.empty(m), np.full(m, np.nan)
    method = np.empty(m, dtype=object)
    seen: dict = {}
    work = [0]
    for i in range(m):
        row = np.abs(C[i])
        tol = 1e-10 * max(float(row.max(initial=0.0)), 1e-300)
        keep = (row > tol) & (K[i] > 0 if K is not None else True)
        c = row[keep]
        key = (
            tuple(np.round(c, 10).tolist()),
            tuple(T[i][keep].tolist()),
            () if K is None else tuple(K[i][keep].tolist()),
        )
        if c.size == 0:
            half[i], cov[i], method[i] = 0.0, 1.0, "exact"
            continue
        if key not in seen:
            a, tt, n = _groups(np.where(row > tol, row, 0.0), T[i], None if K is None else K[i])
            seen[key] = _one(noise, a, tt, n, level, exact_ok=len(seen) < MAX_PROFILES, work=work)
        r, p, how = seen[key]
        half[i], cov[i], method[i] = r * grid, p, how
    return IntervalLaw(level, half, cov, method)


#: Rows of weights sorted at once by :func:`_plain` (bounds its temporary arrays).
_CHUNK = 4096


def _plain(C, noise, t, level):
    """:func:`law_intervals` for one scale t (lattice units) and one draw per weight, in
    lattice units: answers with the same sorted |weights| (to 10 digits) share one
    computation, the first :data:`MAX_PROFILES` distinct ones (in row order) by the exact or
    binned law, every other by moments, vectorised over the rows."""
    m = C.shape[0]
    ids: dict = {}  # sorted rounded |weights| (bytes) -> profile, in order of first row
    first: list = []
    empty: list = []  # per profile: every weight zero
    row_profile = np.empty(m, dtype=np.int64)
    for lo in range(0, m, _CHUNK):
        w = np.abs(C[lo : lo + _CHUNK])
        tol = 1e-10 * np.maximum(w.max(1, initial=0.0), 1e-300)
        w = np.round(np.sort(np.where(w > tol[:, None], w, 0.0), axis=1), 10)
        w += 0.0  # -0.0 and 0.0 as one key
        nonzero = w[:, -1] > 0 if w.shape[1] else np.zeros(w.shape[0], dtype=bool)
        for r in range(w.shape[0]):
            j = ids.setdefault(w[r].tobytes(), len(ids))
            if j == len(first):
                first.append(lo + r)
                empty.append(not nonzero[r])
            row_profile[lo + r] = j
    first_rows = np.asarray(first, dtype=np.int64)
    P = first_rows.size
    half, cov = np.zeros(P), np.full(P, np.nan)
    method = np.full(P, "exact", dtype=object)
    cov[np.asarray(empty, dtype=bool)] = 1.0  # no noise: the answer is exact
    live = [j for j in range(P) if not empty[j]]
    work = [0]
    for j in live[:MAX_PROFILES]:
        row = np.abs(C[first[j]])
        tol = 1e-10 * max(float(row.max(initial=0.0)), 1e-300)
        a, tt, n = _groups(np.where(row > tol, row, 0.0), t, None)
        half[j], cov[j], method[j] = _one(noise, a, tt, n, level, exact_ok=True, work=work)
    rest = np.asarray(live[MAX_PROFILES:], dtype=np.int64)
    if rest.size:  # moments: s² = Σ a²·var, κ₄ = Σ a⁴·κ₄(z)·var² / s⁴ (as _moments)
        var, kurt = _variance(noise, t), _kurtosis(noise, t)
        a = np.abs(C[first_rows[rest]])
        tol = 1e-10 * np.maximum(a.max(1, initial=0.0), 1e-300)
        a = np.round(np.where(a > tol[:, None], a, 0.0), 12)
        s2 = var * (a * a).sum(1)
        k4 = kurt * var * var * (a**4).sum(1) / (s2 * s2)
        z = float(ndtri(0.5 + level / 2))
        err = math.exp(-z * z / 2) / math.sqrt(2 * math.pi) * (z**3 - 3 * z) * k4 / 12.0
        normal = np.abs(err) <= NORMAL_TOLERANCE
        half[rest] = np.where(normal, z, z + k4 * (z**3 - 3 * z) / 24.0) * np.sqrt(s2)
        # coverage: the Edgeworth estimate (edgeworth_coverage) for the normal quantile, the
        # level for Cornish–Fisher, whose quantile removes that term
        cov[rest] = np.where(normal, np.clip(level - err, 0.0, 1.0), level)
        method[rest] = np.where(normal, "normal", "cornish-fisher")
    return half[row_profile], cov[row_profile], method[row_profile]


def _per_scale(noise, tt):
    """(variance, excess kurtosis) of one draw at each scale of ``tt`` (computed once per
    distinct scale: the exact variance is a rational computation, ~0.1 ms)."""
    u, inv = np.unique(tt, return_inverse=True)
    var = np.array([_variance(noise, s) for s in u.tolist()])
    kurt = np.array([_kurtosis(noise, s) for s in u.tolist()])
    return var[inv], kurt[inv]


def _one(noise, a, tt, n, level, *, exact_ok, work):
    var = _per_scale(noise, tt)[0]
    sd = math.sqrt(float((n * a * a * var).sum()))
    if exact_ok and np.all(np.abs(a - np.rint(a)) <= 1e-9):
        try:
            _, pmf = sum_pmf(noise, tt, a, counts=n)
            r, p = _central(pmf, level)
            return float(r), p, "exact"
        except ValueError:
            pass  # lattice too wide: the binned convolution is as good at this scale
    if (
        exact_ok
        and int(n.sum()) <= MAX_TERMS
        and work[0] + (cost := _convolution_work(a, n)) <= MAX_WORK
    ):
        work[0] += cost
        r, p = _convolution(noise, a, tt, n, sd, level)
        return r, p, "convolution"
    return _moments(noise, a, tt, n, level)
