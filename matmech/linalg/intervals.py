"""Interval workloads: every row is the indicator of a contiguous range [lo, hi] of cells.

All ranges, prefix sums, explicit interval lists, the identity and the total query are one
family. A row [lo, hi] equals p_{hi+1} − p_lo, where p_k is the indicator of the first k
cells; so W = E·P̃ with P̃ the (n+1)×n prefix matrix and E the edge-incidence matrix of the
multigraph with an edge (lo, hi+1) per row. Hence the gram is WᵀW = P̃ᵀ L P̃ with L = EᵀE
a graph Laplacian: the complete graph for all ranges ((n+1)I − 11ᵀ), the star for prefixes.
That gives the closed forms G_ij = min(i,j)(n − max(i,j) + 1) (all ranges) and
G_ij = n − max(i,j) + 1 (prefix), 1-based, and O(n) gram-vector products.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from matmech.linalg.linop import LinOp, check_size, register
from matmech.linalg.normmax import check_p as _check_p


def prefix_apply(x):
    """P̃ x: row k is the sum of the first k cells (k = 0..n)."""
    out = np.zeros((x.shape[0] + 1, x.shape[1]))
    np.cumsum(x, axis=0, out=out[1:])
    return out


def _prefix_rapply(u):
    """P̃ᵀ u: cell j collects u_k for all k > j."""
    return np.cumsum(u[:0:-1], axis=0)[::-1]


@register("Intervals")
class Intervals(LinOp):
    """Rows are indicators of inclusive 0-based intervals [lo, hi] over n cells."""

    kind = "intervals"

    def __init__(self, n, lo, hi):
        n = check_size(n)
        lo, hi = np.asarray(lo), np.asarray(hi)
        for name, a in (("lo", lo), ("hi", hi)):
            if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
                raise TypeError(
                    f"interval bounds {name} must be a 1-D integer array, got dtype {a.dtype}, shape {a.shape}"
                )
        if lo.shape != hi.shape or lo.size == 0:
            raise ValueError(
                f"need the same positive number of lo and hi bounds, got {lo.size} and {hi.size}"
            )
        bad = np.flatnonzero((lo < 0) | (hi >= n) | (lo > hi))
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"interval {i} = ({int(lo[i])}, {int(hi[i])}) is invalid: need 0 <= lo <= hi <= {n - 1} (inclusive, 0-based)"
            )
        self.n = n
        self._lo, self._hi = lo.astype(np.int64), hi.astype(np.int64)
        self.shape = (lo.size, n)

    # rows are described by their bounds; subclasses generate them on demand
    def bounds(self, start=0, stop=None):
        stop = self.shape[0] if stop is None else stop
        return self._lo[start:stop], self._hi[start:stop]

    def _chunks(self, size=4_000_000):
        for start in range(0, self.shape[0], size):
            yield start, *self.bounds(start, min(self.shape[0], start + size))

    def _matmat(self, x):
        s = prefix_apply(x)
        return np.vstack([s[hi + 1] - s[lo] for _, lo, hi in self._chunks()])

    def _rmatmat(self, y):
        d = np.zeros((self.n + 1, y.shape[1]))
        for start, lo, hi in self._chunks():
            block = y[start : start + lo.size]
            np.add.at(d, lo, block)
            np.add.at(d, hi + 1, -block)
        return np.cumsum(d[:-1], axis=0)

    def gram(self):
        return IntervalGram(self)

    def col_norms(self, p=1):
        _check_p(p)
        d = np.zeros(self.n + 1)
        for _, lo, hi in self._chunks():
            d += np.bincount(lo, minlength=self.n + 1) - np.bincount(hi + 1, minlength=self.n + 1)
        counts = np.cumsum(d[:-1])
        return counts if p == 1 else np.sqrt(counts)

    def rows(self, start, stop):
        lo, hi = self.bounds(start, stop)
        j = np.arange(self.n)
        return ((j >= lo[:, None]) & (j <= hi[:, None])).astype(np.float64)

    def take_rows(self, rows):
        lo, hi = self.bounds()
        return Intervals(self.n, lo[rows], hi[rows])

    def integer_valued(self):
        return True

    def entry_range(self):
        return 0.0, 1.0

    def to_dict(self, out):
        lo, hi = self.bounds()
        return {"n": int(self.n), "lo": out.array(lo), "hi": out.array(hi)}

    @classmethod
    def from_dict(cls, node, src):
        return cls(
            src.field(node, "n", int),
            src.array(node, "lo", "int", 1),
            src.array(node, "hi", "int", 1),
        )

    # -- quadratic forms used by error analysis -----------------------------------------
    def laplacian_apply(self, v):
        """L v for the interval multigraph on nodes 0..n (L = EᵀE)."""
        out = np.zeros_like(v)
        for _, lo, hi in self._chunks():
            diff = v[lo] - v[hi + 1]
            np.add.at(out, lo, diff)
            np.add.at(out, hi + 1, -diff)
        return out

    def laplacian_dense(self):
        lap = np.zeros((self.n + 1, self.n + 1))
        for _, lo, hi in self._chunks():
            a, b = lo, hi + 1
            np.add.at(lap, (a, a), 1.0)
            np.add.at(lap, (b, b), 1.0)
            np.add.at(lap, (a, b), -1.0)
            np.add.at(lap, (b, a), -1.0)
        return lap

    def rank(self):
        """rank W = (n + 1) − #components of the graph with an edge (lo, hi+1) per row."""
        from scipy.sparse.csgraph import connected_components  # imported when needed (import time)

        lo, hi = self.bounds()
        graph = sp.coo_matrix((np.ones(lo.size), (lo, hi + 1)), shape=(self.n + 1, self.n + 1))
        return self.n + 1 - connected_components(graph, directed=False)[0]

    def row_norms2(self):
        """Squared row norms: the interval lengths hi − lo + 1."""
        lo, hi = self.bounds()
        return (hi - lo + 1).astype(np.float64)

    def block_overlaps(self, s, start=0, stop=None):
        """Per row, Σ_B |row ∩ B|² over the aligned blocks B of size s (s divides n).

        With D = hi + 1 − lo and the offsets r_lo = lo mod s, r_hi = (hi + 1) mod s, full blocks
        give s·|B ∩ row| and the two cut ones lose r(s − r) each: s·D − r_lo(s − r_lo) −
        r_hi(s − r_hi), or D² when the row lies inside one block (r_lo + D < s). The whole
        vector is kept per s on the (immutable) operator while the kept ones hold at most
        :data:`MAX_OVERLAP_BYTES`: the advisor's hierarchies and Haar share block sizes."""
        whole = start == 0 and (stop is None or stop >= self.shape[0])
        cache = self.__dict__.setdefault("_block_overlaps", {})
        if whole and s in cache:
            return cache[s]
        lo, hi = self.bounds(start, stop)
        out = _overlaps(lo, hi + 1, int(s))
        if whole and out.nbytes + sum(v.nbytes for v in cache.values()) <= MAX_OVERLAP_BYTES:
            out.setflags(write=False)
            cache[s] = out
        return out

    def block_energy(self, s):
        """Σ_B ‖W 1_B‖² over the aligned blocks of size s: trace(G E_s)·s; kept per s on the
        (immutable) operator: the advisor's hierarchies share block sizes (b = 2, 4, 8, 16
        and 32 on 2^k cells all use powers of two), each an O(rows) pass."""
        cache = self.__dict__.setdefault("_block_energy", {})
        if s not in cache:
            if self.shape[0] * 8 <= MAX_OVERLAP_BYTES:  # one vector, kept for the variances
                cache[s] = float(self.block_overlaps(s).sum())
            else:
                cache[s] = float(
                    sum(
                        self.block_overlaps(s, start, start + lo.size).sum()
                        for start, lo, _ in self._chunks()
                    )
                )
        return cache[s]

    def prefix_quadratic(self, c, start=0, stop=None):
        """Per row, w C̃ wᵀ written through C = P̃ M P̃ᵀ: C[hi+1,hi+1] + C[lo,lo] − 2 C[lo,hi+1]."""
        lo, hi = self.bounds(start, stop)
        d = np.diag(c)
        return d[hi + 1] + d[lo] - 2.0 * c[lo, hi + 1]

    def prefix_quadratic_sum(self, c):
        return float(
            sum(
                self.prefix_quadratic(c, start, start + lo.size).sum()
                for start, lo, _ in self._chunks()
            )
        )


