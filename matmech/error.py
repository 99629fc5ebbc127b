"""Sensitivity and the analytic error of the Matrix Mechanism (Li et al., PODS 2010).

With strategy A, noise of per-unit variance P and least-squares reconstruction, the answer
to query w has variance P·w(AᵀA)⁺wᵀ and the total squared error is
P·trace(WᵀW (AᵀA)⁺). For pure ε-DP (Laplace, scale Δ₁/ε) P = 2Δ₁²/ε²; for (ε, δ) the
Gaussian σ² of :func:`matmech.privacy.calibration.gaussian_sigma` with Δ₂. Every figure here is a
variance in squared counts, except ``measure="rmse"`` which is in counts.

The pseudo-inverse is kept structured (block-spectral for identity, uniform hierarchies and
Haar on 2^k cells; the nested-partition covariance of
:class:`~matmech.linalg.spectral.NestedCovariance` for hierarchies and Haar on any n;
Kronecker for products), and traces/diagonals against interval workloads use their
closed forms, so that n = 65536 cells costs O(n·levels) rather than dense n×n algebra.

Unions of marginals on marginal-lattice strategies (MarginalStrategy, ResidualStrategy or a
union of marginals used as its own strategy) take trace, per-query variances and their max
from the lattice eigenvalues, trace(W_S M W_Sᵀ) = Πᵢ∉S dᵢ Σ_{T ⊆ S} m_T/λ_T (the form the
marginal optimiser and advise score with); Kronecker strategies against stacks of Kronecker
products factor term by term, Σⱼ wⱼ² Πᵢ trace(Gᵢⱼ Mᵢ); sensitivities of stacks of Kronecker
products come from the factors (:func:`matmech.linalg.normmax.factored_sensitivity`). None of
these builds a domain-length vector.
"""

from __future__ import annotations

import math
from functools import reduce

import numpy as np
from matmech.linalg.lazy import sla

from matmech.privacy.calibration import (
    measurement_variance,
    neighbor_sensitivity,
    noise_variance,
)
from matmech.privacy.params import check_privacy_params
from matmech.linalg.intervals import Intervals, _prefix_apply
from matmech.linalg.linop import Identity, Kron, Scaled, VStack, as_linop
from matmech.linalg.spectral import BlockSpectral, NestedCovariance
from matmech.linalg.structured import (
    MAX_DENSE_N,
    MAX_LATTICE_ATTRIBUTES,
    _marginal_terms,
    _subset_sum,
    _workload_spectrum,
    pinv_gram,
    split_diagonal,
    woodbury_factor,
)
from matmech.validate import linear
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names used only in annotations
    from matmech.linalg.linop import LinOp
    import numpy.typing as npt

__all__ = [
    "sensitivity",
    "expected_error",
    "error_figures",
    "per_query_variance",
    "measured_variances",
    "lower_bound",
    "MAX_DENSE_N",
    "MAX_VARIANCE_ROWS",
    "marginal_spectrum",
    "noise_weights",
    "NOISE_MODELS",
]

#: Largest number of per-query variances returned as a vector.
MAX_VARIANCE_ROWS = 50_000_000
#: Above this many cells, the largest per-query variance of a rank-deficient interval workload
#: used as its own strategy (a dense n×n pseudo-inverse) is left out of :func:`error_figures`
#: (None) unless ``measure="max"`` is asked for alone.
MAX_SELF_MAX_N = 512
MEASURES = ("total", "rmse", "max")
#: ``noise=`` of the error functions: the exact discrete noise a release draws (default),
#: or the continuous Laplace / Gaussian of the textbook formulas (2Δ₁²/ε², σ²).
NOISE_MODELS = ("discrete", "continuous")
#: noise_weights forms at most this many entries (m·p, and m·n, n·n for the dense inverse).
MAX_WEIGHT_ENTRIES = 1 << 24


