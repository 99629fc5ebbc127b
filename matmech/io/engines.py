"""Counting records per cell of a declared :class:`~matmech.io.domain.Domain`, where the data lives.

The Matrix Mechanism reads the data only through the histogram x (Li et al., "The matrix
mechanism", VLDB J. 2015, §2) or, for high-dimensional domains, through marginal tables of it
(McKenna et al., "Optimizing error of high-dimensional statistical queries under differential
privacy", PVLDB 2018, §3: a marginal is x summed over the other attributes). Both are one
group-by count. Here the domain's mapping (integer ranges, bins, categories, the clip / other /
drop / error policies) is compiled into that group-by and executed by an engine:

* ``"duckdb"`` (default for DataFrames and files): pandas and Polars DataFrames, Arrow tables,
  CSV and Parquet paths, in one SQL ``GROUP BY`` (``GROUPING SETS`` for several marginals)
  with ``CASE`` expressions; files are streamed (out of core), the result is O(cells);
* ``"spark"``: a Spark DataFrame, the same domain compiled to one Spark SQL aggregation;
* ``"numpy"``: in-memory columns (a mapping of column → values, a 2-D array in domain
  order, or a DataFrame), vectorised; the reference the engines are tested against.

Every engine gives the same counts: a record dropped by any attribute counts nowhere, and an
attribute with policy ``"error"`` refuses the data if any record is out of its domain (or
missing, with ``missing = "error"``). Errors name the column and the kind of defect, never a
value, a row or a count; an engine's own error text (which may quote records) is withheld.
"""

from __future__ import annotations

import contextlib
import math
import os
import uuid
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from matmech.validate import SizeError

from matmech.io.domain import Domain

__all__ = ["histogram", "marginal_counts", "compile_query", "csv_header", "open_text", "ENGINES", "source_kind"]

ENGINES = ("auto", "numpy", "duckdb", "spark")
#: Sentinel codes inside an engine: drop the record; out of domain under "error"; missing under "error".
DROP, OOD, MISS = -1, -2, -3
NONE = -9  # a column that is not in a grouping set
CSV_SUFFIXES = (".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz")
PARQUET_SUFFIXES = (".parquet", ".pq")
ENGINES_HINT = 'pip install "matmech-dp[engines]"'


# -- sources -------------------------------------------------------------------------------------


def _module(obj):
    return type(obj).__module__.split(".")[0]


def source_kind(source) -> str:
    """"csv", "parquet", "pandas", "polars", "arrow", "spark", "columns" or "array"."""
    if isinstance(source, (str, os.PathLike)):
        name = str(source).lower()
        if name.endswith(PARQUET_SUFFIXES):
            return "parquet"
        if name.endswith(CSV_SUFFIXES):
            return "csv"
        raise ValueError(f"{source}: expected a .csv/.tsv/.txt or .parquet file")
    mod, cls = _module(source), type(source).__name__
    if mod == "pandas" and cls == "DataFrame":
        return "pandas"
    if mod == "polars" and cls in ("DataFrame", "LazyFrame"):
        return "polars"
    if mod == "pyarrow" and cls in ("Table", "RecordBatch"):
        return "arrow"
    if mod == "pyspark" and cls == "DataFrame":
        return "spark"
    if isinstance(source, Mapping):
        return "columns"
    if isinstance(source, np.ndarray) and source.ndim == 2:
        return "array"
    raise TypeError(
        "expected a pandas/Polars DataFrame, an Arrow table, a Spark DataFrame, a CSV or Parquet path, a mapping "
        f"{{column: values}} or a 2-D array (records x attributes), got {type(source).__name__}"
    )


def _columns_of(source, kind):
    if kind in ("pandas", "polars", "arrow"):
        names = source.column_names if kind == "arrow" else (
            source.collect_schema().names() if type(source).__name__ == "LazyFrame" else source.columns)
        return [str(c) for c in names]
    if kind == "spark":
        return list(source.columns)
    if kind == "columns":
        return [str(c) for c in source]
    return None


