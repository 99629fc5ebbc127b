"""Structure-aware combinators: identities, ones, Kronecker products, weighted stacks, sums.

Gram, column norms, sensitivity and pseudo-inverses of these factor over their parts
((⊗Aᵢ)ᵀ(⊗Aᵢ) = ⊗AᵢᵀAᵢ; a stack's gram is the weighted sum of its blocks' grams), as in the
Kronecker and union operators of HDMM (McKenna et al., "Optimizing error of
high-dimensional statistical queries under differential privacy", PVLDB 2018, §3 and §6),
so a product domain of 10¹⁸ cells is never materialised. The contract they implement is
:class:`matmech.linalg.operator.LinOp`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np
import scipy.sparse as sp

from matmech.linalg.normmax import SensitivityResult, check_p as _check_p, factored_sensitivity
from matmech.linalg.operator import (
    DEFAULT_MAX_ENTRIES,
    FACTORED_SENSITIVITY_N,
    LinOp,
    Scaled,
    is_int,
    as_linop,
    register,
)
from matmech import validate


def check_size(n, name="n"):
    """Return ``n`` as an int if it is a positive integer of at most 2**62
    (:data:`matmech.validate.MAX_INDEX`), else raise naming the value: TypeError for a
    non-integer (bool, float such as 8.0, str), ValueError (:class:`~matmech.validate.SizeError`
    above 2**62). No memory estimate here: an operator is implicit, and a factor of a
    Kronecker product (a product domain) may index far more cells than fit in memory; what
    materialises a vector checks its own memory (:func:`matmech.validate.memory`)."""
    return validate.size(n, name, bytes_per=0, limit=None)


@register("Identity")
class Identity(LinOp):
    """The n×n identity."""

    #: Hook flag: the operator is the identity on the cells (:mod:`matmech.linalg.quadratic`).
    is_identity = True

    def __init__(self, n):
        n = check_size(n)
        self.shape = (n, n)

    def _matmat(self, x):
        return x.copy()

    _rmatmat = _matmat

    def gram(self):
        return self

    def col_norms(self, p=1):
        _check_p(p)
        return np.ones(self.shape[1])

    def rows(self, start, stop):
        return np.eye(self.shape[1])[start:stop]

    def _dense(self):
        return np.eye(self.shape[0])

    # -- quadratic-form hooks (matmech.linalg.quadratic) ---------------------------------------
    def covariance_trace(self, W):
        """trace(W I Wᵀ) = Σ squared column norms of W."""
        return float((W.col_norms(2) ** 2).sum())

    def covariance_diag(self, W):
        """diag(W Wᵀ) from W's squared row norms when W knows them (``row_norms2``), else None."""
        rn = getattr(W, "row_norms2", None)
        return None if rn is None else rn()

    def split_like(self, factors):
        """I_n as ⊗ I_{nᵢ} over the column sizes of ``factors`` (a Kronecker workload's)."""
        return [Identity(f.shape[1]) for f in factors]

    def gram_pinv(self):
        return self, None  # IᵀI = I is its own inverse

    def gram_eigenvalues(self):
        return np.ones(self.shape[0])

    def integer_valued(self):
        return True

    def entry_range(self):
        return 0.0, 1.0

    def explicit_matrix(self):
        return sp.identity(self.shape[0], format="csr")

    def rounded_matrix(self, g):
        return sp.identity(self.shape[0], format="csr")  # integer: exact on any grid g <= 1

    def to_dict(self, out):
        return {"n": int(self.shape[0])}

    @classmethod
    def from_dict(cls, node, src):
        return cls(src.field(node, "n", int))


