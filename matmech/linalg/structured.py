"""Structured (AᵀA)⁺: the pseudo-inverse of a strategy's gram without dense n×n algebra
where the structure allows, used by the error analysis and by least squares alike.

* :func:`pinv_gram`: (M, N) with M = (AᵀA)⁺ as a LinOp and N the null-space projector;
  an operator that knows its own inverse returns it from ``gram_pinv()``; Kronecker
  products and scalings factor; block-spectral grams (identity, uniform hierarchies, Haar) invert in
  closed form (trees and Haar on any n through their own ``gram_pinv``,
  :class:`~matmech.linalg.spectral.NestedCovariance`); a plain union of marginals beyond :data:`MAX_DENSE_N` cells by its lattice
  spectrum (as :class:`~matmech.optimizers.marginal_lattice.MarginalStrategy`); anything else by a
  dense eigen-decomposition up to :data:`MAX_DENSE_N`.
* The marginal lattice: ``_marginal_terms`` (a weighted union of marginals as (weight²,
  subset) terms, :func:`matmech.linalg.products.marginal_terms`), ``workload_spectrum`` (its eigenvalues λ_T per class T), the zeta
  transforms and ``spectral_pinv``, shared by the error analysis and the marginal optimiser.
* :func:`split_diagonal` / :func:`woodbury_factor`: strategies made of single-entry rows
  plus r ≤ n/4 other rows, as HDMM's p-Identity [I; Θ]D (McKenna et al., VLDB 2018):
  (D + RᵀR)⁻¹ = D⁻¹ − D⁻¹Rᵀ(I + RD⁻¹Rᵀ)⁻¹RD⁻¹ (Woodbury), O(n r²).
* :func:`gram_inverse`: (AᵀA)⁻¹ by Woodbury or Cholesky, None when singular.
* :class:`RoundedDense` / :class:`RoundedSparse`: real strategies rounded to a power-of-two
  grid for exact measurement (:mod:`matmech.privacy.measure`), which carry this inverse.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matmech.linalg.lazy import sla
import scipy.sparse as sp

from matmech.linalg.linop import (
    Dense,
    Identity,
    Kron,
    Scaled,
    Sparse,
    Sum,
    VStack,
    as_linop,
    register,
)
from matmech.linalg.products import marginal_terms as _marginal_terms
from matmech.linalg.spectral import BlockSpectral


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
    n = A.shape[1]
    if n > MAX_DENSE_N and isinstance(
        A, Dense
    ):  # its gram would be a dense n×n array: refuse before forming it
        raise ValueError(
            f"this strategy is a dense matrix over n={n:,} cells: inverting its gram needs {8 * n * n / 2**30:,.1f} GiB "
            f"(the dense limit is {MAX_DENSE_N} cells); use a structured strategy (identity, hierarchical, Haar, a "
            "Kronecker product of small factors) or, for a union of marginals, strategy='auto' (marginal tables)"
        )
    g = A.gram()
    if isinstance(g, Identity):
        return g, None
    if isinstance(g, BlockSpectral):
        return g.pinv(), g.null_projector()
    n = A.shape[1]
    if n > MAX_DENSE_N and isinstance(A, VStack):
        lattice = _marginal_union_pinv(A)
        if lattice is not None:
            return lattice
    if n > MAX_DENSE_N:
        raise ValueError(
            f"this strategy has no structured inverse and n={n} cells exceeds the dense limit {MAX_DENSE_N}; "
            "use a structured strategy (identity, hierarchical, Haar, or a Kronecker product of small factors)"
        )
    if A.shape[0] <= 4 * n:
        # from the SVD of A itself: (AᵀA)⁺ = V S⁻² Vᵀ is accurate to eps·cond(A), where the
        # eigenvalues of AᵀA would lose eps·cond(A)² (the oracle test compares at 1e-8)
        _, sv, vt = np.linalg.svd(A.dense(max_entries=4 * MAX_DENSE_N**2), full_matrices=True)
        lam, vec = np.zeros(n), vt.T
        lam[: sv.size] = sv**2
    else:
        lam, vec = np.linalg.eigh(g.dense(max_entries=MAX_DENSE_N**2))
    keep = lam > 1e-10 * max(lam.max(), 1e-300)
    F = vec[:, keep] / np.sqrt(lam[keep])
    nul = vec[:, ~keep] @ vec[:, ~keep].T if (~keep).any() else None
    return GramFactor(F), (as_linop(nul) if nul is not None else None)


class GramFactor(Dense):
    """(AᵀA)⁺ = F Fᵀ held with its factor F = V S⁻¹ (n × r): quadratic forms w M wᵀ are then
    ‖w F‖², sums of squares, accurate to eps·cond(A) instead of eps·cond(A)² for the
    explicit product (:func:`matmech.error` and :func:`matmech.svt.combine.answer_covariance`
    use ``gram_factor``)."""

    def __init__(self, F):
        self.gram_factor = np.asarray(F, dtype=np.float64)
        super().__init__(self.gram_factor @ self.gram_factor.T)


def _marginal_union_pinv(A):
    """A plain weighted union of marginals inverts like the equal MarginalStrategy: the
    spectral form Σ_T λ_T⁻¹ P_T (:mod:`matmech.optimizers.marginal_lattice`), or None."""
    marg = _marginal_terms(A)
    if marg is None or len(marg[1]) > MAX_LATTICE_ATTRIBUTES:
        return None
    lam = workload_spectrum(*marg)[0]
    return spectral_pinv(marg[1], lam, lattice_masks(marg[1])[1])


# -- the marginal lattice (McKenna et al. 2018 §6.3; :mod:`matmech.optimizers.marginal_lattice`) ---------------

#: Largest number of attributes whose 2^k lattice classes the structured paths enumerate.
MAX_LATTICE_ATTRIBUTES = 20


def lattice_masks(domain):
    # Πᵢ∉S dᵢ and Πᵢ∈S (dᵢ − 1) for every mask S, built bit by bit (bit i is the high half)
    out_prod, mult = np.ones(1), np.ones(1)
    for d in domain:
        out_prod = np.concatenate([out_prod * float(d), out_prod])
        mult = np.concatenate([mult, mult * float(d - 1)])
    return out_prod, mult


def superset_inplace(lam, k):
    """λ_T = Σ_{S ⊇ T} c_S (zeta transform over supersets) in place on the C-contiguous
    length-2^k array ``lam`` holding c, O(k 2^k): level i adds each mask with bit i set to
    the same mask without it, on a strided view (no index arrays)."""
    for i in range(k):
        if i < _SHORT_LEVELS:  # runs of 1 << i: 1-D strided slices, one per offset (faster)
            for j in range(1 << i):
                lam[j :: 2 << i] += lam[j + (1 << i) :: 2 << i]
            continue
        v = lam.reshape(
            -1, 2, 1 << i
        )  # v[:, 0] has bit i clear, v[:, 1] the same masks with it set
        v[:, 0, :] += v[:, 1, :]
    return lam


#: Levels of the zeta transforms done as 1-D strided slices (the same additions, in the same
#: order, as the 3-D views, which iterate runs of 1 << i elements slowly for small i).
_SHORT_LEVELS = 3


def subset_inplace(c, k):
    """Σ_{T ⊆ S} c_T for every S (zeta transform over subsets), in place as :func:`superset_inplace`."""
    for i in range(k):
        if i < _SHORT_LEVELS:
            for j in range(1 << i):
                c[j + (1 << i) :: 2 << i] += c[j :: 2 << i]
            continue
        v = c.reshape(-1, 2, 1 << i)
        v[:, 1, :] += v[:, 0, :]
    return c


def superset_sum(c, k):
    """λ_T = Σ_{S ⊇ T} c_S on a copy of c."""
    return superset_inplace(np.array(c, copy=True, order="C"), k)


def subset_sum(c, k):
    """Σ_{T ⊆ S} c_T for every S, on a copy of c."""
    return subset_inplace(np.array(c, copy=True, order="C"), k)


def workload_spectrum(terms, domain):
    k = len(domain)
    out_prod, mult = lattice_masks(domain)
    c = np.zeros(1 << k)
    for w2, s in terms:
        c[sum(1 << i for i in s)] += w2 * out_prod[sum(1 << i for i in s)]
    return superset_sum(c, k), mult, out_prod


def class_projector_factors(domain, mask):
    """⊗ᵢ (I − J/dᵢ if i ∈ T else J/dᵢ): the projector onto the class T."""
    out = []
    for i, d in enumerate(domain):
        j = np.full((d, d), 1.0 / d)
        out.append(Dense(np.eye(d) - j) if (mask >> i) & 1 else Dense(j))
    return out


def spectral_pinv(domain, lam, mult, tol=1e-12):
    """(Σ_T λ_T⁻¹ P_T as a Sum of Krons, the null projector Σ_{λ_T=0} P_T or None)."""
    top = float(lam.max()) if lam.size else 0.0
    pos, null = [], []
    for mask in range(lam.size):
        if mult[mask] == 0:
            continue  # an attribute of size 1 is never mean-zero: the class is empty
        if lam[mask] > tol * top:
            pos.append(Scaled(Kron(*class_projector_factors(domain, mask)), 1.0 / lam[mask]))
        else:
            null.append(Kron(*class_projector_factors(domain, mask)))
    return Sum(pos), (Sum(null) if null else None)


def split_diagonal(A, max_rows=None) -> tuple[np.ndarray, np.ndarray] | None:
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
        d = np.bincount(
            m.indices[m.indptr[single]], weights=m.data[m.indptr[single]] ** 2, minlength=n
        )
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
    if np.linalg.norm(res) > 1e-8 * max(float(np.linalg.norm(V)), 1e-300):
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

    matrix: Any  # the ndarray of a Dense, the scipy matrix of a Sparse

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
