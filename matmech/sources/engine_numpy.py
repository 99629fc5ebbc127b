"""The numpy counting engine: in-memory columns, vectorised; the reference the others are tested against.

Counts records per cell of the marginals a plan asks for (Li et al., "The matrix mechanism", VLDB J. 2015, §2; McKenna et al., "Optimizing error of
high-dimensional statistical queries under differential privacy", PVLDB 2018, §3) from
a mapping of column → values, a 2-D array in domain order, or a DataFrame.
"""

from __future__ import annotations

import math

import numpy as np

from matmech.io.attribute import WHITESPACE, trim_text
from matmech.sources.grouping import DROP, Engine, actions, not_spark
from matmech.io.zones import ISO_TEXT, ISO_ZONED, zone_table


def _object_missing(obj):
    """None / NaN / pandas NA entries of an object array."""
    try:
        return np.asarray((obj == None) | (obj != obj), dtype=bool)  # noqa: E711 (elementwise)
    except TypeError:  # pandas NA compares to NA, which has no truth value
        return np.frompyfunc(
            lambda v: v is None or v != v if type(v).__name__ != "NAType" else True, 1, 1
        )(obj).astype(bool)


def _np_numbers(values):
    """(float64 values, missing mask): text parsed once per distinct value after trimming
    :data:`~matmech.io.attribute.WHITESPACE`; text with other white space at an end is not a
    number (as in SQL, where Python's ``float`` would strip it)."""
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
            t = trim_text(s)
            try:
                parsed[i] = float(t) if t == t.strip() else np.nan
            except ValueError:
                parsed[i] = np.nan
        v[~miss] = parsed[inv]
    return v, np.isnan(v)


def _ns_to_seconds(ts):
    """(int64 seconds, floored, missing mask) of a pandas UTC datetime Series."""
    miss = ts.isna().to_numpy()
    ns = ts.dt.tz_convert(None).to_numpy(dtype="datetime64[ns]").astype(np.int64)
    sec = np.floor_divide(ns, 10**9)
    sec[miss] = 0
    return sec, miss


def _np_instants(values):
    """(int64 seconds since 1970-01-01 — wall-clock seconds for naive values —, zoned mask,
    missing mask) of timestamps: datetime64 / zoned pandas columns, datetimes, or text in the
    ISO 8601 form :data:`~matmech.io.zones.ISO_TEXT` after trimming (anything else is
    missing); text is parsed once per distinct value."""
    import datetime as dt

    import pandas as pd

    ser = values if isinstance(values, pd.Series) else pd.Series(np.asarray(values))
    n = len(ser)
    if isinstance(ser.dtype, pd.DatetimeTZDtype) or ser.dtype.kind == "M":
        sec, miss = _ns_to_seconds(pd.to_datetime(ser, utc=True))
        return sec, np.full(n, isinstance(ser.dtype, pd.DatetimeTZDtype)) & ~miss, miss
    obj = ser.astype(object).to_numpy()
    sec, miss, zoned = np.zeros(n, np.int64), np.ones(n, bool), np.zeros(n, bool)
    is_text = np.frompyfunc(lambda v: isinstance(v, str), 1, 1)(obj).astype(bool)
    if is_text.any():
        uniq, inv = np.unique(obj[is_text].astype(str), return_inverse=True)
        text = pd.Series(uniq, dtype=object).map(trim_text)
        ok = text.str.fullmatch(ISO_TEXT).to_numpy(dtype=bool)
        u_sec, u_miss = _ns_to_seconds(
            pd.to_datetime(text.where(ok, None), format="ISO8601", utc=True, errors="coerce")
        )
        u_zoned = text.str.fullmatch(ISO_ZONED).to_numpy(dtype=bool) & ~u_miss
        sec[is_text], miss[is_text], zoned[is_text] = u_sec[inv], u_miss[inv], u_zoned[inv]
    for i in np.flatnonzero(~is_text).tolist():  # datetimes and dates; anything else is missing
        v = obj[i]
        if isinstance(v, (dt.date, np.datetime64)) and not pd.isna(v):
            one, gone = _ns_to_seconds(pd.to_datetime(pd.Series([v]), utc=True))
            sec[i], miss[i] = one[0], gone[0]
            zoned[i] = getattr(v, "tzinfo", None) is not None and not gone[0]
    return sec, zoned, miss