@register("Ones")
class Ones(LinOp):
    """The m×n matrix of ones (m = 1: the total query)."""

    def __init__(self, m, n):
        self.shape = (check_size(m, "m"), check_size(n, "n"))

    def _matmat(self, x):
        return np.repeat(x.sum(0, keepdims=True), self.shape[0], axis=0)

    def _rmatmat(self, y):
        return np.repeat(y.sum(0, keepdims=True), self.shape[1], axis=0)

    def gram(self):
        m, n = self.shape
        return Scaled(Ones(n, n), m)

    def col_norms(self, p=1):
        _check_p(p)
        m = self.shape[0]
        return np.full(self.shape[1], float(m) if p == 1 else np.sqrt(m))

    def rows(self, start, stop):
        return np.ones((stop - start, self.shape[1]))

    def _dense(self):
        return np.ones(self.shape)

    def integer_valued(self):
        return True

    def entry_range(self):
        return 0.0, 1.0

    def to_dict(self, out):
        return {"shape": [int(s) for s in self.shape]}

    @classmethod
    def from_dict(cls, node, src):
        return cls(*src.ints(node, "shape"))


def _kron_apply(factors, x, transpose):
    """Apply ⊗ factors (or their transposes) to the columns of x, one mode at a time."""
    k = x.shape[1]
    dims_in = [f.shape[0] if transpose else f.shape[1] for f in factors]
    t = x.T.reshape([k, *dims_in])
    for axis, f in enumerate(factors, start=1):
        t = np.moveaxis(t, axis, -1)
        lead = t.shape[:-1]
        flat = t.reshape(-1, t.shape[-1]).T
        flat = f.rmatmat(flat) if transpose else f.matmat(flat)
        t = np.moveaxis(flat.T.reshape(*lead, flat.shape[0]), -1, axis)
    return t.reshape(k, -1).T


@register("Kron")
class Kron(LinOp):
    """Kronecker product A₁ ⊗ … ⊗ A_d (row-major cell order: the last factor varies fastest).

    Gram, column norms, sensitivity and pseudo-inverses factor: (⊗Aᵢ)ᵀ(⊗Aᵢ) = ⊗AᵢᵀAᵢ and
    the column norms of a Kronecker product are the Kronecker product of column norms.
    """

    def __init__(self, *factors):
        if len(factors) == 1 and isinstance(factors[0], (list, tuple)):
            factors = tuple(factors[0])
        if not factors:
            raise ValueError("Kron needs at least one factor")
        self.factors = tuple(as_linop(f) for f in factors)
        # exact Python-int products (np.prod wraps around in int64), within an int64 index
        self.shape = tuple(
            check_size(math.prod(int(f.shape[i]) for f in self.factors), f"Kron {what}")
            for i, what in enumerate(("rows", "columns"))
        )

    def _matmat(self, x):
        return _kron_apply(self.factors, x, transpose=False)

    def _rmatmat(self, y):
        return _kron_apply(self.factors, y, transpose=True)

    def gram(self):
        return Kron(*[f.gram() for f in self.factors])

    def col_norms(self, p=1):
        if self.shape[1] > DEFAULT_MAX_ENTRIES:
            raise ValueError(
                f"refusing to build the {self.shape[1]:,} column norms of a Kronecker product; "
                "use sensitivity() or factored_col_norms() (factor by factor)"
            )
        return reduce(np.kron, [f.col_norms(p) for f in self.factors])

    def sensitivity_details(self, p=1):
        # the max of a Kronecker product of non-negative vectors is the product of the maxima
        return SensitivityResult(
            float(np.prod([f.sensitivity(p) for f in self.factors])), True, "kron"
        )

    def _dense(self):
        return reduce(np.kron, [f._dense() for f in self.factors])

    def kron_factors(self):
        """The factors (hook of :mod:`matmech.linalg.quadratic` and :mod:`matmech.estimators.gls`)."""
        return self.factors

    def gram_eigenvalues(self):
        lams = [f.gram_eigenvalues() for f in self.factors]
        return None if any(lam is None for lam in lams) else reduce(np.kron, lams)

    def integer_valued(self):
        return all(f.integer_valued() for f in self.factors)

    def entry_range(self):
        lo, hi = 1.0, 1.0
        for f in self.factors:
            a, b = f.entry_range()
            products = (lo * a, lo * b, hi * a, hi * b)
            lo, hi = min(products), max(products)
        return min(lo, 0.0), max(hi, 0.0)

    def to_dict(self, out):
        return {"factors": [out.node(f) for f in self.factors]}

    @classmethod
    def from_dict(cls, node, src):
        return cls(*src.children(node, "factors"))


