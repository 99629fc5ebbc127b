"""One reading of product structure: an operator as a weighted union of Kronecker products.

W = [w₁ ⊗ᵢ Aᵢ₁; …; w_K ⊗ᵢ Aᵢ_K], HDMM's workload and strategy form (McKenna et al.,
"Optimizing error of high-dimensional statistical queries under differential privacy",
PVLDB 2018, §6.2), is read in one place: :func:`product_terms` (defined next to the
combinators it walks, :mod:`matmech.linalg.combinators`, and re-exported here) walks the
Kron / weighted VStack / Scaled tree once and returns frozen :class:`ProductTerm` records; the
marginal reading (§6.3: every factor an identity or a total) is derived from them by
:func:`marginal_terms`, and a 1-D factor that is itself a weighted stack (e.g. [I; T]) is
read by the same walk with ``leaf=True``. :func:`matmech.linalg.linop.kron_terms`,
:func:`matmech.optimizers.marginal_workloads.kron_blocks` and the optimisers' term readers
are views of these records.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from matmech.linalg.combinators import Kron, VStack, product_terms
from matmech.linalg.intervals import Intervals


def interval_kind(f: Any) -> str | None:
    """``"I"`` if the 1-D factor f is the identity written as intervals [i, i], ``"T"`` if it
    is the single total interval [0, n−1], else None (any other operator included).

    Parameters
    ----------
    f : LinOp
        One attribute's factor.

    Returns
    -------
    str or None
        The factor's kind.

    Examples
    --------
    >>> from matmech import workloads as wl
    >>> interval_kind(wl.identity(3)), interval_kind(wl.total(3)), interval_kind(wl.prefix(3))
    ('I', 'T', None)
    """
    if not isinstance(f, Intervals):
        return None
    lo, hi = f.bounds()
    if f.shape[0] == f.n and np.array_equal(lo, np.arange(f.n)) and np.array_equal(hi, lo):
        return "I"
    if f.shape[0] == 1 and lo[0] == 0 and hi[0] == f.n - 1:
        return "T"
    return None


def marginal_terms(A: Any) -> tuple[list, tuple] | None:
    """([(weight², frozenset of attributes)], domain) when A is a flat weighted union of
    marginals (a Kron, or a VStack of Krons, whose factors are all interval identities or
    totals, :func:`interval_kind`), else None. Nested or scaled stacks are read as marginals
    only after :func:`matmech.optimizers.marginal_workloads.expand_marginals` flattens them.

    Parameters
    ----------
    A : LinOp
        The operator to read.

    Returns
    -------
    tuple or None
        The terms and the attribute sizes.

    Examples
    --------
    >>> from matmech import workloads as wl
    >>> terms, domain = marginal_terms(wl.marginals((2, 3), 1))
    >>> [sorted(s) for _, s in terms], domain
    ([[0], [1]], (2, 3))
    """
    flat = isinstance(A, Kron) or (
        isinstance(A, VStack) and all(isinstance(b, Kron) for b in A.blocks)
    )
    terms = product_terms(A) if flat else None
    if terms is None:
        return None
    out = []
    for t in terms:
        kinds = [interval_kind(f) for f in t.factors]
        if None in kinds:
            return None
        out.append((t.weight2, frozenset(i for i, k in enumerate(kinds) if k == "I")))
    return out, tuple(f.n for f in terms[0].factors)
