"""A workload or strategy as a union of Kronecker products, read factor by factor.

W = [w₁ ⊗ᵢ Aᵢ₁; …; w_k ⊗ᵢ Aᵢ_k] (:func:`matmech.linalg.products.product_terms`). A factor is the
total 1ᵀ (kind ``"T"``), the identity (``"I"``) or anything else (``"O"``). A term whose
factors are all I or T is the marginal on the attributes with I; the *support* of a union
is the set of attributes where some term is not a total. Restricted to a set U ⊇ support,
every term is (⊗_{i∈U} Aᵢ) ⊗ 1ᵀ, so W x = W_U x_U with x_U the marginal table of x on U:
the factored release measures and solves on x_U, never on x. Data-independent.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from matmech.linalg.linop import Identity, Kron, LinOp, Ones, VStack, as_linop
from matmech.linalg.products import interval_kind, product_terms


#: Factors up to this size are classified from their dense form; larger ones by type.
MAX_CHECK_N = 4096


def _kind(f):
    m, n = f.shape
    if isinstance(f, Identity):
        return "I"
    if isinstance(f, Ones) and m == 1:
        return "T"
    if n > MAX_CHECK_N or m > MAX_CHECK_N:
        return interval_kind(f) or "O"
    if m == 1:
        return "T" if np.array_equal(f.dense(), np.ones((1, n))) else "O"
    if m == n and np.array_equal(f.dense(), np.eye(n)):
        return "I"
    return "O"


@dataclass(frozen=True, eq=False)
class Terms:
    """The Kronecker terms of a workload or strategy: ``weights[j]``, ``factors[j][i]`` and
    ``kinds[j][i]`` ("I", "T", "O"), over attribute sizes ``domain``."""

    domain: tuple
    weights: tuple
    factors: tuple
    kinds: tuple

    @property
    def support(self):
        return tuple(sorted({i for ks in self.kinds for i, k in enumerate(ks) if k != "T"}))

    def marginals(self):
        """(subsets, row weights) when every term is a marginal, else None."""
        if any(k == "O" for ks in self.kinds for k in ks):
            return None
        return [tuple(i for i, k in enumerate(ks) if k == "I") for ks in self.kinds], list(
            self.weights
        )

    @property
    def rows(self):
        return sum(
            math.prod(f.shape[0] for f in fs)
            if fs is not None
            else math.prod(n for n, k in zip(self.domain, ks) if k == "I")
            for fs, ks in zip(self.factors, self.kinds)
        )


class MarginalWorkload(LinOp):
    """The weighted marginals on ``subsets`` of ``domain``, described by their subsets only:
    for domains too large for a :class:`~matmech.linalg.linop.Kron` (10¹⁰⁰ cells is fine).
    ``shape[1]`` is the exact number of cells (a Python int); it applies itself to vectors
    only when the domain has at most 2**22 cells."""

    def __init__(self, domain, subsets, weights=None):
        from matmech.linalg.residual import check_lattice

        self.domain, self.subsets, self.weights = check_lattice(domain, subsets, weights)
        self.weights.setflags(write=False)
        rows = sum(math.prod(self.domain[i] for i in s) for s in self.subsets)
        self.shape = (int(rows), math.prod(self.domain))

    def _explicit(self):
        if self.shape[1] > 1 << 22:
            raise ValueError(
                f"the marginal workload spans {self.shape[1]:.4g} cells; it is applied factor by factor "
                "only (release_factored)"
            )
        blocks = [
            Kron(*[Identity(n) if i in s else Ones(1, n) for i, n in enumerate(self.domain)])
            for s in self.subsets
        ]
        return VStack(blocks, weights=self.weights)

    def _matmat(self, x):
        return self._explicit().matmat(x)

    def _rmatmat(self, y):
        return self._explicit().rmatmat(y)

    def labels(self, names=None):
        """One label per row, e.g. ``"a0=1, a3=4"`` (``names``: attribute names)."""
        names = [f"a{i}" for i in range(len(self.domain))] if names is None else list(names)
        out = []
        for s in self.subsets:
            if not s:
                out.append("total")
                continue
            for cell in itertools.product(*[range(self.domain[i]) for i in s]):
                out.append(", ".join(f"{names[i]}={c}" for i, c in zip(s, cell)))
        return out


def marginal_workload(domain, subsets, weights=None):
    """A :class:`MarginalWorkload` (the marginals on ``subsets``, any domain size)."""
    return MarginalWorkload(domain, subsets, weights)


def _marginal_terms(W):
    kinds = tuple(tuple("I" if i in s else "T" for i in range(len(W.domain))) for s in W.subsets)
    return Terms(W.domain, tuple(float(w) for w in W.weights), (None,) * len(W.subsets), kinds)


def as_terms(A, *, name="W"):
    """:class:`Terms` of A (a Kron, a scaling or a weighted stack of them, or a
    :class:`MarginalWorkload`), or ValueError."""
    if isinstance(A, MarginalWorkload):
        return _marginal_terms(A)
    if not isinstance(A, LinOp):
        raise TypeError(
            f"{name} must be a matmech LinOp (a Kron or a stack of Krons), got {type(A).__name__}"
        )
    terms = product_terms(A)
    if terms is None:
        raise ValueError(
            f"{name} ({type(A).__name__}) is not a Kronecker product or a stack of them; "
            "the factored release needs its factors"
        )
    cache = {}

    def kind(f):
        if id(f) not in cache:
            cache[id(f)] = (f, _kind(f))
        return cache[id(f)][1]

    domain = tuple(int(f.shape[1]) for f in terms[0].factors)
    return Terms(
        domain,
        tuple(float(t.weight) for t in terms),
        tuple(t.factors for t in terms),
        tuple(tuple(kind(f) for f in t.factors) for t in terms),
    )


def restrict(terms, U):
    """The union restricted to the attributes U (sorted): a LinOp over the cells of the
    marginal on U, row for row the same as the original. Raises if a term is not a total
    outside U."""
    U = tuple(sorted(U))
    if not U:
        raise ValueError("the attribute set to restrict to is empty")
    blocks = []
    for j, (fs, ks) in enumerate(zip(terms.factors, terms.kinds)):
        if fs is None:  # a MarginalWorkload term
            fs = [Identity(n) if k == "I" else Ones(1, n) for n, k in zip(terms.domain, ks)]
        bad = [i for i, k in enumerate(ks) if i not in U and k != "T"]
        if bad:
            raise ValueError(f"term {j} is not a total on attributes {bad} outside {U}")
        inner = [fs[i] for i in U]
        blocks.append(Kron(*inner) if len(inner) > 1 else as_linop(inner[0]))
    if len(blocks) == 1 and terms.weights[0] == 1.0:
        return blocks[0]
    return VStack(blocks, weights=np.array(terms.weights))
