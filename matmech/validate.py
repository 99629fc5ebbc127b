"""Input validation at the public boundary: one rule for every entry point.

A public function checks its arguments here before any work or privacy spend, and a bad
argument raises ``TypeError`` (wrong kind of thing) or ``ValueError`` (right kind, bad
value) whose message names the argument, the value it got and what was expected. Nothing
is converted silently: ``True`` is not 1, ``"no"`` is not False, ``"3"`` is not 3.

Sizes are checked against the machine before anything is allocated: :func:`size` and
:func:`memory` estimate the bytes a request needs and refuse it, with the estimate and the
limit in the message, when it exceeds the memory this process can still allocate
(:func:`memory_limit`, :mod:`matmech.limits`).
This follows the boundary-validation habit of dp_accounting
(``ValueError(f"delta must be in [0, 1], got {delta}")``), not any equation.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence

import numpy as np

from matmech.limits import SizeError, check_memory, memory_room


#: Largest count of rows or entries any operator may index (int64 with headroom: sums of
#: two indices must not overflow).
MAX_INDEX = 2**62
#: Largest size of one attribute (a 1-D domain of n cells) a builder accepts: 2**27 =
#: 134,217,728 cells. Every 1-D figure and release needs several float64 vectors of n
#: entries (1 GiB each at this size) and O(n·levels) passes over them; beyond it a call
#: would run for minutes or exhaust memory instead of answering, so it is refused up
#: front. Product domains (Kronecker, marginals) may be larger: they are handled factor by
#: factor, and what materialises a vector over the whole domain (a measurement of x)
#: checks its memory itself.
MAX_CELLS = 2**27


def _show(x) -> str:
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def real(x, name: str) -> float:
    """``x`` as a float. TypeError for anything that is not a real number (``bool``,
    ``str``, ``bytes``, arrays included); ValueError for an integer too large for a float."""
    if isinstance(x, (bool, np.bool_, str, bytes)) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__}: {_show(x)}")
    try:
        return float(x)
    except OverflowError:
        raise ValueError(
            f"{name} must be a real number a float can hold (|x| < 1.8e308), got {_show(x)}"
        ) from None


def finite_real(x, name: str) -> float:
    """A finite real number (no NaN, no ±inf)."""
    v = real(x, name)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {_show(x)}")
    return v


def positive_real(x, name: str) -> float:
    """A positive finite real number."""
    v = real(x, name)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a positive finite number, got {_show(x)}")
    return v


def nonnegative_real(x, name: str) -> float:
    """A non-negative finite real number."""
    v = real(x, name)
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{name} must be a non-negative finite number, got {_show(x)}")
    return v


def integer(x, name: str, *, min=None, max=None) -> int:  # noqa: A002 (keyword names read best)
    """``x`` as an int: Python or numpy integers only (no bool, no float such as 3.0)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(x).__name__}: {_show(x)}")
    v = int(x)
    if (min is not None and v < min) or (max is not None and v > max):
        lo = "" if min is None else f">= {min}"
        hi = "" if max is None else f"<= {max}"
        raise ValueError(
            f"{name} must be an integer {' and '.join(s for s in (lo, hi) if s)}, got {v}"
        )
    return v


def memory_limit() -> int:
    """Bytes this process can still allocate (:func:`matmech.limits.memory_room`: the
    address-space and data limits, its cgroups and the available RAM, whichever is least)."""
    return memory_room().bytes


def memory(nbytes, what: str, *, limit=None) -> int:
    """Refuse (:class:`SizeError`) work whose estimated memory ``nbytes`` exceeds the room
    this process has (:func:`matmech.limits.check_memory`), or ``limit`` bytes when given
    and smaller; returns the estimate as an int."""
    return check_memory(
        nbytes, what, limit=limit, limit_name="", after="; use a smaller domain or strategy"
    )