#: Bytes of per-row block overlaps an interval workload keeps (first come, never evicted: the
#: advisor sweeps the block sizes in the same order for every candidate). 256 MiB: every
#: power of two up to 2²⁴ for 10⁶ ranges.
MAX_OVERLAP_BYTES = 256 << 20


def _overlaps(lo, end, s):
    """Σ_B |[lo, end) ∩ B|² over the aligned blocks B of s cells, per row (exact in float64
    below 2⁵³: the terms are integers)."""
    if s & (s - 1) == 0:  # a power of two: offsets by a mask
        r_lo, r_hi = lo & (s - 1), end & (s - 1)
    else:
        r_lo, r_hi = lo % s, end % s
    d = (end - lo).astype(np.float64)
    a, c = r_lo.astype(np.float64), r_hi.astype(np.float64)
    out = float(s) * d
    out -= a * (s - a)
    out -= c * (s - c)
    inside = np.flatnonzero(r_lo + (end - lo) < s)
    out[inside] = d[inside] ** 2
    return out


def _ramp_sums(n, s):
    """For each aligned block B of size s: Σ_k v_k and Σ_k v_k² with v = P̃ 1_B (k = 0..n)."""
    t = np.arange(n // s, dtype=np.float64) * s
    s = float(s)
    tail = n - t - s
    return s * (s + 1) / 2 + s * tail, s * (s + 1) * (2 * s + 1) / 6 + s * s * tail


class _AllOfAKind(Intervals):
    """Every interval of one kind over n cells: described by n alone, full column rank."""

    def __init__(self, n):  # n rows (a kind with more rows sets its own shape)
        self.n = check_size(n)
        self.shape = (self.n, self.n)

    def rank(self):
        return self.n

    def to_dict(self, out):
        return {"n": int(self.n)}

    @classmethod
    def from_dict(cls, node, src):
        return cls(src.field(node, "n", int))


@register("AllRange")
class AllRange(_AllOfAKind):
    """All n(n+1)/2 ranges, ordered by lo then hi; rows are generated on demand."""

    kind = "all_range"

    def __init__(self, n):
        self.n = check_size(n)
        self.shape = (self.n * (self.n + 1) // 2, self.n)

    def bounds(self, start=0, stop=None):
        n = self.n
        stop = self.shape[0] if stop is None else stop
        r = np.arange(start, stop, dtype=np.int64)
        lo_all = np.arange(n + 1, dtype=np.int64)
        offsets = lo_all * n - lo_all * (lo_all - 1) // 2
        lo = np.searchsorted(offsets, r, side="right") - 1
        return lo, lo + (r - offsets[lo])

    def col_norms(self, p=1):
        _check_p(p)
        j = np.arange(1, self.n + 1, dtype=np.float64)
        counts = j * (self.n - j + 1)
        return counts if p == 1 else np.sqrt(counts)

    def laplacian_apply(self, v):
        return (self.n + 1) * v - v.sum(0, keepdims=True)

    def laplacian_dense(self):
        return (self.n + 1) * np.eye(self.n + 1) - 1.0

    def block_energy(self, s):
        sv, sv2 = _ramp_sums(self.n, s)
        return float(((self.n + 1) * sv2 - sv**2).sum())

    def prefix_quadratic_sum(self, c):
        return float((self.n + 1) * np.trace(c) - c.sum())

    def gram_eigenvalues(self):
        """G = (n+1)·T⁻¹ with T the Dirichlet second-difference matrix: λ_k = (n+1)/(4 sin²(kπ/(2(n+1))))."""
        k = np.arange(1, self.n + 1)
        return (self.n + 1) / (4 * np.sin(k * np.pi / (2 * (self.n + 1))) ** 2)


@register("Prefix")
class Prefix(_AllOfAKind):
    """The n prefix queries [0, k]."""

    kind = "prefix"

    def bounds(self, start=0, stop=None):
        stop = self.shape[0] if stop is None else stop
        hi = np.arange(start, stop, dtype=np.int64)
        return np.zeros_like(hi), hi

    def col_norms(self, p=1):
        _check_p(p)
        counts = np.arange(self.n, 0, -1, dtype=np.float64)
        return counts if p == 1 else np.sqrt(counts)

    def laplacian_apply(self, v):
        out = v.copy()
        out[0] = (v[0] - v[1:]).sum(0)
        out[1:] -= v[0]
        return out

    def block_energy(self, s):
        _, sv2 = _ramp_sums(self.n, s)
        return float(sv2.sum())

    def prefix_quadratic_sum(self, c):
        return float(np.trace(c) - c[0, 0])

    def gram_eigenvalues(self):
        """Eigenvalues of the prefix gram: λ_k = 1/(4 sin²((2k−1)π/(2(2n+1))))."""
        k = np.arange(1, self.n + 1)
        return 1 / (4 * np.sin((2 * k - 1) * np.pi / (2 * (2 * self.n + 1))) ** 2)


class IntervalGram(LinOp):
    """WᵀW = P̃ᵀ L P̃ of an interval workload, applied in O(n + m) and built in O(n²)."""

    def __init__(self, workload):
        self.workload = workload
        self.shape = (workload.n, workload.n)

    def _matmat(self, x):
        return _prefix_rapply(self.workload.laplacian_apply(prefix_apply(x)))

    _rmatmat = _matmat

    def diagonal(self):
        return self.workload.col_norms(1)

    def _dense(self):
        lap = self.workload.laplacian_dense()
        return _prefix_rapply(_prefix_rapply(lap).T)
