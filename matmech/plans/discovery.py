"""The category-discovery plan: the threshold mechanism of partition selection, run by
:func:`~matmech.run.runner.run_plan` (issue 34: one spend protocol).

Built without data by :func:`matmech.run.discover.discover_categories` (the maths and the
module notes are there: Desfontaines, Voss, Gipson, Mandayam, PoPETs 2022, §3). The plan reads
its own table, the count of records per distinct trimmed value of one column
(:meth:`DiscoveryPlan.read`), checks it, and after the one spend adds exact discrete Laplace
noise with scale t to each count (Canonne, Kamath, Steinke 2020) and releases the values whose
noisy count reaches τ, sorted, never the counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from matmech.io.attribute import trim_text
from matmech.io.domain import Attribute, categories
from matmech.plans.plan import Draws
from matmech.privacy import noise
from matmech.privacy.events import Threshold


@dataclass(frozen=True)
class Discovery:
    """The outcome of :func:`~matmech.run.discover.discover_categories`: the released
    ``values`` (sorted), the ``attribute`` declaring them (None when no value passed), and how
    they were chosen."""

    column: str
    values: tuple
    attribute: Attribute | None
    eps: float
    delta: float
    scale: float  # t of the discrete Laplace noise
    threshold: int  # τ: a value is released when count + Z ≥ τ
    note: str


def _strings(values):
    """Trimmed strings of a column (:func:`~matmech.io.attribute.trim_text`, the rule of every
    engine); None for missing or empty values."""
    arr = np.asarray(values, dtype=object)
    out: list[str | None] = []
    for v in arr.tolist():
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append(None)
            continue
        s = trim_text(str(v))
        out.append(s or None)
    return out


def _key_counts(source, column, *, encoding, delimiter):
    """(values, counts) of the non-missing trimmed values of ``column`` (private: the caller
    charges the budget before any of it leaves)."""
    from matmech.sources import engine_numpy, engine_sql, files as sources

    kind = sources.source_kind(source)
    where = f"column {column!r}"
    if kind in ("columns", "pandas", "polars", "arrow"):
        available = sources.columns_of(source, kind)
        if column not in available:
            raise ValueError(f"{where}: no such column; the columns are {available}")
        values = _strings(engine_numpy.column_values(source, kind, 0, column))
        keys = [v for v in values if v is not None]
        if not keys:
            return [], np.zeros(0, dtype=np.int64)
        uniq, counts = np.unique(np.array(keys, dtype=object), return_counts=True)
        return [str(u) for u in uniq], np.asarray(counts, dtype=np.int64)
    if kind in ("csv", "parquet"):
        import duckdb

        sources.check_file(source)
        if kind == "csv":
            sources.check_csv_options(encoding, delimiter)
        d = engine_sql.Dialect("duckdb")
        con = duckdb.connect()
        try:
            src = engine_sql.duckdb_source(con, source, kind, d, encoding, delimiter)
            try:
                cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()]
                if column not in cols:  # a CSV header may be a record: its names are not shown
                    shown = (
                        f"the columns are {cols}"
                        if kind != "csv"
                        else f"the header line has {sources.hidden_header(len(cols))}"
                    )
                    raise ValueError(f"{where}: no such column; {shown}")
                ref = d.trim(f"CAST({d.ident(column)} AS VARCHAR)")
                res = con.execute(
                    f"SELECT {ref} AS k, count(*) AS n FROM {src} WHERE {ref} IS NOT NULL AND {ref} <> '' "
                    "GROUP BY 1"
                ).fetchall()
            except duckdb.Error as exc:
                raise engine_sql.engine_error(
                    where, exc, encoding if kind == "csv" else None
                ) from None
        finally:
            con.close()
        return [str(k) for k, _ in res], np.array([n for _, n in res], dtype=np.int64)
    raise TypeError(
        f"discover_categories reads a DataFrame, an Arrow table, a mapping of columns or a CSV/Parquet "
        f"path, got {kind}"
    )


@dataclass(frozen=True, eq=False)
class DiscoveryPlan:
    """The threshold mechanism on ``column`` (:class:`~matmech.plans.plan.Plan`, with its own
    ``read``): noise scale ``scale`` (t, exact), threshold ``tau``; ``name``, ``other`` and
    ``policy`` declare the attribute of the released values; ``encoding`` and ``delimiter``
    read a CSV file."""

    column: str
    name: str
    eps: float
    delta: float
    scale: Fraction
    tau: int
    other: str | None
    policy: str
    encoding: str = "utf-8"
    delimiter: str | None = None
    neighbors: str = field(default="add_remove", init=False)
    workload: None = field(default=None, init=False)
    sizes: tuple = field(default=(), init=False)
    subsets: tuple = field(default=(), init=False)

    @property
    def what(self) -> str:
        return f"discover the categories of column {self.column!r} (partition selection)"

    @property
    def events(self) -> tuple:
        return (Threshold(self.eps, self.delta),)  # delta > 0: threshold() refused anything else

    def read(self, source):
        """(values, counts) of the column: private, read before the spend."""
        return _key_counts(source, self.column, encoding=self.encoding, delimiter=self.delimiter)

    def check(self, table):
        keys, counts = table
        if len(set(keys)) != len(keys) or any(not k or k != trim_text(k) for k in keys):
            # every key must be a value categories() accepts, or the declaration after the
            # spend would fail; an engine that breaks the trimming rule is refused before it
            raise RuntimeError(
                f"{self.what}: the engine returned values that are not distinct trimmed "
                "strings (a bug; nothing was charged)"
            )
        return keys, counts

    def draw(self, table, *, rng) -> Draws:
        keys, counts = table
        z = (
            noise.discrete_laplace(self.scale, len(keys), rng=noise.check_rng(rng))
            if len(keys)
            else np.zeros(0, dtype=np.int64)
        )
        passed = (k for k, c, e in zip(keys, counts.tolist(), z.tolist()) if c + e >= self.tau)
        return Draws((), tuple(sorted(passed)))

    def estimate(self, draws: Draws) -> tuple:
        # the other cell's label is not a value
        return tuple(v for v in draws.state if v != self.other)

    def result(self, released: tuple, *, budget_remaining) -> Discovery:
        attr = None
        if released:
            attr = categories(
                self.name,
                list(released),
                column=self.column,
                other=self.other,
                policy=self.policy,
                missing=self.policy,
            )
        t = float(self.scale)
        note = (
            f"threshold mechanism (Desfontaines et al., PoPETs 2022): discrete Laplace scale {t:.6g} on each value's "
            f"count, released when the noisy count is at least {self.tau}; (eps, delta) = ({self.eps:g}, {self.delta:g})"
        )
        return Discovery(self.column, released, attr, self.eps, self.delta, t, self.tau, note)
