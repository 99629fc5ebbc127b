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

import numpy as np

from matmech.privacy.calibration import (
    measurement_variance,
    neighbor_sensitivity,
    noise_variance,
)
from matmech.privacy.params import check_privacy_params
from matmech.linalg.linop import as_linop
from matmech.linalg.marginal_spectrum import (
    lattice_diag as _lattice_diag,
    lattice_pair as _lattice_pair,
    nuclear_norm as _nuclear_norm,
)
from matmech.linalg.quadratic import (
    MAX_VARIANCE_ROWS,
    covariance as _covariance,
    quadratic_diag as _diag,
    quadratic_max as _max,
    quadratic_trace as _trace,
    woodbury_diag,
)
from matmech.linalg.structured import MAX_DENSE_N
from matmech.validate import choice, linear
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names used only in annotations
    from matmech.linalg.linop import LinOp
    import numpy.typing as npt


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


def _check_pair(W, A):
    W, A = as_linop(linear(W, "W")), as_linop(linear(A, "A"))  # named refusals (matmech.validate)
    if W.shape[1] != A.shape[1]:
        raise ValueError(
            f"shape mismatch: the workload has {W.shape[1]} columns (cells) but the strategy has {A.shape[1]} "
            f"(shapes {W.shape} and {A.shape})"
        )
    return W, A


def _check_measure(measure):
    choice(measure, "measure", MEASURES)


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
    if A is W and getattr(W, "rank", None) is not None:
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
        if (
            "max" in measures
            and getattr(W, "prefix_quadratic", None) is not None
            and W.shape[0] <= MAX_VARIANCE_ROWS
        ):
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
    :func:`matmech.linalg.quadratic.woodbury_diag`, O(n r² + m r), instead of the n×n inverse.
    """
    W, A = _check_pair(W, A)
    d = woodbury_diag(W, A)
    return (_query_diag(W, A) if d is None else d) * variance


def noise_weights(W, A):
    """C = W (AᵀA)⁺ Aᵀ (m×p, dense): answer i of least squares is W x + Σⱼ C[i, j]·noiseⱼ
    (Li et al., PODS 2010), the input of the exact interval laws of
    :mod:`matmech.privacy.confidence`. None when m·p, m·n or n² exceeds
    :data:`MAX_WEIGHT_ENTRIES` (the caller then uses moments only)."""
    W, A = _check_pair(W, A)
    (m, n), p = W.shape, A.shape[0]
    if max(m * p, m * n, n * n) > MAX_WEIGHT_ENTRIES:
        return None
    # a few rows (selected ones) of a wide structured W: m transposed products, not n
    Wd = np.asarray(W.rmatmat(np.eye(m))).T if m < n else W.dense(max_entries=MAX_WEIGHT_ENTRIES)
    if getattr(A, "is_identity", False):
        return Wd
    M = _covariance(W, A)
    B = (
        Wd.T if getattr(M, "is_identity", False) else np.asarray(as_linop(M).matmat(Wd.T))
    )  # n×m, structured M
    return np.asarray(A.matmat(B)).T


def lower_bound(
    W: LinOp | npt.ArrayLike,
    eps: float = 1.0,
    delta: float = 0.0,
    measure: str = "total",
    *,
    neighbors: str = "add_remove",
    max_dense_n: int = MAX_DENSE_N,
) -> float:
    """SVD lower bound of Li & Miklau (ICDT 2013): total error ≥ P·(Σσᵢ(W))²/n.

    P is the noise variance of a unit-sensitivity measurement (Laplace 2/ε² for δ = 0,
    Gaussian σ² for δ > 0). The bound is proved for L2 (ε, δ) strategies; for pure ε it
    still holds for every strategy but is loose. ``"max"`` returns total/m (no query can
    be below the average); ``"rmse"`` sqrt(total/m).

    Parameters
    ----------
    W, eps, delta : LinOp or array_like, float, float
        The workload, ε (default 1.0) and δ (default 0.0) (as :func:`expected_error`).
    measure : {"total", "rmse", "max"}, default "total"
        As in :func:`expected_error`.
    neighbors : {"add_remove", "substitute"}, default "add_remove"
        The neighbouring relation.
    max_dense_n : int, default MAX_DENSE_N
        The largest n for which Σσᵢ may come from a dense eigendecomposition of the gram
        (structured workloads have closed forms at any size); ValueError above it.

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
    total = unit * _nuclear_norm(W, max_dense_n) ** 2 / W.shape[1]
    return (
        total
        if measure == "total"
        else (math.sqrt(total / W.shape[0]) if measure == "rmse" else total / W.shape[0])
    )
