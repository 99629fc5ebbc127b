"""Generalised least squares in the measured space, exact for duplicate and dependent rows.

The unknowns are the k answers q = W_S x of some rows of a workload. They lie in the column
space of W_S (a subspace of R^k of dimension r = rank W_S ≤ k): duplicate or linearly
dependent rows make r < k, and every covariance of estimates of q is then singular. Write
q = B θ with B (k × r) of full column rank spanning that space. Each measurement record
says ``values = op q + e`` with a (pseudo-)precision P of e; the GLS (Aitken 1935;
Rao 1973, §4a.3 for the singular case) is

    J = Bᵀ (Σᵢ opᵢᵀ Pᵢ opᵢ) B,   θ̂ = J⁻¹ Bᵀ Σᵢ opᵢᵀ Pᵢ valuesᵢ,   q̂ = B θ̂,   Cov(q̂) = B J⁻¹ Bᵀ.

A record with a singular covariance Σ whose range is the answers' space (the Matrix
Mechanism's W_S x̂: Σ = σ² W_S (AᵀA)⁺ W_Sᵀ) has the precision Σ⁺ = B (BᵀΣB)⁻¹ Bᵀ
(:func:`precision_on`): the inverse is taken on the r-dimensional space only, so nothing is
dropped and no near-zero pivot decides anything.

The one discrete choice is the rank r. :func:`row_space_basis` decides it *exactly* from an
integer Gram matrix (fraction-free Bareiss elimination on Python integers; every 0/1, prefix,
range and identity workload has one) and otherwise with the relative tolerance
:data:`RANK_RTOL` = 1e-9, seven orders of magnitude above the rounding of an eigen solver, so
it does not flip with BLAS threads or CPU kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from matmech import validate
from matmech.linalg.answers import Answers
from matmech.linalg.lazy import sla


#: Eigenvalues of a Gram matrix below this fraction of the largest count as zero (float path).
RANK_RTOL = 1e-9
#: Largest k for which the rank of an integer Gram matrix is computed exactly (Python ints).
EXACT_RANK_MAX = 400


def exact_rank(G) -> int:
    """Rank of a matrix of integers: fraction-free Gaussian elimination (Bareiss 1968) on
    Python ints, so no rounding decides it."""
    M = [[int(v) for v in row] for row in np.asarray(G, dtype=object)]
    n = len(M)
    m = len(M[0]) if n else 0
    rank, prev = 0, 1
    for col in range(m):
        piv = next((i for i in range(rank, n) if M[i][col] != 0), None)
        if piv is None:
            continue
        M[rank], M[piv] = M[piv], M[rank]
        p = M[rank]
        for i in range(rank + 1, n):
            a, Mi = M[i][col], M[i]
            M[i] = [(p[col] * Mi[c] - a * p[c]) // prev for c in range(m)]
        prev = p[col]
        rank += 1
        if rank == n:
            break
    return rank


def integer_gram(R) -> np.ndarray | None:
    """The Gram matrix R Rᵀ of the rows ``R`` (k × n) as Python integers (rows that are not
    integers are first divided by their largest absolute entry, which keeps the rank); None
    when that does not make them integers."""
    R = np.asarray(R, dtype=np.float64)
    if R.ndim != 2 or not np.all(np.isfinite(R)):
        return None
    if not np.array_equal(R, np.rint(R)):
        scale = np.abs(R).max(axis=1, keepdims=True) if R.size else np.ones((R.shape[0], 1))
        scale[scale == 0] = 1.0
        R = R / scale
        if not np.array_equal(R, np.rint(R)):
            return None
    S = R
    if S.shape[1] and float(np.abs(S).max()) ** 2 * S.shape[1] < 2.0**62:
        Si = S.astype(np.int64)
        return (Si @ Si.T).astype(object)
    Si = S.astype(np.int64).astype(object)
    return Si @ Si.T


def row_space_basis(gram, *, exact=None) -> np.ndarray:
    """B (k × r, orthonormal columns) spanning the column space of the k × k Gram matrix
    ``gram`` = W_S W_Sᵀ, i.e. the space the answers W_S x live in.

    ``exact``: the same Gram matrix as integers (:func:`integer_gram`, or a Hadamard product
    of integer factor Grams); when given and k ≤ :data:`EXACT_RANK_MAX` the rank r is exact.
    Otherwise eigenvalues below :data:`RANK_RTOL` · λ_max count as zero.
    """
    G = np.asarray(gram, dtype=np.float64)
    k = G.shape[0]
    if k == 0:
        return np.zeros((0, 0))
    lam, Q = np.linalg.eigh((G + G.T) / 2)
    if exact is not None and k <= EXACT_RANK_MAX:
        r = exact_rank(exact)
    else:
        top = float(lam[-1]) if lam.size else 0.0
        r = int(np.count_nonzero(lam > RANK_RTOL * top)) if top > 0 else 0
    return Q[:, k - r :] if r else np.zeros((k, 0))


def precision_on(cov, B) -> np.ndarray:
    """Σ⁺ = B (BᵀΣB)⁻¹ Bᵀ: the pseudo-inverse of a covariance Σ whose range is span(B).

    Raises ValueError when BᵀΣB is not positive definite (the measurement does not cover
    the space of B)."""
    C = B.T @ np.asarray(cov, dtype=np.float64) @ B
    L = _chol((C + C.T) / 2, "the measured covariance restricted to the answers' space")
    Linv_Bt = np.linalg.solve(L, B.T)
    return Linv_Bt.T @ Linv_Bt


#: A matrix the structure makes positive definite is refused only when its smallest eigenvalue
#: is below this fraction of its largest: singular up to rounding (1e-16), not merely as
#: ill-conditioned as a real strategy can make it (cond(A)² up to ~1e12).
SINGULAR_RTOL = 1e-14


def _chol(M, what):
    if M.shape[0] == 0:
        return M
    lam = np.linalg.eigvalsh(M)
    if not np.all(np.isfinite(lam)) or not lam[0] > SINGULAR_RTOL * max(float(lam[-1]), 0.0):
        raise ValueError(
            f"{what} is not positive definite: the measurements do not determine the answers"
        )
    return np.linalg.cholesky(M)


def gls_answers(records, B) -> Answers:
    """The GLS of the unknowns q = B θ from ``records`` as :class:`~matmech.linalg.answers.Answers`
    (values q̂, variances, covariance Cov(q̂)) (module docstring).

    ``records``: iterable of (op, values, precision) with op (m × k), values (m,) and the
    precision (m × m, positive semidefinite; e.g. :func:`precision_on` of a singular
    covariance, or :func:`precision` of a record with a common offset). ``B`` (k × r): a basis
    of the space q lies in. Raises ValueError when the records do not determine θ.
    """
    B = np.asarray(B, dtype=np.float64)
    r = B.shape[1]
    J = np.zeros((r, r))
    h = np.zeros(r)
    for op, values, P in records:
        OB = np.asarray(op, dtype=np.float64) @ B
        PO = np.asarray(P, dtype=np.float64) @ OB
        J += OB.T @ PO
        h += PO.T @ np.asarray(values, dtype=np.float64)
    L = _chol((J + J.T) / 2, "the information of the measurements")
    theta = np.linalg.solve(L.T, np.linalg.solve(L, h))
    Linv_Bt = np.linalg.solve(L, B.T) if r else np.zeros((0, B.shape[0]))
    cov = Linv_Bt.T @ Linv_Bt
    cov = (cov + cov.T) / 2
    return Answers(B @ theta, np.diag(cov).copy(), cov, method="GLS on the answers' space")


def gls(records, B) -> tuple[np.ndarray, np.ndarray]:
    """:func:`gls_answers` as (q̂, Cov(q̂)) (the form :func:`matmech.svt.combine.combine_gaps` reads)."""
    out = gls_answers(records, B)
    return np.array(out.values), np.array(out.covariance)


# -- the cell space: the normal equations of every record --------------------------------------

#: Eigenvalues of the normal matrix below this fraction of the largest are its null space
#: (the minimum-norm solution), when Cholesky finds it (nearly) singular.
PINV_RTOL = 1e-10


def precision(variance, common_variance=0.0) -> np.ndarray:
    """The precision of noise with covariance diag(``variance``) + ``common_variance``·11ᵀ:
    D⁻¹ − D⁻¹11ᵀD⁻¹ / (1/s + 1ᵀD⁻¹1), exactly D⁻¹ for s = 0 and, for s = inf (an unknown
    common offset, Noisy Top-c's gaps), the limit that only sees differences (Sherman-Morrison)."""
    w = 1.0 / np.asarray(variance, dtype=np.float64)
    s = float(common_variance)
    if s == 0:
        return np.diag(w)
    denom = (0.0 if math.isinf(s) else 1.0 / s) + w.sum()
    return np.diag(w) - np.outer(w, w) / denom


def psd_solve(gram, rhs) -> np.ndarray:
    """J⁺ rhs for a symmetric positive semidefinite J (``gram``): Cholesky when J is well
    conditioned (pivots above :data:`PINV_RTOL` of the largest), else the eigen-decomposition
    with relative cut-off :data:`PINV_RTOL` (the minimum-norm solution). The one dense
    normal-equation kernel: :func:`matmech.estimators.gls.solve`'s dense fallback and
    :func:`cell_gls` both use it."""
    return _psd_factor(gram)(rhs)


@dataclass(frozen=True)
class _PsdSolve:
    """rhs ↦ J⁺ rhs, with ``range`` the orthonormal basis of J's range when the eigen path
    was taken (None: Cholesky, full rank)."""

    solve: Callable[[np.ndarray], np.ndarray]
    range: np.ndarray | None

    def __call__(self, rhs):
        return self.solve(rhs)


def _psd_factor(gram) -> _PsdSolve:
    """The solve of :func:`psd_solve` for ``gram`` (:class:`_PsdSolve`)."""
    gram = 0.5 * (gram + gram.T)
    try:
        L = sla.cholesky(gram, lower=True, check_finite=False)
        d = np.diag(L) ** 2
        if d.min() > PINV_RTOL * d.max():

            def chol(rhs):
                return sla.cho_solve((L, True), rhs, check_finite=False)

            return _PsdSolve(chol, None)
    except sla.LinAlgError:
        pass
    lam, vec = np.linalg.eigh(gram)
    keep = lam > PINV_RTOL * max(lam.max(), 1e-300)

    def eig(rhs):
        return vec[:, keep] @ ((vec[:, keep].T @ rhs) / lam[keep][:, None])

    return _PsdSolve(eig, vec[:, keep])


def cell_gls(parts, W=None, *, variances=True, covariance=False) -> Answers:
    """The GLS over the cells: x̂ = J⁺ Σᵢ Qᵢᵀ Pᵢ yᵢ with J = Σᵢ Qᵢᵀ Pᵢ Qᵢ (dense, small n),
    and, with a workload ``W`` (dense m × n), the answers W x̂ with covariance W J⁺ Wᵀ.

    ``parts``: (Q (mᵢ × n), y (mᵢ,), P (mᵢ × mᵢ precision, :func:`precision`));
    ``variances=False``: the values alone (the rows of W still checked). The variances
    are the row sums of W ∘ (J⁺Wᵀ)ᵀ (m × n memory); the m × m covariance is formed only with
    ``covariance=True``, else on demand (:meth:`Answers.cov`). The memory of what is formed is
    estimated first (:func:`cell_gls_bytes`) and refused above
    :func:`matmech.validate.memory_limit` (a ValueError naming m, the bytes and the limit).
    Raises ValueError when a row of W is not in the row space of J (the records do not
    determine it: never a silent pseudo-inverse number)."""
    parts = list(parts)
    n = np.asarray(parts[0][0]).shape[1]
    m = (n if variances else 0) if W is None else np.asarray(W).shape[0]
    validate.memory(cell_gls_bytes(m, n, covariance=covariance), _what(m, n, covariance))
    J = np.zeros((n, n))
    h = np.zeros(n)
    for Q, y, P in parts:
        Q = np.asarray(Q, dtype=np.float64)
        PQ = np.asarray(P, dtype=np.float64) @ Q
        J += Q.T @ PQ
        h += PQ.T @ np.asarray(y, dtype=np.float64)
    solve = _psd_factor(J)
    xhat = solve(h[:, None])[:, 0]
    if W is None:
        if not variances:
            return Answers(xhat, None, method="GLS over the cells (dense)")
        W = np.eye(n)
    W = np.asarray(W, dtype=np.float64)
    if solve.range is not None and W.size:  # J singular: W's rows must lie in its range
        U = solve.range
        off = W.T - U @ (U.T @ W.T)
        if float((off**2).sum()) > 1e-8 * float((W**2).sum()):  # the rule of error.py
            raise ValueError(
                "some answers are not in the row space of the measurements: the records do "
                "not determine them"
            )
        del off
    method = "GLS over the cells (dense)"
    if not variances:
        return Answers(W @ xhat, None, method=method)
    if covariance:
        cov = _covariance(W, solve)
        return Answers(W @ xhat, np.diag(cov).copy(), cov, method=method)
    var = np.einsum("ij,ji->i", W, solve(W.T))  # diag(W J⁺ Wᵀ) without the m × m matrix

    def covariance_of():
        validate.memory(cell_gls_bytes(m, n, covariance=True), _what(m, n, True))
        return _covariance(W, solve)

    return Answers(W @ xhat, var, method=method, covariance_of=covariance_of)


def cell_gls_bytes(m: int, n: int, *, covariance: bool = False) -> int:
    """Bytes :func:`cell_gls` forms for m answers over n cells: J, its factor and their work
    arrays (4 n²), J⁺Wᵀ and the range check of a singular J (3 m n), and with the covariance
    its m × m matrix and the two arrays of its symmetrisation (3 m²); float64 (the caller's
    W and records not counted)."""
    return 8 * (4 * n * n + 3 * m * n + (3 * m * m if covariance else 0))


def _what(m, n, covariance):
    what = f"the dense GLS of m={m:,} answers over {n:,} cells"
    return what + (f" with their {m:,}×{m:,} covariance" if covariance else "")


def _covariance(W, solve):
    """W J⁺ Wᵀ, symmetrised (its diagonal is unchanged)."""
    cov = W @ solve(W.T)
    return (cov + cov.T) / 2
