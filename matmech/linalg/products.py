"""One reading of product structure: an operator as a weighted union of Kronecker products.

W = [w₁ ⊗ᵢ Aᵢ₁; …; w_K ⊗ᵢ Aᵢ_K], HDMM's workload and strategy form (McKenna et al.,
"Optimizing error of high-dimensional statistical queries under differential privacy",
PVLDB 2018, §6.2), is read here and nowhere else: :func:`product_terms` walks the Kron /
weighted VStack / Scaled tree once and returns frozen :class:`ProductTerm` records; the
marginal reading (§6.3: every factor an identity or a total) is derived from them by
:func:`marginal_terms`, and a 1-D factor that is itself a weighted stack (e.g. [I; T]) is
read by the same walk with ``leaf=True``. :func:`matmech.linalg.linop.kron_terms`,
:func:`matmech.optimizers.marginal_workloads.kron_blocks` and the optimisers' term readers
are views of these records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from matmech.linalg.operator import Scaled

__all__ = ["ProductTerm", "product_terms", "interval_kind", "marginal_terms"]


@dataclass(frozen=True)
class ProductTerm:
    """One term wⱼ ⊗ᵢ Aᵢⱼ of a weighted union of Kronecker products.

    ``weight`` is wⱼ ≥ 0 (the product of the stack weights and scalings above the term, a
    negative scaling taken by its absolute value: it changes no gram or column norm);
    ``weight2`` is wⱼ² computed as the product of the squared weights (the gram's factor,
    rounded as the gram readers always have); ``factors`` the 1-D factors Aᵢⱼ."""

    weight: float
    weight2: float
    factors: tuple


def product_terms(A: Any, *, leaf: bool = False) -> tuple[ProductTerm, ...] | None:
    """The terms of A = [w₁ ⊗ᵢ Aᵢ₁; …] (a Kron, a scaling or a weighted, possibly nested,
    stack of them, every term over the same attribute sizes), else None.

    With ``leaf=True`` A is one attribute's factor: a Kron is not split, and every operator
    other than a stack or a scaling is a one-factor term (so [I; T] reads as two terms).

    Parameters
    ----------
    A : LinOp
        The operator to read.
    leaf : bool, optional
        Read A as a single attribute's (possibly stacked) factor.

    Returns
    -------
    tuple of ProductTerm or None
        The terms in row order, or None when A has no such form.

    Examples
    --------
    >>> from matmech.linalg.linop import Identity, Kron, Ones, VStack
    >>> import numpy as np
    >>> W = VStack([Kron(Identity(2), Ones(1, 3))], weights=np.array([2.0]))
    >>> [(t.weight, t.weight2, len(t.factors)) for t in product_terms(W)]
    [(2.0, 4.0, 2)]
    """
    from matmech.linalg.combinators import Kron, VStack

    if isinstance(A, Scaled):
        sub = product_terms(A.base, leaf=leaf)
        if sub is None:
            return None
        return tuple(ProductTerm(abs(A.c) * t.weight, A.c**2 * t.weight2, t.factors) for t in sub)
    if isinstance(A, VStack):
        out, dims = [], None
        for w, b in zip(A.weights, A.blocks):
            sub = product_terms(b, leaf=leaf)
            if sub is None:
                return None
            for t in sub:
                d = tuple(f.shape[1] for f in t.factors)
                if dims not in (None, d):
                    return None
                dims = d
                out.append(ProductTerm(float(w) * t.weight, float(w) ** 2 * t.weight2, t.factors))
        return tuple(out)
    if isinstance(A, Kron) and not leaf:
        return (ProductTerm(1.0, 1.0, tuple(A.factors)),)
    if leaf:
        return (ProductTerm(1.0, 1.0, (A,)),)
    return None


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
    from matmech.linalg.intervals import Intervals

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
    from matmech.linalg.combinators import Kron, VStack

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
