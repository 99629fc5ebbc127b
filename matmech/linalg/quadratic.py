"""Quadratic forms W M Wᵀ of a workload W and a covariance M: trace, diagonal, largest entry.

The Matrix Mechanism's error is σ²·trace(W (AᵀA)⁺ Wᵀ) and its per-answer variances
σ²·diag(W (AᵀA)⁺ Wᵀ) (Li et al., PODS 2010). No case analysis on operator types lives here:
each form asks the operators through hooks (a method a class defines; the absent method is
the generic default "no structure"), in this order:

1. ``W.row_blocks()`` / ``M.linear_terms()`` (:class:`~matmech.linalg.operator.LinOp`): split
   over a weighted stack's blocks or a sum's terms;
2. ``kron_factors()`` on both (``M.split_like(factors)`` lets the identity act as ⊗ I): a
   Kronecker pair factors, trace(⊗Wᵢ ⊗Mᵢ ⊗Wᵢᵀ) = Π trace(Wᵢ Mᵢ Wᵢᵀ) (HDMM, VLDB 2018, §6);
3. ``M.covariance_trace(W)`` / ``M.covariance_diag(W)``: the covariance's closed form
   (identity, block-spectral hierarchies and Haar, nested tree covariances);
4. ``W.prefix_quadratic_sum(C)`` / ``W.prefix_quadratic(C)``: interval rows through the prefix
   covariance C = P̃ M P̃ᵀ;
5. ``M.gram_factor`` (M = F Fᵀ: sums of squares), then dense row blocks.
"""

from __future__ import annotations

from functools import reduce

import numpy as np

from matmech.linalg.intervals import prefix_apply
from matmech.linalg.lazy import sla
from matmech.linalg.linop import Identity, as_linop
from matmech.linalg.structured import MAX_DENSE_N, pinv_gram, split_diagonal, woodbury_factor


#: Largest number of per-query variances returned as a vector.
MAX_VARIANCE_ROWS = 50_000_000


def _hook(op, name, *args):
    """``op.name(*args)`` when ``op`` defines that hook, else None (the generic default)."""
    fn = getattr(op, name, None)
    return None if fn is None else fn(*args)


def _as_dense(M):
    return M.dense(max_entries=MAX_DENSE_N**2)


def _pairs(W, M, *, identity=False):
    """[(Wᵢ, Mᵢ)] when W = ⊗Wᵢ and M = ⊗Mᵢ with matching sizes (``identity``: M = I counts
    as ⊗ I), else None."""
    wf = _hook(W, "kron_factors")
    if wf is None:
        return None
    mf = _hook(M, "kron_factors")
    if mf is None and identity:
        mf = _hook(M, "split_like", wf)
    if mf is None or len(wf) != len(mf) or any(w.shape[1] != m.shape[0] for w, m in zip(wf, mf)):
        return None
    return list(zip(wf, mf))


def _prefix_cov(M):
    """C = P̃ M P̃ᵀ ((n+1)×(n+1)), so that interval rows read their variance from C."""
    return prefix_apply(prefix_apply(_as_dense(M)).T)


def quadratic_trace(W, M) -> float:
    """trace(W M Wᵀ) (module notes for the order of the hooks)."""
    blocks = W.row_blocks()
    if blocks is not None:
        return sum(w**2 * quadratic_trace(b, M) for w, b in blocks)
    terms = M.linear_terms()
    if terms is not None:
        return sum(c * quadratic_trace(W, t) for c, t in terms)
    pairs = _pairs(W, M)
    if pairs is not None:
        return float(np.prod([quadratic_trace(w, m) for w, m in pairs]))
    out = _hook(M, "covariance_trace", W)
    if out is not None:
        return out
    if getattr(W, "prefix_quadratic_sum", None) is not None:
        return W.prefix_quadratic_sum(_prefix_cov(M))
    g = W.gram().dense(max_entries=MAX_DENSE_N**2)
    return float((g * _as_dense(M)).sum())


