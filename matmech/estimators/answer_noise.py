"""The noise law of a pure-ε residual answer, for intervals from the noise actually drawn.

The pure-ε residual release (:func:`matmech.measurements.residual.plan_residual_laplace`) adds
iid discrete Laplace noise z_{T,c} of scale b_T to every cell c of every measured table T,
combines each residual R as ŷ_R = Σ_{T ⊇ R} w_{T,R} Q_R(table T summed to R) (the pair
weights) and reconstructs the marginal on S as Σ_{R ⊆ S} (Q_Rᵀ ⊗ 1/n_{S∖R}) ŷ_R (Xiao et al.,
NeurIPS 2023, §4). With Q_RᵀQ_R = ⊗_{i∈R}(I − 11ᵀ/nᵢ), the weight of z_{T,c} in the answer
u of the marginal on S (row weight ω) is

    coef(T, A) = ω Σ_{R ⊆ S∩T, (T,R) a pair} w_{T,R} / Π_{i∈S∖R} nᵢ · Π_{i∈R∩A}(1 − 1/nᵢ) · Π_{i∈R∖A}(−1/nᵢ),

where A = {i ∈ S∩T : cᵢ = uᵢ}: it depends on c only through A, and the cells with a given A
number Π_{i∈(S∩T)∖A}(nᵢ − 1) · Π_{i∈T∖S} nᵢ. Every answer of a marginal therefore has the
same noise law, a sum of at most Σ_T 2^|S∩T| weight classes with multiplicities
(:func:`marginal_terms`); :class:`ResidualNoiseLaw` turns them into intervals with
:func:`matmech.privacy.confidence.law_intervals` (exact lattice law, binned convolution or
the fourth-cumulant normal / Cornish–Fisher quantile).

The (ε, δ) residual release draws a discrete Gaussian Z_j per row j of each residual's
integer contrasts H_R; cell u of the marginal on S then carries Z_j with the weight
H_R[j](u_R)/(λ_j² Π_{i∈S∖R} nᵢ), λ_j = ‖H_R[j]‖ (:func:`gaussian_weights`), and
:class:`GaussianResidualLaw` evaluates those rows the same way. All of it is
data-independent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from matmech.measurements.residual import row_keys, least_sigma, residual_batches, row_noise
from matmech.linalg.residual import haar_contrasts
from matmech.privacy.confidence import (
    NORMAL_TOLERANCE,
    IntervalLaw,
    chebyshev_intervals,
    edgeworth_error,
    excess_kurtosis,
    law_intervals,
    normal_intervals,
)


#: Most (marginal, table) pairs :meth:`ResidualNoiseLaw.intervals` evaluates for one
#: release (a few seconds); beyond it every answer gets the normal quantile, named "normal"
#: (the streamed :meth:`~matmech.results.store.MarginalRelease.interval` has no such cap).
MAX_PAIRS = 1 << 22


class _Index:
    """The plan's pairs by residual (tables, weights), each table's attribute membership
    and cell count: the look-ups of :func:`marginal_terms`, built once per law."""

    def __init__(self, mplan):
        lat, tables = mplan.plan.lattice, mplan.plan.tables
        order = np.argsort(mplan.pair_residual, kind="stable")
        res = np.asarray(mplan.pair_residual)[order]
        starts = np.searchsorted(res, np.arange(len(lat.residuals) + 1)).tolist()
        tab = np.asarray(mplan.pair_table, dtype=np.int64)[order]
        w = np.asarray(mplan.pair_weight, dtype=np.float64)[order]
        self.by_res = {
            R: (tab[starts[j] : starts[j + 1]], w[starts[j] : starts[j + 1]])
            for j, R in enumerate(lat.residuals)
        }
        d = lat.domain
        self.member = np.zeros((len(tables), len(d)), dtype=bool)
        for j, t in enumerate(tables):
            self.member[j, list(t)] = True
        self.cells = np.array([math.prod(d[i] for i in t) for t in tables], dtype=np.float64)
        self.scales = np.asarray(mplan.scales, dtype=np.float64)


def marginal_terms(
    mplan, S, weight: float = 1.0, *, index: _Index | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(coef, count, scale): the noise of every answer of the marginal on ``S`` (row weight
    ``weight``) is Σ coef·z over ``count`` independent discrete Laplace draws of ``scale``
    per term (one term per (table, pattern) with a nonzero count; see the module notes).

    ``mplan`` is a :class:`~matmech.measurements.residual.LaplaceMeasurementPlan`; ``index``
    its look-ups (built when None). Data-independent.
    """
    d = mplan.plan.lattice.domain
    S = tuple(sorted(int(a) for a in S))
    k = len(S)
    ix = _Index(mplan) if index is None else index
    n = np.array([d[i] for i in S], dtype=np.float64)
    bits = np.arange(1 << k)
    inset = ((bits[:, None] >> np.arange(k)[None, :]) & 1).astype(bool)  # (2^k, k)
    # G[r, a]: weight of a cell with pattern a in the term of residual S[r], per unit w
    G = np.empty((1 << k, 1 << k))
    for r in range(1 << k):
        R = inset[r]
        fac = np.where(inset[:, R], 1.0 - 1.0 / n[R], -1.0 / n[R]).prod(axis=1)
        G[r] = fac / np.prod(n[~R])
    J, pos, w = [], [], []
    for r in range(1 << k):
        R = tuple(S[i] for i in range(k) if inset[r, i])
        if R in ix.by_res:  # else not in the lattice (a size-1 attribute): never reconstructed
            tab, wt = ix.by_res[R]
            J.append(tab)
            pos.append(np.full(tab.size, r))
            w.append(wt)
    if not J:
        return np.empty(0), np.empty(0, dtype=np.int64), np.empty(0)
    tabs, inv = np.unique(np.concatenate(J), return_inverse=True)
    B = np.zeros((tabs.size, 1 << k))  # Σ w per (table, residual position)
    np.add.at(B, (inv.reshape(-1), np.concatenate(pos)), np.concatenate(w))
    coef = float(weight) * (B @ G)
    member = ix.member[np.ix_(tabs, list(S))]
    outside = ix.cells[tabs] / np.where(member, n[None, :], 1.0).prod(axis=1)
    ok = ~(inset[None, :, :] & ~member[:, None, :]).any(axis=2)  # pattern a ⊆ S∩T
    other = np.where(member[:, None, :] & ~inset[None, :, :], n[None, None, :] - 1.0, 1.0)
    count = np.where(ok, other.prod(axis=2), 0.0) * outside[:, None]
    scale = np.broadcast_to(ix.scales[tabs][:, None], coef.shape)
    keep = count > 0
    return coef[keep], np.rint(count[keep]).astype(np.int64), scale[keep]