def size(
    n,
    name: str = "n",
    *,
    bytes_per: int = 8,
    what: str | None = None,
    limit: int | None = MAX_CELLS,
) -> int:
    """A positive integer size that this machine can hold: ``n <= limit`` (default
    :data:`MAX_CELLS`, the largest domain; None for :data:`MAX_INDEX` only) and ``n *
    bytes_per`` bytes (one float64 vector of length n by default) within
    :func:`memory_limit`. TypeError for a non-integer, ValueError otherwise."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {type(n).__name__}: {_show(n)}")
    v = int(n)
    if v <= 0:
        raise ValueError(f"{name} must be a positive integer, got {v}")
    if v > MAX_INDEX:
        raise SizeError(f"{name} must be at most 2**62 (an int64 index), got {v}")
    if limit is not None and v > limit:
        raise SizeError(
            f"{name}={v} is more than the {limit:,} cells a domain may have (matmech.validate.MAX_CELLS): "
            f"every figure needs several float64 vectors of that length; use a smaller domain"
        )
    memory(v * bytes_per, what or f"{name}={v} (a vector of {v} float64 values)")
    return v


def flag(x, name: str) -> bool:
    """``True`` or ``False`` (numpy booleans too); anything else, including 0, 1, "no" and
    "False", is a TypeError."""
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(x).__name__}: {_show(x)}")
    return bool(x)


def choice(x, name: str, options):
    """One of ``options`` (strings): TypeError if ``x`` is not a str, ValueError if it is
    not one of them."""
    options = tuple(options)
    if not isinstance(x, str):
        raise TypeError(
            f"{name} must be one of {list(options)}, got {type(x).__name__}: {_show(x)}"
        )
    if x not in options:
        raise ValueError(f"{name} must be one of {list(options)}, got {x!r}")
    return x


def text(x, name: str, *, empty: bool = False) -> str:
    """A string (non-empty unless ``empty``); TypeError for anything else (bytes included)."""
    if not isinstance(x, str):
        raise TypeError(f"{name} must be a string, got {type(x).__name__}: {_show(x)}")
    if not (x or empty):
        raise ValueError(f"{name} must be a non-empty string, got ''")
    return x


def texts(x, name: str) -> tuple:
    """A list or tuple of non-empty strings as a tuple (TypeError naming the first other item)."""
    items = sequence(x, name)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise TypeError(
                f"{name} must be a list of strings; {name}[{i}] is {type(item).__name__}: {_show(item)}"
            )
    return items


def path(x, name: str = "path"):
    """A file-system path (``str`` or ``os.PathLike``, not empty, no NUL byte) as a
    ``pathlib.Path``; TypeError for anything else (bytes included), ValueError for an empty
    name or one with a NUL byte (no file system takes it)."""
    from pathlib import Path

    if not isinstance(x, (str, os.PathLike)) or isinstance(x, bytes):
        raise TypeError(
            f"{name} must be a file path (str or os.PathLike), got {type(x).__name__}: {_show(x)}"
        )
    s = os.fspath(x)
    if not isinstance(s, str):
        raise TypeError(f"{name} must be a file path (str or os.PathLike), got {_show(x)}")
    if not s or "\x00" in s:
        raise ValueError(f"{name} must be a non-empty file path without NUL bytes, got {_show(x)}")
    return Path(s)


def subset(x, name: str, d: int) -> tuple:
    """Attribute indices: a list or tuple of distinct integers in 0..d-1 as a tuple, in the
    order given (no bool, no float, no string); the empty subset is allowed."""
    items = sequence(x, name)
    out = []
    for i, a in enumerate(items):
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, numbers.Integral):
            raise TypeError(
                f"{name} must hold attribute indices (integers); {name}[{i}] is "
                f"{type(a).__name__}: {_show(a)}"
            )
        out.append(int(a))
    if len(set(out)) != len(out) or any(not 0 <= a < d for a in out):
        raise ValueError(
            f"{name} must hold distinct attribute indices in 0..{d - 1}, got {_show(items)}"
        )
    return tuple(out)


def sequence(x, name: str, *, allow_str: bool = False):
    """``x`` as a tuple if it is a list, tuple or other non-string iterable; else TypeError."""
    if isinstance(x, (str, bytes)) and not allow_str:
        raise TypeError(f"{name} must be a list or tuple, got a {type(x).__name__}: {_show(x)}")
    if isinstance(x, np.ndarray):
        return tuple(x.tolist())
    try:
        return tuple(x)
    except TypeError:
        raise TypeError(
            f"{name} must be a list or tuple, got {type(x).__name__}: {_show(x)}"
        ) from None


def _numeric(a, name):
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise TypeError(f"{name} must be numeric (hold numbers), got an array of dtype {a.dtype}")
    if np.iscomplexobj(a):
        raise TypeError(f"{name} must hold real numbers, got complex dtype {a.dtype}")


def _ragged(x, name):
    """Name the first row of a nested list whose length differs from row 0."""
    if (
        isinstance(x, (list, tuple))
        and x
        and all(isinstance(r, (list, tuple, np.ndarray)) for r in x)
    ):
        lengths = [len(r) for r in x]
        for i, k in enumerate(lengths):
            if k != lengths[0]:
                raise ValueError(
                    f"{name} is ragged: row {i} has {k} entries, row 0 has {lengths[0]}"
                )
    if (
        isinstance(x, (list, tuple))
        and x
        and any(isinstance(r, (list, tuple, np.ndarray)) for r in x)
        and not all(isinstance(r, (list, tuple, np.ndarray)) for r in x)
    ):
        i = next(i for i, r in enumerate(x) if not isinstance(r, (list, tuple, np.ndarray)))
        raise ValueError(
            f"{name} is ragged: row {i} is a {type(x[i]).__name__}, not a sequence like row 0"
        )


def _numeric_array(x, name, expected):
    """``np.asarray(x)`` of numbers, refusing strings/None (TypeError), ragged nesting (naming
    the row) and non-numeric entries, with ``expected`` in the message."""
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name} must be {expected}, got {type(x).__name__}: {_show(x)}")
    _ragged(x, name)
    try:
        a = np.asarray(x)
    except ValueError as err:
        raise ValueError(f"{name} is not a rectangular array of numbers: {err}") from None
    _numeric(a, name)
    return a


def vector(x, name: str, *, finite: bool = True, length=None) -> np.ndarray:
    """A 1-D float64 array of real numbers (finite unless ``finite=False``)."""
    a = _numeric_array(x, name, "a 1-D sequence of numbers")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got an array of shape {a.shape}")
    if length is not None and a.shape[0] != length:
        raise ValueError(f"{name} must have {length} entries, got {a.shape[0]}")
    a = a.astype(np.float64)
    if finite and not np.all(np.isfinite(a)):
        i = int(np.argmax(~np.isfinite(a)))
        raise ValueError(f"{name} must be finite; {name}[{i}] is {a[i]}")
    return a


def matrix(x, name: str, *, finite: bool = True) -> np.ndarray:
    """A 2-D array of real numbers with at least one row and column (dtype kept if numeric).
    A ragged nested list is a ValueError naming its first short or long row."""
    a = _numeric_array(x, name, "a 2-D array of numbers")
    if a.ndim != 2 or 0 in a.shape:
        raise ValueError(
            f"{name} must be a 2-D array with at least one row and one column, got shape {a.shape}"
        )
    if finite and not np.all(np.isfinite(a)):
        i, j = (int(k) for k in np.argwhere(~np.isfinite(a))[0])
        raise ValueError(f"{name} must be finite; entry [{i}, {j}] is {a[i, j]}")
    return a


def operator(A, name: str, *, per_row: int = 0, per_col: int = 8, what: str | None = None):
    """Refuse an operator (anything with a ``shape`` (m, n)) whose rows or columns exceed
    :data:`MAX_INDEX`, or whose work needs more than :func:`memory_limit` bytes, estimated
    as ``m * per_row + n * per_col`` (e.g. ``per_row=8`` for one float64 answer per row).
    Returns ``A``; raises before anything is allocated."""
    shape = getattr(A, "shape", None)
    if not (isinstance(shape, tuple) and len(shape) == 2):
        raise TypeError(
            f"{name} must be a matrix or matmech.LinOp with a 2-D shape, got {type(A).__name__}"
        )
    m, n = (int(k) for k in shape)
    for label, k in (("rows", m), ("columns", n)):
        if k > MAX_INDEX:
            raise SizeError(
                f"{name} has {k:.4g} {label}, more than 2**62 (an int64 index); use a smaller domain"
            )
    memory(m * per_row + n * per_col, what or f"{name} ({m:,} rows x {n:,} columns)")
    return A


def named_operators(x, name: str):
    """A non-empty sequence of ``(name, operator)`` pairs (str, anything with a 2-D shape)
    as a tuple of pairs; TypeError naming the first bad item."""
    items = sequence(x, name)
    if not items:
        raise ValueError(f"{name} must name at least one (name, strategy) pair, got {_show(x)}")
    for i, item in enumerate(items):
        if not (
            isinstance(item, (tuple, list))
            and len(item) == 2
            and isinstance(item[0], str)
            and isinstance(getattr(item[1], "shape", None), tuple)
        ):
            raise TypeError(
                f"{name}[{i}] must be a (name, strategy) pair with a str name and a matrix or LinOp, got {_show(item)}"
            )
    return tuple((str(a), b) for a, b in items)


def rectangular(x, name: str):
    """Refuse a ragged nested list (ValueError naming its first ragged row); return ``x``."""
    _ragged(x, name)
    return x


def linear(A, name: str):
    """A matrix-like argument (a workload or strategy): a 2-D shape of positive sizes.
    Nested lists become a checked array (ragged rows and non-numbers are named); numpy
    arrays must be 2-D, non-empty, numeric and finite; objects with a 2-D ``shape`` (a
    matmech LinOp, a scipy sparse matrix) pass unchanged. Anything else is a TypeError."""
    if isinstance(A, (list, tuple)):
        return matrix(A, name)
    if isinstance(A, np.ndarray):
        return matrix(A, name)
    shape = getattr(A, "shape", None)
    if not (isinstance(shape, tuple) and len(shape) == 2):
        raise TypeError(
            f"{name} must be a workload or strategy (a matmech LinOp, an array or a sparse matrix), "
            f"got {type(A).__name__}: {_show(A)}"
        )
    if not all(isinstance(k, numbers.Integral) and int(k) > 0 for k in shape):
        raise ValueError(f"{name} must have at least one row and one column, got shape {shape}")
    return operator(
        A, name, per_col=0
    )  # rows and columns within an int64 index (a product domain may be implicit)


def factors(ops, what: str) -> tuple:
    """The factors of a Kronecker product or the blocks of a stack: ``f(A, B)`` or
    ``f([A, B])``; each checked by :func:`linear` (named "factor i"), at least one."""
    if (
        len(ops) == 1
        and isinstance(ops[0], (list, tuple))
        and all(hasattr(o, "shape") for o in ops[0])
    ):
        ops = tuple(ops[0])
    if not ops:
        raise ValueError(f"{what} needs at least one factor")
    return tuple(linear(op, f"{what} factor {i}") for i, op in enumerate(ops))


def check_labels(labels, m: int) -> Sequence:
    """``labels`` as a sequence of m names (one per workload row; a list, or the sequence
    itself when it computes them on demand, e.g. :class:`matmech.io.labels.Labels`), or
    TypeError / ValueError naming them."""
    if isinstance(labels, (str, bytes)) or not hasattr(labels, "__iter__"):
        raise TypeError(
            f"labels must be a sequence of {m} names, one per query, got {type(labels).__name__}"
        )
    if not isinstance(labels, Sequence) or isinstance(labels, (list, tuple, range)):
        labels = list(labels)
    if len(labels) != m:
        raise ValueError(f"got {len(labels)} labels for {m} queries")
    return labels
