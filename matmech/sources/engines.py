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

The engines are entries of :data:`ENGINE_REGISTRY` (:class:`matmech.sources.grouping.Engine`):
:mod:`matmech.sources.engine_numpy` and :mod:`matmech.sources.engine_sql` count, :mod:`matmech.sources.grouping`
holds the plan they share and :mod:`matmech.sources.files` recognises the data source; a new
engine is one module with its entry and one :func:`register_engine` call
(docs/guide/extending.md).
"""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np

from matmech.limits import check_memory
from matmech.validate import SizeError, choice

from matmech.io.domain import Domain
from matmech.sources.engine_numpy import NUMPY
from matmech.sources.engine_sql import DUCKDB, SPARK
from matmech.sources.grouping import Engine, grouped_tables, grouping_sets
from matmech.sources.files import (
    ENGINES_HINT,
    check_columns,
    check_csv_options,
    check_file,
    columns_of,
    source_kind,
)


_ENGINES: dict[str, Engine] = {e.name: e for e in (NUMPY, DUCKDB, SPARK)}
#: Engine name → its entry (how it counts, which sources it takes), in the order registered;
#: a read-only view, extended by :func:`register_engine`.
ENGINE_REGISTRY: MappingProxyType[str, Engine] = MappingProxyType(_ENGINES)
#: ``"auto"`` and the built-in engines.
ENGINES = ("auto", *ENGINE_REGISTRY)


def register_engine(engine: Engine, *, replace: bool = False) -> Engine:
    """Add a counting engine to :data:`ENGINE_REGISTRY` (a name taken is refused unless
    ``replace``); ``engine="<name>"`` then selects it in :func:`histogram` and
    :func:`marginal_counts` (``"auto"`` keeps choosing among the built-in engines)."""
    if not isinstance(engine, Engine):
        raise TypeError(f"register_engine takes a matmech.sources.grouping.Engine, got {engine!r}")
    if engine.name == "auto" or (engine.name in _ENGINES and not replace):
        raise ValueError(f"an engine named {engine.name!r} is registered already")
    _ENGINES[engine.name] = engine
    return engine


def _check_engine(engine, kind):
    choice(engine, "engine", ["auto", *ENGINE_REGISTRY])
    if engine == "auto":
        if kind == "spark":
            return "spark"
        if kind in ("columns", "array"):
            return "numpy"
        try:
            import duckdb  # noqa: F401
        except ImportError:
            if kind in ("csv", "parquet"):
                raise ImportError(
                    f"reading {kind.upper()} files needs DuckDB: {ENGINES_HINT}"
                ) from None
            return "numpy"
        return "duckdb"
    ENGINE_REGISTRY[engine].check(kind)
    return engine


# -- the public functions --------------------------------------------------------------------


def _check_memory(cells):
    """Refuse result tables that cannot fit: 8 bytes per cell, and as much again for the
    engine's result, within the memory this process can still allocate
    (:func:`matmech.limits.check_memory`)."""
    need = 8 * cells
    if cells > 2**31:
        raise SizeError(
            f"the counts need {cells:,} cells ({need / 2**30:.2f} GiB as int64): too large; "
            "count fewer or smaller marginals"
        )
    check_memory(
        2 * need,
        f"the counts of {cells:,} cells (int64, and the engine's result)",
        after="; count fewer or smaller marginals",
    )


def marginal_counts(
    source, domain, subsets, *, engine="auto", encoding="utf-8", delimiter=None, memory=None
) -> dict:
    """Counts of the records in each cell of the marginal on each subset of attributes.

    ``subsets``: attribute indices in domain order, e.g. ``[(0,), (1, 2), ()]``. Returns
    ``{subset: int64 array}`` shaped by those attributes' sizes, cells row-major (``()``:
    the 0-d total). All tables come from one aggregation over the same kept records, so they
    are marginals of one histogram. ``encoding`` / ``delimiter`` (auto-detected by default)
    apply to CSV paths. Several tables are counted in one scan of the data
    (:mod:`matmech.sources.table_scan`); ``memory`` (bytes, None: the engine's default) bounds
    DuckDB's own buffers, which spill to a temporary directory past it.
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
        check_file(source)
    if kind == "csv" and engine == "duckdb":
        check_csv_options(encoding, delimiter)
    check_columns(domain, columns_of(source, kind), where)
    entry = ENGINE_REGISTRY[engine]
    if entry.tables is not None and len(set(wanted)) > 1:
        # several tables: one scan streams the codes into all of them (the engine's GROUPING
        # SETS run one hash table per set, several times slower past a few dozen sets)
        uniq = list(dict.fromkeys(wanted))
        tables = entry.tables(
            source,
            kind,
            domain,
            uniq,
            where=where,
            encoding=encoding,
            delimiter=delimiter,
            memory=memory,
        )
        return {s: tables[s] for s in uniq}
    sets = grouping_sets(domain, wanted)
    groups = entry.groups(
        source, kind, domain, sets, where=where, encoding=encoding, delimiter=delimiter
    )
    return grouped_tables(domain, sets, groups, wanted)


def histogram(source, domain, *, engine="auto", encoding="utf-8", delimiter=None) -> np.ndarray:
    """The histogram x over the domain's cells (int64, row-major, the last attribute fastest).

    ``source``: a pandas/Polars DataFrame, an Arrow table, a CSV or Parquet path, a Spark
    DataFrame, a mapping ``{column: values}`` or a 2-D array with one column per attribute in
    domain order. See :func:`marginal_counts`.
    """
    if not isinstance(domain, Domain):
        raise TypeError(f"domain must be a matmech.io.domain.Domain, got {type(domain).__name__}")
    full = tuple(range(len(domain)))
    return marginal_counts(
        source, domain, [full], engine=engine, encoding=encoding, delimiter=delimiter
    )[full].ravel()