def _check_columns(domain, available, where):
    if available is None:
        return
    missing = [c for c in domain.columns if c not in available]
    if missing:
        raise ValueError(f"{where}: no column(s) {missing} for the domain's attributes; the columns are {available}")


def _check_engine(engine, kind):
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {list(ENGINES)}, got {engine!r}")
    if engine == "auto":
        if kind == "spark":
            return "spark"
        if kind in ("columns", "array"):
            return "numpy"
        try:
            import duckdb  # noqa: F401
        except ImportError:
            if kind in ("csv", "parquet"):
                raise ImportError(f"reading {kind.upper()} files needs DuckDB: {ENGINES_HINT}") from None
            return "numpy"
        return "duckdb"
    if engine == "spark" and kind != "spark":
        raise TypeError(f"the spark engine counts a Spark DataFrame; got a {kind} source (use engine='duckdb' or 'auto')")
    if kind == "spark" and engine != "spark":
        raise TypeError(f"a Spark DataFrame is counted by the spark engine, not {engine!r}")
    if engine == "numpy" and kind in ("csv", "parquet"):
        raise TypeError(f"the numpy engine counts in-memory columns; read {kind.upper()} files with engine='duckdb'")
    if engine == "duckdb" and kind == "array":
        raise TypeError("a 2-D numpy array is counted by the numpy engine (or pass a DataFrame)")
    return engine


# -- the public functions --------------------------------------------------------------------


