"""Workload builders: linear query sets as implicit matrices (never materialised).

Cells of a multi-attribute domain are ordered row-major (the last attribute varies
fastest), matching :class:`matmech.linalg.linop.Kron`.

Every builder validates its arguments through :mod:`matmech.validate` before building
anything: a domain this machine cannot hold (one float64 per cell, and row counts within
an int64 index) is refused with the estimate in the message, a ragged matrix names its
ragged row.
"""

from __future__ import annotations

import itertools
import numbers

import numpy as np
import scipy.sparse as sp

from matmech.linalg.intervals import AllRange, Intervals, Prefix
from matmech.linalg.linop import Dense, Kron, LinOp, Sparse, VStack, as_linop
from matmech.validate import MAX_INDEX, SizeError, factors, finite_real, operator, size, vector
from matmech.validate import matrix as _matrix
from typing import Any, Sequence


def check_size(n, name="n"):
    """A positive integer domain size this machine can hold (a float64 per cell)."""
    return size(n, name, what=f"a domain of {name}={n!r} cells (one float64 per cell)")


__all__ = [
    "abs_diff",
    "affine",
    "all_range",
    "check_domain",
    "circular_ranges",
    "from_matrix",
    "identity",
    "kron",
    "marginals",
    "prefix",
    "ranges",
    "stack",
    "total",
]

#: Largest number of nonzeros the dense-pattern builders (circular ranges, pair thresholds) create.
MAX_PATTERN_NNZ = 1 << 24
#: Largest pair domain n₁·n₂ of :func:`affine` and :func:`abs_diff` (checked before any array is built).
MAX_PAIR_CELLS = 1 << 22


def identity(n: int) -> LinOp:
    """The n point queries x₀, …, x_{n−1}.

    Parameters
    ----------
    n : int
        Number of cells.

    Returns
    -------
    LinOp
        The n×n identity workload.

    Raises
    ------
    ValueError, TypeError
        n not an integer ≥ 1, or too large for memory.

    Examples
    --------
    >>> identity(4).shape
    (4, 4)
    """
    n = size(
        n, "n", bytes_per=24, what=f"identity({n!r}) (its interval bounds and one float64 per cell)"
    )
    cells = np.arange(n)
    return Intervals(n, cells, cells)


def total(n: int) -> LinOp:
    """The single query Σ x.

    Parameters
    ----------
    n : int
        Number of cells.

    Returns
    -------
    LinOp
        The 1×n all-ones row.

    Raises
    ------
    ValueError, TypeError
        n not an integer ≥ 1.

    Examples
    --------
    >>> (total(4) @ np.arange(4.0)).tolist()
    [6.0]
    """
    n = check_size(n)
    return Intervals(n, np.array([0]), np.array([n - 1]))


def prefix(n: int) -> LinOp:
    """The n prefix sums x₀ + … + x_k.

    Parameters
    ----------
    n : int
        Number of cells.

    Returns
    -------
    LinOp
        The n×n lower-triangular ones (implicit).

    Raises
    ------
    ValueError, TypeError
        n not an integer ≥ 1, or too large.

    Examples
    --------
    >>> (prefix(4) @ np.ones(4)).tolist()
    [1.0, 2.0, 3.0, 4.0]
    """
    return Prefix(check_size(n))


def all_range(n: int) -> LinOp:
    """All n(n+1)/2 range queries [lo, hi] (n up to ~3·10⁹, so that the row count fits an
    int64 index; memory is checked for one float64 per cell).

    Parameters
    ----------
    n : int
        Number of cells.

    Returns
    -------
    LinOp
        The n(n+1)/2 × n range workload (implicit).

    Raises
    ------
    ValueError, TypeError
        n not an integer ≥ 1, or too large.

    Examples
    --------
    >>> all_range(4096).shape
    (8390656, 4096)
    """
    n = check_size(n)
    if n * (n + 1) // 2 > MAX_INDEX:
        raise SizeError(
            f"all_range(n) has n(n+1)/2 rows, more than 2**62 (an int64 index) for n={n}"
        )
    return AllRange(n)


