"""Measurement strategies: identity, hierarchical interval trees, Haar wavelet, Kronecker.

Any workload can also be used as a strategy as it is.
"""

from __future__ import annotations

import math
import numbers

import networkx as nx
import numpy as np
import scipy.sparse as sp

from matmech.linalg.intervals import IntervalGram, Intervals
from matmech.linalg.linop import Identity, Kron, Sparse, check_size, register
from matmech.linalg.spectral import BlockSpectral

__all__ = ["identity", "hierarchical", "haar", "kron", "Tree", "Haar"]


def identity(n):
    """Measure every cell once (A = I)."""
    return Identity(n)


@register("Tree")
class Tree(Intervals):
    """Interval sums of the nodes of a tree over the cells (Hay et al., VLDB 2010).

    Rows are nodes in breadth-first order (root first); ``parent[r]`` is the row of the
    parent node (−1 for the top). Every leaf is one cell, so the strategy has full column
    rank. ``sizes`` (when not None) are the uniform block sizes of a regular b-ary tree,
    ``branching`` its b (None for a tree given as a graph).
    """

    kind = "tree"

    def __init__(self, n, lo, hi, parent, *, labels=None, sizes=None, branching=None):
        super().__init__(n, lo, hi)
        self.parent = np.asarray(parent, dtype=np.int64)
        self.labels = labels
        self.sizes = sizes
        self.branching = None if branching is None else int(branching)

    def to_dict(self, out):
        lo, hi = self.bounds()
        d = {
            "n": int(self.n),
            "lo": out.array(lo),
            "hi": out.array(hi),
            "parent": out.array(self.parent),
            "sizes": None if self.sizes is None else [int(s) for s in self.sizes],
            "labels": _json_labels(self.labels),
        }
        if self.branching is not None:
            d["branching"] = self.branching
        return d

    @classmethod
    def from_dict(cls, node, src):
        sizes = node.get("sizes")
        if sizes is not None:
            sizes = tuple(src.ints(node, "sizes"))
        labels = node.get("labels")
        if labels is not None and not isinstance(labels, list):
            src.fail("Tree.labels must be a list")
        return cls(
            src.field(node, "n", int),
            src.array(node, "lo", "int", 1),
            src.array(node, "hi", "int", 1),
            src.array(node, "parent", "int", 1),
            labels=labels,
            sizes=sizes,
            branching=src.field(node, "branching", int) if "branching" in node else None,
        )


    def gram(self):
        if self.sizes is None:
            return IntervalGram(self)
        # a complete level of blocks of size s adds s·E_s to AᵀA
        return BlockSpectral(self.n, self.sizes, np.cumsum(self.sizes, dtype=np.float64))


def _json_labels(labels):
    """Tree node labels as JSON (strings and numbers kept, anything else by its str)."""
    if labels is None:
        return None
    out = []
    for v in labels:
        if isinstance(v, (str, bool)) or v is None:
            out.append(v)
        elif isinstance(v, numbers.Integral):
            out.append(int(v))
        elif isinstance(v, numbers.Real):
            out.append(float(v))
        else:
            out.append(str(v))
    return out


