"""Least squares on trees and on the Haar matrix in O(nodes): the fast paths of
:func:`matmech.estimators.gls.solve` for :class:`matmech.strategies.Tree` and
:class:`matmech.strategies.Haar` (duck-typed: ``parent``/``bounds()`` and ``n``/``levels``).

* trees: two passes (Hay, Rastogi, Miklau, Suciu, VLDB 2010, Thm. 3, in the form of exact
  Gaussian belief propagation): a bottom-up pass combines each node's measurement with the
  sum of its children's subtree estimates by inverse variance, a top-down pass splits the
  parent's final estimate among the children in proportion to their subtree variances;
* Haar (any n): A is square and invertible, x̂ = A⁻¹ y by splitting block sums top-down in
  O(n) (Xiao, Wang, Gehrke, ICDE 2010).
"""

from __future__ import annotations

import weakref

import numpy as np

from matmech.linalg.spectral import tree_depths


# -- trees: two passes (Hay et al. 2010) ---------------------------------------------------------


class _TreePlan:
    """Levels of a tree grouped by parent, the leaf → cell map; None from tree_plan if invalid."""

    __slots__ = ("n", "levels", "leaves", "cells", "size")

    def __init__(self, n, levels, leaves, cells, size):
        self.n, self.levels, self.leaves, self.cells, self.size = n, levels, leaves, cells, size


def tree_plan(T):
    """Check that T's rows form a tree whose leaves are the n cells, and group it by level.

    Returns None (so callers fall back to the generic path) when ``parent`` is not a tree
    or a node's interval is not the disjoint union of its children's intervals. The result
    is cached per Tree object (keyed weakly, checked against its arrays).
    """
    key = (id(T.parent), id(T._lo) if hasattr(T, "_lo") else None, T.shape)
    hit = _PLANS.get(T)
    if hit is not None and hit[0] == key:
        return hit[1]
    plan = _tree_plan(T)
    try:
        _PLANS[T] = (key, plan)
    except TypeError:  # not weak-referenceable
        pass
    return plan


_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _tree_plan(T):
    N, n = T.shape
    parent = np.asarray(T.parent)
    if parent.shape != (N,) or (N and (parent.min() < -1 or parent.max() >= N)):
        return None
    depth = tree_depths(parent)
    if depth is None:
        return None
    lo, hi = T.bounds()
    child = parent >= 0
    has_child = np.bincount(parent[child], minlength=N) > 0
    leaves = np.flatnonzero(~has_child)
    if leaves.size != n or np.any(lo[leaves] != hi[leaves]):
        return None
    cells = lo[leaves]
    if np.any(np.bincount(cells, minlength=n) != 1):
        return None
    # children of each node, sorted by their left end, must tile the node's interval
    kids = np.flatnonzero(child)
    pk, lk, dk = parent[kids], lo[kids], depth[kids]
    # breadth-first trees (hierarchical()) are already sorted: skip the O(N log N) sorts
    if np.all((pk[1:] > pk[:-1]) | ((pk[1:] == pk[:-1]) & (lk[1:] > lk[:-1]))):
        order = kids
    else:
        order = kids[np.lexsort((lk, pk))]
    par = parent[order]
    first = np.r_[True, par[1:] != par[:-1]] if order.size else np.zeros(0, bool)
    last = np.r_[par[1:] != par[:-1], True] if order.size else np.zeros(0, bool)
    if order.size:
        if np.any(lo[order[first]] != lo[par[first]]) or np.any(hi[order[last]] != hi[par[last]]):
            return None
        inner = ~first
        if np.any(lo[order[inner]] != hi[order[np.flatnonzero(inner) - 1]] + 1):
            return None
    levels = []
    if np.all((dk[1:] > dk[:-1]) | ((dk[1:] == dk[:-1]) & (pk[1:] >= pk[:-1]))):
        by_depth = kids
    else:
        by_depth = kids[np.lexsort((pk, dk))]
    dsort = depth[by_depth]
    for d in range(int(dsort.max()) if dsort.size else 0, 0, -1):
        a, b = np.searchsorted(dsort, [d, d + 1])
        seg = by_depth[a:b]
        p = parent[seg]
        starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])
        levels.append((seg, starts, p[starts]))
    return _TreePlan(n, levels, leaves, cells, N)


def tree_solve(plan, Y, node_var=None):
    """x̂ = T⁺Y for a tree with independent per-node noise variances (default all equal).

    Bottom-up: z_v = (y_v·S_V + S_z·v_v)/(S_V + v_v), V_v = v_v·S_V/(v_v + S_V) with S_z, S_V
    the sums over the children of their z and V. Top-down: x̂_c = z_c + V_c/S_V·(x̂_p − S_z).
    This is the generalised least-squares (BLUE) solution (Hay et al. 2010, Sec. 4).
    """
    N, k = plan.size, Y.shape[1]
    var = np.ones(N) if node_var is None else np.asarray(node_var, dtype=np.float64)
    z = Y.copy()
    V = var.copy()
    sum_z = np.zeros((N, k))
    sum_v = np.ones(N)
    for seg, starts, parents in plan.levels:  # deepest level first
        sz = np.add.reduceat(z[seg], starts, axis=0)
        sv = np.add.reduceat(V[seg], starts)
        own = var[parents]
        z[parents] = (Y[parents] * sv[:, None] + sz * own[:, None]) / (sv + own)[:, None]
        V[parents] = own * sv / (own + sv)
        sum_z[parents], sum_v[parents] = sz, sv
    est = z  # roots keep their bottom-up estimate; refine every other node top-down
    for seg, starts, parents in reversed(plan.levels):  # shallowest level first
        counts = np.diff(np.r_[starts, seg.size])
        par = np.repeat(parents, counts)
        est[seg] = z[seg] + (V[seg] / sum_v[par])[:, None] * (est[par] - sum_z[par])
    out = np.empty((plan.n, k))
    out[plan.cells] = est[plan.leaves]
    return out


# -- Haar: split block sums top-down --------------------------------------------------------------


def haar_solve(A, Y):
    """A⁻¹Y for the Haar matrix (:class:`matmech.strategies.Haar`, any n): the total, then per
    dyadic level the block sums split top-down, left = (sum + detail)/2, right = (sum − detail)/2;
    a block without a right half passes its sum to its left half. O(n) after the levels."""
    n, k = A.n, Y.shape[1]
    sums = Y[0:1]
    r = 1
    for s, kept in A.levels:
        blocks = -(-n // (s // 2))  # blocks of size s/2 below
        nxt = np.empty((blocks, k))
        d = Y[r : r + kept]
        nxt[0 : 2 * kept : 2] = (sums[:kept] + d) / 2.0
        nxt[1 : 2 * kept : 2] = (sums[:kept] - d) / 2.0
        if 2 * kept < blocks:  # the last block at this level has no right half
            nxt[2 * kept :] = sums[kept:]
        sums, r = nxt, r + kept
    return sums
