"""Measurement strategies: identity, hierarchical interval trees, Haar wavelet, Kronecker.

Trees (Hay et al., VLDB 2010) and Haar (Xiao, Wang, Gehrke, ICDE 2010) are defined for every
n, with error figures in O(n·levels) (:mod:`matmech.linalg.spectral`). Any workload can also
be used as a strategy as it is.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Hashable

import numpy as np
import scipy.sparse as sp

from matmech.linalg.intervals import IntervalGram, Intervals
from matmech.linalg.linop import Identity, Kron, LinOp, check_size, register
from matmech.linalg.normmax import check_p as _check_p
from matmech.linalg.spectral import BlockSpectral, NestedCovariance
from matmech.validate import memory as check_memory
from matmech.validate import factors as _factors, operator as _operator, size as _size
from typing import Any, Sequence

__all__ = ["identity", "hierarchical", "haar", "kron", "Tree", "Haar"]


def identity(n: int) -> LinOp:
    """Measure every cell once (A = I).

    Parameters
    ----------
    n : int
        Number of cells.

    Returns
    -------
    LinOp
        The n×n identity strategy.

    Raises
    ------
    ValueError, TypeError
        n not an integer ≥ 1, or too large for memory.

    Examples
    --------
    >>> identity(4).sensitivity(1)
    1.0
    """
    return Identity(_size(n, "n", what=f"identity({n!r}) (one float64 per cell)"))


@register("Tree")
class Tree(Intervals):
    """Interval sums of the nodes of a tree over the cells (Hay et al., VLDB 2010).

    Rows are nodes in breadth-first order (root first); ``parent[r]`` is the row of the
    parent node (−1 for the top). Every leaf is one cell, so the strategy has full column
    rank. ``sizes`` (when not None) are the uniform block sizes of a regular b-ary tree,
    ``branching`` its b (None for a tree given as a graph).

    Parameters
    ----------
    n : int
        Number of cells.
    lo, hi : numpy.ndarray
        Each node's interval of cells.
    parent : numpy.ndarray
        Parent row of each node (−1 for the top).
    labels : sequence, optional
        Node labels (trees given as a graph).
    sizes, branching : optional
        Regular-tree metadata, or None.

    Returns
    -------
    Tree
        A strategy; build it with :func:`hierarchical`.

    Raises
    ------
    ValueError
        Inconsistent node arrays.

    Examples
    --------
    >>> T = hierarchical(4)
    >>> type(T).__name__, T.shape
    ('Tree', (7, 4))
    """

    kind = "tree"

    def __init__(
        self,
        n: int,
        lo: np.ndarray,
        hi: np.ndarray,
        parent: np.ndarray,
        *,
        labels: Sequence | None = None,
        sizes: Sequence[int] | None = None,
        branching: int | None = None,
    ) -> None:
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

    def col_norms(self, p=1):
        if self.sizes is None:
            return super().col_norms(p)
        _check_p(p)  # uniform levels: every cell lies in one block of each
        levels = np.full(self.n, float(len(self.sizes)))
        return levels if p == 1 else np.sqrt(levels)

    def gram_pinv(self):
        if self.sizes is not None:
            return None  # block-spectral gram: closed form (:func:`matmech.linalg.structured.pinv_gram`)
        if getattr(self, "_pinv", None) is None:  # cached: the tree does not change
            lo, hi = self.bounds()
            cov = NestedCovariance.from_tree(self.n, lo, hi, self.parent)
            self._pinv = False if cov is None else (cov, None)
        return self._pinv or None

    def gram(self):
        if self.sizes is None:
            return IntervalGram(self)
        # a complete level of blocks of size s adds s·E_s to AᵀA
        return BlockSpectral(self.n, self.sizes, np.cumsum(self.sizes, dtype=np.float64))


def _json_labels(labels):
    """Tree node labels as JSON (strings and numbers kept, anything else by its str)."""
    if labels is None:
        return None
    out: list[str | bool | int | float | None] = []
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


def level_sizes(n, b, *, root=True):
    """The block sizes bˡ < n of the b-ary hierarchy on n cells, smallest first, then n (the
    root; also without ``root`` when n is 1)."""
    levels, s = [], 1
    while s < n:
        levels.append(s)
        s *= b
    if root or n == 1:
        levels.append(n)
    return levels


def _regular_tree(n, b, root):
    """Aligned b-adic blocks [j·bˡ, (j+1)·bˡ) ∩ [0, n) for every bˡ < n, plus the root."""
    levels = level_sizes(n, b, root=root)
    los: list[np.ndarray] = []
    his: list[np.ndarray] = []
    parent: list[np.ndarray] = []
    first: dict[int, int] = {}
    rows = 0
    for depth, s in enumerate(reversed(levels)):
        starts = np.arange(0, n, s)
        first[depth], rows = rows, rows + starts.size
        los.append(starts)
        his.append(np.minimum(starts + s, n) - 1)
        if depth == 0:
            parent.append(np.full(starts.size, -1))
        else:
            up = list(reversed(levels))[depth - 1]
            parent.append(first[depth - 1] + starts // up)
    lo, hi = np.concatenate(los), np.concatenate(his)
    uniform = n % levels[-2 if (root and n > 1) else -1] == 0 if len(levels) > 1 else True
    sizes = tuple(levels) if uniform else None
    return lo, hi, np.concatenate(parent), sizes


def _networkx_graph(obj):
    """Whether obj is a networkx graph (networkx is imported only by callers that use it)."""
    nx = sys.modules.get("networkx")
    return nx is not None and isinstance(obj, nx.Graph)


def _tree_from_graph(tree):
    import networkx as nx

    if not isinstance(tree, nx.DiGraph):
        raise TypeError(
            f"a tree strategy needs a networkx DiGraph arborescence, got {type(tree).__name__}"
        )
    if tree.number_of_nodes() == 0 or not nx.is_arborescence(tree):
        raise ValueError(
            "the graph is not an arborescence (a directed tree with edges pointing away from one root)"
        )
    (root,) = [v for v, d in tree.in_degree() if d == 0]
    # leaves in depth-first order (children in insertion order) are the cells 0..n-1
    order = list(nx.dfs_preorder_nodes(tree, root))
    cell: dict[Hashable, int] = {}
    span: dict[Hashable, tuple[int, int]] = {}
    for v in order:
        if tree.out_degree(v) == 0:
            cell[v] = len(cell)
    for v in reversed(order):
        kids = list(tree.successors(v))
        span[v] = (
            (cell[v], cell[v])
            if not kids
            else (min(span[k][0] for k in kids), max(span[k][1] for k in kids))
        )
    bfs = [root] + [v for _, v in nx.bfs_edges(tree, root)]
    row = {v: i for i, v in enumerate(bfs)}
    parent = [-1] + [row[next(iter(tree.predecessors(v)))] for v in bfs[1:]]
    lo = np.array([span[v][0] for v in bfs])
    hi = np.array([span[v][1] for v in bfs])
    return len(cell), lo, hi, np.array(parent), bfs


def hierarchical(n: Any, branching: int = 2, root: bool = True) -> Tree:
    """Hierarchical interval strategy H_b (Hay et al. VLDB 2010; Qardaji et al. VLDB 2013).

    ``hierarchical(n, b)``: every aligned block of bˡ cells for bˡ < n (leaves included),
    plus the whole domain when ``root``; blocks at the end are cut at n, so every n works.
    Error figures cost O(n·levels) for every n (block-spectral when the blocks nest,
    :class:`~matmech.linalg.spectral.NestedCovariance` otherwise), least squares O(nodes).
    ``hierarchical(tree)``: one row per node of a networkx arborescence whose leaves, in
    depth-first order, are the cells (unbalanced trees such as geographies; the same
    O(nodes · depth) error figures); ``root=False`` drops the root row. The rows' memory is
    estimated first and a tree that cannot fit is refused with the estimate.

    Parameters
    ----------
    n : int or networkx.DiGraph
        Number of cells, or an arborescence whose leaves are the cells.
    branching : int, default 2
        b, for a regular tree.
    root : bool, default True
        Include the whole-domain row.

    Returns
    -------
    Tree
        The hierarchical strategy.

    Raises
    ------
    ValueError
        n < 1, branching < 2, a graph that is not an arborescence, or a size that does
        not fit in memory (with the estimate).
    TypeError
        Arguments of the wrong kind.

    Examples
    --------
    >>> H = hierarchical(8)
    >>> H.shape, H.sensitivity(1)
    ((15, 8), 4.0)
    >>> hierarchical(16, 4, root=False).shape
    (20, 16)
    """
    if _networkx_graph(n):
        size, lo, hi, parent, labels = _tree_from_graph(n)
        if not root and lo.size > 1 and hi[0] - lo[0] + 1 == size:
            lo, hi, parent, labels = (
                lo[1:],
                hi[1:],
                np.where(parent[1:] <= 0, -1, parent[1:] - 1),
                labels[1:],
            )
        return Tree(size, lo, hi, parent, labels=labels)
    n = _size(n, "n")  # an int64-indexable size whose x fits in memory (matmech.validate)
    if isinstance(branching, (bool, np.bool_)) or not isinstance(branching, numbers.Integral):
        raise TypeError(
            f"branching must be an integer >= 2, got {type(branching).__name__}: {branching!r}"
        )
    if branching < 2:
        raise ValueError(f"branching must be an integer >= 2, got {branching!r}")
    if not isinstance(root, (bool, np.bool_)):
        raise TypeError(f"root must be True or False, got {root!r}")
    nodes, s = 1, 1
    while s < n:
        nodes += -(-n // s)
        s *= int(branching)
    check_memory(
        8 * 6 * nodes,
        f"the hierarchical strategy on n={n:,} cells with branching {int(branching)} ({nodes:,} rows)",
    )
    lo, hi, parent, sizes = _regular_tree(n, int(branching), bool(root))
    return Tree(n, lo, hi, parent, sizes=sizes, branching=int(branching))


@register("Haar")
class Haar(LinOp):
    """Unnormalised Haar wavelet matrix (±1 entries, rows root first; the slides' Y₄).

    Rows: the total, then for every dyadic block size s = N, N/2, …, 2 (N = 2^⌈log₂ n⌉) and
    every block [js, (j+1)s) ∩ [0, n) whose right half is not empty, +1 on its left half and
    −1 on the rest (Xiao, Wang, Gehrke, ICDE 2010). For n a power of two this is the
    classical square Haar matrix; for other n the blocks are cut at n and a block without a
    right half adds no row, so the matrix is still square and invertible (n rows), with L1
    sensitivity 1 + log₂ N. Implicit: products cost O(n log n) through prefix sums, and the
    error analysis and least squares take O(n log n) for every n
    (:class:`~matmech.linalg.spectral.NestedCovariance`).

    Parameters
    ----------
    n : int
        Number of cells.

    Returns
    -------
    Haar
        The strategy; build it with :func:`haar`.

    Raises
    ------
    ValueError
        n < 1.

    Examples
    --------
    >>> type(haar(5)).__name__, haar(5).shape
    ('Haar', (5, 5))
    """

    def __init__(self, n: int) -> None:
        n = check_size(n)
        big = 1 << max(0, (n - 1).bit_length())
        self.n, self.power_of_two = n, big == n
        self.levels = []  # (block size s, number of blocks with a row), largest s first
        rows, s = 1, big
        while s > 1:
            k = -(-(n - s // 2) // s)  # blocks j with js + s/2 < n: a prefix of the level
            self.levels.append((s, k))
            rows += k
            s //= 2
        self.shape = (rows, n)

    def _offsets(self):
        off = 1
        for s, k in self.levels:
            yield off, s, k
            off += k

    def _matmat(self, x):
        c = np.zeros((self.n + 1, x.shape[1]))
        np.cumsum(x, axis=0, out=c[1:])
        out = np.empty((self.shape[0], x.shape[1]))
        out[0] = c[-1]
        for off, s, k in self._offsets():
            st = np.arange(k) * s
            out[off : off + k] = 2.0 * c[st + s // 2] - c[st] - c[np.minimum(st + s, self.n)]
        return out

    def _rmatmat(self, y):
        d = np.zeros((self.n + 1, y.shape[1]))
        d[0] += y[0]
        d[self.n] -= y[0]
        for off, s, k in self._offsets():
            st, block = np.arange(k) * s, y[off : off + k]
            d[st] += block  # within a level the starts, middles and ends are distinct
            d[st + s // 2] -= 2.0 * block
            d[np.minimum(st + s, self.n)] += block
        return np.cumsum(d[:-1], axis=0)

    def col_norms(self, p=1):
        _check_p(p)
        d = np.zeros(self.n + 1)
        d[0] += 1.0
        for s, k in self.levels:
            st = np.arange(k) * s
            d[st] += 1.0
            d[np.minimum(st + s, self.n)] -= 1.0
        counts = np.cumsum(d[:-1])
        return counts if p == 1 else np.sqrt(counts)

    def gram(self):
        if not self.power_of_two:
            return super().gram()
        sizes = [1 << k for k in range(int(math.log2(self.n)) + 1)]
        # detail rows with support 2s span E_s − E_2s with eigenvalue 2s; the total row spans E_n with n
        return BlockSpectral(self.n, sizes, [*sizes[1:], self.n])

    def gram_pinv(self):
        if self.power_of_two:
            return None  # the block-spectral gram inverts in closed form
        return NestedCovariance.haar(self.n), None

    def _csr(self):
        n = self.n
        rows, cols, vals = [np.zeros(n, dtype=np.int64)], [np.arange(n)], [np.ones(n)]
        for off, s, k in self._offsets():
            j = np.arange(min(n, k * s))
            rows.append(off + j // s)
            cols.append(j)
            vals.append(np.where(j % s < s // 2, 1.0, -1.0))
        return sp.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=self.shape
        )

    def explicit_matrix(self):
        nnz = self.n * (1 + len(self.levels))
        return self._csr() if nnz <= MAX_EXPLICIT_NNZ else None

    def rows(self, start, stop):
        if not (0 <= start <= stop <= self.shape[0]):
            raise ValueError(f"row range {start}:{stop} is outside 0:{self.shape[0]}")
        m = self.explicit_matrix()
        return m[start:stop].toarray() if m is not None else super().rows(start, stop)

    def _dense(self):
        return self._csr().toarray()

    def integer_valued(self):
        return True

    def entry_range(self):
        return (-1.0 if self.n > 1 else 0.0), 1.0

    def to_dict(self, out):
        return {"n": int(self.n)}

    @classmethod
    def from_dict(cls, node, src):
        return cls(src.field(node, "n", int))


#: Largest number of non-zeros of an implicit strategy (Haar) built as an explicit CSR matrix.
MAX_EXPLICIT_NNZ = 20_000_000


def haar(n: int) -> LinOp:
    """The unnormalised Haar wavelet strategy (Privelet).

    Parameters
    ----------
    n : int
        Number of cells (any n).

    Returns
    -------
    Haar
        The square, invertible Haar strategy (implicit).

    Raises
    ------
    ValueError, TypeError
        n not an integer ≥ 1, or too large.

    Examples
    --------
    >>> Y = haar(8)
    >>> Y.shape, Y.sensitivity(1)
    ((8, 8), 4.0)
    """
    return Haar(
        _size(n, "n", bytes_per=32, what=f"haar({n!r}) (a few float64 vectors of n entries)")
    )


def kron(*strategies: LinOp) -> LinOp:
    """Kronecker product of per-attribute strategies.

    Parameters
    ----------
    *strategies : LinOp
        One strategy per attribute.

    Returns
    -------
    LinOp
        Their Kronecker product.

    Raises
    ------
    ValueError
        No strategies.
    TypeError
        An argument that is not an operator.

    Examples
    --------
    >>> kron(identity(2), hierarchical(4)).shape
    (14, 8)
    """
    return _operator(Kron(*_factors(strategies, "kron")), "the Kronecker strategy", per_col=0)