def _finish(law: IntervalLaw, C: np.ndarray, scale: np.ndarray) -> IntervalLaw:
    """``law`` of unweighted answers with noise weights C (rows) → half-widths × ``scale``.

    An "exact" error lies on g·ℤ (g the gcd of the row's integer weights); the
    reconstruction computes it up to float round-off (~1e-15), so a half-width r could drop
    the points ±r: r + g/2 covers the same points (the same exact coverage) robustly."""
    margin = np.zeros(C.shape[0])
    for i in np.flatnonzero(law.method == "exact").tolist():
        c = np.abs(C[i])
        big = c > 1e-10 * max(float(c.max(initial=0.0)), 1e-300)
        margin[i] = 0.5 * float(np.gcd.reduce(np.rint(c[big]).astype(np.int64)))
    half = (law.half + margin) * scale
    return IntervalLaw(law.level, half, law.coverage.copy(), law.method.copy())


@dataclass(frozen=True, eq=False)
class ResidualNoiseLaw:
    """The noise law of every answer of a pure-ε residual release: W's terms ``subsets``
    with row ``weights`` (answers in that order, term after term) under the table
    measurement ``mplan``. :meth:`intervals` is what :meth:`matmech.results.release.Release.interval_law`
    reports for such a release; :meth:`marginal` that of one marginal (the streamed
    :class:`~matmech.results.store.MarginalRelease`). Data-independent."""

    mplan: Any = field(repr=False)
    subsets: tuple = field(repr=False)
    weights: tuple = field(repr=False)
    _index: list = field(default_factory=list, init=False, repr=False)

    def _ix(self) -> _Index:
        if not self._index:
            self._index.append(_Index(self.mplan))
        return self._index[0]

    def _laws(self, subsets, weights, level):
        """The law of each marginal (unweighted: the weight |ω| scales the half-width, so
        a term and its unweighted marginal get the same interval up to that factor)."""
        ix = self._ix()
        prof = [marginal_terms(self.mplan, S, index=ix) for S in subsets]
        width = max(1, max(c.size for c, _, _ in prof))
        shape = (len(prof), width)
        C, K, T = np.zeros(shape), np.zeros(shape, dtype=np.int64), np.ones(shape)
        for i, (c, k, t) in enumerate(prof):
            C[i, : c.size], K[i, : c.size], T[i, : c.size] = c, k, t
        law = law_intervals(C, "discrete_laplace", T, 1.0, level, counts=K)
        return _finish(law, C, np.abs(np.asarray(weights, dtype=np.float64)))

    def marginal(self, S, level: float = 0.95, weight: float = 1.0) -> IntervalLaw:
        """The law of the marginal on ``S`` (one entry: every cell shares it)."""
        return self._laws([S], [weight], level)

    def marginal_half(self, S, std: np.ndarray, level: float = 0.95) -> np.ndarray:
        """Half-widths of the (unweighted) marginal on ``S``, shaped as its ``std``."""
        return np.full(np.shape(std), float(self.marginal(S, level).half[0]))

    def intervals(self, level: float = 0.95, std: np.ndarray | None = None) -> IntervalLaw:
        """Half-width, coverage and method of every answer, W's rows in order; the normal
        quantile of ``std`` when the marginals and tables make more than
        :data:`MAX_PAIRS` pairs."""
        d = self.mplan.plan.lattice.domain
        sizes = [math.prod(d[i] for i in S) for S in self.subsets]
        if len(self.subsets) * len(self.mplan.plan.tables) > MAX_PAIRS and std is not None:
            # coverage: the Edgeworth estimate at the heaviest tails an answer can have: a
            # weighted sum of independent draws has at most the largest one-draw excess kurtosis
            scales = np.unique(np.asarray(self.mplan.scales, dtype=np.float64)).tolist()
            one = max(excess_kurtosis("discrete_laplace", t) for t in scales)
            return normal_intervals(std, level, excess=one)
        law = self._laws(self.subsets, self.weights, level)
        return IntervalLaw(
            law.level,
            np.repeat(law.half, sizes),
            np.repeat(law.coverage, sizes),
            np.repeat(law.method, sizes),
        )