def _np_times(values, a):
    """(float64 wall-clock seconds in the attribute's zone — months since 1970-01 for unit
    "month" —, missing mask) of timestamps (:mod:`matmech.io.zones`)."""
    sec, zoned, miss = _np_instants(values)
    times, offsets = zone_table(a)
    shift = np.asarray(offsets, dtype=np.int64)[
        np.searchsorted(np.asarray(times, dtype=np.int64), sec, side="right")
    ]
    wall = sec + np.where(zoned, shift, 0)
    if a.time == "month":
        wall = (wall // 86400).astype("datetime64[D]").astype("datetime64[M]").astype(np.int64)
    v = wall.astype(np.float64)
    v[miss] = np.nan
    return v, miss


def _np_strings(values):
    """(trimmed str array, missing mask): missing = None / NaN / empty."""
    obj = np.asarray(values).astype(object)
    miss = _object_missing(obj)
    s = np.full(obj.shape, "", dtype=object)
    if (~miss).any():
        s[~miss] = np.char.strip(obj[~miss].astype(str), WHITESPACE).astype(object)
    return s, miss | (s == "")


#: Grids up to this many bins look their edges up in a table (the same floats as the formula).
_EDGE_TABLE = 1 << 20


def grid_codes(grid, v):
    """The bins of ``grid`` (:class:`~matmech.io.attribute.RegularBins`) holding the values
    ``v`` (all in [edge 0, edge k)): a first guess ⌊(v − lo) / width⌋, within one bin of the
    answer, then moved by comparing v with the edges themselves (e_i ≤ v < e_{i+1})."""
    c = np.minimum(((v - grid.lo) / grid.width).astype(np.int64), grid.k - 1)  # v ≥ lo: floor
    if grid.k <= _EDGE_TABLE:
        e = grid.edges(np.arange(grid.k + 1))
        c -= v < e[c]
        return c + (v >= e[c + 1])
    c = c - (v < grid.edges(c))
    return c + (v >= grid.edges(c + 1))


def _np_codes(a, values):
    miss, low, high, ood = actions(a)
    if a.kind == "categories":
        s, missing = _np_strings(values)
        code = np.full(s.shape, ood, dtype=np.int64)
        for i, c in enumerate(a.categories):  # one vectorised comparison per category
            code[s == c] = i
        code[missing] = miss
        return code
    v, missing = _np_times(values, a) if a.time is not None else _np_numbers(values)
    grid = a.grid if a.regular else None
    lo_bound, hi_bound = (grid.lo, grid.hi) if grid is not None else (a.bins[0][0], a.bins[-1][1])
    with np.errstate(invalid="ignore"):
        below, above = v < lo_bound, v >= hi_bound
        inside = ~(missing | below | above)
        code = np.full(v.shape, ood, dtype=np.int64)
        vi = v[inside]
        if grid is not None:
            code[inside] = grid_codes(grid, vi)
        else:
            starts = np.array([b[0] for b in a.bins])
            ends = np.array([b[1] for b in a.bins])
            c = np.searchsorted(starts, vi, side="right") - 1
            in_bin = vi < ends[c]
            code[np.flatnonzero(inside)[in_bin]] = c[in_bin]
    code[below], code[above], code[missing] = low, high, miss
    return code


def column_values(source, kind, j, column, *, zoned=False):
    """One column's values; ``zoned``: as a pandas Series where the source has one, so that a
    zoned timestamp column keeps its zone (``to_numpy`` of an Arrow or Polars column drops it)."""
    if kind == "array":
        return source[:, j]
    if kind == "columns":
        return source[column]
    if kind == "pandas":
        return source[column] if zoned else source[column].to_numpy()
    if kind == "polars":
        frame = source.collect() if type(source).__name__ == "LazyFrame" else source
        return frame[column].to_pandas() if zoned else frame[column].to_numpy()
    col = source.column(column)
    if zoned:
        return col.to_pandas()
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
        _np_codes(a, column_values(source, kind, j, a.column, zoned=a.time is not None))
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
    not_spark(kind, "numpy")
    if kind in ("csv", "parquet"):
        raise TypeError(
            f"the numpy engine counts in-memory columns; read {kind.upper()} files with engine='duckdb'"
        )


def _groups(source, kind, domain, sets, *, where, encoding, delimiter):
    return _numpy_groups(source, kind, domain, sets, where)


#: The numpy engine's registry entry.
NUMPY = Engine("numpy", _groups, _check_kind)