def _row_chunks(W, size=None):
    m, n = W.shape
    size = size or max(1, 4_000_000 // n)
    for start in range(0, m, size):
        yield start, min(m, start + size)


def quadratic_diag(W, M) -> np.ndarray:
    """diag(W M Wᵀ) as a vector of length m."""
    blocks = W.row_blocks()
    if blocks is not None:
        return np.concatenate([w**2 * quadratic_diag(b, M) for w, b in blocks])
    terms = M.linear_terms()
    if terms is not None:
        return sum(c * quadratic_diag(W, t) for c, t in terms)
    pairs = _pairs(W, M, identity=True)
    if pairs is not None:
        return reduce(np.kron, [quadratic_diag(w, m) for w, m in pairs])
    out = _hook(M, "covariance_diag", W)
    if out is not None:
        return out
    if getattr(W, "prefix_quadratic", None) is not None:
        return W.prefix_quadratic(_prefix_cov(M))
    F = getattr(M, "gram_factor", None)
    if F is not None:  # M = F Fᵀ: sums of squares (no cancellation)
        out = np.empty(W.shape[0])
        for start, stop in _row_chunks(W):
            out[start:stop] = np.square(np.asarray(W.rows(start, stop)) @ F).sum(1)
        return out
    md = None if getattr(M, "is_identity", False) else _as_dense(M)
    out = np.empty(W.shape[0])
    for start, stop in _row_chunks(W):
        r = W.rows(start, stop)
        out[start:stop] = (r * r).sum(1) if md is None else ((r @ md) * r).sum(1)
    return out


def quadratic_max(W, M) -> float:
    """max diag(W M Wᵀ), through the structure where the vector would be too long."""
    blocks = W.row_blocks()
    if blocks is not None:
        return max(w**2 * quadratic_max(b, M) for w, b in blocks)
    terms = M.linear_terms()
    if terms is not None and len(terms) == 1:  # a scaling (c ≥ 0 for a covariance)
        c, t = terms[0]
        return c * quadratic_max(W, t)
    pairs = _pairs(W, M, identity=True)
    if pairs is not None:
        return float(np.prod([quadratic_max(w, m) for w, m in pairs]))
    if W.shape[0] > MAX_VARIANCE_ROWS:
        raise ValueError(
            f"the largest per-query variance of a workload with {W.shape[0]:,} rows is not computed row by row "
            f"(limit {MAX_VARIANCE_ROWS:,}); use measure='total' or 'rmse'"
        )
    return float(quadratic_diag(W, M).max())


def rowspace_residual(W, A, nul) -> float:
    """trace(G_W N_A) / trace(G_W): 0 when every row of W lies in A's row space (``nul`` the
    null-space projector of :func:`~matmech.linalg.structured.pinv_gram`)."""
    if nul is None:
        return 0.0
    if isinstance(nul, tuple):  # Kronecker strategy: factor by factor where W factors too
        if all(x is None for x in nul[1]):
            return 0.0
        blocks = W.row_blocks()
        if blocks is not None:
            return max(rowspace_residual(b, A, nul) for _, b in blocks)
        af = A.kron_factors()
        wf = _hook(W, "kron_factors")
        if wf is not None and len(wf) == len(af):
            return max(rowspace_residual(w, a, x) for w, a, x in zip(wf, af, nul[1]))
        proj = reduce(
            np.kron,
            [np.eye(a.shape[1]) - (0 if x is None else _as_dense(x)) for a, x in zip(af, nul[1])],
        )
        nul = as_linop(np.eye(A.shape[1]) - proj)
    scale = quadratic_trace(W, Identity(W.shape[1]))
    return quadratic_trace(W, nul) / scale if scale > 0 else 0.0


def covariance(W, A):
    """M = (AᵀA)⁺ (structured), refusing when W's rows are not in A's row space."""
    M, nul = pinv_gram(A)
    r = rowspace_residual(W, A, nul)
    if r > 1e-8:
        raise ValueError(
            f"the workload's rows are not in the strategy's row space (relative residual {r:.3g}): "
            "some queries cannot be answered from these measurements; add rows to the strategy "
            "(e.g. stack it with identity) or choose another"
        )
    return M


def woodbury_diag(W, A) -> np.ndarray | None:
    """diag(W (AᵀA)⁻¹ Wᵀ) for interval rows W (``bounds``) on a diagonal-plus-rows strategy A
    (``split_diagonal``: AᵀA = D + RᵀR, HDMM's p-Identity) without the n×n inverse; None
    when the pair has not that structure.

    With (D + RᵀR)⁻¹ = D⁻¹ − D⁻¹Rᵀ C⁻¹ R D⁻¹ (C = I + RD⁻¹Rᵀ = LLᵀ) and a row w = 1[lo, hi]:
    w D⁻¹ wᵀ = Σ_{lo..hi} 1/d, and the low-rank part is ‖L⁻¹ R D⁻¹ wᵀ‖² = ‖Z_{hi+1} − Z_lo‖²
    with Z = P̃ D⁻¹ Rᵀ L⁻ᵀ (prefix sums, (n+1)×r). O(n r² + m r).
    """
    if getattr(W, "bounds", None) is None or getattr(W, "prefix_quadratic", None) is None:
        return None
    split = split_diagonal(A)
    if split is None:
        return None
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