#: Most noise weights (cells × residual coordinates, summed over W's marginals) the
#: (ε, δ) law evaluates for one release; beyond it, or for one marginal, the least-σ rule.
MAX_GAUSSIAN_WEIGHTS = 1 << 22
#: Least discrete Gaussian σ (lattice units) for which the least-σ rule keeps the normal
#: quantile: there κ₄/σ⁴ < 1e-5, and a measured lattice effect (1-way marginals at
#: σ = 1.24: 94.6% at 95%) was gone at σ = 2.3 (3: a margin).
MIN_NORMAL_SIGMA = 3.0


def gaussian_weights(mplan, S) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(C, sigma, var) of the marginal on ``S`` under the (ε, δ) residual measurement
    ``mplan``: C[u, j] the weight of residual row j's discrete Gaussian draw in cell u's
    answer, H_R[j](u_R)/(λ_j² Π_{i∈S∖R} nᵢ) for every residual R ⊆ S (rows of the
    integer contrasts H_R = ⊗ Hᵢ, λ_j² = ‖H_R[j]‖²; the reconstruction of
    :mod:`matmech.estimators.reconstruct`), sigma each draw's σ and var its exact variance
    (:func:`matmech.measurements.residual.row_noise`). Data-independent."""
    lat = mplan.plan.lattice
    d, at = lat.domain, {R: j for j, R in enumerate(lat.residuals)}
    S = tuple(sorted(int(a) for a in S))
    blocks, sig, var = [], [], []
    for r in range(1 << len(S)):
        R = tuple(S[i] for i in range(len(S)) if r >> i & 1)
        if R not in at:
            continue
        block = np.ones((1, 1))
        for i in S:
            if i in R:
                H, l2 = haar_contrasts(d[i])
                f = H.T.astype(np.float64) / l2[None, :].astype(np.float64)
            else:
                f = np.full((d[i], 1), 1.0 / d[i])
            block = np.kron(block, f)
        l2u, cls = row_keys(tuple(d[i] for i in R), range(len(R)))
        params, index, v = row_noise(mplan, least_sigma(mplan, [mplan.plan.variances[at[R]]], l2u))
        sd = np.array([math.sqrt(p.a / p.b) for p in params])
        blocks.append(block)
        sig.append(sd[index[0]][cls])
        var.append(v[index[0]][cls])
    return np.hstack(blocks), np.concatenate(sig), np.concatenate(var)


@dataclass(frozen=True, eq=False)
class GaussianResidualLaw:
    """The (ε, δ) residual answers: each cell's noise is Σ_j C[u, j]·Z_j over independent
    discrete Gaussian draws (:func:`gaussian_weights`), its law evaluated by
    :func:`~matmech.privacy.confidence.law_intervals` (a binned convolution for at most 256
    draws, else the fourth-cumulant normal / Cornish–Fisher quantile). Beyond
    :data:`MAX_GAUSSIAN_WEIGHTS`, the least-σ rule: the normal quantile when every draw has
    σ ≥ :data:`MIN_NORMAL_SIGMA` and an Edgeworth error within ``NORMAL_TOLERANCE`` (an
    answer's |excess kurtosis| is at most its least-σ draw's), else Chebyshev's
    std/√(1 − level), whose coverage is at least the level for any law."""

    mplan: Any = field(repr=False)
    subsets: tuple = field(repr=False)
    weights: tuple = field(repr=False)
    least_sigma: float = 0.0

    def normal_ok(self, level: float) -> bool:
        """Whether the least-σ rule keeps the normal quantile at ``level``."""
        t = float(self.least_sigma)
        k4 = excess_kurtosis("discrete_gaussian", t)
        return t >= MIN_NORMAL_SIGMA and edgeworth_error(k4, level) <= NORMAL_TOLERANCE

    def _rule(self, level, std):
        std = np.asarray(std, dtype=np.float64)
        if not self.normal_ok(level):
            return chebyshev_intervals(std, level)
        one = excess_kurtosis("discrete_gaussian", float(self.least_sigma))  # the largest excess
        return normal_intervals(std, level, excess=one)

    def _size(self, subsets) -> int:
        d = self.mplan.plan.lattice.domain
        return sum(math.prod(d[i] for i in S) * math.prod(d[i] for i in S) for S in subsets)

    def _laws(self, subsets, weights, level):
        """Per-cell law of the marginals on ``subsets``, stacked (weights scale them)."""
        parts = [gaussian_weights(self.mplan, S) for S in subsets]
        width = max(c.shape[1] for c, _, _ in parts)
        rows = sum(c.shape[0] for c, _, _ in parts)
        C, T = np.zeros((rows, width)), np.ones((rows, width))
        scale, at = np.empty(rows), 0
        for (c, sig, _), w in zip(parts, weights):
            C[at : at + c.shape[0], : c.shape[1]] = c
            T[at : at + c.shape[0], : c.shape[1]] = sig[None, :]
            scale[at : at + c.shape[0]] = abs(float(w))
            at += c.shape[0]
        law = law_intervals(C, "discrete_gaussian", T, 1.0, level)
        return _finish(law, C, scale)

    def intervals(self, level: float = 0.95, std: np.ndarray | None = None) -> IntervalLaw:
        """Half-width, coverage and method of every answer, W's rows in order (the least-σ
        rule on ``std`` beyond :data:`MAX_GAUSSIAN_WEIGHTS`)."""
        if self._size(self.subsets) > MAX_GAUSSIAN_WEIGHTS and std is not None:
            return self._rule(level, std)
        return self._laws(self.subsets, self.weights, level)

    def marginal_half(self, S, std: np.ndarray, level: float = 0.95) -> np.ndarray:
        """Half-widths of the (unweighted) marginal on ``S``, shaped as its ``std``."""
        if self._size([S]) > MAX_GAUSSIAN_WEIGHTS:
            return self._rule(level, np.reshape(std, -1)).half.reshape(np.shape(std))
        return self._laws([S], [1.0], level).half.reshape(np.shape(std))


def gaussian_law(mplan: Any, subsets, weights) -> GaussianResidualLaw:
    """The :class:`GaussianResidualLaw` of W's terms under a ``ResidualMeasurementPlan``
    (with the least σ lower bound over its residual rows for the fallback rule)."""
    least = min(float(b.tau.min()) for b in residual_batches(mplan))
    return GaussianResidualLaw(mplan, tuple(subsets), tuple(float(w) for w in weights), least)