def _distinct_cells(blocks, p):
    """Per attribute, the column p-norms of every block's factor (blocks × cells) kept at one
    cell of each class of cells on which all of them agree, or None when the blocks' factors do
    not line up. Every block's column norm is then equal, bit for bit, on all cells of a
    product of classes: the stack's column norms need only one cell of each."""
    sizes = [f.shape[1] for f in blocks[0].factors]
    if any([f.shape[1] for f in b.factors] != sizes for b in blocks):
        return None
    grid = []
    for i in range(len(sizes)):
        V = np.array([np.asarray(b.factors[i].col_norms(p), dtype=np.float64) for b in blocks])
        reps = np.sort(np.unique(V, axis=1, return_index=True)[1])
        grid.append(V[:, reps])
    return grid


@register("VStack")
class VStack(LinOp):
    """Weighted vertical stack [w₁A₁; …; w_kA_k]; its gram is Σ wᵢ² AᵢᵀAᵢ.

    A union of marginals (:func:`matmech.workloads.marginals`) records its attribute sizes
    ``domain`` and one attribute subset per block in ``subsets`` (labels for the answers
    and the optimisers; None for other stacks).
    """

    def __init__(self, blocks, weights=None, *, domain=None, subsets=None):
        blocks = tuple(as_linop(b) for b in blocks)
        if not blocks:
            raise ValueError("VStack needs at least one block")
        n = blocks[0].shape[1]
        for b in blocks:
            if b.shape[1] != n:
                raise ValueError(
                    f"shape mismatch: cannot stack blocks with {n} and {b.shape[1]} columns "
                    f"(shapes {blocks[0].shape} and {b.shape})"
                )
        if weights is None:
            weights = np.ones(len(blocks))
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (len(blocks),):
            raise ValueError(f"expected {len(blocks)} weights, got {weights.shape}")
        if not np.all(np.isfinite(weights)) or np.any(weights <= 0):
            raise ValueError(f"weights must be positive and finite, got {weights.tolist()}")
        if (domain is None) != (subsets is None):
            raise ValueError("give both domain and subsets (a union of marginals) or neither")
        if subsets is not None:
            domain = tuple(int(d) for d in domain)
            subsets = tuple(tuple(int(i) for i in s) for s in subsets)
            if len(subsets) != len(blocks):
                raise ValueError(
                    f"expected one attribute subset per block ({len(blocks)}), got {len(subsets)}"
                )
        self.domain, self.subsets = domain, subsets
        self.blocks, self.weights = blocks, weights
        m = check_size(
            sum(int(b.shape[0]) for b in blocks), "VStack rows"
        )  # exact, within an int64 index
        self.offsets = np.concatenate([[0], np.cumsum([b.shape[0] for b in blocks])])
        self.shape = (m, n)

    def _matmat(self, x):
        return np.vstack([w * b.matmat(x) for w, b in zip(self.weights, self.blocks)])

    def _rmatmat(self, y):
        o = self.offsets
        return sum(
            w * b.rmatmat(y[o[i] : o[i + 1]])
            for i, (w, b) in enumerate(zip(self.weights, self.blocks))
        )

    def gram(self):
        return Sum([Scaled(b.gram(), w**2) for w, b in zip(self.weights, self.blocks)])

    def col_norms(self, p=1):
        _check_p(p)
        return self._sum_norms([b.col_norms(p) for b in self.blocks], p)

    def sensitivity_details(self, p=1):
        _check_p(p)
        if self.shape[1] > FACTORED_SENSITIVITY_N:
            terms = kron_terms(self)
            if terms is not None:
                return factored_sensitivity(terms, p)
        grid = None
        if all(isinstance(b, Kron) for b in self.blocks):
            grid = _distinct_cells(self.blocks, p)
        if grid is not None:
            # max(col_norms(p)) with the same products and sums, on one cell per class: no
            # domain-length kron per block (0.2-0.3 s per error evaluation at 10⁵-10⁶ cells)
            cols = [reduce(np.kron, [V[j] for V in grid]) for j in range(len(self.blocks))]
            return SensitivityResult(float(self._sum_norms(cols, p).max()), True, "dense")
        return super().sensitivity_details(p)

    def _sum_norms(self, cols, p):
        """The stack's column p-norms from its blocks' (``cols``)."""
        if p == 1:
            return sum(w * c for w, c in zip(self.weights, cols))
        return np.sqrt(sum((w * c) ** 2 for w, c in zip(self.weights, cols)))

    def rows(self, start, stop):
        out, o = [], self.offsets
        for i, (w, b) in enumerate(zip(self.weights, self.blocks)):
            lo, hi = max(start, o[i]), min(stop, o[i + 1])
            if lo < hi:
                out.append(w * b.rows(lo - o[i], hi - o[i]))
        return np.vstack(out) if out else np.zeros((0, self.shape[1]))

    def _dense(self):
        return np.vstack([w * b._dense() for w, b in zip(self.weights, self.blocks)])

    def integer_valued(self):
        return all(is_int(w) for w in self.weights) and all(b.integer_valued() for b in self.blocks)

    def entry_range(self):
        parts = [Scaled(b, w).entry_range() for w, b in zip(self.weights, self.blocks)]
        return min(p[0] for p in parts), max(p[1] for p in parts)

    def explicit_matrix(self):
        parts = [b.explicit_matrix() for b in self.blocks]
        if any(p is None for p in parts):
            return None
        return sp.vstack([w * sp.csr_matrix(p) for w, p in zip(self.weights, parts)], format="csr")

    def rounded_matrix(self, g):
        parts = [
            (Scaled(b, w) if w != 1.0 else b).rounded_matrix(g)
            for w, b in zip(self.weights, self.blocks)
        ]
        return sp.vstack([sp.csr_matrix(p) for p in parts], format="csr")

    def row_blocks(self):
        return list(zip(self.weights, self.blocks))

    def to_dict(self, out):
        d = {"weights": out.array(self.weights), "blocks": [out.node(b) for b in self.blocks]}
        if self.subsets is not None:
            d["domain"] = [int(x) for x in self.domain]
            d["subsets"] = [[int(i) for i in s] for s in self.subsets]
        return d

    @classmethod
    def from_dict(cls, node, src):
        blocks, weights = src.children(node, "blocks"), src.array(node, "weights", "float", 1)
        if "domain" not in node:
            return cls(blocks, weights=weights)
        subsets = src.field(node, "subsets", list)
        if not all(isinstance(s, list) and all(type(i) is int for i in s) for s in subsets):
            src.fail("VStack.subsets must be a list of lists of integers")
        return cls(blocks, weights=weights, domain=src.ints(node, "domain"), subsets=subsets)


