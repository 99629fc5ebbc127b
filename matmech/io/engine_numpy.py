"""The numpy counting engine: in-memory columns, vectorised; the reference the others are tested against.

Counts records per cell of the marginals a plan asks for (Li et al., "The matrix mechanism", VLDB J. 2015, §2; McKenna et al., "Optimizing error of
high-dimensional statistical queries under differential privacy", PVLDB 2018, §3) from
a mapping of column → values, a 2-D array in domain order, or a DataFrame.
"""

from __future__ import annotations

import math

import numpy as np

from matmech.io.grouping import DROP, Engine, _actions, _not_spark

__all__ = ["NUMPY"]


def _object_missing(obj):
    """None / NaN / pandas NA entries of an object array."""
    try:
        return np.asarray((obj == None) | (obj != obj), dtype=bool)  # noqa: E711 (elementwise)
    except TypeError:  # pandas NA compares to NA, which has no truth value
        return np.frompyfunc(
            lambda v: v is None or v != v if type(v).__name__ != "NAType" else True, 1, 1
        )(obj).astype(bool)


def _np_numbers(values):
    """(float64 values, missing mask): text parsed once per distinct value, spaces trimmed."""
    arr = np.asarray(values)
    if arr.dtype.kind in "biuf":
        v = arr.astype(np.float64)
        return v, np.isnan(v)
    obj = arr.astype(object)
    miss = _object_missing(obj)
    v = np.full(obj.shape, np.nan)
    if (~miss).any():
        uniq, inv = np.unique(obj[~miss].astype(str), return_inverse=True)
        parsed = np.empty(uniq.size)
        for i, s in enumerate(uniq):  # one parse per distinct text, not per record
            try:
                parsed[i] = float(s.strip(" "))
            except ValueError:
                parsed[i] = np.nan
        v[~miss] = parsed[inv]
    return v, np.isnan(v)


def _np_times(values, unit):
    """(float64 seconds since 1970-01-01 UTC — months since 1970-01 for unit "month" —, missing
    mask) of timestamps: datetime64 values, datetimes or ISO 8601 text (naive: UTC, zoned:
    converted to UTC); unparseable text is missing."""
    import pandas as pd

    arr = np.asarray(values)
    if arr.dtype.kind == "M":
        ts = pd.to_datetime(pd.Series(arr), utc=True)
    else:
        obj = pd.Series(arr.astype(object))
        obj = obj.where(~obj.map(lambda v: isinstance(v, str) and not v.strip()), None)
        ts = pd.to_datetime(
            obj.map(lambda v: v.strip() if isinstance(v, str) else v),
            errors="coerce",
            utc=True,
            format="ISO8601",
        )
    miss = ts.isna().to_numpy()
    naive = ts.dt.tz_convert(None)
    if unit == "month":
        v = ((naive.dt.year - 1970) * 12 + naive.dt.month - 1).to_numpy(
            dtype=np.float64, na_value=np.nan
        )
    else:
        ns = naive.to_numpy(dtype="datetime64[ns]").astype(np.int64)
        v = np.floor_divide(ns, 10**9).astype(np.float64)
        v[miss] = np.nan
    return v, miss


def _np_strings(values):
    """(trimmed str array, missing mask): missing = None / NaN / empty."""
    obj = np.asarray(values).astype(object)
    miss = _object_missing(obj)
    s = np.full(obj.shape, "", dtype=object)
    if (~miss).any():
        s[~miss] = np.char.strip(obj[~miss].astype(str), " ").astype(object)
    return s, miss | (s == "")


def _np_codes(a, values):
    miss, low, high, ood = _actions(a)
    if a.kind == "categories":
        s, missing = _np_strings(values)
        code = np.full(s.shape, ood, dtype=np.int64)
        for i, c in enumerate(a.categories):  # one vectorised comparison per category
            code[s == c] = i
        code[missing] = miss
        return code
    v, missing = _np_times(values, a.time) if a.time is not None else _np_numbers(values)
    lo_bound, hi_bound = (a.lo, a.hi + 1) if a.kind == "range" else (a.bins[0][0], a.bins[-1][1])
    with np.errstate(invalid="ignore"):
        below, above = v < lo_bound, v >= hi_bound
        inside = ~(missing | below | above)
        code = np.full(v.shape, ood, dtype=np.int64)
        vi = v[inside]
        if a.regular:
            c = np.floor((vi - float(a.lo)) / float(a.width)).astype(np.int64)
            code[inside] = np.minimum(c, a.declared_size - 1)
        else:
            starts = np.array([b[0] for b in a.bins])
            ends = np.array([b[1] for b in a.bins])
            c = np.searchsorted(starts, vi, side="right") - 1
            in_bin = vi < ends[c]
            code[np.flatnonzero(inside)[in_bin]] = c[in_bin]
    code[below], code[above], code[missing] = low, high, miss
    return code


def _column_values(source, kind, j, column):
    if kind == "array":
        return source[:, j]
    if kind == "columns":
        return source[column]
    if kind == "pandas":
        return source[column].to_numpy()
    if kind == "polars":
        frame = source.collect() if type(source).__name__ == "LazyFrame" else source
        return frame[column].to_numpy()
    col = source.column(column)
    try:
        return col.to_numpy(zero_copy_only=False)
    except TypeError:  # a ChunkedArray
        return col.to_numpy()


def _numpy_groups(source, kind, domain, sets, where):
    if kind == "array" and source.shape[1] != len(domain):
        raise ValueError(
            f"the array has {source.shape[1]} columns but the domain has {len(domain)} attributes {list(domain.names)}"
        )
    codes = [
        _np_codes(a, _column_values(source, kind, j, a.column))
        for j, a in enumerate(domain.attributes)
    ]
    lengths = {c.size for c in codes}
    if len(lengths) > 1:
        raise ValueError(f"{where}: the columns have different lengths")
    dropped = np.zeros(codes[0].size, dtype=bool)
    for c in codes:
        dropped |= c == DROP
    groups = {}
    for s in sets:
        if not s:
            groups[s] = (
                np.zeros((2, 0), np.int64),
                np.array([False, True]),
                np.array([np.sum(~dropped), np.sum(dropped)], dtype=np.int64),
            )
            continue
        # one int64 key per record: codes shifted past the sentinels (≥ -3), then the drop bit
        dims = tuple(domain.attributes[j].size + 3 for j in s) + (2,)
        key = np.ravel_multi_index(
            tuple(codes[j] + 3 for j in s) + (dropped.astype(np.int64),), dims
        )
        if math.prod(dims) <= max(4 * key.size, 1 << 16):
            counts = np.bincount(key, minlength=math.prod(dims))
            uniq = np.flatnonzero(counts)
            counts = counts[uniq]
        else:
            uniq, counts = np.unique(key, return_counts=True)
        parts = np.unravel_index(uniq, dims)
        groups[s] = (
            np.column_stack(parts[:-1]) - 3,
            parts[-1].astype(bool),
            counts.astype(np.int64),
        )
    return groups


def _check_kind(kind: str) -> None:
    _not_spark(kind, "numpy")
    if kind in ("csv", "parquet"):
        raise TypeError(
            f"the numpy engine counts in-memory columns; read {kind.upper()} files with engine='duckdb'"
        )


def _groups(source, kind, domain, sets, *, where, encoding, delimiter):
    return _numpy_groups(source, kind, domain, sets, where)


#: The numpy engine's registry entry.
NUMPY = Engine("numpy", _groups, _check_kind)