def ranges(n: int, intervals: Sequence[tuple[int, int]]) -> Intervals:
    """Range queries from inclusive 0-based ``(lo, hi)`` pairs.

    Parameters
    ----------
    n : int
        Number of cells.
    intervals : sequence of (int, int)
        Inclusive, 0-based (lo, hi) with 0 <= lo <= hi < n.

    Returns
    -------
    Intervals
        One row per interval.

    Raises
    ------
    ValueError
        An empty list or an interval outside [0, n) (naming it).
    TypeError
        Intervals that are not integer pairs.

    Examples
    --------
    >>> (ranges(10, [(0, 4), (5, 9)]) @ np.ones(10)).tolist()
    [5.0, 5.0]
    """
    n = check_size(n)
    if isinstance(intervals, (str, bytes)) or not hasattr(intervals, "__len__"):
        raise TypeError(
            f"intervals must be a sequence of (lo, hi) pairs, got {type(intervals).__name__}: {intervals!r}"
        )
    pairs = _matrix(intervals, "intervals") if len(intervals) else np.zeros((0, 2))
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.shape[0] == 0:
        raise ValueError(
            f"intervals must be a non-empty sequence of (lo, hi) pairs, got an array of shape {pairs.shape}"
        )
    if not np.issubdtype(pairs.dtype, np.integer):
        if not (
            np.issubdtype(pairs.dtype, np.floating)
            and np.all(np.isfinite(pairs))
            and np.all(pairs == np.round(pairs))
        ):
            raise TypeError(f"interval bounds must be integers, got dtype {pairs.dtype}")
        pairs = pairs.astype(np.int64)
    return Intervals(n, pairs[:, 0], pairs[:, 1])


def check_domain(domain: Any) -> tuple[int, ...]:
    """Validate a multi-attribute domain: a non-empty tuple of positive attribute sizes.

    Parameters
    ----------
    domain : tuple of int
        Attribute sizes.

    Returns
    -------
    tuple of int
        The validated domain.

    Raises
    ------
    ValueError
        An empty domain or a non-positive size.
    TypeError
        Not a tuple of integers.

    Examples
    --------
    >>> check_domain((2, 3))
    (2, 3)
    """
    if isinstance(domain, numbers.Integral) and not isinstance(domain, bool):
        domain = (domain,)
    if not isinstance(domain, (tuple, list)) or not domain:
        raise TypeError(f"domain must be a non-empty tuple of attribute sizes, got {domain!r}")
    sizes = tuple(check_size(d, f"domain[{i}]") for i, d in enumerate(domain))
    cells = int(np.prod(sizes, dtype=object))
    if cells > MAX_INDEX:
        raise SizeError(
            f"the domain {sizes} has {cells:.4g} cells, more than 2**62 (an int64 index)"
        )
    return sizes


def marginals(domain: Any, k: Any = None, *, attrs: Any = None) -> VStack:
    """Marginal queries over a multi-attribute ``domain``.

    Either all ``k``-way marginals, or the marginals on the attribute subsets ``attrs``
    (e.g. ``[(0, 1), (2,)]``). A marginal on S is ⊗ᵢ (I if i ∈ S else 1ᵀ).

    Parameters
    ----------
    domain : tuple of int
        Attribute sizes.
    k : int, optional
        All k-way marginals.
    attrs : sequence of tuple of int, optional
        The attribute subsets (instead of ``k``).

    Returns
    -------
    VStack
        The stacked marginal queries.

    Raises
    ------
    ValueError
        Both or neither of ``k`` and ``attrs``, or attributes outside the domain.
    TypeError
        A domain that is not a tuple of integers.

    Examples
    --------
    >>> marginals((2, 3), 1).shape            # the 2 + 3 one-way cells
    (5, 6)
    >>> marginals((2, 3), attrs=[(0, 1)]).shape
    (6, 6)
    """
    domain = check_domain(domain)
    d = len(domain)
    if (k is None) == (attrs is None):
        raise ValueError(
            "give exactly one of k (all k-way marginals) or attrs (a list of attribute subsets)"
        )
    if k is not None:
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral):
            raise TypeError(
                f"k must be an integer in [0, {d}] for a {d}-attribute domain, got {type(k).__name__}: {k!r}"
            )
        if not 0 <= int(k) <= d:
            raise ValueError(
                f"k must be an integer in [0, {d}] for a {d}-attribute domain, got {k!r}"
            )
        subsets = list(itertools.combinations(range(d), int(k)))
    else:
        subsets = []
        for s in attrs:
            s = tuple(s) if isinstance(s, (tuple, list)) else (s,)
            for a in s:
                if (
                    isinstance(a, bool)
                    or not isinstance(a, numbers.Integral)
                    or not 0 <= int(a) < d
                ):
                    raise ValueError(
                        f"attribute {a!r} in {s} is not an index in [0, {d - 1}] of the domain {domain}"
                    )
            if len(set(s)) != len(s):
                raise ValueError(f"attribute subset {s} repeats an attribute")
            subsets.append(tuple(sorted(s)))
        if not subsets:
            raise ValueError("attrs must name at least one attribute subset")
    blocks = [
        Kron(*[identity(n) if i in s else total(n) for i, n in enumerate(domain)]) for s in subsets
    ]
    return VStack(blocks, domain=domain, subsets=subsets)


