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

from matmech.error import _marginal_terms
from matmech.linalg.linop import Identity, Kron, Ones, Scaled, VStack, as_linop

__all__ = ["marginal_workload", "expand_marginals", "kron_blocks", "MAX_EXPANDED_TERMS"]

#: Largest number of marginals a product of [identity; total]-type factors is expanded into.
MAX_EXPANDED_TERMS = 1 << 14


def marginal_workload(W):
    """(terms, domain) if W is a weighted union of marginals, else None.

    ``terms`` is a list of (weight², frozenset of attributes).
    """
    if not isinstance(W, (VStack, Kron)):
        return None
    if isinstance(W, VStack) and not all(isinstance(b, Kron) for b in W.blocks):
        return None
    return _marginal_terms(W)


def _factor_options(f):
    """[(weight², in_subset)] if the 1-D workload f is an identity, a total, or a weighted
    stack of them (e.g. [I; T]), else None: the rows of f as marginals on one attribute."""
    from matmech.linalg.intervals import Intervals

    if isinstance(f, Scaled):
        sub = _factor_options(f.base)
        return None if sub is None else [(f.c**2 * w2, s) for w2, s in sub]
    if isinstance(f, VStack):
        out = []
        for w, b in zip(f.weights, f.blocks):
            sub = _factor_options(b)
            if sub is None:
                return None
            out += [(float(w) ** 2 * w2, s) for w2, s in sub]
        return out
    if isinstance(f, Intervals):
        lo, hi = f.bounds()
        if f.shape[0] == f.n and np.array_equal(lo, np.arange(f.n)) and np.array_equal(hi, lo):
            return [(1.0, True)]
        if f.shape[0] == 1 and lo[0] == 0 and hi[0] == f.n - 1:
            return [(1.0, False)]
    if isinstance(f, Identity):
        return [(1.0, True)]
    if isinstance(f, Ones) and f.shape[0] == 1:
        return [(1.0, False)]
    return None


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
    acc, count = {}, 0
    for w2, fs in blocks:
        opts = [_factor_options(f) for f in fs]
        if any(o is None for o in opts):
            return None
        count += math.prod(len(o) for o in opts)
        if count > max_terms:
            return None
        terms = {(): w2}
        for o in opts:
            nxt = {}
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
    same attribute sizes (single-attribute unions count as one factor), else None."""
    W = as_linop(W)
    if isinstance(W, Kron):
        return [(1.0, list(W.factors))]
    if isinstance(W, Scaled) and isinstance(W.base, Kron):
        return [(W.c**2, list(W.base.factors))]
    if isinstance(W, VStack):
        out, dims = [], None
        for w, b in zip(W.weights, W.blocks):
            sub = kron_blocks(b)
            if sub is None:
                return None
            for w2, fs in sub:
                d = tuple(f.shape[1] for f in fs)
                if dims not in (None, d):
                    return None
                dims = d
                out.append((float(w) ** 2 * w2, fs))
        return out
    return None


def _identity_like(f):
    """True if the 1-D workload factor f is the identity (as Intervals or Identity)."""
    from matmech.linalg.intervals import Intervals

    if isinstance(f, Identity):
        return True
    if isinstance(f, Intervals):
        lo, hi = f.bounds()
        return f.shape[0] == f.n and np.array_equal(lo, np.arange(f.n)) and np.array_equal(hi, lo)
    return False


def _total_like(f):
    """True if the 1-D workload factor f is (a multiple of) the total query 1ᵀ (rank one, all ones)."""
    from matmech.linalg.intervals import Intervals

    if isinstance(f, Scaled):
        return _total_like(f.base)
    if isinstance(f, Ones):
        return True
    if isinstance(f, Intervals):
        lo, hi = f.bounds()
        return bool(np.all(lo == 0) and np.all(hi == f.n - 1))
    return False
