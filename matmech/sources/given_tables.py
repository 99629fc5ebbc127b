"""Marginal tables computed elsewhere (a warehouse, a Spark job) and handed in (issue 36).

A curator whose data cannot come to matmech runs one query where the data lives and hands in
its result: :func:`tables_sql` prints that query for the plan's tables and the declared
:class:`~matmech.io.domain.Domain` (the domain's mapping compiled to ``CASE`` expressions, as
matmech's own engines run it, then one ``GROUP BY GROUPING SETS``: one scan). Its result —
one row per non-empty cell of each table, one code column per attribute named as the
attribute (NULL when the attribute is not in that row's table), ``dropped`` and ``n`` — is
saved as Parquet or CSV and read back by :func:`read_tables`, which checks it against the
declaration before anything is spent:

* every attribute column and ``n`` present; codes integers within the attribute's cells or
  its sentinels (-1 dropped, -2 out of domain, -3 missing), ``dropped`` 0/1;
* counts finite non-negative integers; a cell listed twice is refused;
* the "error" policies applied as the engines apply them (out-of-domain or missing values in
  an "error" attribute refuse the data); dropped records count nowhere;
* every table holds the same record total.

The tables then go to :func:`matmech.release` or
:func:`~matmech.release.release_marginals` as a mapping, where their shapes, their
agreement on common marginals and ``max_records`` are checked before the spend. Messages name
attributes and tables, never a count or a value of the data.
"""

from __future__ import annotations

import math
import os

import numpy as np

from matmech import validate
from matmech.io.domain import Domain
from matmech.linalg.linop import LinOp
from matmech.linalg.terms import as_terms
from matmech.sources.engine_sql import Dialect, code_query
from matmech.sources.grouping import MISS, grouping_sets, refuse_defects
from matmech.sources.tables import maximal_subsets

__all__ = ["tables_sql", "read_tables", "workload_tables"]


def _check_domain(domain):
    if not isinstance(domain, Domain):
        raise TypeError(f"domain must be a matmech.io.domain.Domain, got {type(domain).__name__}")


def _subsets(domain, subsets):
    return [domain.check_subset(s) for s in validate.sequence(subsets, "subsets")]


def workload_tables(W, d: int) -> list[tuple[int, ...]]:
    """The attribute subsets of the tables a release of W reads (data-independent): for each
    Kronecker term of W the attributes it does not sum over (for a union of marginals, its
    marginals), keeping the largest only, since a table inside another is summed out of it
    (:func:`~matmech.sources.tables.maximal_subsets`); the full table on all ``d``
    attributes when W has no Kronecker terms."""
    if not isinstance(W, LinOp):
        raise TypeError(f"W must be a matmech LinOp (a workload), got {type(W).__name__}")
    d = validate.size(d, "d", limit=None, bytes_per=64, what="the list of d attributes")
    try:
        terms = as_terms(W, name="W")
    except (TypeError, ValueError):
        return [tuple(range(d))]
    if len(terms.domain) != d:
        raise ValueError(f"W has {len(terms.domain)} attribute(s), not d={d}")
    used = [tuple(i for i, k in enumerate(ks) if k != "T") for ks in terms.kinds]
    return sorted(maximal_subsets(used))


def tables_sql(domain, subsets, source_sql, dialect="duckdb", *, types=None) -> str:
    """The one query computing the tables on ``subsets`` (attribute indices) of the data in
    ``source_sql`` (a table name or FROM item) with ``domain``'s mapping, in ``dialect``
    ("duckdb" or "spark", Spark SQL being close to most warehouses' SQL). ``types``: optional
    {column: SQL type} (integer columns of range attributes then skip parsing). Its result is
    the input of :func:`read_tables`."""
    _check_domain(domain)
    if not isinstance(source_sql, str) or not source_sql.strip():
        raise TypeError(
            "source_sql must be the records' table name or a FROM item (a non-empty string), "
            f"got {source_sql!r}"
        )
    wanted = _subsets(domain, subsets)
    sets = grouping_sets(domain, wanted)
    d = Dialect(dialect)
    codes = code_query(domain, source_sql, dialect, types=types)
    names = [d.ident(a.name) for a in domain.attributes]
    select = ", ".join(f"c{j} AS {n}" for j, n in enumerate(names))
    group = ", ".join("(" + ", ".join([*(f"c{j}" for j in s), "dropped"]) + ")" for s in sets)
    return (
        f"SELECT {select}, dropped, count(*) AS n FROM ({codes}) AS t "
        f"GROUP BY GROUPING SETS ({group})"
    )


def _read(data):
    """{column: numpy array} of a Parquet/CSV path, an Arrow table or a pandas DataFrame."""
    if isinstance(data, (str, os.PathLike)):
        path = str(data)
        if not os.path.isfile(path):
            raise ValueError(f"no such file: {path!r}")
        if path.lower().endswith((".parquet", ".pq")):
            import pyarrow.parquet as pq

            data = pq.read_table(path)
        elif path.lower().endswith((".csv", ".csv.gz")):
            import pyarrow.csv as pc

            data = pc.read_csv(path)
        else:
            raise ValueError(f"{path!r}: give a .parquet or .csv file of tables")
    if hasattr(data, "column_names"):  # Arrow
        return {c: data.column(c).to_numpy(zero_copy_only=False) for c in data.column_names}
    if hasattr(data, "columns") and hasattr(data, "__getitem__"):  # pandas / Polars
        return {str(c): np.asarray(data[c]) for c in data.columns}
    raise TypeError(
        f"tables must be a Parquet or CSV path, an Arrow table or a DataFrame, got {type(data).__name__}"
    )


