"""The workload gram G = WᵀW as every strategy optimiser consumes it.

:class:`GramOperator` applies G to the rows of a p×n block in O(pn) for all ranges and
prefixes through their closed forms (G = P̃ᵀ L P̃, :mod:`matmech.linalg.intervals`) and
densely otherwise; :func:`check_gram` validates an explicit gram (finite, symmetric, PSD).
Used by the p-Identity (:mod:`matmech.optimizers.pure`) and L2
(:mod:`matmech.optimizers.l2`) optimisers and their dispatch.
"""

from __future__ import annotations

import numpy as np
from matmech.linalg.lazy import sla

from matmech.linalg.intervals import AllRange, Intervals, Prefix
from matmech.linalg.linop import Identity, LinOp, Ones, Scaled, as_linop


#: Largest n for which :func:`check_gram` makes a LinOp gram dense (the optimisers' limit).
MAX_GRAM_N = 8192
#: Bytes of dense factor grams :func:`factor_gram` keeps (oldest dropped first).
FACTOR_GRAM_CACHE_BYTES = 64 << 20


class _GramCache(dict):
    """Structure key → read-only dense gram, oldest first, with the running total of the
    grams' bytes (so an eviction pass does not sum over the cache)."""

    nbytes: int = 0


_FACTOR_GRAMS = _GramCache()


def structure_key(f: LinOp) -> tuple | None:
    """A hashable key shared by 1-D workloads with the same rows (prefixes, all ranges, lists
    of intervals, identities, totals, and scalings of them), or None for other operators.

    A union of Kronecker products repeats the same few factors in every term as distinct
    objects (issue 24's Adult ≤3-way: 6,580 factors, 22 distinct); keyed by structure, their
    dense grams and 1-D fits are computed once (:func:`factor_gram`)."""
    c: tuple = ()  # the scale factors from the outside in (their product may round)
    while isinstance(f, Scaled):
        c += (f.c,)
        f = f.base
    if type(f) in (Prefix, AllRange):
        return (type(f).__name__, f.shape[1], c)
    if isinstance(f, Intervals) and type(f) is Intervals:
        lo, hi = f.bounds()
        return ("Intervals", f.shape[1], c, lo.tobytes(), hi.tobytes())
    if type(f) is Identity:
        return ("Identity", f.shape[1], c)
    if type(f) is Ones:
        return ("Ones", f.shape, c)
    return None


def factor_gram(f: LinOp, max_entries: int) -> np.ndarray:
    """``f.gram().dense(max_entries=max_entries)`` of a 1-D workload factor, read-only, computed
    once per :func:`structure_key` (the same array is returned for equal keys; operators without
    a key are not cached)."""
    key = structure_key(f)
    if key is None or f.shape[1] ** 2 > max_entries:
        return f.gram().dense(max_entries=max_entries)
    g = _FACTOR_GRAMS.get(key)
    if g is None:
        g = np.asarray(f.gram().dense(max_entries=max_entries), dtype=np.float64)
        g.setflags(write=False)
        cache = _FACTOR_GRAMS
        while cache and g.nbytes + cache.nbytes > FACTOR_GRAM_CACHE_BYTES:
            cache.nbytes -= cache.pop(next(iter(cache))).nbytes
        cache[key] = g
        cache.nbytes += g.nbytes
    return g


def distinct_by_id(seq) -> tuple[list, np.ndarray]:
    """(the distinct objects of ``seq`` by identity, first seen first; each item's index among
    them): the per-term factor grams of a union repeat a few shared arrays
    (:class:`FactorGrams`, :func:`factor_gram`), so per-gram work runs once per distinct one."""
    index: dict = {}
    items: list = []
    at = []
    for x in seq:
        j = index.setdefault(id(x), len(items))
        if j == len(items):
            items.append(x)
        at.append(j)
    return items, np.array(at, dtype=np.intp)


def unwrap(W):
    """(base workload, scale²) through single-block stacks and scalings."""
    c2 = 1.0
    while True:
        blocks = W.row_blocks()
        if blocks is None or len(blocks) != 1:
            return W, c2
        w, W = blocks[0]
        c2 *= float(w) ** 2