def kron(*workloads: LinOp) -> LinOp:
    """Kronecker product of per-attribute workloads (e.g. 2-D ranges = kron(all_range, all_range)).

    Parameters
    ----------
    *workloads : LinOp
        One workload per attribute.

    Returns
    -------
    LinOp
        Their Kronecker product (implicit).

    Raises
    ------
    ValueError
        No workloads.
    TypeError
        An argument that is not a workload.

    Examples
    --------
    >>> kron(prefix(2), identity(3)).shape
    (6, 6)
    """
    return operator(Kron(*_operators(workloads, "kron")), "the Kronecker product", per_col=0)


def _operators(ops, what, *, total="product"):
    """The operands checked; ``total``: how their row counts combine ("product" for a
    Kronecker product, "sum" for a stack), refused beyond an int64 index."""
    ops = factors(ops, what)
    rows = 1 if total == "product" else 0
    for op in ops:
        rows = rows * int(op.shape[0]) if total == "product" else rows + int(op.shape[0])
    if rows > MAX_INDEX:
        raise SizeError(f"{what} would have {rows:.4g} rows, more than 2**62 (an int64 index)")
    return ops


def stack(*workloads: LinOp, weights: Any = None) -> LinOp:
    """Union of workloads over the same domain, optionally weighted (gram = Σ wᵢ² Gᵢ).

    Parameters
    ----------
    *workloads : LinOp
        Workloads over the same cells.
    weights : sequence of float, optional
        One positive weight per workload.

    Returns
    -------
    LinOp
        The weighted union.

    Raises
    ------
    ValueError
        Different column counts, or bad weights.
    TypeError
        An argument that is not a workload.

    Examples
    --------
    >>> stack(prefix(4), total(4), weights=[1.0, 4.0]).shape
    (5, 4)
    """
    workloads = _operators(workloads, "stack", total="sum")
    if weights is not None:
        weights = vector(weights, "weights", length=len(workloads))
    return VStack(workloads, weights=weights)


def from_matrix(matrix: Any) -> LinOp:
    """A workload from an explicit numpy array or scipy sparse matrix.

    Parameters
    ----------
    matrix : array_like or scipy.sparse matrix
        The queries, one row each.

    Returns
    -------
    LinOp
        A dense or sparse workload.

    Raises
    ------
    ValueError
        A ragged matrix (naming the row) or non-finite entries.
    TypeError
        Not a matrix.

    Examples
    --------
    >>> from_matrix([[1, 0], [1, 1]]).shape
    (2, 2)
    """
    if isinstance(matrix, LinOp):
        return matrix
    if sp.issparse(matrix):
        if 0 in matrix.shape or not np.all(np.isfinite(matrix.data)):
            raise ValueError(
                f"a workload matrix must have rows and columns and finite entries, got shape {matrix.shape}"
            )
        return Sparse(matrix)
    a = _matrix(matrix, "the workload matrix")
    return as_linop(Dense(a))


def _pattern(rows, cols, shape, what):
    """A 0/1 sparse workload from the (row, column) pairs of its ones."""
    return Sparse(sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=shape))


def _check_nnz(nnz, what):
    if nnz > MAX_PATTERN_NNZ:
        raise SizeError(
            f"{what} would have {nnz:,} nonzero entries, more than {MAX_PATTERN_NNZ:,} (MAX_PATTERN_NNZ)"
        )