@register("Sum")
class Sum(LinOp):
    """Σ Aᵢ of equally shaped operators (grams of stacks, structured covariances)."""

    def __init__(self, terms):
        self.terms = tuple(as_linop(t) for t in terms)
        if not self.terms:
            raise ValueError("Sum needs at least one term")
        for t in self.terms:
            if t.shape != self.terms[0].shape:
                raise ValueError(
                    f"shape mismatch: cannot add operators of shapes {self.terms[0].shape} and {t.shape}"
                )
        self.shape = self.terms[0].shape

    def _matmat(self, x):
        return sum(t.matmat(x) for t in self.terms)

    def _rmatmat(self, y):
        return sum(t.rmatmat(y) for t in self.terms)

    def _dense(self):
        return sum(t._dense() for t in self.terms)

    def integer_valued(self):
        return all(t.integer_valued() for t in self.terms)

    def linear_terms(self):
        return [(1.0, t) for t in self.terms]

    def to_dict(self, out):
        return {"terms": [out.node(t) for t in self.terms]}

    @classmethod
    def from_dict(cls, node, src):
        return cls(src.children(node, "terms"))


# -- sensitivity of Kronecker products and stacks of them, from the factors -------------------------


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


def kron_terms(A):
    """[(wⱼ, [Aᵢⱼ])] with A = [w₁ ⊗ᵢAᵢ₁; …] (a Kron, a scaling or a weighted, possibly nested,
    stack of them, every term over the same attribute sizes), else None: a view of
    :func:`product_terms`. The weights are non-negative (a negative scaling changes no
    column norm)."""
    terms = product_terms(A)
    return None if terms is None else [(t.weight, list(t.factors)) for t in terms]
