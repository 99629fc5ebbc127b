"""The selected rows of a factored selection: where they are, their sensitivity, their span.

After a private selection (:mod:`matmech.plans.factored_selected`) the k selected rows of W are
measured themselves: row r of term j is w_j·u_r with u_r = ⊗ᵢ (row rᵢ of factor i) an integer
rank-one Kronecker row. From the factors alone (never the domain):

* :func:`rows_sensitivity` — Δ_p of the stack U_S: for marginal cells the largest set of
  pairwise consistent cells (a maximum clique, Tomita & Seki 2003; past
  :data:`CLIQUE_NODE_CAP` nodes a colouring bound), otherwise
  :func:`matmech.linalg.normmax.factored_sensitivity` on the k rank-one rows (exact by branch
  and bound, else its certified upper bound, never above the bound of the whole terms);
* :func:`row_basis` — an orthonormal basis of the range of U_S from the Gram
  U_S U_Sᵀ = ∘ᵢ VᵢVᵢᵀ, its rank decided exactly in integers (duplicate and dependent rows).
"""

from __future__ import annotations

import numpy as np

from matmech.plans.factored_selection import term_factor, term_shape
from matmech.linalg.gls import row_space_basis
from matmech.linalg.linop import Dense, LinOp, Ones
from matmech.linalg.normmax import factored_sensitivity


#: Branch-and-bound nodes of the exact sensitivity of selected marginal cells (a maximum
#: clique) before the certified colouring bound is used instead.
CLIQUE_NODE_CAP = 20_000


def _locate(plan, rows):
    """(term, multi-index over its non-total factors) of each row."""
    terms = np.searchsorted(plan.offsets, rows, side="right") - 1
    out = []
    for r, j in zip(rows.tolist(), terms.tolist()):
        shape = term_shape(plan.terms, j, plan.subsets[j])
        out.append(
            (
                j,
                tuple(int(v) for v in np.unravel_index(r - int(plan.offsets[j]), shape))
                if shape
                else (),
            )
        )
    return out


class _Cap(Exception):
    pass


def _max_clique(adj, cap):
    """(size of a maximum clique or None past ``cap`` nodes, an upper bound on it) of the graph
    with bitmask adjacency ``adj`` (branch and bound with a greedy-colouring bound, Tomita &
    Seki 2003; past the cap the bound is the number of colours of a greedy colouring)."""
    best, nodes = 0, 0

    def colour(P):
        order, colours, U, c = [], [], P, 0
        while U:
            c += 1
            Q = U
            while Q:
                v = (Q & -Q).bit_length() - 1
                Q &= ~adj[v] & ~(1 << v)
                U &= ~(1 << v)
                order.append(v)
                colours.append(c)
        return order, colours

    def expand(size, P):
        nonlocal best, nodes
        nodes += 1
        if nodes > cap:
            raise _Cap
        order, colours = colour(P)
        for v, c in zip(reversed(order), reversed(colours)):
            if size + c <= best:
                return
            Q = P & adj[v]
            if Q:
                expand(size + 1, Q)
            elif size + 1 > best:
                best = size + 1
            P &= ~(1 << v)

    try:
        expand(0, (1 << len(adj)) - 1)
    except _Cap:
        return None, max(colour((1 << len(adj)) - 1)[1], default=0)  # colours bound the clique
    return best, best


def _cells_sensitivity(plan, loc, p):
    """Δ_p of selected marginal cells (every factor identity or total): a column is one cell
    of the domain, and the cells containing it are pairwise consistent (equal values on the
    attributes they share) — conversely pairwise consistent cells share a column. So Δ₁ =
    Δ₂² = the largest set of pairwise consistent cells: a maximum clique → (Δ_p, exact); past
    :data:`CLIQUE_NODE_CAP` nodes the smaller of a greedy colouring's number of colours and
    the number of distinct marginals (a record is in one cell of each), not exact."""
    cells = [dict(zip(plan.subsets[j], idx)) for j, idx in loc]
    adj = [0] * len(cells)
    for a in range(len(cells)):
        for b in range(a + 1, len(cells)):
            if all(cells[b].get(i, v) == v for i, v in cells[a].items()):
                adj[a] |= 1 << b
                adj[b] |= 1 << a
    size, bound = _max_clique(adj, CLIQUE_NODE_CAP)
    if size is not None:
        return float(size) ** (1.0 / p), True
    return float(min(bound, len({j for j, _ in loc}))) ** (1.0 / p), False


