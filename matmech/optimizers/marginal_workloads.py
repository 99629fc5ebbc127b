"""Reading product structure off a workload: unions of marginals and of Kronecker products.

A marginal workload is a weighted union of Kronecker products whose factors are identities
(attributes kept) or totals (attributes summed out), McKenna et al., "Optimizing error of
high-dimensional statistical queries under differential privacy", PVLDB 2018, §6.3; a
Kronecker workload W = W₁ ⊗ … ⊗ W_d or a union of them is HDMM's §6.2 input. These readers
say which form W has (``None`` when it has none), so the optimisers of
:mod:`matmech.optimizers.marginal_lattice` and :mod:`matmech.optimizers.general_marginals`
and the dispatcher read the structure one way.
"""

from __future__ import annotations

import math

import numpy as np

from matmech.linalg.linop import Identity, Kron, Ones, Scaled, VStack, as_linop
from matmech.linalg.products import interval_kind, marginal_terms, product_terms


#: Largest number of marginals a product of [identity; total]-type factors is expanded into.
MAX_EXPANDED_TERMS = 1 << 14


def subset_weights(domain, weights):
    """``(domain, k, w)``: the attribute sizes as ints, their number k and the 2^k weights of a
    union of (generalised) marginals (one per attribute subset, bit i: attribute i), checked
    non-negative, finite and not all zero."""
    domain = tuple(int(d) for d in domain)
    k = len(domain)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (1 << k,) or not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
        raise ValueError(
            f"need {1 << k} non-negative finite weights (one per attribute subset), not all zero"
        )
    return domain, k, w


def marginal_workload(W):
    """(terms, domain) if W is a weighted union of marginals, else None.

    ``terms`` is a list of (weight², frozenset of attributes)
    (:func:`matmech.linalg.products.marginal_terms`).
    """
    return marginal_terms(W)


def _factor_options(f):
    """[(weight², in_subset)] if the 1-D workload f is an identity, a total, or a weighted
    stack of them (e.g. [I; T]), else None: the rows of f as marginals on one attribute
    (its blocks read by :func:`matmech.linalg.products.product_terms` with ``leaf=True``)."""
    terms, out = product_terms(f, leaf=True), []
    for t in terms or ():
        (b,) = t.factors
        kind = interval_kind(b)
        if isinstance(b, Identity):
            kind = "I"
        elif isinstance(b, Ones) and b.shape[0] == 1:
            kind = "T"
        if kind is None:
            return None
        out.append((t.weight2, kind == "I"))
    return out if terms is not None else None


def expand_marginals(W, *, max_terms=MAX_EXPANDED_TERMS):
    """A union of marginals with the same gram as W (so the same error for every strategy),
    or None. W itself when it is one; otherwise a weighted union of Kronecker products whose
    factors are identities, totals or stacks of them (HDMM's Kron[IT, …, IT] workloads):
    each product expands into the marginals on the attribute subsets it covers, equal
    subsets merged (their weights² add). None beyond ``max_terms`` expanded products."""
    W = as_linop(W)
    if marginal_workload(W) is not None:
        return W
    blocks = kron_blocks(W)
    if blocks is None:
        return None
    domain = tuple(f.shape[1] for f in blocks[0][1])
    acc: dict[tuple[int, ...], float] = {}
    count = 0
    for w2, fs in blocks:
        found = [_factor_options(f) for f in fs]
        opts = [o for o in found if o is not None]
        if len(opts) != len(found):
            return None
        count += math.prod(len(o) for o in opts)
        if count > max_terms:
            return None
        terms: dict[tuple[bool, ...], float] = {(): w2}
        for o in opts:
            nxt: dict[tuple[bool, ...], float] = {}
            for key, v in terms.items():
                for w, inside in o:
                    k2 = key + (inside,)
                    nxt[k2] = nxt.get(k2, 0.0) + v * w
            terms = nxt
        for key, v in terms.items():
            s = tuple(i for i, inside in enumerate(key) if inside)
            acc[s] = acc.get(s, 0.0) + v
    from matmech.linalg.intervals import Intervals

    # built from the interval operators directly: the marginals of a 10¹⁸-cell domain are
    # an ordinary (factored) workload here, whatever limit the user-facing builders apply
    ident = {d: Intervals(d, np.arange(d), np.arange(d)) for d in set(domain)}
    tot = {d: Intervals(d, np.array([0]), np.array([d - 1])) for d in set(domain)}
    subsets = sorted(acc, key=lambda s: (len(s), s))
    blocks = [
        Kron(*[ident[d] if i in s else tot[d] for i, d in enumerate(domain)]) for s in subsets
    ]
    weights = np.sqrt([acc[s] for s in subsets])
    return VStack(blocks, weights=weights, domain=domain, subsets=subsets)


def kron_blocks(W):
    """[(weight², [factor workloads])] if W is a Kron or a weighted union of Krons over the
    same attribute sizes (single-attribute unions count as one factor), else None: a view of
    :func:`matmech.linalg.products.product_terms`."""
    terms = product_terms(as_linop(W))
    return None if terms is None else [(t.weight2, list(t.factors)) for t in terms]


def identity_like(f):
    """True if the 1-D workload factor f is the identity (as Intervals or Identity)."""
    return isinstance(f, Identity) or interval_kind(f) == "I"


def total_like(f):
    """True if the 1-D workload factor f is (a multiple of) the total query 1ᵀ (rank one, all ones)."""
    from matmech.linalg.intervals import Intervals

    if isinstance(f, Scaled):
        return total_like(f.base)
    if isinstance(f, Ones):
        return True
    if isinstance(f, Intervals):
        lo, hi = f.bounds()
        return bool(np.all(lo == 0) and np.all(hi == f.n - 1))
    return False
