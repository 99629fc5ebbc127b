"""Structured (AᵀA)⁺: the pseudo-inverse of a strategy's gram without dense n×n algebra
where the structure allows, used by the error analysis and by least squares alike.

* :func:`pinv_gram`: (M, N) with M = (AᵀA)⁺ as a LinOp and N the null-space projector;
  an operator that knows its own inverse returns it from ``gram_pinv()``; Kronecker
  products and scalings factor; block-spectral grams (identity, uniform hierarchies, Haar) invert in
  closed form; anything else by a dense eigen-decomposition up to :data:`MAX_DENSE_N`.
* :func:`split_diagonal` / :func:`woodbury_factor`: strategies made of single-entry rows
  plus r ≤ n/4 other rows, as HDMM's p-Identity [I; Θ]D (McKenna et al., VLDB 2018):
  (D + RᵀR)⁻¹ = D⁻¹ − D⁻¹Rᵀ(I + RD⁻¹Rᵀ)⁻¹RD⁻¹ (Woodbury), O(n r²).
* :func:`gram_inverse`: (AᵀA)⁻¹ by Woodbury or Cholesky, None when singular.
* :class:`RoundedDense` / :class:`RoundedSparse`: real strategies rounded to a power-of-two
  grid for exact measurement (:mod:`matmech.privacy.measure`), which carry this inverse.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from matmech.linalg.linop import Dense, Identity, Kron, Scaled, Sparse, as_linop, register
from matmech.linalg.spectral import BlockSpectral

__all__ = [
    "pinv_gram",
    "gram_inverse",
    "split_diagonal",
    "woodbury_factor",
    "woodbury_solve",
    "RoundedDense",
    "RoundedSparse",
    "MAX_DENSE_N",
    "CHOLESKY_N",
]

#: Largest domain for which a general (unstructured) strategy gram is inverted densely.
MAX_DENSE_N = 8192
#: Largest domain for which :func:`gram_inverse` tries a dense Cholesky factorisation.
CHOLESKY_N = 8192


def pinv_gram(A):
    """(M, N): M = (AᵀA)⁺ as a structured LinOp, N the null-space projector (None if full rank).

    A strategy with its own structure returns the same pair from ``A.gram_pinv()``
    (:meth:`~matmech.linalg.linop.LinOp.gram_pinv`); otherwise a gram that is the identity
    or block-spectral inverts in closed form, anything else densely.
    """
    out = A.gram_pinv()
    if out is not None:
        return out
    if isinstance(A, Kron):  # ⊗(AᵢᵀAᵢ)⁺, null part ("kron", [Nᵢ]) so that callers can factor it
        parts = [pinv_gram(f) for f in A.factors]
        return Kron(*[m for m, _ in parts]), ("kron", [nul for _, nul in parts])
    if isinstance(A, Scaled):  # (cA)ᵀ(cA) = c²AᵀA
        m, nul = pinv_gram(A.base)
        return Scaled(m, 1.0 / A.c**2), nul
    g = A.gram()
    if isinstance(g, Identity):
        return g, None
    if isinstance(g, BlockSpectral):
        return g.pinv(), g.null_projector()
    n = A.shape[1]
    if n > MAX_DENSE_N:
        raise ValueError(
            f"this strategy has no structured inverse and n={n} cells exceeds the dense limit {MAX_DENSE_N}; "
            "use a structured strategy (identity, hierarchical with a branching whose blocks divide n, "
            "Haar with n a power of two, or a Kronecker product of small factors)"
        )
    lam, vec = np.linalg.eigh(g.dense(max_entries=MAX_DENSE_N**2))
    keep = lam > 1e-10 * max(lam.max(), 1e-300)
    m = (vec[:, keep] / lam[keep]) @ vec[:, keep].T
    nul = vec[:, ~keep] @ vec[:, ~keep].T if (~keep).any() else None
    return as_linop(m), (as_linop(nul) if nul is not None else None)


def split_diagonal(A, max_rows=None):
    """(d, R) with AᵀA = diag(d) + RᵀR when A's single-entry rows give a positive diagonal d
    and at most ``max_rows`` (default n/4) rows remain (R dense, r×n); else None."""
    m = A.explicit_matrix()
    if m is None:
        return None
    n = A.shape[1]
    max_rows = n // 4 if max_rows is None else max_rows
    if sp.issparse(m):
        m = sp.csr_matrix(m)
        m.eliminate_zeros()
        nnz = np.diff(m.indptr)
        single = np.flatnonzero(nnz == 1)
        rest = np.flatnonzero(nnz > 1)
        if rest.size > max_rows:
            return None
        d = np.bincount(m.indices[m.indptr[single]], weights=m.data[m.indptr[single]] ** 2, minlength=n)
        R = m[rest].toarray()
    else:
        nz = m != 0
        nnz = nz.sum(1)
        single = np.flatnonzero(nnz == 1)
        rest = np.flatnonzero(nnz > 1)
        if rest.size > max_rows:
            return None
        cols = nz[single].argmax(1)
        d = np.bincount(cols, weights=m[single, cols] ** 2, minlength=n)
        R = m[rest]
    if d.min() <= 0 or d.max() > 1e12 * d.min():
        return None
    return d, np.ascontiguousarray(R, dtype=np.float64)


def woodbury_factor(d, R):
    """(D⁻¹, RD⁻¹, Cholesky of I + RD⁻¹Rᵀ) for (D + RᵀR)⁻¹ = D⁻¹ − D⁻¹Rᵀ(I + RD⁻¹Rᵀ)⁻¹RD⁻¹."""
    dinv = 1.0 / d
    RD = R * dinv  # R D⁻¹
    C = RD @ R.T
    C[np.diag_indices_from(C)] += 1.0
    return dinv, RD, sla.cho_factor(C, lower=True, check_finite=False)


def woodbury_solve(d, R, V):
    """(diag(d) + RᵀR)⁻¹V, or None if the residual check fails."""
    dinv, RD, cf = woodbury_factor(d, R)
    u = dinv[:, None] * V
    x = u - RD.T @ sla.cho_solve(cf, R @ u, check_finite=False)
    res = d[:, None] * x + R.T @ (R @ x) - V
    if np.linalg.norm(res) > 1e-8 * max(np.linalg.norm(V), 1e-300):
        return None
    return x


def gram_inverse(A):
    """(M, None) with M = (AᵀA)⁻¹ as a dense LinOp, through Woodbury or Cholesky; None
    when AᵀA is singular or not small enough (callers then use :func:`pinv_gram`'s eigen path)."""
    n = A.shape[1]
    split = split_diagonal(A)
    if split is not None:
        d, R = split
        dinv, RD, cf = woodbury_factor(d, R)
        M = -RD.T @ sla.cho_solve(cf, RD, check_finite=False)
        M[np.diag_indices_from(M)] += dinv
        return Dense(0.5 * (M + M.T)), None
    if n > CHOLESKY_N:
        return None
    gram = A.gram().dense(max_entries=CHOLESKY_N**2)
    try:
        L = sla.cholesky(0.5 * (gram + gram.T), lower=True, check_finite=False)
    except sla.LinAlgError:
        return None
    dg = np.diag(L) ** 2
    if dg.min() <= 1e-10 * dg.max():
        return None
    Linv = sla.solve_triangular(L, np.eye(n), lower=True, check_finite=False)
    return Dense(Linv.T @ Linv), None


class _GramPinv:
    """(AᵀA)⁺ through Woodbury or Cholesky (:func:`gram_inverse`), falling back to the
    eigen-decomposition of :func:`pinv_gram` when those do not apply."""

    def gram_pinv(self):
        out = gram_inverse(self)
        if out is not None:
            return out
        return pinv_gram(as_linop(self.matrix))  # the plain Dense/Sparse: eigen path


@register("RoundedDense")
class RoundedDense(_GramPinv, Dense):
    """A real-valued strategy rounded to a power-of-two grid (dense storage)."""


@register("RoundedSparse")
class RoundedSparse(_GramPinv, Sparse):
    """A real-valued strategy rounded to a power-of-two grid (CSR storage)."""