def _integers(values, what):
    """``values`` as int64 with NULLs marked (mask), or raise naming ``what``."""
    arr = np.asarray(values)
    if arr.dtype == object:
        null = np.array([v is None or (isinstance(v, float) and v != v) for v in arr], dtype=bool)
        try:
            arr = np.where(null, 0, arr).astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{what} must hold integers") from None
    elif arr.dtype.kind == "f":
        null = np.isnan(arr)
    elif arr.dtype.kind in "iub":
        null = np.zeros(arr.shape, dtype=bool)
    else:
        raise ValueError(f"{what} must hold integers, got dtype {arr.dtype}")
    filled = np.where(null, 0, arr)
    if filled.dtype.kind == "f" and (
        not np.all(np.isfinite(filled)) or np.any(filled != np.floor(filled))
    ):
        raise ValueError(f"{what} holds a non-integer or non-finite entry")
    return filled.astype(np.int64), null


def read_tables(data, domain, subsets=None) -> dict:
    """{subset: int64 table} from the result of :func:`tables_sql` (a Parquet or CSV path, an
    Arrow table or a DataFrame), checked against ``domain`` (see the module): every table in
    ``data``; ``subsets``, the tables the plan needs, must each be in it or inside one of its
    tables (None: not checked here; the release checks it before its spend).
    Raises ValueError naming the defect and the attribute or table, never a count."""
    _check_domain(domain)
    cols = _read(data)
    names = [a.name for a in domain.attributes]
    missing = [n for n in (*names, "n") if n not in cols]
    if missing:
        raise ValueError(
            f"the tables lack the column(s) {missing}: give one code column per attribute, named "
            "as the attribute, and the count n (the result of matmech.sources.given_tables.tables_sql)"
        )
    rows = len(cols["n"])
    counts, null_n = _integers(cols["n"], "the count column n")
    if null_n.any() or np.any(counts < 0):
        raise ValueError("the count column n holds a missing or negative entry")
    codes = np.zeros((rows, len(names)), dtype=np.int64)
    present = np.zeros((rows, len(names)), dtype=bool)
    for j, a in enumerate(domain.attributes):
        c, null = _integers(cols[a.name], f"the code column {a.name!r}")
        if np.any(~null & ((c < MISS) | (c >= a.size))):
            raise ValueError(
                f"the code column {a.name!r} holds a cell outside the declared domain "
                f"(codes 0 … {a.size - 1}, or -1 / -2 / -3 for dropped / out of domain / missing)"
            )
        codes[:, j], present[:, j] = c, ~null
    if "dropped" in cols:
        dropped, null = _integers(cols["dropped"], "the column dropped")
        if null.any() or np.any((dropped != 0) & (dropped != 1)):
            raise ValueError("the column dropped must hold 0 or 1 in every row")
    else:
        dropped = np.zeros(rows, dtype=np.int64)
    # which table each row belongs to: the attributes whose codes are present
    weights = 1 << np.arange(len(names), dtype=np.int64)
    mask = present.astype(np.int64) @ weights if len(names) < 63 else None
    if mask is None:
        raise ValueError("read_tables takes domains of at most 62 attributes")
    found = {
        int(m): tuple(j for j in range(len(names)) if (int(m) >> j) & 1) for m in np.unique(mask)
    }
    for s in [] if subsets is None else _subsets(domain, subsets):
        if not any(set(s) <= set(k) for k in found.values()):
            raise ValueError(f"no table given for attributes {tuple(sorted(s))} nor for a superset")
    for j, a in enumerate(domain.attributes):  # the "error" policies, in every table holding j
        refuse_defects(a, codes[present[:, j], j])
    tables, total = {}, None
    for m, s in found.items():
        rows_s = mask == m
        c, dr, n = codes[rows_s][:, list(s)], dropped[rows_s], counts[rows_s]
        sizes = domain.subset_sizes(s)
        key = np.ravel_multi_index(tuple((c + 3).T), tuple(k + 3 for k in sizes)) if s else None
        cell = np.zeros(rows_s.sum(), dtype=np.int64) if key is None else key
        if np.unique(cell * 2 + dr).size < cell.size:
            raise ValueError(f"the table on attributes {s} lists a cell twice")
        keep = (dr == 0) & np.all(c >= 0, axis=1)
        t = np.zeros(math.prod(sizes), dtype=np.int64)
        if s:
            np.add.at(t, np.ravel_multi_index(tuple(c[keep].T), sizes), n[keep])
        else:
            t[0] = n[keep].sum()
        if total is None:
            total = int(t.sum())
        elif int(t.sum()) != total:
            raise ValueError(
                f"the table on attributes {s} disagrees with the others on the record total: "
                "inconsistent tables are refused (nothing was spent)"
            )
        tables[s] = t.reshape(sizes)
    return tables