def rows_sensitivity(plan, rows, p):
    """(Δ_p, exact, method) of the unweighted rows ``rows`` of W (no neighbours factor): the
    largest column p-norm of the stack of rank-one Kronecker rows, from the factors
    (:func:`~matmech.linalg.normmax.factored_sensitivity`: exact or its certified upper
    bound), never above the same bound for the whole terms the rows belong to."""
    terms, d = plan.terms, len(plan.terms.domain)
    loc = _locate(plan, np.asarray(rows, dtype=np.int64))
    if all(k != "O" for j, _ in loc for k in terms.kinds[j]):
        value, exact = _cells_sensitivity(plan, loc, p)
        return (
            value,
            exact,
            "maximum clique of consistent cells"
            if exact
            else "colouring bound of consistent cells",
        )
    ones = [Ones(1, n) for n in terms.domain]
    cache, stack = {}, []
    for j, idx in loc:
        fs: list[LinOp] = list(ones)
        for i, r in zip(plan.subsets[j], idx):
            key = (j, i, r)
            if key not in cache:
                row = np.zeros((1, terms.domain[i]))
                if terms.kinds[j][i] == "I":
                    row[0, r] = 1.0
                else:
                    row[:] = np.rint(
                        np.asarray(term_factor(terms, j, i).dense()[r : r + 1], dtype=np.float64)
                    )
                cache[key] = Dense(row)
            fs[i] = cache[key]
        stack.append((1.0, fs))
    by_rows = factored_sensitivity(stack, p)
    hit = sorted({j for j, _ in loc})
    by_terms = factored_sensitivity(
        [(1.0, [term_factor(terms, j, i) for i in range(d)]) for j in hit], p
    )
    if by_rows.exact or by_rows.value <= by_terms.value:
        return by_rows.value, by_rows.exact, by_rows.method
    return by_terms.value, False, "upper bound of the whole terms"


def _row_vectors(plan, rows):
    """Per attribute, the k × nᵢ matrix of the selected rows' factor rows (totals: ones)."""
    terms = plan.terms
    V = [None] * len(terms.domain)
    for a, (j, idx) in enumerate(_locate(plan, rows)):
        for i, r in zip(plan.subsets[j], idx):
            if V[i] is None:
                V[i] = np.ones((rows.size, terms.domain[i]))
            if terms.kinds[j][i] == "I":
                V[i][a] = 0.0
                V[i][a, r] = 1.0
            else:
                V[i][a] = np.rint(np.asarray(term_factor(terms, j, i).dense()[r], dtype=np.float64))
    return V


def row_basis(plan, rows):
    """B (k × r, orthonormal) spanning the range of the unweighted selected rows U_S (the space
    U_S x lives in), from the Gram U_S U_Sᵀ = ∘ᵢ VᵢVᵢᵀ/nᵢ (columns scaled per attribute by
    1/√nᵢ, which leaves the range unchanged), never from the domain. The factor rows are
    integers, so the rank r is decided exactly (:func:`matmech.linalg.gls.row_space_basis`):
    duplicate and dependent rows never depend on rounding."""
    k = len(rows)
    G = np.ones((k, k))
    exact = np.ones((k, k), dtype=np.int64).astype(object)
    for i, V in enumerate(_row_vectors(plan, np.asarray(rows, dtype=np.int64))):
        if V is not None:
            VV = V @ V.T
            G *= VV / plan.terms.domain[i]
            exact = exact * np.rint(VV).astype(np.int64).astype(object)
    return row_space_basis(G, exact=exact)
