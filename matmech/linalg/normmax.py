"""The largest column norm of a stack of Kronecker products, from its factors.

A stack A = [w₁ ⊗ᵢAᵢ₁; …] has column p-norms Σⱼ wⱼ ⊗ᵢ cᵢⱼ (p = 1, cᵢⱼ the column norms of
factor Aᵢⱼ) or sqrt(Σⱼ wⱼ² ⊗ᵢ cᵢⱼ²) (p = 2): its sensitivity is the maximum of a sum of
products over a domain that may hold 10¹⁸ cells (HDMM, McKenna et al. VLDB 2018, §6). Found
here without enumerating the domain: exactly when the factors' norms are constant or there is
one term, else by branch and bound over the attributes, with a certified upper bound past a
work cap. The factors are used only through ``col_norms(p)``.
"""

from __future__ import annotations

import math
from functools import reduce

import numpy as np


#: Largest number of branch-and-bound nodes :func:`factored_sensitivity` visits before it
#: returns the certified upper bound Σⱼ wⱼ Πᵢ max colnorm(Aᵢⱼ) instead of the exact maximum.
SENSITIVITY_NODE_CAP = 200_000

#: ... and at most about this many multiply-adds (nodes × cells × terms) in that search.
SENSITIVITY_WORK_CAP = 200_000_000


def check_p(p):
    """The norm order: 1 (L1, pure ε) or 2 (L2, Gaussian)."""
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise TypeError(f"p must be 1 or 2, got {type(p).__name__}: {p!r}")
    if p not in (1, 2):
        raise ValueError(f"p must be 1 or 2, got {p!r}")


class SensitivityResult(tuple):
    """(value, exact, method) of a sensitivity: ``exact`` is False when ``value`` is only the
    certified upper bound Σⱼ wⱼ Πᵢ max colnorm(Aᵢⱼ) (the exact search hit its node cap);
    ``method`` names how it was found ("dense", "kron", "constant", "single term",
    "branch and bound", "upper bound")."""

    __slots__ = ()

    def __new__(cls, value, exact, method):
        return super().__new__(cls, (float(value), bool(exact), str(method)))

    value = property(lambda self: self[0])
    exact = property(lambda self: self[1])
    method = property(lambda self: self[2])


def factored_col_norms(terms, p=1):
    """The column p-norms of the stack ``terms`` (:func:`kron_terms`), built from the factors:
    Σⱼ wⱼ ⊗ᵢ colnorm₁(Aᵢⱼ) for p = 1, sqrt(Σⱼ wⱼ² ⊗ᵢ colnorm₂(Aᵢⱼ)²) for p = 2. This is a
    domain-length vector (for tests and small domains); :func:`factored_sensitivity` is not."""
    check_p(p)
    total = 0.0
    for w, fs in terms:
        v = reduce(np.kron, [f.col_norms(p) ** p for f in fs])
        total = total + w**p * v
    return total if p == 1 else np.sqrt(total)


def _max_sum_of_products(weights, vecs, node_cap):
    """max over x of Σⱼ wⱼ Πᵢ vecs[i][j, xᵢ] (all entries ≥ 0): (value, exact, method).

    Attributes on which every term is constant are folded into the weights; one term left is
    the product of maxima; otherwise depth-first branch and bound over the attributes, each
    partial assignment bounded by the product of the remaining per-term maxima.
    """
    w = np.asarray(weights, dtype=np.float64)
    rest = []
    for V in vecs:
        if np.all(V[:, :1] == V):
            w = w * V[:, 0]
        else:
            rest.append(np.unique(V, axis=1))  # equal cells (columns) need one branch
    live = w > 0
    if not live.any():
        return 0.0, True, "constant"
    w = w[live]
    rest = [V[live] for V in rest]
    if not rest:
        return float(w.sum()), True, "constant"
    if w.size == 1:
        return float(w[0] * np.prod([V[0].max() for V in rest])), True, "single term"
    rest.sort(key=lambda V: -V.shape[1])  # wide attributes first: their bounds prune most
    k = len(rest)
    suffix = np.ones((k + 1, w.size))
    for i in range(k - 1, -1, -1):
        suffix[i] = suffix[i + 1] * rest[i].max(1)
    root = float(w @ suffix[0])
    # each node costs (cells × terms) flops: bound the work as well as the node count
    node_cap = min(
        node_cap, max(1000, SENSITIVITY_WORK_CAP // (w.size * max(V.shape[1] for V in rest)))
    )
    best, nodes, stack = -np.inf, 0, [(root, 0, w)]
    while stack:
        bound, i, pre = stack.pop()
        if bound <= best * (1 + 1e-12):
            continue
        nodes += 1
        if nodes > node_cap:
            return root, False, "upper bound"
        cand = rest[i].T * pre  # (cells of attribute i, terms)
        if i + 1 == k:
            best = max(best, float(cand.sum(1).max()))
            continue
        bounds = cand @ suffix[i + 1]
        for v in np.argsort(bounds, kind="stable"):  # the largest bound is popped first
            if bounds[v] > best * (1 + 1e-12):
                stack.append((float(bounds[v]), i + 1, cand[v]))
    return best, True, "branch and bound"


def factored_sensitivity(terms, p=1, *, node_cap=None):
    """Largest column p-norm of the stack ``terms`` (:func:`kron_terms`) without a
    domain-length vector, as a :class:`SensitivityResult`.

    The column norms are Σⱼ wⱼ ⊗ᵢ cᵢⱼ (p = 1, cᵢⱼ the factor column norms) or the square
    root of Σⱼ wⱼ² ⊗ᵢ cᵢⱼ² (p = 2). Their maximum is exact when every factor's column norms
    are constant (identity, total, marginal factors) or there is one term (the product of
    the factor maxima); otherwise an exact branch and bound over the attributes. Past
    ``node_cap`` nodes (default :data:`SENSITIVITY_NODE_CAP`) it returns the certified upper
    bound Σⱼ wⱼ Πᵢ max cᵢⱼ with ``exact=False`` (the cap shrinks so that the search does at most
    about :data:`SENSITIVITY_WORK_CAP` multiply-adds).
    """
    check_p(p)
    cap = SENSITIVITY_NODE_CAP if node_cap is None else int(node_cap)
    k = len(terms[0][1])
    weights = np.array([float(w) ** p for w, _ in terms])
    vecs = [
        np.array([np.asarray(fs[i].col_norms(p), dtype=np.float64) ** p for _, fs in terms])
        for i in range(k)
    ]
    value, exact, method = _max_sum_of_products(weights, vecs, cap)
    return SensitivityResult(value if p == 1 else math.sqrt(value), exact, method)