class FactorGrams:
    """Dense grams of the 1-D workload factors of one workload, computed once per distinct
    factor object (factors of equal :func:`structure_key` share :func:`factor_gram`'s cached
    array); equal grams share one array, so that per-attribute work can run once per distinct
    gram. Totals and identities in closed form, others by :func:`factor_gram` up to
    ``max_entries`` entries."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.cache: dict = {}
        self.by_content: dict = {}

    def __call__(self, f: LinOp) -> np.ndarray:
        from matmech.optimizers.marginal_workloads import identity_like, total_like

        key = id(f)
        if key not in self.cache:
            n = f.shape[1]
            if total_like(f):
                c2 = f.c**2 if isinstance(f, Scaled) else 1.0
                base = f.base if isinstance(f, Scaled) else f
                g = np.full((n, n), c2 * float(base.shape[0]))
            elif identity_like(f):
                g = np.eye(n)
            else:
                g = factor_gram(f, self.max_entries)
            g = np.asarray(g, dtype=np.float64)
            g = self.by_content.setdefault((g.shape, g.tobytes()), g)
            self.cache[key] = (f, g)  # keep f alive: ids stay unique
        return self.cache[key][1]


class GramOperator:
    """G = WᵀW applied to the rows of a p×n block (Z ↦ Z G), with its diagonal.

    All-range and prefix grams are applied in O(pn) through their closed forms
    (G = P̃ᵀ L P̃, :mod:`matmech.linalg.intervals`); anything else is made dense once.
    """

    def __init__(self, kind, n, diag, dense=None, scale=1.0):
        self.kind, self.n, self.diag, self._dense, self.scale = kind, n, diag, dense, scale

    @classmethod
    def from_workload(cls, W):
        W = as_linop(W)
        base, c2 = unwrap(W)
        n = W.shape[1]
        if isinstance(base, AllRange):
            j = np.arange(1, n + 1, dtype=np.float64)
            return cls("all_range", n, c2 * j * (n - j + 1), scale=c2)
        if isinstance(base, Prefix):
            return cls("prefix", n, c2 * np.arange(n, 0, -1, dtype=np.float64), scale=c2)
        return cls.from_gram(W.gram())

    @classmethod
    def from_gram(cls, G):
        """From an explicit gram (ndarray or LinOp), checked to be finite, symmetric and PSD."""
        g = check_gram(G)
        return cls("dense", g.shape[0], np.diag(g).copy(), dense=g)

    def dense(self):
        if self._dense is not None:
            return self._dense
        n = self.n
        i = np.arange(1, n + 1, dtype=np.float64)
        mx = np.maximum.outer(i, i)
        g = np.minimum.outer(i, i) * (n - mx + 1) if self.kind == "all_range" else n - mx + 1
        return self.scale * g

    def rows(self, Z, out=None, work=None):
        """Z G for a p×n block Z (``out``, ``work``: optional p×n buffers, reused)."""
        if self.kind == "dense":
            return np.matmul(Z, self._dense, out=out)
        n = self.n
        out = np.empty_like(Z) if out is None else out
        work = np.empty_like(Z) if work is None else work
        # u_k = z_0 + … + z_{k−1} for the prefix nodes k = 1..n (u_0 = 0); G z = P̃ᵀ L u
        # with (P̃ᵀ v)_j = Σ_{k>j} v_k, so only v_1..v_n matter.
        # np.add.accumulate is np.cumsum without its Python wrapper (≈3 µs a call: this runs
        # per objective evaluation of small p-Identity fits)
        np.add.accumulate(Z, axis=1, out=work)
        if self.kind == "all_range":
            # complete-graph Laplacian L = (n+1)I − 11ᵀ: v_k = (n+1)u_k − Σ_k' u_k'
            total = work.sum(1, keepdims=True)
            work *= n + 1
            work -= total
        # star Laplacian (prefix) rooted at node 0 with u_0 = 0: v_k = u_k
        np.add.accumulate(work, axis=1, out=out)
        # the last column copied first: an operand overlapping ``out`` makes numpy buffer the
        # whole block (7× slower), with the same differences
        np.subtract(out[:, -1:].copy(), out, out=out)
        out += work
        if self.scale != 1.0:
            out *= self.scale
        return out


def check_gram(G, name="gram"):
    """Return G as a dense symmetric float array, or raise if it is not a finite PSD matrix."""
    if isinstance(G, LinOp):
        G = G.dense(max_entries=MAX_GRAM_N**2)
    g = np.asarray(G, dtype=np.float64)
    if g.ndim != 2 or g.shape[0] != g.shape[1] or g.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty square matrix, got shape {g.shape}")
    if not np.all(np.isfinite(g)):
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(g))[0])
        raise ValueError(f"{name} must be finite; found {g[bad]} at index {bad}")
    scale = max(float(np.abs(g).max()), 1e-300)
    asym = float(np.abs(g - g.T).max())
    if asym > 1e-10 * scale:
        raise ValueError(f"{name} must be symmetric; max |G − Gᵀ| = {asym:.3g}")
    g = (g + g.T) / 2
    lam_min = (
        float(sla.eigvalsh(g, subset_by_index=[0, 0])[0]) if g.shape[0] > 1 else float(g[0, 0])
    )
    if lam_min < -1e-8 * scale * g.shape[0]:
        raise ValueError(
            f"{name} must be positive semidefinite (a WᵀW); its smallest eigenvalue is {lam_min:.3g}"
        )
    if not np.any(g):
        raise ValueError(f"{name} is zero: the workload has no non-zero query")
    return g
