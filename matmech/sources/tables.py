"""Marginal tables of records on attribute subsets, each computed once.

The factored release (issue 14) needs only the marginals of the data on attribute subsets.
A table on S is an int64 array of shape (nᵢ for i ∈ S), row-major, cell (c_i)_{i∈S} counting
the records whose codes on S are (c_i). Sources:

* a 2-D integer array of codes (records × attributes), counted with ``numpy.bincount`` on
  the raveled indices of the attributes of S;
* an object with ``marginal_counts(subsets) -> {subset: array}`` (a data engine);
* a mapping ``{subset: array}`` of precomputed tables (e.g. from
  ``matmech.sources.engines.marginal_counts``). A table's axes follow its key's order
  (``{(2, 0): t}`` holds t[c₂, c₀]; it is transposed, never reshaped); a subset given twice,
  or tables that disagree on a common marginal, are refused before anything is spent.

Only the maximal subsets are counted from the source; every smaller one is summed out of the
smallest counted superset (exact in integers). Every check names the subset, shape or dtype
that is wrong, never a count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from matmech.sources.table_scan import count_tables
from matmech.validate import sequence, size, subset


#: Record codes are copied as intp (no conversion per table) up to this many bytes.
_INTP_COPY_BYTES = 1 << 30


def maximal_subsets(subsets):
    """The subsets not contained in another one of ``subsets`` (sorted tuples, in order).

    Largest first: a subset is inside a kept one iff some kept subset (of a larger size:
    distinct subsets of one size never contain each other) holds every attribute of it,
    i.e. the AND of its attributes' bitmasks over the kept subsets is non-zero. The masks are
    Python ints rebuilt once per size, so the work is a few big-int ANDs per subset."""
    uniq = sorted({tuple(sorted(s)) for s in subsets}, key=lambda s: (-len(s), s))
    out: list[tuple[int, ...]] = []
    masks: dict[int, int] = {}
    pending: dict[int, list[int]] = {}
    size = None
    for s in uniq:
        if len(s) != size:  # the kept subsets of the previous size join the masks
            for a, idx in pending.items():
                masks[a] = masks.get(a, 0) | _bitmask(idx)
            pending, size = {}, len(s)
        if s:
            common = masks.get(s[0], 0)
            for a in s[1:]:
                if not common:
                    break
                common &= masks.get(a, 0)
            inside = bool(common)
        else:
            inside = bool(out)  # the empty subset is inside any kept one
        if not inside:
            for a in s:
                pending.setdefault(a, []).append(len(out))
            out.append(s)
    return out


def _bitmask(indices):
    """The Python int with bits ``indices`` set."""
    bits = np.zeros(max(indices) + 1, dtype=bool)
    bits[indices] = True
    return int.from_bytes(np.packbits(bits, bitorder="little").tobytes(), "little")


def check_codes(codes, domain):
    """``codes`` as a 2-D integer array (records × attributes) within the domain, or raise
    naming the attribute whose codes are out of range (never a count, a value or a row)."""
    if hasattr(codes, "to_numpy") and not isinstance(codes, np.ndarray):
        codes = codes.to_numpy()
    if codes is None or isinstance(codes, (str, bytes)):
        raise TypeError(
            f"records must be a 2-D array of codes (records × attributes), got {type(codes).__name__}"
        )
    try:
        arr = np.asarray(codes)
    except ValueError:  # ragged: which record is not said (the records are private)
        raise ValueError(
            "records must be a 2-D array of codes (records × attributes) with one code per "
            "attribute in every record"
        ) from None
    if arr.ndim != 2:
        raise ValueError(
            f"records must be a 2-D array of codes (records × attributes), got {arr.ndim} dimensions"
        )
    if arr.shape[1] != len(domain):
        raise ValueError(f"records have {arr.shape[1]} attributes but the domain has {len(domain)}")
    if not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
        raise TypeError(f"record codes must be integers, got dtype {arr.dtype}")
    if arr.shape[0]:
        lo, hi = arr.min(axis=0), arr.max(axis=0)
        for i, n in enumerate(domain):
            if lo[i] < 0 or hi[i] >= n:
                raise ValueError(f"attribute {i} holds a code outside [0, {n - 1}]")
    return arr


def _key(k, domain):
    """A table's key as given (attribute indices in the order of the table's axes)."""
    if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
        k = (k,)
    try:
        key = tuple(k)
    except TypeError:
        raise TypeError(
            f"a marginal table's key must be a tuple of attribute indices, got {k!r}"
        ) from None
    if not all(
        isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_)) for a in key
    ):
        raise TypeError(f"a marginal table's key must be a tuple of attribute indices, got {k!r}")
    key = tuple(int(a) for a in key)
    if len(set(key)) != len(key) or any(not 0 <= a < len(domain) for a in key):
        raise ValueError(
            f"a marginal table's key must hold distinct attribute indices in 0..{len(domain) - 1}, got {k!r}"
        )
    return key


def _check_table(t, domain, key):
    """The table given for ``key`` as an int64 array over sorted(key), or raise naming the key.

    The axes of a table follow its key: ``{(2, 0): t}`` has t[c2, c0]. A table keyed in
    non-sorted order is *transposed* to sorted order (never reshaped: that would permute
    the counts). A flat 1-D table is read row-major in key order."""
    try:
        arr = np.asarray(t)
    except (TypeError, ValueError):
        raise TypeError(
            f"the table for attributes {key} must be an array of counts, got {type(t).__name__}"
        ) from None
    shape = tuple(domain[i] for i in key)
    if arr.ndim == 1 and len(key) > 1 and arr.size == math.prod(shape):
        arr = arr.reshape(shape)  # flat, row-major in key order
    if arr.shape != shape:
        raise ValueError(
            f"the table for attributes {key} has shape {arr.shape}, expected {shape} "
            "(one axis per attribute, in the key's order)"
        )
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.integer)
        or np.issubdtype(arr.dtype, np.floating)
        or arr.dtype == bool
    ):
        raise TypeError(
            f"the table for attributes {key} must hold integer counts, got dtype {arr.dtype}"
        )
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)):
            raise ValueError(
                f"the table for attributes {key} holds a non-integer or non-finite entry"
            )
    if np.any(arr < 0):
        raise ValueError(f"the table for attributes {key} holds a negative entry")
    order = np.argsort(key, kind="stable")
    return np.transpose(arr, order).astype(np.int64)


def _given_tables(data, domain):
    """{sorted subset: int64 table} from a mapping of given tables, checked and consistent.

    Refuses a subset given twice (e.g. as (0, 1) and (1, 0)) and tables that disagree on a
    common marginal (two tables over S and T must sum to the same table over S ∩ T; the
    totals included). Tables are private: this runs before any spend and the message names
    only the attribute subsets, never a count."""
    given: dict[Any, Any] = {}
    raw: dict[Any, Any] = {}
    for k, v in data.items():
        key = _key(k, domain)
        s = tuple(sorted(key))
        if s in given:
            raise ValueError(
                f"the marginal on attributes {s} is given twice (as {raw[s]} and {key})"
            )
        given[s], raw[s] = _check_table(v, domain, key), key
    keys = list(given)
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            common = tuple(sorted(set(a) & set(b)))
            if not np.array_equal(_sum_out(given[a], a, common), _sum_out(given[b], b, common)):
                over = f"attributes {common}" if common else "the record total"
                raise ValueError(
                    f"the marginal tables for attributes {a} and {b} disagree on {over}: inconsistent "
                    "tables are refused (pass tables counted from one dataset; nothing was spent)"
                )
    return given


def _sum_out(table, sup, s):
    axes = tuple(k for k, i in enumerate(sup) if i not in s)
    return table.sum(axis=axes) if axes else table


def marginal_tables(data, domain, subsets):
    """{subset: int64 table} for every subset in ``subsets`` (sorted attribute tuples).

    ``data``: records (2-D integer codes), an object with ``marginal_counts(subsets)``, or a
    mapping subset → table. The maximal subsets come from ``data``; each other subset is
    summed out of the smallest maximal superset. Raises before any table is built when the
    input is malformed.
    """
    sizes = sequence(domain, "domain")
    if not sizes:
        raise ValueError("domain must hold at least one attribute size, got an empty domain")
    domain = tuple(size(n, f"domain[{i}]", limit=None) for i, n in enumerate(sizes))
    d = len(domain)
    subsets = [subset(s, f"subsets[{i}]", d) for i, s in enumerate(sequence(subsets, "subsets"))]
    if not subsets:
        raise ValueError("subsets must name at least one attribute subset, got none")
    return table_reader(data, domain)(subsets)


class _Reader:
    """``reader(subsets)`` → {subset: int64 table}; ``reader.check_covers(subsets)`` raises
    (from the keys alone) when given tables hold no superset of one of them."""

    def __init__(self, read, given=None):
        self._read, self._given = read, given

    def __call__(self, subsets):
        return self._read(_sorted(subsets))

    def check_covers(self, subsets):
        if self._given is None:
            return
        keys = [set(k) for k in self._given]
        for s in maximal_subsets(_sorted(subsets)):
            if not any(set(s) <= k for k in keys):
                raise ValueError(f"no table given for attributes {s} nor for a superset of them")


def table_reader(data, domain, *, engines=True):
    """A function ``subsets → {subset: int64 table}`` over ``data`` (as
    :func:`marginal_tables`), with every check of the source done here, once: the record
    codes' range, or the given tables' shapes, entries and consistency. Calls then only
    count (records) or sum out (given tables), so a release can read its tables batch by
    batch after its spend without any further check on the data. ``engines=False`` refuses
    an object with ``marginal_counts`` (its tables could only be checked batch by batch)."""
    if isinstance(data, Mapping):
        given = _given_tables(data, domain)
        return _Reader(
            lambda subsets: _down_the_lattice(
                _from_given(given, domain, maximal_subsets(subsets)), domain, subsets
            ),
            given,
        )
    if hasattr(data, "marginal_counts") and callable(data.marginal_counts):
        if not engines:
            raise TypeError(
                "a data engine's tables are checked as they arrive; pass the records (a 2-D code "
                "array) or a mapping of marginal tables"
            )
        return _Reader(lambda subsets: _from_engine(data, domain, subsets))
    codes = check_codes(data, domain)
    # contiguous columns; as intp (bincount's index type) when that copy is small
    codes = np.asfortranarray(codes, dtype=np.intp if codes.size * 8 <= _INTP_COPY_BYTES else None)
    return _Reader(
        lambda subsets: _down_the_lattice(
            count_tables(codes, domain, maximal_subsets(subsets)), domain, subsets
        )
    )


def _sorted(subsets):
    return [tuple(sorted(int(a) for a in s)) for s in subsets]


def _from_given(given, domain, top):
    base = {}
    for s in top:
        if s in given:
            base[s] = given[s]
            continue
        sup = [k for k in given if set(s) <= set(k)]
        if not sup:
            raise ValueError(f"no table given for attributes {s} nor for a superset of them")
        k = min(sup, key=lambda k: math.prod(domain[i] for i in k))
        base[s] = _sum_out(given[k], k, s)
    return base


def _from_engine(data, domain, subsets):
    got = data.marginal_counts(maximal_subsets(subsets))
    if not isinstance(got, Mapping):
        raise TypeError(
            f"marginal_counts must return a dict subset → table, got {type(got).__name__}"
        )
    return table_reader(dict(got), domain)(subsets)


def _down_the_lattice(base, domain, subsets):
    """Every table of ``subsets`` from the counted ``base`` tables, largest subsets first:
    each one summed over one axis of a table one attribute larger when such a table is at
    hand (work linear in the tables' total size: O(d) look-ups a subset instead of a scan
    of every maximal subset, which grew as d**5 for all <=3-way marginals), else summed out
    of the smallest counted superset."""
    have = dict(base)
    # attribute -> counted subsets containing it (for the rare fallback)
    holders: dict[int, list[tuple[int, ...]]] = {}
    for m in base:
        for a in m:
            holders.setdefault(a, []).append(m)
    for s in sorted(set(subsets) - set(base), key=lambda s: (-len(s), s)):
        parents = [tuple(sorted((*s, a))) for a in range(len(domain)) if a not in s]
        near = [k for k in parents if k in have]
        if near:
            k = min(near, key=lambda k: math.prod(domain[i] for i in k))
            have[s] = _sum_out(have[k], k, s)
            continue
        pool = min((holders.get(a, []) for a in s), key=len) if s else list(base)
        k = min(
            (m for m in pool if set(s) <= set(m)), key=lambda m: math.prod(domain[i] for i in m)
        )
        have[s] = _sum_out(base[k], k, s)
    return {s: have[s] for s in subsets}