def circular_ranges(n: int) -> LinOp:
    """All circular (wrap-around) ranges of an attribute whose values lie on a circle.

    For hours, weekdays or angles: for every start s and length L = 1, …, n − 1 the cells
    s, s+1, …, s+L−1 mod n, then the total once; n(n−1) + 1 rows (QuerySmasher's circular
    ranges, cmla-psu/QuerySmasherMatrixMechanism). A per-attribute factor like
    :func:`prefix`: usable in :func:`kron` and unions.

    Parameters
    ----------
    n : int
        The number of cells on the circle.

    Returns
    -------
    LinOp
        The n(n−1) + 1 by n workload (sparse 0/1).

    Raises
    ------
    ValueError
        ``n`` not a positive size, or more than 2**24 nonzeros.
    TypeError
        ``n`` not an integer.

    Examples
    --------
    >>> circular_ranges(4).shape
    (13, 4)
    """
    n = check_size(n)
    _check_nnz(n * n * (n - 1) // 2 + n, f"circular_ranges({n})")
    grid_s, grid_l = np.meshgrid(np.arange(n), np.arange(1, n), indexing="ij")
    starts, lengths = grid_s.ravel(), grid_l.ravel()
    row_id = np.repeat(np.arange(starts.size), lengths)
    offset = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    cols = (np.repeat(starts, lengths) + offset) % n
    rows = np.concatenate([row_id, np.full(n, starts.size)])
    cols = np.concatenate([cols, np.arange(n)])
    return _pattern(rows, cols, (starts.size + 1, n), "circular_ranges")


def _check_pair(n1, n2, what):
    n1, n2 = check_size(n1, "n1"), check_size(n2, "n2")
    if n1 * n2 > MAX_PAIR_CELLS:
        raise SizeError(
            f"{what}({n1}, {n2}) has a pair domain of {n1 * n2:,} cells, more than {MAX_PAIR_CELLS:,} (MAX_PAIR_CELLS)"
        )
    return n1, n2


def _pair_thresholds(score, what):
    """One row per distinct value c of ``score`` (an n₁×n₂ array over the pair domain, cells
    row-major): the cells with score ≤ c."""
    flat = score.ravel()
    values = np.unique(flat)
    order = np.argsort(flat, kind="stable")
    ranks = np.searchsorted(values, flat[order])
    _check_nnz(int((values.size - ranks).sum()), what)
    # row r holds every cell whose score rank is ≤ r
    counts = values.size - ranks
    offset = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    rows = np.repeat(ranks, counts) + offset
    cols = np.repeat(order, counts)
    return _pattern(rows, cols, (values.size, flat.size), what)


def affine(n1: int, n2: int, *, a: float = 1, b: float = 1) -> LinOp:
    """Affine threshold queries on a pair of ordered attributes (sizes n₁, n₂).

    For every value c of a·i + b·j, the count of the cells (i, j) with a·i + b·j ≤ c
    (default a = b = 1: the n₁ + n₂ − 1 thresholds of i + j). The columns are the pair
    domain, n₁·n₂ cells row-major (the second attribute varies fastest): the pair is one
    attribute of a union, e.g. ``kron(affine(8, 8), identity(3))`` over the domain (64, 3).

    Parameters
    ----------
    n1, n2 : int
        The sizes of the two attributes.
    a, b : float, default 1
        The coefficients of a·i + b·j.

    Returns
    -------
    LinOp
        One row per distinct value of a·i + b·j, over the n₁·n₂ pair cells.

    Raises
    ------
    ValueError
        Sizes that are not positive or a pair domain above ``MAX_PAIR_CELLS``.
    TypeError
        A non-integer size or a non-finite coefficient.

    Examples
    --------
    >>> affine(3, 4).shape
    (6, 12)
    """
    n1, n2 = _check_pair(n1, n2, "affine")
    a, b = finite_real(a, "a"), finite_real(b, "b")
    i, j = np.meshgrid(np.arange(n1), np.arange(n2), indexing="ij")
    return _pair_thresholds(a * i + b * j, f"affine({n1}, {n2})")


def abs_diff(n1: int, n2: int) -> LinOp:
    """Absolute-difference threshold queries on a pair of ordered attributes on one scale.

    For c = 0, …, max(n₁, n₂) − 1 (every value abs(i − j) takes), the count of the cells
    (i, j) with abs(i − j) ≤ c. Columns: the pair domain as in :func:`affine`.

    Parameters
    ----------
    n1, n2 : int
        The sizes of the two attributes.

    Returns
    -------
    LinOp
        One row per threshold c, over the n₁·n₂ pair cells.

    Raises
    ------
    ValueError
        Sizes that are not positive or a pair domain above ``MAX_PAIR_CELLS``.
    TypeError
        A non-integer size.

    Examples
    --------
    >>> abs_diff(3, 3).dense()[0].tolist()   # c = 0: the diagonal i = j
    [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    """
    n1, n2 = _check_pair(n1, n2, "abs_diff")
    i, j = np.meshgrid(np.arange(n1), np.arange(n2), indexing="ij")
    return _pair_thresholds(np.abs(i - j).astype(np.float64), f"abs_diff({n1}, {n2})")