def sensitivity(A: LinOp | npt.ArrayLike, p: int = 1, neighbors: str = "add_remove") -> float:
    """L_p sensitivity of x ↦ A x: the largest column p-norm, doubled for substitution.

    Under add/remove neighbours one record changes one cell of x by 1; under substitution
    two cells change (the slides' "histogram sensitivity 2"), which at most doubles it.

    Parameters
    ----------
    A : LinOp or array_like
        The strategy (or workload) matrix.
    p : {1, 2}, default 1
        L1 (pure ε, Laplace) or L2 ((ε, δ), Gaussian) sensitivity.
    neighbors : {"add_remove", "substitute"}, default "add_remove"
        The neighbouring relation; ``"substitute"`` doubles the figure.

    Returns
    -------
    float
        The largest column p-norm of A (times 2 for substitution).

    Raises
    ------
    ValueError
        ``p`` not 1 or 2, an unknown ``neighbors``, or an empty matrix.
    TypeError
        ``A`` is not a matrix or operator.

    Examples
    --------
    >>> from matmech import strategies as S
    >>> sensitivity(S.hierarchical(8))      # 4 levels: every cell is in 4 nodes
    4.0
    >>> sensitivity(S.identity(4), neighbors="substitute")
    2.0
    """
    return neighbor_sensitivity(as_linop(linear(A, "A")).sensitivity(p), neighbors)


def _unit_variance(A, eps, delta, neighbors, noise="discrete"):
    """Per-measurement noise variance. ``"discrete"``: what a release draws — discrete
    Laplace at t = Δ₁/ε (variance 2e^{-1/t}/(1−e^{-1/t})², 1.841 at t = 1, not 2) or discrete
    Gaussian at σ (Canonne, Kamath, Steinke 2020), on the integers for integer strategies;
    real-valued strategies are measured on a grid g ≤ scale·2⁻²⁰ where the two differ by at
    most g²/6, so the continuous figure is kept there. ``"continuous"``: 2Δ₁²/ε² or σ²."""
    if noise not in NOISE_MODELS:
        raise ValueError(f"noise must be one of {NOISE_MODELS}, got {noise!r}")
    eps, delta = check_privacy_params(eps, delta)
    sens = sensitivity(A, 1 if delta == 0 else 2, neighbors)
    discrete = noise == "discrete" and as_linop(A).integer_valued()
    return measurement_variance(eps, delta, sens, discrete=discrete)


def _as_dense(M):
    return M.dense(max_entries=MAX_DENSE_N**2)


# -- quadratic forms W M Wᵀ: trace, diagonal, max ---------------------------------------------


def _kron_match(W, M):
    return (
        isinstance(W, Kron)
        and isinstance(M, Kron)
        and len(W.factors) == len(M.factors)
        and all(w.shape[1] == m.shape[0] for w, m in zip(W.factors, M.factors))
    )


def _prefix_cov(M, n):
    """C = P̃ M P̃ᵀ ((n+1)×(n+1)), so that interval rows read their variance from C."""
    md = _as_dense(M)
    return _prefix_apply(_prefix_apply(md).T)


def _trace(W, M):
    """trace(W M Wᵀ): split over W's row blocks and M's terms, then the pairwise fast paths."""
    blocks = W.row_blocks()
    if blocks is not None:
        return sum(w**2 * _trace(b, M) for w, b in blocks)
    terms = M.linear_terms()
    if terms is not None:
        return sum(c * _trace(W, t) for c, t in terms)
    if _kron_match(W, M):
        return float(np.prod([_trace(w, m) for w, m in zip(W.factors, M.factors)]))
    if isinstance(M, Identity):
        return float((W.col_norms(2) ** 2).sum())
    if isinstance(W, Intervals):
        if isinstance(M, BlockSpectral):
            return M.trace_against(W.block_energy)
        if isinstance(M, NestedCovariance):
            return M.interval_trace(W)
        return W.prefix_quadratic_sum(_prefix_cov(M, W.n))
    if isinstance(M, NestedCovariance) and isinstance(W, Identity):
        return float(M.diagonal().sum())
    g = W.gram().dense(max_entries=MAX_DENSE_N**2)
    return float((g * _as_dense(M)).sum())


