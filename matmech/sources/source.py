"""Data sources: where a plan's marginal tables come from (issue 22, item 1).

Every form of private data a release accepts hands out the marginals a plan asks for through
one method, :meth:`DataSource.marginals` ``(sizes, subsets) → {subset: int64 table}``:

* :class:`HistogramSource` — a histogram x over the cells of a product domain (row-major);
  the plan on all attributes gets x itself (checked by
  :func:`matmech.privacy.measure.check_counts`), a smaller subset its marginal summed out of x;
* :class:`TableSource` — records (a records × attributes code array), a mapping
  subset → precomputed table, or any object with ``marginal_counts(subsets)`` (a data engine),
  read by :func:`matmech.sources.tables.marginal_tables` (each maximal subset once, the
  rest summed out of it);
* :class:`EngineSource` — a table or file (DataFrame, Arrow table, CSV/Parquet path) read by
  the data engine with the declared :class:`~matmech.io.domain.Domain`.

A plan that reads its tables batch by batch (``lazy = True``, e.g. the streamed residual
release) gets ``source.reader(sizes, subsets)`` instead: every check on the data once, up
front (:func:`matmech.sources.tables.table_reader`), then ``reader(batch) → {subset: table}``
with no further check. Histograms and :class:`TableSource` hand one out; a data engine's
tables are counted before the spend into a file (:mod:`matmech.sources.spilled_tables`) and
read from it.

A source is built from the types and shapes of its input only; nothing is read before
:func:`matmech.run.runner.run_plan` has checked that the budget affords the plan. Which
source a release uses follows from the form of x; which tables it reads follows from the plan.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from matmech.sources.tables import marginal_tables, table_reader
from matmech.privacy.measure import check_counts
from matmech.validate import rectangular


@runtime_checkable
class DataSource(Protocol):
    """What a release reads: the marginal tables of the private data on attribute subsets."""

    def marginals(
        self, sizes: Sequence[int], subsets: Sequence[tuple[int, ...]]
    ) -> Mapping[tuple[int, ...], np.ndarray]:
        """{subset: int64 table of shape (sizes[i] for i in subset)} for each subset."""
        ...


class HistogramSource:
    """A histogram x over ``prod(sizes)`` cells, row-major over the attributes.

    ``marginals(sizes, [all attributes])`` is x itself as checked counts (the explicit
    histogram release); any other subsets are summed out of x (the tables route on a
    histogram). The counts are checked when they are read, never before.
    """

    def __init__(self, x: Any, *, name: str = "x"):
        self.x, self.name = x, name  # name: the caller's parameter, for messages

    def marginals(self, sizes, subsets):
        sizes, subsets = tuple(int(n) for n in sizes), [tuple(s) for s in subsets]
        if subsets == [tuple(range(len(sizes)))]:
            x = check_counts(self.x, math.prod(sizes), name=self.name)
            return {subsets[0]: x.reshape(sizes)}
        return self.reader(sizes, subsets)(subsets)

    def reader(self, sizes, subsets):
        """The checked lazy reader of x's marginals (x checked here, once)."""
        sizes = tuple(int(n) for n in sizes)
        x = check_counts(self.x, math.prod(sizes), name=self.name).reshape(sizes)
        return _covering(table_reader({tuple(range(len(sizes))): x}, sizes), subsets)


class TableSource:
    """Records (2-D codes), a mapping subset → table, or an object with
    ``marginal_counts(subsets)``: read by :func:`~matmech.sources.tables.marginal_tables`."""

    def __init__(self, data: Any):
        self.data = data

    def marginals(self, sizes, subsets):
        return marginal_tables(self.data, tuple(sizes), list(subsets))

    def reader(self, sizes, subsets):
        """The checked lazy reader of the records or given tables (checked here, once: the
        codes' range, the tables' shapes, entries, consistency and that they cover
        ``subsets``); TypeError for a data engine, whose tables could be checked only as
        they arrive."""
        return _covering(table_reader(self.data, tuple(sizes), engines=False), subsets)


def _covering(reader, subsets):
    reader.check_covers(list(subsets))
    return reader