def _regular_tree(n, b, root):
    """Aligned b-adic blocks [j·bˡ, (j+1)·bˡ) ∩ [0, n) for every bˡ < n, plus the root."""
    levels, s = [], 1
    while s < n:
        levels.append(s)
        s *= b
    if root or n == 1:
        levels.append(n)
    lo, hi, parent, first, rows = [], [], [], {}, 0
    for depth, s in enumerate(reversed(levels)):
        starts = np.arange(0, n, s)
        first[depth], rows = rows, rows + starts.size
        lo.append(starts)
        hi.append(np.minimum(starts + s, n) - 1)
        if depth == 0:
            parent.append(np.full(starts.size, -1))
        else:
            up = list(reversed(levels))[depth - 1]
            parent.append(first[depth - 1] + starts // up)
    lo, hi = np.concatenate(lo), np.concatenate(hi)
    uniform = n % levels[-2 if (root and n > 1) else -1] == 0 if len(levels) > 1 else True
    sizes = tuple(levels) if uniform else None
    return lo, hi, np.concatenate(parent), sizes


def _tree_from_graph(tree):
    if not isinstance(tree, nx.DiGraph):
        raise TypeError(f"a tree strategy needs a networkx DiGraph arborescence, got {type(tree).__name__}")
    if tree.number_of_nodes() == 0 or not nx.is_arborescence(tree):
        raise ValueError("the graph is not an arborescence (a directed tree with edges pointing away from one root)")
    (root,) = [v for v, d in tree.in_degree() if d == 0]
    # leaves in depth-first order (children in insertion order) are the cells 0..n-1
    order = list(nx.dfs_preorder_nodes(tree, root))
    cell, span = {}, {}
    for v in order:
        if tree.out_degree(v) == 0:
            cell[v] = len(cell)
    for v in reversed(order):
        kids = list(tree.successors(v))
        span[v] = (cell[v], cell[v]) if not kids else (min(span[k][0] for k in kids), max(span[k][1] for k in kids))
    bfs = [root] + [v for _, v in nx.bfs_edges(tree, root)]
    row = {v: i for i, v in enumerate(bfs)}
    parent = [-1] + [row[next(iter(tree.predecessors(v)))] for v in bfs[1:]]
    lo = np.array([span[v][0] for v in bfs])
    hi = np.array([span[v][1] for v in bfs])
    return len(cell), lo, hi, np.array(parent), bfs


def hierarchical(n, branching=2, root=True):
    """Hierarchical interval strategy H_b (Hay et al. VLDB 2010; Qardaji et al. VLDB 2013).

    ``hierarchical(n, b)``: every aligned block of bˡ cells for bˡ < n (leaves included),
    plus the whole domain when ``root``. When the largest block size divides n the gram is
    block-spectral and all error figures are O(n·levels). ``hierarchical(tree)``: one row
    per node of a networkx arborescence whose leaves, in depth-first order, are the cells
    (unbalanced trees such as geographies); ``root=False`` drops the root row.
    """
    if isinstance(n, nx.Graph):
        size, lo, hi, parent, labels = _tree_from_graph(n)
        if not root and lo.size > 1 and hi[0] - lo[0] + 1 == size:
            lo, hi, parent, labels = lo[1:], hi[1:], np.where(parent[1:] <= 0, -1, parent[1:] - 1), labels[1:]
        return Tree(size, lo, hi, parent, labels=labels)
    n = check_size(n)
    if isinstance(branching, bool) or not isinstance(branching, numbers.Integral) or branching < 2:
        raise ValueError(f"branching must be an integer >= 2, got {branching!r}")
    if not isinstance(root, (bool, np.bool_)):
        raise TypeError(f"root must be True or False, got {root!r}")
    lo, hi, parent, sizes = _regular_tree(n, int(branching), bool(root))
    return Tree(n, lo, hi, parent, sizes=sizes, branching=int(branching))


@register("Haar")
class Haar(Sparse):
    """Unnormalised Haar wavelet matrix (±1 entries, rows root first; the slides' Y₄).

    For n not a power of two it is the Haar matrix of N = 2^⌈log₂ n⌉ restricted to the
    first n columns, with rows that become zero dropped: still of full column rank, with
    L1 sensitivity 1 + log₂ N (Xiao, Wang, Gehrke, ICDE 2010).
    """

    def __init__(self, n):
        n = check_size(n)
        big = 1 << max(0, math.ceil(math.log2(n)))
        rows, cols, vals, r, s = [], [], [], 1, big
        rows.append(np.zeros(n, dtype=np.int64))
        cols.append(np.arange(n))
        vals.append(np.ones(n))
        while s > 1:
            for start in range(0, n, s):
                half = start + s // 2
                c = np.arange(start, min(start + s, n))
                rows.append(np.full(c.size, r))
                cols.append(c)
                vals.append(np.where(c < half, 1.0, -1.0))
                r += 1
            s //= 2
        mat = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, n))
        super().__init__(mat)
        self.n, self.power_of_two = n, big == n

    def gram(self):
        if not self.power_of_two:
            return super().gram()
        sizes = [1 << k for k in range(int(math.log2(self.n)) + 1)]
        # detail rows with support 2s span E_s − E_2s with eigenvalue 2s; the total row spans E_n with n
        return BlockSpectral(self.n, sizes, [*sizes[1:], self.n])

    def to_dict(self, out):
        return {"n": int(self.n)}

    @classmethod
    def from_dict(cls, node, src):
        return cls(src.field(node, "n", int))


def haar(n):
    """The unnormalised Haar wavelet strategy (Privelet)."""
    return Haar(n)


def kron(*strategies):
    """Kronecker product of per-attribute strategies."""
    return Kron(*strategies)