def _row_chunks(W, size=None):
    m, n = W.shape
    size = size or max(1, 4_000_000 // n)
    for start in range(0, m, size):
        yield start, min(m, start + size)


def _diag(W, M):
    """diag(W M Wᵀ) as a vector of length m."""
    blocks = W.row_blocks()
    if blocks is not None:
        return np.concatenate([w**2 * _diag(b, M) for w, b in blocks])
    terms = M.linear_terms()
    if terms is not None:
        return sum(c * _diag(W, t) for c, t in terms)
    if _kron_match(W, M):
        return reduce(np.kron, [_diag(w, m) for w, m in zip(W.factors, M.factors)])
    if isinstance(W, Kron) and isinstance(M, Identity):
        return reduce(np.kron, [_diag(w, Identity(w.shape[1])) for w in W.factors])
    if isinstance(W, Intervals):
        if isinstance(M, Identity):
            lo, hi = W.bounds()
            return (hi - lo + 1).astype(np.float64)
        if isinstance(M, BlockSpectral):
            return sum(c * W.block_overlaps(s) / s for c, s in zip(M.level_weights(), M.sizes))
        if isinstance(M, NestedCovariance):
            return M.interval_diagonal(W)
        return W.prefix_quadratic(_prefix_cov(M, W.n))
    F = getattr(M, "gram_factor", None)
    if F is not None:  # M = F Fᵀ: sums of squares (no cancellation)
        out = np.empty(W.shape[0])
        for start, stop in _row_chunks(W):
            out[start:stop] = np.square(np.asarray(W.rows(start, stop)) @ F).sum(1)
        return out
    md = None if isinstance(M, Identity) else _as_dense(M)
    out = np.empty(W.shape[0])
    for start, stop in _row_chunks(W):
        r = W.rows(start, stop)
        out[start:stop] = (r * r).sum(1) if md is None else ((r @ md) * r).sum(1)
    return out


def _max(W, M):
    """max diag(W M Wᵀ), through the structure where the vector would be too long."""
    blocks = W.row_blocks()
    if blocks is not None:
        return max(w**2 * _max(b, M) for w, b in blocks)
    terms = M.linear_terms()
    if terms is not None and len(terms) == 1:  # a scaling (c ≥ 0 for a covariance)
        c, t = terms[0]
        return c * _max(W, t)
    if _kron_match(W, M):
        return float(np.prod([_max(w, m) for w, m in zip(W.factors, M.factors)]))
    if isinstance(W, Kron) and isinstance(M, Identity):
        return float(np.prod([_max(w, Identity(w.shape[1])) for w in W.factors]))
    if W.shape[0] > MAX_VARIANCE_ROWS:
        raise ValueError(
            f"the largest per-query variance of a workload with {W.shape[0]:,} rows is not computed row by row "
            f"(limit {MAX_VARIANCE_ROWS:,}); use measure='total' or 'rmse'"
        )
    return float(_diag(W, M).max())


def _rowspace_residual(W, A, nul):
    """trace(G_W N_A) / trace(G_W): 0 when every row of W lies in A's row space."""
    if nul is None:
        return 0.0
    if isinstance(nul, tuple):  # Kronecker strategy: factor by factor where W factors too
        if all(x is None for x in nul[1]):
            return 0.0
        if isinstance(W, VStack):
            return max(_rowspace_residual(b, A, nul) for b in W.blocks)
        if isinstance(W, Kron) and len(W.factors) == len(A.factors):
            return max(_rowspace_residual(w, a, x) for w, a, x in zip(W.factors, A.factors, nul[1]))
        proj = reduce(
            np.kron,
            [
                np.eye(a.shape[1]) - (0 if x is None else _as_dense(x))
                for a, x in zip(A.factors, nul[1])
            ],
        )
        nul = as_linop(np.eye(A.shape[1]) - proj)
    scale = _trace(W, Identity(W.shape[1]))
    return _trace(W, nul) / scale if scale > 0 else 0.0


def _check_pair(W, A):
    W, A = as_linop(linear(W, "W")), as_linop(linear(A, "A"))  # named refusals (matmech.validate)
    if W.shape[1] != A.shape[1]:
        raise ValueError(
            f"shape mismatch: the workload has {W.shape[1]} columns (cells) but the strategy has {A.shape[1]} "
            f"(shapes {W.shape} and {A.shape})"
        )
    return W, A


def _covariance(W, A):
    M, nul = pinv_gram(A)
    r = _rowspace_residual(W, A, nul)
    if r > 1e-8:
        raise ValueError(
            f"the workload's rows are not in the strategy's row space (relative residual {r:.3g}): "
            "some queries cannot be answered from these measurements; add rows to the strategy "
            "(e.g. stack it with identity) or choose another"
        )
    return M


# -- marginal workloads on marginal-lattice strategies: the spectrum advise scores with ---------------


def _lattice_eigenvalues(A, domain):
    """λ_T of AᵀA on the classes of :func:`marginal_spectrum` when A is a marginal-lattice
    strategy over ``domain`` (a :class:`~matmech.optimizers.marginals.MarginalStrategy`,
    ResidualStrategy or a plain weighted union of marginals), else None."""
    if (
        getattr(A, "domain", None) is not None
        and hasattr(A, "eigenvalues")
        and tuple(A.domain) == tuple(domain)
    ):
        return np.asarray(A.eigenvalues(), dtype=np.float64)
    if isinstance(A, (VStack, Kron)):
        marg = _marginal_terms(A)
        if marg is not None and marg[1] == tuple(domain):
            return _workload_spectrum(*marg)[0]
    return None


def _lattice_pair(W, A):
    """For a union of marginals W on a marginal-lattice strategy A: per W block (weight²,
    rows, trace of the block's W M Wᵀ) with M = (AᵀA)⁺, from the eigenvalues λ_T (the
    structure :class:`~matmech.optimizers.marginals.MarginalStrategy` is scored with); None
    when the pair has no such structure. Raises when W is not in A's row space."""
    if not isinstance(W, (VStack, Kron)) or not isinstance(A, (VStack, Kron)):
        return None
    marg = _marginal_terms(W)
    if marg is None or len(marg[1]) > MAX_LATTICE_ATTRIBUTES:
        return None
    terms, domain = marg
    lam = _lattice_eigenvalues(A, domain)
    if lam is None:
        return None
    k = len(domain)
    mu, mult, out_prod = _workload_spectrum(terms, domain)
    need = (mu > 0) & (mult > 0)
    zero = lam <= 1e-12 * max(float(lam.max()), 1e-300)
    null = need & zero
    if null.any():
        r = float((mult * mu)[null].sum() / (mult * mu)[need].sum())
        raise ValueError(
            f"the workload's rows are not in the strategy's row space (relative residual {r:.3g}): "
            "some queries cannot be answered from these measurements; add rows to the strategy "
            "(e.g. stack it with identity) or choose another"
        )
    q = np.zeros_like(lam)
    ok = (mult > 0) & ~zero  # classes with λ_T = 0 are outside every W subset here
    q[ok] = mult[ok] / lam[ok]
    per_subset = _subset_sum(q, k)  # Σ_{T ⊆ S} m_T / λ_T
    out = []
    for w2, s in terms:
        mask = sum(1 << i for i in s)
        rows = math.prod(domain[i] for i in s)
        out.append((w2, rows, float(out_prod[mask] * per_subset[mask])))
    return out


def _lattice_diag(blocks):
    """diag(W M Wᵀ): constant within each marginal (M commutes with relabelling each attribute's values)."""
    return np.concatenate([np.full(rows, w2 * tr / rows) for w2, rows, tr in blocks])


def _check_measure(measure):
    if measure not in MEASURES:
        raise ValueError(f"measure must be one of {MEASURES}, got {measure!r}")


def expected_error(
    W: LinOp | npt.ArrayLike,
    A: LinOp | npt.ArrayLike,
    eps: float = 1.0,
    delta: float = 0.0,
    measure: str = "total",
    *,
    neighbors: str = "add_remove",
    noise: str = "discrete",
) -> float:
    """Expected error of answering W by measuring A and least squares.

    ``measure="total"``: Σ of per-query variances (squared counts),
    ``"rmse"``: sqrt(total/m) (counts), ``"max"``: the largest per-query variance.
    δ = 0 is pure ε-DP with Laplace noise; δ > 0 the Gaussian mechanism with L2
    sensitivity. ``noise="discrete"`` (default) is the variance of the exact discrete noise
    :func:`matmech.release` draws, so this equals ``Release.expected_error`` for the same
    strategy; ``noise="continuous"`` the textbook 2Δ₁²/ε² (4% higher in RMSE at Δ₁/ε = 1).
    Raises ValueError if W is not supported by A.

    Parameters
    ----------
    W : LinOp or array_like
        The workload (m queries over n cells).
    A : LinOp or array_like
        The strategy (k measurements over the same n cells).
    eps : float, default 1.0
        ε in [1e-4, 100].
    delta : float, default 0.0
        0 for pure ε-DP, else in [1e-100, 1).
    measure : {"total", "rmse", "max"}, default "total"
        Sum of variances (squared counts), RMSE per query (counts), or largest variance.
    neighbors : {"add_remove", "substitute"}, default "add_remove"
        The neighbouring relation.
    noise : {"discrete", "continuous"}, default "discrete"
        The noise whose variance is used: the exact discrete noise a release draws, or the
        continuous Laplace / Gaussian of the textbook formula.

    Returns
    -------
    float
        The exact expected error (an expectation over the noise, not a simulation).

    Raises
    ------
    ValueError
        W not in A's row space, mismatched shapes, ε or δ out of range, an unknown
        ``measure``, or a size whose exact figure would not fit in memory.
    TypeError
        W or A is not a matrix or operator, or ε/δ is not a real number.

    Examples
    --------
    >>> from matmech import workloads as W, strategies as S
    >>> expected_error(W.prefix(8), S.identity(8), eps=1.0, noise="continuous")  # 2/ε² · 36
    72.0
    >>> expected_error(W.prefix(8), S.identity(8), eps=1.0, measure="rmse", noise="continuous")
    3.0
    >>> round(expected_error(W.prefix(8), S.identity(8), eps=1.0), 4)  # discrete Laplace: 1.8407 · 36
    66.2885
    """
    _check_measure(measure)
    return error_figures(W, A, eps, delta, measures=(measure,), neighbors=neighbors, noise=noise)[
        measure
    ]


def error_figures(
    W, A, eps=1.0, delta=0.0, *, measures=MEASURES, neighbors="add_remove", noise="discrete"
):
    """{measure: value} for several measures from one pseudo-inverse of AᵀA.

    ``"max"`` is None when W has too many rows and no structure to take the max through.
    ``noise``: as :func:`expected_error`.
    """
    for m in measures:
        _check_measure(m)
    W, A = _check_pair(W, A)
    unit = _unit_variance(A, eps, delta, neighbors, noise)
    out, M = {}, None
    if A is W and isinstance(W, Intervals):
        # A = W (Li et al. 2010's extreme strategy): trace(G G⁺) = rank W; with linearly
        # independent rows W W⁺ = I, so every query has exactly the unit variance.
        rank = W.rank()
        total = unit * rank
        if W.shape[0] == rank:
            out["max"] = unit
        elif measures != ("max",) and W.shape[1] > MAX_SELF_MAX_N:
            out["max"] = None  # the leverage scores need a dense n×n inverse: only when asked alone
    elif (lattice := _lattice_pair(W, A)) is not None:
        total = unit * sum(w2 * tr for w2, _, tr in lattice)
        out["max"] = unit * max(w2 * tr / rows for w2, rows, tr in lattice)
    elif (tr := getattr(A, "factored_trace", lambda W: None)(W)) is not None:
        total = unit * tr  # e.g. GeneralMarginalStrategy: exact, from its factors
    else:
        M = _covariance(W, A)
        if "max" in measures and isinstance(W, Intervals) and W.shape[0] <= MAX_VARIANCE_ROWS:
            # one pass: interval rows get their variances through the same block sums the
            # trace uses, so the total is their sum (compare on 2·10⁶ intervals: half the time)
            d = _diag(W, M)
            total, out["max"] = unit * float(d.sum()), unit * float(d.max())
        else:
            total = unit * _trace(W, M)
    out["total"], out["rmse"] = total, math.sqrt(total / W.shape[0])
    if "max" in measures and "max" not in out:
        M = _covariance(W, A) if M is None else M
        try:
            out["max"] = unit * _max(W, M)
        except ValueError:
            if measures == ("max",):
                raise
            out["max"] = None
    return {m: out[m] for m in measures}


def per_query_variance(
    W: LinOp | npt.ArrayLike,
    A: LinOp | npt.ArrayLike,
    eps: float = 1.0,
    delta: float = 0.0,
    *,
    neighbors: str = "add_remove",
    noise: str = "discrete",
) -> np.ndarray:
    """Vector of the m per-query variances P·diag(W (AᵀA)⁺ Wᵀ) (squared counts).

    Parameters
    ----------
    W : LinOp or array_like
        The workload (at most 5·10⁷ queries; use ``expected_error(measure="max")`` beyond).
    A : LinOp or array_like
        The strategy.
    eps : float, default 1.0
        ε in [1e-4, 100].
    delta : float, default 0.0
        0 for pure ε-DP, else in [1e-100, 1).
    neighbors : {"add_remove", "substitute"}, default "add_remove"
        The neighbouring relation.
    noise : {"discrete", "continuous"}, default "discrete"
        As in :func:`expected_error`.

    Returns
    -------
    numpy.ndarray
        The m variances, in squared counts.

    Raises
    ------
    ValueError
        W not answerable from A, too many queries, or ε/δ out of range.
    TypeError
        W or A is not a matrix or operator.

    Examples
    --------
    >>> from matmech import workloads as W, strategies as S
    >>> per_query_variance(W.prefix(4), S.identity(4), 1.0, noise="continuous").tolist()
    [2.0, 4.0, 6.0, 8.0]
    """
    W, A = _check_pair(W, A)
    unit = _unit_variance(A, eps, delta, neighbors, noise)
    return unit * _query_diag(W, A)


def _query_diag(W, A):
    """diag(W (AᵀA)⁺ Wᵀ) for checked W, A: lattice spectrum, structured covariance."""
    if W.shape[0] > MAX_VARIANCE_ROWS:
        raise ValueError(
            f"the workload has {W.shape[0]:,} queries, more than {MAX_VARIANCE_ROWS:,} variances to return; "
            "use expected_error(..., measure='max') or measure='total'"
        )
    lattice = _lattice_pair(W, A)
    if lattice is not None:
        return _lattice_diag(lattice)
    return _diag(W, _covariance(W, A))


def measured_variances(W, A, variance):
    """diag(W (AᵀA)⁺ Wᵀ)·``variance``: the per-answer variances when every row of A was
    measured with noise of that (exact) variance (Li et al., PODS 2010).

    Interval workloads on diagonal-plus-rows strategies (p-Identity) use the Woodbury form of
    :func:`_interval_diag_split`, O(n r² + m r), instead of the n×n inverse.
    """
    W, A = _check_pair(W, A)
    if isinstance(W, Intervals):
        split = split_diagonal(A)
        if split is not None:
            return _interval_diag_split(W, split) * variance
    return _query_diag(W, A) * variance


def noise_weights(W, A):
    """C = W (AᵀA)⁺ Aᵀ (m×p, dense): answer i of least squares is W x + Σⱼ C[i, j]·noiseⱼ
    (Li et al., PODS 2010), the input of the exact interval laws of
    :mod:`matmech.privacy.confidence`. None when m·p, m·n or n² exceeds
    :data:`MAX_WEIGHT_ENTRIES` (the caller then uses moments only)."""
    W, A = _check_pair(W, A)
    (m, n), p = W.shape, A.shape[0]
    if max(m * p, m * n, n * n) > MAX_WEIGHT_ENTRIES:
        return None
    Wd = W.dense(max_entries=MAX_WEIGHT_ENTRIES)
    if isinstance(A, Identity):
        return Wd
    M = _covariance(W, A)
    B = (
        Wd.T if isinstance(M, Identity) else np.asarray(as_linop(M).matmat(Wd.T))
    )  # n×m, structured M
    return np.asarray(A.matmat(B)).T


def _interval_diag_split(W, split):
    """diag(W (D + RᵀR)⁻¹ Wᵀ) for interval rows without the n×n inverse.

    With (D + RᵀR)⁻¹ = D⁻¹ − D⁻¹Rᵀ C⁻¹ R D⁻¹ (C = I + RD⁻¹Rᵀ = LLᵀ) and a row w = 1[lo, hi]:
    w D⁻¹ wᵀ = Σ_{lo..hi} 1/d, and the low-rank part is ‖L⁻¹ R D⁻¹ wᵀ‖² = ‖Z_{hi+1} − Z_lo‖²
    with Z = P̃ D⁻¹ Rᵀ L⁻ᵀ (prefix sums, (n+1)×r). O(n r² + m r).
    """
    d, R = split
    dinv, RD, (L, _) = woodbury_factor(d, R)
    Z = np.zeros((W.n + 1, R.shape[0]))
    np.cumsum(sla.solve_triangular(L, RD, lower=True, check_finite=False).T, axis=0, out=Z[1:])
    cd = np.concatenate([[0.0], np.cumsum(dinv)])
    out = np.empty(W.shape[0])
    for start in range(0, W.shape[0], 16384):
        lo, hi = W.bounds(start, min(W.shape[0], start + 16384))
        diff = Z[hi + 1] - Z[lo]
        out[start : start + lo.size] = cd[hi + 1] - cd[lo] - np.einsum("ij,ij->i", diff, diff)
    return out


def marginal_spectrum(terms, domain):
    """Eigenvalues of G = Σ_S w_S² ⊗ᵢ (I if i ∈ S else 11ᵀ) with their multiplicities.

    In the basis that is constant or mean-zero per attribute, the eigenvector class T
    (mean-zero on the attributes in T) has λ_T = Σ_{S ⊇ T} w_S² Πᵢ∉S dᵢ and multiplicity
    Πᵢ∈T (dᵢ − 1).
    """
    k = len(domain)
    out = []
    for mask in range(1 << k):
        t = frozenset(i for i in range(k) if mask >> i & 1)
        lam = sum(
            w2 * math.prod(d for i, d in enumerate(domain) if i not in s)
            for w2, s in terms
            if t <= s
        )
        out.append((t, lam, math.prod(domain[i] - 1 for i in t)))
    return out


def _singular_value_sum(W):
    """Σ σᵢ(W) (the nuclear norm), factor by factor for Kronecker products."""
    marg = _marginal_terms(W) if isinstance(W, (VStack, Kron)) else None
    if marg is not None and not isinstance(W, Kron):
        mu, mult, _ = _workload_spectrum(*marg)  # vectorised marginal_spectrum
        return float((mult * np.sqrt(np.clip(mu, 0, None))).sum())
    if isinstance(W, Kron):
        return float(np.prod([_singular_value_sum(f) for f in W.factors]))
    if isinstance(W, Scaled):
        return abs(W.c) * _singular_value_sum(W.base)
    lam = W.gram_eigenvalues()
    if lam is not None:
        return float(np.sqrt(lam).sum())
    n = W.shape[1]
    if n > MAX_DENSE_N:
        raise ValueError(
            f"the SVD bound needs the eigenvalues of an n×n gram; n={n} exceeds the limit {MAX_DENSE_N}"
        )
    lam = np.linalg.eigvalsh(W.gram().dense(max_entries=MAX_DENSE_N**2))
    return float(np.sqrt(np.clip(lam, 0, None)).sum())


def _nuclear_norm(W):
    """:func:`_singular_value_sum`, kept on the (immutable) operator: ``matmech compare``
    asks twice, and a dense n = 4096 eigendecomposition takes ~15 s on one core."""
    v = getattr(W, "_mm_nuclear_norm", None)
    if v is None:
        v = _singular_value_sum(W)
        try:
            object.__setattr__(W, "_mm_nuclear_norm", v)
        except (AttributeError, TypeError):  # an operator with __slots__: not kept
            pass
    return v


def lower_bound(
    W: LinOp | npt.ArrayLike,
    eps: float = 1.0,
    delta: float = 0.0,
    measure: str = "total",
    *,
    neighbors: str = "add_remove",
) -> float:
    """SVD lower bound of Li & Miklau (ICDT 2013): total error ≥ P·(Σσᵢ(W))²/n.

    P is the noise variance of a unit-sensitivity measurement (Laplace 2/ε² for δ = 0,
    Gaussian σ² for δ > 0). The bound is proved for L2 (ε, δ) strategies; for pure ε it
    still holds for every strategy but is loose. ``"max"`` returns total/m (no query can
    be below the average); ``"rmse"`` sqrt(total/m).

    Parameters
    ----------
    W : LinOp or array_like
        The workload.
    eps : float, default 1.0
        ε in [1e-4, 100].
    delta : float, default 0.0
        0 for pure ε-DP, else in [1e-100, 1).
    measure : {"total", "rmse", "max"}, default "total"
        As in :func:`expected_error`.
    neighbors : {"add_remove", "substitute"}, default "add_remove"
        The neighbouring relation.

    Returns
    -------
    float
        A figure no strategy can beat, in the units of ``measure``.

    Raises
    ------
    ValueError
        ε/δ out of range, an unknown ``measure``, or a workload whose singular values
        cannot be computed in memory.
    TypeError
        W is not a matrix or operator.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> round(lower_bound(W.prefix(8), eps=1.0), 3)
    33.103
    """
    _check_measure(measure)
    W = as_linop(linear(W, "W"))
    eps, delta = check_privacy_params(eps, delta)
    unit = noise_variance(eps, delta, sensitivity=neighbor_sensitivity(1.0, neighbors))
    total = unit * _nuclear_norm(W) ** 2 / W.shape[1]
    return (
        total
        if measure == "total"
        else (math.sqrt(total / W.shape[0]) if measure == "rmse" else total / W.shape[0])
    )
