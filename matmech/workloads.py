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
from matmech.validate import MAX_INDEX, SizeError, factors, matrix as _matrix, operator, size, vector
from typing import Any, Sequence


def check_size(n, name="n"):
    """A positive integer domain size this machine can hold (a float64 per cell)."""
    return size(n, name, what=f"a domain of {name}={n!r} cells (one float64 per cell)")

__all__ = [
    "identity",
    "total",
    "prefix",
    "all_range",
    "ranges",
    "marginals",
    "kron",
    "stack",
    "from_matrix",
    "check_domain",
]


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
    ValueError
        n < 1 or too large for memory.
    TypeError
        n not an integer.

    Examples
    --------
    >>> identity(4).shape
    (4, 4)
    """
    n = size(n, "n", bytes_per=24, what=f"identity({n!r}) (its interval bounds and one float64 per cell)")
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
    ValueError
        n < 1.
    TypeError
        n not an integer.

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
    ValueError
        n < 1 or too large.
    TypeError
        n not an integer.

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
    ValueError
        n < 1 or too large.
    TypeError
        n not an integer.

    Examples
    --------
    >>> all_range(4096).shape
    (8390656, 4096)
    """
    n = check_size(n)
    if n * (n + 1) // 2 > MAX_INDEX:
        raise SizeError(f"all_range(n) has n(n+1)/2 rows, more than 2**62 (an int64 index) for n={n}")
    return AllRange(n)


def ranges(n: int, intervals: Sequence[tuple[int, int]]) -> LinOp:
    """Range queries from inclusive 0-based ``(lo, hi)`` pairs.

    Parameters
    ----------
    n : int
        Number of cells.
    intervals : sequence of (int, int)
        Inclusive, 0-based (lo, hi) with 0 <= lo <= hi < n.

    Returns
    -------
    LinOp
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
        raise TypeError(f"intervals must be a sequence of (lo, hi) pairs, got {type(intervals).__name__}: {intervals!r}")
    pairs = _matrix(intervals, "intervals") if len(intervals) else np.zeros((0, 2))
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.shape[0] == 0:
        raise ValueError(f"intervals must be a non-empty sequence of (lo, hi) pairs, got an array of shape {pairs.shape}")
    if not np.issubdtype(pairs.dtype, np.integer):
        if not (np.issubdtype(pairs.dtype, np.floating) and np.all(np.isfinite(pairs)) and np.all(pairs == np.round(pairs))):
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
        raise SizeError(f"the domain {sizes} has {cells:.4g} cells, more than 2**62 (an int64 index)")
    return sizes


def marginals(domain: Any, k: Any = None, *, attrs: Any = None) -> LinOp:
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
    LinOp
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
        raise ValueError("give exactly one of k (all k-way marginals) or attrs (a list of attribute subsets)")
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 0 <= int(k) <= d:
            raise ValueError(f"k must be an integer in [0, {d}] for a {d}-attribute domain, got {k!r}")
        subsets = list(itertools.combinations(range(d), int(k)))
    else:
        subsets = []
        for s in attrs:
            s = tuple(s) if isinstance(s, (tuple, list)) else (s,)
            for a in s:
                if isinstance(a, bool) or not isinstance(a, numbers.Integral) or not 0 <= int(a) < d:
                    raise ValueError(f"attribute {a!r} in {s} is not an index in [0, {d - 1}] of the domain {domain}")
            if len(set(s)) != len(s):
                raise ValueError(f"attribute subset {s} repeats an attribute")
            subsets.append(tuple(sorted(s)))
        if not subsets:
            raise ValueError("attrs must name at least one attribute subset")
    blocks = [Kron(*[identity(n) if i in s else total(n) for i, n in enumerate(domain)]) for s in subsets]
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


def _operators(ops, what):
    ops = factors(ops, what)
    rows = 1
    for op in ops:
        rows *= int(op.shape[0])
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
    workloads = _operators(workloads, "stack")
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
            raise ValueError(f"a workload matrix must have rows and columns and finite entries, got shape {matrix.shape}")
        return Sparse(matrix)
    a = _matrix(matrix, "the workload matrix")
    return as_linop(Dense(a))