class EngineSource(TableSource):
    """A table or file read through the data engine with the declared Domain: marginal
    tables computed where the data lives (:func:`matmech.sources.engines.marginal_counts`, every
    table of a read in one scan). ``memory``: bytes a lazy read's scans may hold (tables and
    one chunk of codes; DuckDB's own buffers a quarter of it more); ``spill_dir``: where its
    tables wait for the draws (None: the system's temporary directory)."""

    def __init__(self, source: Any, domain: Any, *, memory: int = 1 << 30, spill_dir=None):
        super().__init__(self)
        self.source, self.domain = source, domain
        self.memory, self.spill_dir = int(memory), spill_dir

    def marginal_counts(self, subsets, *, memory=None):
        from matmech.sources.engines import marginal_counts

        return marginal_counts(self.source, self.domain, subsets, memory=memory)

    def reader(self, sizes, subsets):
        """Every table the plan reads counted now, before the spend, in scans of at most
        ``memory`` bytes of tables each (:func:`matmech.sources.table_scan.scan_batches`), kept in
        a file and checked (:func:`matmech.sources.spilled_tables.spill_tables`); the draws then
        read the file, never the data."""
        from matmech.sources.spilled_tables import spill_tables
        from matmech.sources.table_scan import scan_batches

        if tuple(int(n) for n in sizes) != tuple(self.domain.sizes):
            raise ValueError(
                f"the declared domain's attribute sizes {tuple(self.domain.sizes)} differ from the "
                f"plan's {tuple(sizes)}"
            )
        engine_memory = max(64 << 20, self.memory // 4)
        reader = spill_tables(
            lambda batch: self.marginal_counts(batch, memory=engine_memory),
            sizes,
            subsets,
            cut=lambda tops: scan_batches(self.domain, tops, self.memory),
            directory=self.spill_dir,
        )
        return _covering(reader, subsets)


def histogram_cells(x: Any) -> int:
    """The number of cells of the histogram x (its shape, never a count)."""
    arr = (
        x.to_numpy()
        if hasattr(x, "to_numpy") and not isinstance(x, np.ndarray)
        else np.asarray(rectangular(x, "x"))
    )
    if arr.ndim != 1:
        raise ValueError(f"x must be a 1-D vector of counts (the histogram), got shape {arr.shape}")
    return arr.shape[0]


def declared_cells(domain: Any, n: int) -> int | None:
    """The declared number of cells (an int or a :class:`matmech.io.domain.Domain`); a
    histogram of ``n`` cells must match it (None: nothing declared)."""
    if domain is None:
        return None
    if isinstance(domain, numbers.Integral) and not isinstance(domain, (bool, np.bool_)):
        cells = int(domain)
    elif isinstance(getattr(domain, "n", None), numbers.Integral) and hasattr(domain, "sizes"):
        cells = int(domain.n)
    else:
        raise TypeError(
            f"domain must be a number of cells or a matmech.io.domain.Domain, got {type(domain).__name__}"
        )
    if cells <= 0:
        raise ValueError(f"domain must have at least one cell, got {cells}")
    if cells != n:
        raise ValueError(
            f"x has {n} cells but the declared domain has {cells}: x must be the histogram over the "
            "domain (matmech.histogram), not raw values"
        )
    return cells


def as_table_source(data: Any) -> DataSource:
    """``data`` itself when it is a :class:`DataSource`, else a :class:`TableSource` of it
    (records, a mapping of tables, or an object with ``marginal_counts``)."""
    return data if isinstance(data, DataSource) else TableSource(data)


def as_source(x: Any, domain: Any = None, *, name: str = "x") -> DataSource:
    """The :class:`DataSource` of ``x``, decided from its type and shape only: a mapping of
    tables, an object with ``marginal_counts``, or a 2-D code array → :class:`TableSource`;
    a table or file with a declared Domain → :class:`EngineSource`; else a histogram
    (``name``: the caller's parameter, named by its checks' messages)."""
    if isinstance(x, DataSource):
        return x
    if isinstance(x, Mapping) or hasattr(x, "marginal_counts"):
        return TableSource(x)
    if isinstance(x, np.ndarray):
        return TableSource(x) if x.ndim == 2 else HistogramSource(x, name=name)
    if domain is not None and hasattr(domain, "sizes") and not isinstance(x, (list, tuple)):
        return EngineSource(x, domain)  # a table or file: the engine applies the domain
    return HistogramSource(x, name=name)
