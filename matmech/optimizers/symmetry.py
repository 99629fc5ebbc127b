"""Equitable partitions of a non-negative sparse matrix, to shrink symmetric convex programs.

A program min t s.t. B r ≤ t·1, Σ_T q_T / r_T ≤ 1 (the max-variance plans of
:mod:`matmech.optimizers.residual`) keeps its optimum when r is averaged over the classes of
an *equitable* partition of B's rows and columns — one where every row of a row class has the
same sum over each column class and every column of a column class has the same sum over each
row class — with q constant on the column classes (Grohe, Kersting, Mladenov and Selman,
"Dimension reduction via colour refinement", ESA 2014, for linear programs). With X and Y
the averaging operators of the row and column classes, BY = XB; so for a feasible r the
average Yr satisfies B(Yr) = X(Br) ≤ t·1 (an average of entries ≤ t) and
Σ q/(Yr) ≤ Σ q/r (Jensen, 1/r convex). The program on one variable per column class and one
constraint per row class therefore has the same optimum, and its solution lifted to the
columns is feasible for the full program.

:func:`equitable_partition` finds the coarsest such partition by colour refinement (1-WL)
with hashed signatures, then *verifies* it exactly (up to a relative tolerance on the
floating-point sums): a hash collision can only make the check fail (None), never a wrong
answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


#: Colour-refinement rounds before giving up (:func:`equitable_partition` then returns None).
MAX_REFINEMENT_ROUNDS = 64
#: Relative tolerance of the equitability check and of the value classes (12 significant digits).
_RTOL = 1e-9
_DIGITS = 12


@dataclass(frozen=True)
class EquitablePartition:
    """Row and column classes of an equitable partition of a sparse matrix B.

    ``row_class[i]`` / ``col_class[j]``: the class index of row i / column j; ``blocks``:
    (R, C, s) arrays, s the sum of B over one row of row class R and all columns of column
    class C (the reduced program's constraint matrix, sparse; absent pairs are zero)."""

    row_class: np.ndarray
    col_class: np.ndarray
    blocks: tuple

    @property
    def n_row_classes(self) -> int:
        return int(self.row_class.max()) + 1 if self.row_class.size else 0

    @property
    def n_col_classes(self) -> int:
        return int(self.col_class.max()) + 1 if self.col_class.size else 0


def _value_ids(v):
    """Equal ids for values equal to :data:`_DIGITS` significant digits."""
    v = np.asarray(v, dtype=np.float64)
    mag = np.where(v != 0, np.floor(np.log10(np.abs(np.where(v != 0, v, 1.0)))), 0.0)
    mant = np.round(v / 10.0**mag * 10 ** (_DIGITS - 1)).astype(np.int64)  # < 10¹² < 2⁴⁰
    key = (mag.astype(np.int64) + 400) * (1 << 40) + mant  # one int64 per value: a 1-D unique
    return np.unique(key, return_inverse=True)[1].ravel()


def _mix(a, b):
    """A 64-bit hash of the pairs (a, b) of non-negative integer arrays (splitmix64-style)."""
    with np.errstate(over="ignore"):
        x = a.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + b.astype(np.uint64)
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def _refine(own, nbr_colour, value_id, node, n):
    """New colours: (own colour, multiset of (neighbour colour, value)) per node."""
    h = np.zeros(n, dtype=np.uint64)
    np.add.at(h, node, _mix(nbr_colour, value_id))  # wraps modulo 2⁶⁴: a multiset hash
    # one 64-bit key per node (a collision merges two colours: the final check then fails)
    return np.unique(_mix(own, h), return_inverse=True)[1].ravel()


def _block_sums(node, node_class, other_class, vals, n_class_of_node):
    """(R, C, s) with s the common sum of vals over the entries of one node of class R whose
    other end is in class C, or None when the nodes of some class R disagree (the partition
    is not equitable on this side)."""
    n_other = int(other_class.max(initial=-1)) + 1
    key = node * n_other + other_class
    uk, inv = np.unique(key, return_inverse=True)
    sums = np.bincount(inv.ravel(), weights=vals)
    nd, oc = uk // n_other, uk % n_other
    group = node_class[nd] * n_other + oc
    ug, ginv = np.unique(group, return_inverse=True)
    ginv = ginv.ravel()
    lo = np.full(ug.size, np.inf)
    hi = np.full(ug.size, -np.inf)
    np.minimum.at(lo, ginv, sums)
    np.maximum.at(hi, ginv, sums)
    members = np.bincount(ginv, minlength=ug.size)  # nodes of R with an entry in C
    size = np.bincount(node_class, minlength=n_class_of_node)
    scale = float(np.abs(vals).max(initial=0.0))
    if np.any(members != size[ug // n_other]) or np.any(hi - lo > _RTOL * max(scale, 1e-300)):
        return None
    return ug // n_other, ug % n_other, 0.5 * (lo + hi)


def equitable_partition(rows, cols, vals, shape, *, col_labels=None):
    """The coarsest equitable partition of the non-negative sparse matrix B (entries
    ``vals`` at (``rows``, ``cols``), ``shape`` = (rows, columns)) that refines the given column
    labels (e.g. the column weights q of the program) → :class:`EquitablePartition`, or
    None when none was verified.

    Colour refinement with hashed multiset signatures, then a check (to a relative 1e-9)
    that every row of a row class has the same sum over each column class and every column
    of a column class the same sum over each row class; None when the check fails (a hash
    collision, or values equal only to 12 digits): the caller then solves the full program.

    Raises ValueError for mismatched or out-of-range indices or negative values."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    vals = np.asarray(vals, dtype=np.float64)
    n_r, n_c = (int(s) for s in shape)
    if not (rows.shape == cols.shape == vals.shape and rows.ndim == 1):
        raise ValueError("rows, cols and vals must be 1-D arrays of one length")
    if rows.size and (rows.min() < 0 or rows.max() >= n_r or cols.min() < 0 or cols.max() >= n_c):
        raise ValueError(f"indices outside the shape {shape}")
    if not np.all(np.isfinite(vals)) or np.any(vals < 0):
        raise ValueError("vals must be finite and non-negative")
    vid = _value_ids(vals)
    rc = np.zeros(n_r, dtype=np.int64)
    cc = np.zeros(n_c, dtype=np.int64) if col_labels is None else _value_ids(col_labels)
    counts = (-1, -1)
    for _ in range(MAX_REFINEMENT_ROUNDS):
        rc = _refine(rc, cc[cols], vid, rows, n_r)
        cc = _refine(cc, rc[rows], vid, cols, n_c)
        now = (int(rc.max(initial=-1)) + 1, int(cc.max(initial=-1)) + 1)
        if now == counts:
            break
        counts = now
    else:
        return None
    nr, nc = counts
    row_side = _block_sums(rows, rc, cc[cols], vals, nr)
    col_side = _block_sums(cols, cc, rc[rows], vals, nc)
    if row_side is None or col_side is None:
        return None
    return EquitablePartition(rc, cc, row_side)
