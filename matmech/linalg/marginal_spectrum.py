"""Unions of marginals on marginal-lattice strategies, and the nuclear norm of a workload.

A weighted union of marginals W = [w_S M_S] has gram G = Σ_S w_S² ⊗ᵢ(I if i ∈ S else 11ᵀ),
diagonal in the basis that is constant or mean-zero per attribute: class T (mean-zero on
the attributes in T) has eigenvalue λ_T = Σ_{S ⊇ T} w_S² Πᵢ∉S dᵢ and multiplicity
Πᵢ∈T (dᵢ − 1) (HDMM, McKenna et al., VLDB 2018, §6). On a strategy with the same lattice
(MarginalStrategy, ResidualStrategy, a union of marginals used as its own strategy) the
Matrix Mechanism's trace and per-query variances come from those eigenvalues,
trace(W_S M W_Sᵀ) = Πᵢ∉S dᵢ Σ_{T ⊆ S} m_T/λ_T: no domain-length vector.
"""

from __future__ import annotations

import math

import numpy as np

from matmech.linalg.products import marginal_terms
from matmech.linalg.structured import (
    MAX_DENSE_N,
    MAX_LATTICE_ATTRIBUTES,
    subset_sum,
    workload_spectrum,
)


def _lattice_eigenvalues(A, domain):
    """λ_T of AᵀA on the classes of :func:`marginal_spectrum` when A is a marginal-lattice
    strategy over ``domain`` (its own ``eigenvalues()`` hook, or a plain weighted union of
    marginals), else None."""
    if (
        getattr(A, "domain", None) is not None
        and hasattr(A, "eigenvalues")
        and tuple(A.domain) == tuple(domain)
    ):
        return np.asarray(A.eigenvalues(), dtype=np.float64)
    marg = marginal_terms(A)
    if marg is not None and marg[1] == tuple(domain):
        return workload_spectrum(*marg)[0]
    return None


def lattice_pair(W, A):
    """For a union of marginals W on a marginal-lattice strategy A: per W block (weight²,
    rows, trace of the block's W M Wᵀ) with M = (AᵀA)⁺, from the eigenvalues λ_T; None
    when the pair has no such structure. Raises when W is not in A's row space."""
    marg = marginal_terms(W)
    if marg is None or len(marg[1]) > MAX_LATTICE_ATTRIBUTES:
        return None
    terms, domain = marg
    lam = _lattice_eigenvalues(A, domain)
    if lam is None:
        return None
    k = len(domain)
    mu, mult, out_prod = workload_spectrum(terms, domain)
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
    per_subset = subset_sum(q, k)  # Σ_{T ⊆ S} m_T / λ_T
    out = []
    for w2, s in terms:
        mask = sum(1 << i for i in s)
        rows = math.prod(domain[i] for i in s)
        out.append((w2, rows, float(out_prod[mask] * per_subset[mask])))
    return out


def lattice_diag(blocks):
    """diag(W M Wᵀ): constant within each marginal (M commutes with relabelling each attribute's values)."""
    return np.concatenate([np.full(rows, w2 * tr / rows) for w2, rows, tr in blocks])


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


def _singular_value_sum(W, max_n=MAX_DENSE_N):
    """Σ σᵢ(W) (the nuclear norm): a union of marginals from its spectrum, Kronecker
    products factor by factor (``kron_factors``), a scaling |c|·Σσᵢ (``linear_terms``), a
    closed-form gram spectrum (``gram_eigenvalues``), else a dense eigendecomposition."""
    factors = getattr(W, "kron_factors", lambda: None)()
    if factors is None:
        marg = marginal_terms(W)
        if marg is not None:
            mu, mult, _ = workload_spectrum(*marg)  # vectorised marginal_spectrum
            return float((mult * np.sqrt(np.clip(mu, 0, None))).sum())
    if factors is not None:
        return float(np.prod([_singular_value_sum(f, max_n) for f in factors]))
    terms = W.linear_terms()
    if terms is not None and len(terms) == 1:
        c, base = terms[0]
        return abs(c) * _singular_value_sum(base, max_n)
    lam = W.gram_eigenvalues()
    if lam is not None:
        return float(np.sqrt(lam).sum())
    n = W.shape[1]
    if n > max_n:
        raise ValueError(
            f"the SVD bound needs the eigenvalues of an n×n gram; n={n} exceeds the limit {max_n}"
        )
    lam = np.linalg.eigvalsh(W.gram().dense(max_entries=MAX_DENSE_N**2))
    return float(np.sqrt(np.clip(lam, 0, None)).sum())


def nuclear_norm(W, max_n=MAX_DENSE_N) -> float:
    """Σ σᵢ(W), kept on the (immutable) operator: ``matmech compare`` asks twice, and a dense
    n = 4096 eigendecomposition takes ~15 s on one core."""
    v = getattr(W, "_mm_nuclear_norm", None)
    if v is None:
        v = _singular_value_sum(W, max_n)
        try:
            object.__setattr__(W, "_mm_nuclear_norm", v)
        except (AttributeError, TypeError):  # an operator with __slots__: not kept
            pass
    return v