def _check_memory(cells):
    """Refuse result tables that cannot fit: 8 bytes per cell, at most half the free memory."""
    need = 8 * cells
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        free = None
    if cells > 2**31 or (free is not None and need > free // 2):
        have = f"; about {free / 2**30:.1f} GiB is free" if free is not None else ""
        raise SizeError(f"the counts need {cells:,} cells ({need / 2**30:.2f} GiB as int64){have}: too large; "
                          "count fewer or smaller marginals")


def marginal_counts(source, domain, subsets, *, engine="auto", encoding="utf-8", delimiter=None) -> dict:
    """Counts of the records in each cell of the marginal on each subset of attributes.

    ``subsets``: attribute indices in domain order, e.g. ``[(0,), (1, 2), ()]``. Returns
    ``{subset: int64 array}`` shaped by those attributes' sizes, cells row-major (``()``:
    the 0-d total). All tables come from one aggregation over the same kept records, so they
    are marginals of one histogram. ``encoding`` / ``delimiter`` (auto-detected by default)
    apply to CSV paths.
    """
    if not isinstance(domain, Domain):
        raise TypeError(f"domain must be a matmech.io.domain.Domain, got {type(domain).__name__}")
    if isinstance(subsets, (str, bytes)) or not hasattr(subsets, "__iter__"):
        raise TypeError(f"subsets must be a sequence of attribute-index tuples, got {subsets!r}")
    wanted = [domain.check_subset(s) for s in subsets]
    if not wanted:
        raise ValueError("give at least one subset")
    _check_memory(sum(math.prod(domain.subset_sizes(s)) for s in set(wanted)))
    kind = source_kind(source)
    engine = _check_engine(engine, kind)
    where = str(source) if kind in ("csv", "parquet") else f"the {kind} source"
    if kind in ("csv", "parquet"):
        _check_file(source)
    if kind == "csv" and engine == "duckdb":
        _check_csv_options(encoding, delimiter)
    _check_columns(domain, _columns_of(source, kind), where)
    sets = _grouping_sets(domain, wanted)
    if engine == "numpy":
        groups = _numpy_groups(source, kind, domain, sets, where)
    elif engine == "duckdb":
        groups = _duckdb_groups(source, kind, domain, sets, where, encoding, delimiter)
    else:
        groups = _spark_groups(source, domain, sets)
    return _tables(domain, sets, groups, wanted)


def histogram(source, domain, *, engine="auto", encoding="utf-8", delimiter=None) -> np.ndarray:
    """The histogram x over the domain's cells (int64, row-major, the last attribute fastest).

    ``source``: a pandas/Polars DataFrame, an Arrow table, a CSV or Parquet path, a Spark
    DataFrame, a mapping ``{column: values}`` or a 2-D array with one column per attribute in
    domain order. See :func:`marginal_counts`.
    """
    if not isinstance(domain, Domain):
        raise TypeError(f"domain must be a matmech.io.domain.Domain, got {type(domain).__name__}")
    full = tuple(range(len(domain)))
    return marginal_counts(source, domain, [full], engine=engine, encoding=encoding, delimiter=delimiter)[full].ravel()


# -- grouping sets and the tables built from them ----------------------------------------------


def _may(attr, action):
    return action in (attr.policy, attr.missing)


def _grouping_sets(domain, wanted):
    """The distinct requested subsets, plus a singleton for every "error" attribute not in one."""
    sets = list(dict.fromkeys(wanted))
    covered = {j for s in sets for j in s}
    sets += [(j,) for j, a in enumerate(domain.attributes) if _may(a, "error") and j not in covered]
    return sets


def _needs_drop_flag(domain):
    return any(_may(a, "drop") for a in domain.attributes)


def _tables(domain, sets, groups, wanted):
    """``groups``: {set: (codes (rows × |set|) int64, dropped bool rows, counts int64 rows)}."""
    for s in sets:  # an "error" attribute refuses the data if any record needs it, dropped or not
        codes = groups[s][0]
        for k, j in enumerate(s):
            a = domain.attributes[j]
            col = codes[:, k]
            if a.policy == "error" and np.any(col == OOD):
                raise ValueError(
                    f"column {a.column!r} (attribute {a.name!r}) has values outside its declared domain and its policy "
                    "is 'error'; declare policy = 'clip', 'other' or 'drop', or widen the domain (values are not shown)"
                )
            if a.missing == "error" and np.any(col == MISS):
                raise ValueError(
                    f"column {a.column!r} (attribute {a.name!r}) has missing values (null, NaN, empty or not a "
                    "number) and its missing policy is 'error'; declare missing = 'other' or 'drop'"
                )
    out = {}
    for s in dict.fromkeys(wanted):
        codes, dropped, counts = groups[s]
        keep = ~dropped & np.all(codes >= 0, axis=1)
        sizes = domain.subset_sizes(s)
        table = np.zeros(math.prod(sizes), dtype=np.int64)
        if s:
            idx = np.ravel_multi_index(tuple(codes[keep].T), sizes)
            np.add.at(table, idx, counts[keep])
        else:
            table[0] = counts[keep].sum()
        out[s] = table.reshape(sizes)
    return out


# -- numpy: the vectorised reference -----------------------------------------------------------


def _object_missing(obj):
    """None / NaN / pandas NA entries of an object array."""
    try:
        return np.asarray((obj == None) | (obj != obj), dtype=bool)  # noqa: E711 (elementwise)
    except TypeError:  # pandas NA compares to NA, which has no truth value
        return np.frompyfunc(lambda v: v is None or v != v if type(v).__name__ != "NAType" else True, 1, 1)(obj).astype(bool)


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
        ts = pd.to_datetime(obj.map(lambda v: v.strip() if isinstance(v, str) else v), errors="coerce", utc=True,
                            format="ISO8601")
    miss = ts.isna().to_numpy()
    naive = ts.dt.tz_convert(None)
    if unit == "month":
        v = ((naive.dt.year - 1970) * 12 + naive.dt.month - 1).to_numpy(dtype=np.float64, na_value=np.nan)
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


def _actions(a):
    """(code for a missing value, for one below / above / between the declared cells)."""
    other = {"other": a.other_code, "drop": DROP, "error": MISS}
    miss = other[a.missing]
    ood = {"other": a.other_code, "drop": DROP, "error": OOD, "clip": OOD}[a.policy]  # clip: no gaps
    low = 0 if a.policy == "clip" else ood
    high = a.declared_size - 1 if a.policy == "clip" else ood
    return miss, low, high, ood


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
        raise ValueError(f"the array has {source.shape[1]} columns but the domain has {len(domain)} attributes {list(domain.names)}")
    codes = [_np_codes(a, _column_values(source, kind, j, a.column)) for j, a in enumerate(domain.attributes)]
    lengths = {c.size for c in codes}
    if len(lengths) > 1:
        raise ValueError(f"{where}: the columns have different lengths")
    dropped = np.zeros(codes[0].size, dtype=bool)
    for c in codes:
        dropped |= c == DROP
    groups = {}
    for s in sets:
        if not s:
            groups[s] = (np.zeros((2, 0), np.int64), np.array([False, True]),
                         np.array([np.sum(~dropped), np.sum(dropped)], dtype=np.int64))
            continue
        # one int64 key per record: codes shifted past the sentinels (≥ -3), then the drop bit
        dims = tuple(domain.attributes[j].size + 3 for j in s) + (2,)
        key = np.ravel_multi_index(tuple(codes[j] + 3 for j in s) + (dropped.astype(np.int64),), dims)
        if math.prod(dims) <= max(4 * key.size, 1 << 16):
            counts = np.bincount(key, minlength=math.prod(dims))
            uniq = np.flatnonzero(counts)
            counts = counts[uniq]
        else:
            uniq, counts = np.unique(key, return_counts=True)
        parts = np.unravel_index(uniq, dims)
        groups[s] = (np.column_stack(parts[:-1]) - 3, parts[-1].astype(bool), counts.astype(np.int64))
    return groups


# -- SQL: DuckDB and Spark ---------------------------------------------------------------------


class _Dialect:
    def __init__(self, name):
        self.name = name
        self.string = "VARCHAR" if name == "duckdb" else "STRING"

    def ident(self, s):
        if self.name == "duckdb":
            return '"' + s.replace('"', '""') + '"'
        return "`" + s.replace("`", "``") + "`"

    def text(self, s):
        if self.name == "duckdb":
            return "'" + s.replace("'", "''") + "'"
        return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"

    def real(self, x):
        return f"CAST('{float(x)!r}' AS DOUBLE)"


def _sql_code(a, ref, d):
    """The CASE expression giving attribute ``a``'s code from ``ref`` (a parsed double, or a
    trimmed string for categories), with the sentinels of :func:`_actions`."""
    miss, low, high, ood = _actions(a)
    if a.kind == "categories":
        whens = " ".join(f"WHEN {ref} = {d.text(c)} THEN {i}" for i, c in enumerate(a.categories))
        return f"CASE WHEN {ref} IS NULL OR {ref} = '' THEN {miss} {whens} ELSE {ood} END"
    lo_bound, hi_bound = (a.lo, a.hi + 1) if a.kind == "range" else (a.bins[0][0], a.bins[-1][1])
    if a.regular:
        inner = f"least(CAST(floor(({ref} - {d.real(a.lo)}) / {d.real(a.width)}) AS BIGINT), {a.declared_size - 1})"
    elif all(b[1] == c[0] for b, c in zip(a.bins, a.bins[1:])):
        whens = " ".join(f"WHEN {ref} < {d.real(b[1])} THEN {i}" for i, b in enumerate(a.bins[:-1]))
        inner = f"CASE {whens} ELSE {a.declared_size - 1} END" if whens else "0"
    else:
        whens = " ".join(f"WHEN {ref} >= {d.real(b[0])} AND {ref} < {d.real(b[1])} THEN {i}" for i, b in enumerate(a.bins))
        inner = f"CASE {whens} ELSE {ood} END"
    return (f"CASE WHEN {ref} IS NULL OR isnan({ref}) THEN {miss} WHEN {ref} < {d.real(lo_bound)} THEN {low} "
            f"WHEN {ref} >= {d.real(hi_bound)} THEN {high} ELSE {inner} END")


def _sql_time(a, col, d):
    """A timestamp column as seconds since 1970-01-01 (months since 1970-01 for "month"), a
    double; NULL when it does not parse. DuckDB only (Spark parses text in its session's
    time zone: refused rather than binned in an unstated zone)."""
    if d.name != "duckdb":
        raise ValueError(f"attribute {a.name!r}: time attributes are counted by the numpy and duckdb engines, not spark")
    ts = f"TRY_CAST({col} AS TIMESTAMP)"
    if a.time == "month":
        return f"CAST((year({ts}) - 1970) * 12 + month({ts}) - 1 AS DOUBLE)"
    return f"CAST(epoch({ts}) AS DOUBLE)"


def _key_dims(domain, s):
    """Mixed-radix digits of one set's group key: each code shifted past the sentinels
    (code + 3 ∈ 0 … size + 2), then the drop bit."""
    return tuple(domain.attributes[j].size + 3 for j in s) + (2,)


def _sql_int_code(a, ref, d):
    """A range attribute on an integer-typed column: integer arithmetic, no parsing (the same
    cells as ⌊(v − lo) / width⌋ for every integer v)."""
    miss, low, high, _ = _actions(a)
    w = int(a.width)
    div = "//" if d.name == "duckdb" else "div"
    inner = f"({ref} - {int(a.lo)})" if w == 1 else f"(({ref} - {int(a.lo)}) {div} {w})"
    return (f"CASE WHEN {ref} IS NULL THEN {miss} WHEN {ref} < {int(a.lo)} THEN {low} "
            f"WHEN {ref} > {int(a.hi)} THEN {high} ELSE {inner} END")


#: Column types (lower case, as DuckDB and Spark name them) holding integers.
INTEGER_TYPES = ("tinyint", "smallint", "integer", "int", "bigint", "utinyint", "usmallint", "uinteger", "ubigint", "long",
                 "short", "byte")


def compile_query(domain, sets, source_sql, dialect="duckdb", *, types=None):
    """One aggregation: parse → codes → one BIGINT key per grouping set → GROUP BY (GROUPING
    SETS when several tables). ``dialect``: "duckdb" or "spark"; ``source_sql`` the FROM
    item; ``types``: optional {column: SQL type name} (integer columns of range attributes
    skip parsing). Returns the SQL text and the key dimensions of each set."""
    if dialect not in ("duckdb", "spark"):
        raise ValueError(f"dialect must be 'duckdb' or 'spark', got {dialect!r}")
    d = _Dialect(dialect)
    types = {k: str(v).lower() for k, v in (types or {}).items()}
    parsed, codes = [], []
    for j, a in enumerate(domain.attributes):
        col = d.ident(a.column)
        if a.kind == "range" and types.get(a.column) in INTEGER_TYPES:
            parsed.append(f"CAST({col} AS BIGINT) AS v{j}")
            codes.append(f"CAST({_sql_int_code(a, f'v{j}', d)} AS BIGINT) AS c{j}")
            continue
        if a.time is not None:
            expr = _sql_time(a, col, d)
        else:
            expr = f"trim(CAST({col} AS {d.string}))" if a.kind == "categories" else f"TRY_CAST({col} AS DOUBLE)"
        parsed.append(f"{expr} AS v{j}")
        codes.append(f"CAST({_sql_code(a, f'v{j}', d)} AS BIGINT) AS c{j}")
    if _needs_drop_flag(domain):
        dropped = "CASE WHEN " + " OR ".join(f"c{j} = {DROP}" for j in range(len(domain))) + " THEN 1 ELSE 0 END"
    else:
        dropped = "0"
    dims = [_key_dims(domain, s) for s in sets]
    if any(math.prod(dm) >= 2**62 for dm in dims):
        raise ValueError("a marginal's group key would overflow 64 bits; count fewer attributes at once")
    keys = []
    for i, s in enumerate(sets):
        key = "CAST(0 AS BIGINT)"
        for j in s:
            key = f"({key} * {domain.attributes[j].size + 3} + (c{j} + 3))"
        keys.append(f"{key} * 2 + dropped AS k{i}")
    inner = f"SELECT {', '.join(codes)} FROM (SELECT {', '.join(parsed)} FROM {source_sql}) AS p"
    inner = f"SELECT {', '.join(keys)} FROM (SELECT *, {dropped} AS dropped FROM ({inner}) AS q) AS r"
    if len(sets) == 1:
        return f"SELECT k0, count(*) AS n FROM ({inner}) AS t GROUP BY k0", dims
    group_by = "GROUPING SETS (" + ", ".join(f"(k{i})" for i in range(len(sets))) + ")"
    select = ", ".join([*(f"coalesce(k{i}, {NONE}) AS k{i}" for i in range(len(sets))), "count(*) AS n"])
    return f"SELECT {select} FROM ({inner}) AS t GROUP BY {group_by}", dims


def _split_groups(sets, dims, keys, counts):
    """Rows of the aggregation → {set: (codes, dropped, counts)}: a set's rows are those whose
    key is present (not the GROUPING SETS filler)."""
    groups = {}
    for i, (s, dm) in enumerate(zip(sets, dims)):
        k = np.asarray(keys[i], dtype=np.int64)
        rows = k != NONE
        digits = np.unravel_index(k[rows], dm)
        codes = np.column_stack(digits[:-1]) - 3 if s else np.zeros((int(rows.sum()), 0), np.int64)
        groups[s] = (codes.astype(np.int64), digits[-1].astype(bool), counts[rows])
    return groups


def _check_file(path):
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{path}: no such data file")
    with open(p, "rb"):  # permission errors name the file here, not inside the engine
        pass


def _check_csv_options(encoding, delimiter):
    if encoding.lower().replace("_", "-") not in ("utf-8", "utf8", "utf-16", "utf16", "latin-1", "latin1", "iso-8859-1"):
        raise ValueError(f"encoding must be utf-8, utf-16 or latin-1 for the duckdb engine, got {encoding!r}")
    if delimiter is not None and (not isinstance(delimiter, str) or len(delimiter) != 1):
        raise ValueError(f"delimiter must be one character, got {delimiter!r}")


def open_text(path, encoding):
    """A CSV file opened for reading text (``.gz``: decompressed on the fly, as DuckDB does)."""
    if str(path).lower().endswith(".gz"):
        import gzip

        return gzip.open(path, "rt", newline="", encoding=encoding)
    return open(path, newline="", encoding=encoding)


def csv_header(path, *, encoding="utf-8", delimiter=None):
    """(column names, delimiter) from a CSV file's first line (a UTF-8 byte-order mark is
    skipped; the delimiter is sniffed from the header unless given). Read here rather than by
    the engine's sniffer, which may take a record for the header (and an error would then
    quote it). Errors name the file, never a record."""
    import csv

    enc = "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
    try:
        with open_text(path, enc) as f:
            first = f.readline()
    except (OSError, EOFError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise FileNotFoundError(f"{path}: no such data file") from None
        if isinstance(exc, PermissionError):
            raise
        raise ValueError(f"{path}: not a readable gzip file") from None  # gzip.BadGzipFile, a truncated stream
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such data file") from None
    except LookupError:
        raise ValueError(f"encoding {encoding!r} is not a known text encoding") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not valid {encoding} text; give the file's encoding (encoding='latin-1', "
                         "CLI --encoding latin-1)") from None
    if not first.strip():
        raise ValueError(f"{path}: the data file is empty (expected a header line naming the columns)")
    if delimiter is None:
        try:
            delimiter = csv.Sniffer().sniff(first, delimiters=",;\t|").delimiter
        except csv.Error:
            delimiter = ","
    names = [h.strip() for h in next(csv.reader([first], delimiter=delimiter))]
    if len(set(names)) != len(names) or not all(names):
        raise ValueError(f"{path}: the header must name every column once, got {names}")
    return names, delimiter


def _duckdb_source(con, source, kind, d, encoding, delimiter):
    if kind == "csv":
        enc = encoding.lower().replace("_", "-")
        enc = {"utf8": "utf-8", "utf16": "utf-16", "latin1": "latin-1", "iso-8859-1": "latin-1"}.get(enc, enc)
        names, delim = csv_header(source, encoding=encoding, delimiter=delimiter)
        columns = "{" + ", ".join(f"{d.text(c)}: 'VARCHAR'" for c in names) + "}"
        return (f"read_csv({d.text(str(source))}, header = true, auto_detect = false, columns = {columns}, "
                f"delim = {d.text(delim)}, quote = '\"', escape = '\"', encoding = {d.text(enc)}, "
                f"compression = {d.text('gzip' if str(source).lower().endswith('.gz') else 'none')})")
    if kind == "parquet":
        return f"read_parquet({d.text(str(source))})"
    name = "matmech_src_" + uuid.uuid4().hex
    obj = source
    if kind == "polars":
        obj = (source.collect() if type(source).__name__ == "LazyFrame" else source).to_arrow()
    elif kind == "columns":
        import pyarrow as pa

        obj = pa.table({str(k): np.asarray(v) for k, v in source.items()})
    con.register(name, obj)
    return d.ident(name)


def _engine_error(where, exc, encoding=None):
    msg = str(exc).lower()
    if encoding is not None and ("unicode" in msg or "encod" in msg):
        return ValueError(f"{where}: not valid {encoding} text; give the file's encoding (encoding='latin-1', "
                          "CLI --encoding latin-1)")
    return ValueError(f"{where}: the engine could not read the data ({type(exc).__name__}; its message is withheld "
                      "because it may quote records)")


def _duckdb_groups(source, kind, domain, sets, where, encoding, delimiter):
    try:
        import duckdb
    except ImportError:
        raise ImportError(f"the duckdb engine needs DuckDB: {ENGINES_HINT}") from None
    d = _Dialect("duckdb")
    con = duckdb.connect()
    try:
        con.execute("SET preserve_insertion_order = false")
        with contextlib.suppress(Exception):  # zoned timestamps → UTC (needs DuckDB's ICU extension)
            con.execute("SET TimeZone = 'UTC'")
        src = _duckdb_source(con, source, kind, d, encoding, delimiter)
        try:
            types = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
        except duckdb.Error as exc:
            raise _engine_error(where, exc, encoding if kind == "csv" else None) from None
        _check_columns(domain, list(types), where)
        query, dims = compile_query(domain, sets, src, "duckdb", types=types)
        try:
            res = con.execute(query).fetchnumpy()
        except duckdb.Error as exc:
            raise _engine_error(where, exc, encoding if kind == "csv" else None) from None
    finally:
        con.close()
    counts = np.asarray(res["n"], dtype=np.int64)
    return _split_groups(sets, dims, [res[f"k{i}"] for i in range(len(sets))], counts)


def _spark_groups(source, domain, sets):
    d = _Dialect("spark")
    spark = source.sparkSession
    name = "matmech_src_" + uuid.uuid4().hex
    source.createOrReplaceTempView(name)
    try:
        query, dims = compile_query(domain, sets, d.ident(name), "spark", types=dict(source.dtypes))
        try:
            result = spark.sql(query)
            if hasattr(result, "toArrow"):  # Spark >= 4: columnar, no Row per group
                table = result.toArrow()
                cols = {c: table.column(c).to_numpy() for c in table.column_names}
            else:  # pragma: no cover - Spark 3
                rows = result.collect()
                cols = {c: np.array([r[c] for r in rows]) for c in result.columns}
        except Exception as exc:  # noqa: BLE001 - Spark raises many types; none may leak records
            raise _engine_error("the spark source", exc) from None
    finally:
        spark.catalog.dropTempView(name)
    counts = np.asarray(cols["n"], dtype=np.int64)
    return _split_groups(sets, dims, [cols[f"k{i}"] for i in range(len(sets))], counts)
