"""The SQL counting engines: DuckDB (DataFrames, Arrow, CSV and Parquet files) and Spark.

The domain's mapping is compiled into one ``GROUP BY`` (``GROUPING SETS`` for several
marginals) with ``CASE`` expressions (Li et al., "The matrix mechanism", VLDB J. 2015, §2; McKenna et al., "Optimizing error of
high-dimensional statistical queries under differential privacy", PVLDB 2018, §3: a marginal is one
group-by count); files are streamed, the result is O(cells). An engine's own error text
(which may quote records) is withheld.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
import uuid

import numpy as np

from matmech.io.attribute import WHITESPACE
from matmech.sources.grouping import (
    DROP,
    MISS,
    OOD,
    Engine,
    actions,
    needs_drop_flag,
    not_spark,
    refuse_defects,
)
from matmech.sources.files import ENGINES_HINT, check_columns, csv_header
from matmech.sources.table_scan import SCAN_ROWS, TableCounter
from matmech.io.zones import ISO_TEXT, ISO_ZONED, zone_table
from matmech.limits import memory_room


NONE = -9  # a column that is not in a grouping set


class Dialect:
    """Quoting and functions of one SQL dialect ("duckdb" or "spark")."""

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

    def trim(self, x):
        """``x`` without :data:`~matmech.io.attribute.WHITESPACE` at its ends (plain SQL
        ``trim`` removes spaces only)."""
        chars = "concat(" + ", ".join(f"chr({ord(c)})" for c in WHITESPACE) + ")"
        full = f"trim({x}, {chars})" if self.name == "duckdb" else f"trim(BOTH {chars} FROM {x})"
        # the same strings, three times faster: most values have no white space or control
        # character at either end (ascii() is the first character's code point)
        return f"CASE WHEN ascii({x}) > 32 AND ascii(right({x}, 1)) > 32 THEN {x} ELSE {full} END"

    def full_match(self, x, pattern):
        if self.name == "duckdb":
            return f"regexp_full_match({x}, {self.text(pattern)})"
        return f"({x} RLIKE {self.text('^(?:' + pattern + ')$')})"


def _sql_code(a, ref, d):
    """The CASE expression giving attribute ``a``'s code from ``ref`` (a parsed double, or a
    trimmed string for categories; for a regular attribute the column ``g_<ref>`` holds
    :func:`_sql_guess`), with the sentinels of :func:`actions`."""
    miss, low, high, ood = actions(a)
    if a.kind == "categories":
        whens = " ".join(f"WHEN {ref} = {d.text(c)} THEN {i}" for i, c in enumerate(a.categories))
        return f"CASE WHEN {ref} IS NULL OR {ref} = '' THEN {miss} {whens} ELSE {ood} END"
    grid = a.grid if a.regular else None
    lo_bound, hi_bound = (grid.lo, grid.hi) if grid is not None else (a.bins[0][0], a.bins[-1][1])
    if grid is not None:
        inner = _sql_grid(grid, ref, f"g_{ref}", d)
    elif all(b[1] == c[0] for b, c in zip(a.bins, a.bins[1:])):
        whens = " ".join(f"WHEN {ref} < {d.real(b[1])} THEN {i}" for i, b in enumerate(a.bins[:-1]))
        inner = f"CASE {whens} ELSE {a.declared_size - 1} END" if whens else "0"
    else:
        whens = " ".join(
            f"WHEN {ref} >= {d.real(b[0])} AND {ref} < {d.real(b[1])} THEN {i}"
            for i, b in enumerate(a.bins)
        )
        inner = f"CASE {whens} ELSE {ood} END"
    return (
        f"CASE WHEN {ref} IS NULL OR isnan({ref}) THEN {miss} WHEN {ref} < {d.real(lo_bound)} THEN {low} "
        f"WHEN {ref} >= {d.real(hi_bound)} THEN {high} ELSE {inner} END"
    )


def _sql_guess(g, ref, d):
    """⌊(v − lo) / width⌋ clamped to the bins of the regular grid ``g``, for ``ref`` inside
    [edge 0, edge k) (NULL elsewhere: the BIGINT cast of a value far outside could overflow)."""
    return (
        f"CASE WHEN {ref} >= {d.real(g.lo)} AND {ref} < {d.real(g.hi)} THEN "
        f"least(greatest(CAST(floor(({ref} - {d.real(g.lo)}) / {d.real(g.width)}) AS BIGINT), 0), "
        f"{g.k - 1}) END"
    )


def _sql_grid(g, ref, guess, d):
    """The bin of ``ref`` (inside [edge 0, edge k)) in the regular grid ``g``
    (:class:`~matmech.io.attribute.RegularBins`): the first ``guess`` (:func:`_sql_guess`),
    within one bin of the answer, moved by comparing v with the edges float(num0 + i·step) ·
    scale / float(den) themselves: the numpy engine's :func:`~matmech.sources.engine_numpy.grid_codes` in
    BIGINT and DOUBLE arithmetic."""

    def edge(i):
        return (
            f"(CAST({g.num0} + ({i}) * {g.step} AS DOUBLE) * {d.real(g.scale)} / {d.real(g.den)})"
        )

    return (
        f"CASE WHEN {ref} < {edge(guess)} THEN {guess} - 1 "
        f"WHEN {ref} >= {edge(guess + ' + 1')} THEN {guess} + 1 ELSE {guess} END"
    )


#: DuckDB column types (lower case) holding instants (zoned timestamps).
ZONED_TYPES = ("timestamp with time zone", "timestamptz")
#: DuckDB column types (lower case) holding naive timestamps or dates.
NAIVE_TIME_TYPES = ("timestamp", "timestamp_s", "timestamp_ms", "timestamp_ns", "date", "datetime")


def _sql_instant(a, col, d, ctype):
    """(seconds since 1970-01-01 — wall-clock seconds for naive values —, zoned flag) of a
    timestamp column, as the numpy engine reads it (:mod:`matmech.io.zones`): text in the ISO
    8601 form only, zoned columns as instants, naive ones as wall-clock time. DuckDB only
    (Spark parses text in its session's time zone: refused rather than binned in an unstated
    zone); the caller sets the session zone to UTC, so naive text cast to TIMESTAMPTZ keeps its
    wall-clock reading."""
    if d.name != "duckdb":
        raise ValueError(
            f"attribute {a.name!r}: time attributes are counted by the numpy and duckdb engines, not spark"
        )
    if ctype in TEXT_TYPES:
        t = d.trim(col)
        u = f"CASE WHEN {d.full_match(t, ISO_TEXT)} THEN floor(epoch(TRY_CAST({t} AS TIMESTAMPTZ))) END"
        return u, d.full_match(t, ISO_ZONED)
    if ctype in ZONED_TYPES:
        return f"floor(epoch({col}))", "true"
    if ctype in NAIVE_TIME_TYPES:
        return f"floor(epoch(CAST({col} AS TIMESTAMP)))", "false"
    return "CAST(NULL AS DOUBLE)", "false"  # numbers and the rest are not timestamps


def _sql_wall(a, u, zoned):
    """Wall-clock seconds in the attribute's zone (months since 1970-01 for "month") from
    :func:`_sql_instant`'s columns: a zoned instant gets its offset from the transition table
    of :func:`matmech.io.zones.zone_table`, as in the numpy engine."""
    times, offsets = zone_table(a)
    whens = " ".join(f"WHEN {u} < {t} THEN {o}" for t, o in zip(times, offsets))
    shift = f"CASE {whens} ELSE {offsets[-1]} END" if whens else str(offsets[-1])
    wall = f"({u} + CASE WHEN {zoned} THEN {shift} ELSE 0 END)"
    if a.time == "month":
        ts = f"epoch_ms(CAST({wall} AS BIGINT) * 1000)"
        return f"CAST((year({ts}) - 1970) * 12 + month({ts}) - 1 AS DOUBLE)"
    return f"CAST({wall} AS DOUBLE)"


def _key_dims(domain, s):
    """Mixed-radix digits of one set's group key: each code shifted past the sentinels
    (code + 3 ∈ 0 … size + 2), then the drop bit."""
    return tuple(domain.attributes[j].size + 3 for j in s) + (2,)


def _sql_int_code(a, ref, d):
    """A range attribute on an integer-typed column: integer arithmetic, no parsing (the same
    cells as ⌊(v − lo) / width⌋ for every integer v)."""
    miss, low, high, _ = actions(a)
    w = int(a.width)
    div = "//" if d.name == "duckdb" else "div"
    inner = f"({ref} - {int(a.lo)})" if w == 1 else f"(({ref} - {int(a.lo)}) {div} {w})"
    return (
        f"CASE WHEN {ref} IS NULL THEN {miss} WHEN {ref} < {int(a.lo)} THEN {low} "
        f"WHEN {ref} > {int(a.hi)} THEN {high} ELSE {inner} END"
    )


#: Column types (lower case, as DuckDB and Spark name them) holding integers.
INTEGER_TYPES = (
    "tinyint",
    "smallint",
    "integer",
    "int",
    "bigint",
    "utinyint",
    "usmallint",
    "uinteger",
    "ubigint",
    "long",
    "short",
    "byte",
)


#: Column types (lower case) holding text, parsed by TRY_CAST for numeric and time attributes.
TEXT_TYPES = ("varchar", "string", "text")


def code_query(domain, source_sql, dialect="duckdb", *, types=None):
    """The records' codes: parse → codes, one row per record with columns ``c0`` … ``c{d-1}``
    (a cell, or a sentinel of :func:`~matmech.sources.grouping.actions`) and ``dropped`` (1 when
    an attribute drops the record). Arguments as :func:`compile_query`."""
    if dialect not in ("duckdb", "spark"):
        raise ValueError(f"dialect must be 'duckdb' or 'spark', got {dialect!r}")
    d = Dialect(dialect)
    types = {k: str(v).lower() for k, v in (types or {}).items()}
    parsed, walls, guesses, codes = [], [], [], []
    for j, a in enumerate(domain.attributes):
        col, ctype = d.ident(a.column), types.get(a.column)
        if a.kind == "range" and ctype in INTEGER_TYPES:
            # uint64 values from 2**63 up overflow BIGINT: a refused read for data the domain
            # accepts (clip / other / drop); DuckDB's 128-bit HUGEINT holds every uint64
            wide = "HUGEINT" if dialect == "duckdb" and ctype == "ubigint" else "BIGINT"
            parsed.append(f"CAST({col} AS {wide}) AS p{j}")
            walls.append(f"p{j} AS v{j}")
            codes.append(f"CAST({_sql_int_code(a, f'v{j}', d)} AS BIGINT) AS c{j}")
            continue
        if a.time is not None:
            u, zoned = _sql_instant(a, col, d, ctype)
            parsed += [f"{u} AS p{j}", f"{zoned} AS z{j}"]
            walls.append(f"{_sql_wall(a, f'p{j}', f'z{j}')} AS v{j}")
        else:
            # text is parsed from its trimmed form, as the numpy engine does; trimming also
            # keeps DuckDB from pushing the cast into its CSV scanner, where a non-number (a
            # missing value for the domain) would abort the whole read instead of becoming
            # NULL (privacy audit)
            text = d.trim(col) if ctype in TEXT_TYPES else col
            expr = (
                d.trim(f"CAST({col} AS {d.string})")
                if a.kind == "categories"
                else f"TRY_CAST({text} AS DOUBLE)"
            )
            parsed.append(f"{expr} AS p{j}")
            walls.append(f"p{j} AS v{j}")
        if a.regular:
            guesses.append(f"{_sql_guess(a.grid, f'v{j}', d)} AS g_v{j}")
        codes.append(f"CAST({_sql_code(a, f'v{j}', d)} AS BIGINT) AS c{j}")
    if needs_drop_flag(domain):
        dropped = (
            "CASE WHEN "
            + " OR ".join(f"c{j} = {DROP}" for j in range(len(domain)))
            + " THEN 1 ELSE 0 END"
        )
    else:
        dropped = "0"
    # parse → wall-clock time → first guesses of regular bins → codes, one layer each
    inner = f"SELECT {', '.join(walls)} FROM (SELECT {', '.join(parsed)} FROM {source_sql}) AS p"
    if guesses:
        inner = f"SELECT *, {', '.join(guesses)} FROM ({inner}) AS w"
    inner = f"SELECT {', '.join(codes)} FROM ({inner}) AS g"
    return f"SELECT *, {dropped} AS dropped FROM ({inner}) AS q"


def compile_query(domain, sets, source_sql, dialect="duckdb", *, types=None):
    """One aggregation: parse → codes → one BIGINT key per grouping set → GROUP BY (GROUPING
    SETS when several tables). ``dialect``: "duckdb" or "spark"; ``source_sql`` the FROM
    item; ``types``: optional {column: SQL type name} (integer columns of range attributes
    skip parsing). Returns the SQL text and the key dimensions of each set."""
    codes = code_query(domain, source_sql, dialect, types=types)
    dims = [_key_dims(domain, s) for s in sets]
    if any(math.prod(dm) >= 2**62 for dm in dims):
        raise ValueError(
            "a marginal's group key would overflow 64 bits; count fewer attributes at once"
        )
    keys = []
    for i, s in enumerate(sets):
        key = "CAST(0 AS BIGINT)"
        for j in s:
            key = f"({key} * {domain.attributes[j].size + 3} + (c{j} + 3))"
        keys.append(f"{key} * 2 + dropped AS k{i}")
    inner = f"SELECT {', '.join(keys)} FROM ({codes}) AS r"
    if len(sets) == 1:
        return f"SELECT k0, count(*) AS n FROM ({inner}) AS t GROUP BY k0", dims
    group_by = "GROUPING SETS (" + ", ".join(f"(k{i})" for i in range(len(sets))) + ")"
    select = ", ".join(
        [*(f"coalesce(k{i}, {NONE}) AS k{i}" for i in range(len(sets))), "count(*) AS n"]
    )
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


def duckdb_source(con, source, kind, d, encoding, delimiter):
    if kind == "csv":
        enc = encoding.lower().replace("_", "-")
        enc = {
            "utf8": "utf-8",
            "utf16": "utf-16",
            "latin1": "latin-1",
            "iso-8859-1": "latin-1",
        }.get(enc, enc)
        names, delim = csv_header(source, encoding=encoding, delimiter=delimiter)
        columns = "{" + ", ".join(f"{d.text(c)}: 'VARCHAR'" for c in names) + "}"
        return (
            f"read_csv({d.text(str(source))}, header = true, auto_detect = false, columns = {columns}, "
            f"delim = {d.text(delim)}, quote = '\"', escape = '\"', encoding = {d.text(enc)}, "
            f"compression = {d.text('gzip' if str(source).lower().endswith('.gz') else 'none')})"
        )
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


def engine_error(where, exc, encoding=None):
    msg = str(exc).lower()
    if encoding is not None and ("unicode" in msg or "encod" in msg):
        return ValueError(
            f"{where}: not valid {encoding} text; give the file's encoding (encoding='latin-1', "
            "CLI --encoding latin-1)"
        )
    return ValueError(
        f"{where}: the engine could not read the data ({type(exc).__name__}; its message is withheld "
        "because it may quote records)"
    )


def _duckdb_open(memory=None):
    """A DuckDB connection set up for counting; ``memory`` (bytes) bounds DuckDB's own
    buffers (``memory_limit``), spilling past it to a private ``temp_directory`` (removed
    by :func:`_duckdb_close`)."""
    try:
        import duckdb
    except ImportError:
        raise ImportError(f"the duckdb engine needs DuckDB: {ENGINES_HINT}") from None
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")
    with contextlib.suppress(Exception):  # zoned timestamps → UTC (needs DuckDB's ICU extension)
        con.execute("SET TimeZone = 'UTC'")
    spill = None
    if memory is not None:
        spill = tempfile.mkdtemp(prefix="matmech_duckdb_")
        con.execute(f"SET memory_limit = '{int(memory)}B'")
        con.execute(f"SET temp_directory = '{spill}'")
    return duckdb, con, spill


def _duckdb_close(con, spill):
    con.close()
    if spill is not None:
        shutil.rmtree(spill, ignore_errors=True)


def _duckdb_prepare(duckdb, con, source, kind, domain, where, encoding, delimiter):
    """(FROM item, column types) of the source, its columns checked against the domain."""
    d = Dialect("duckdb")
    src = duckdb_source(con, source, kind, d, encoding, delimiter)
    try:
        types = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
    except duckdb.Error as exc:
        raise engine_error(where, exc, encoding if kind == "csv" else None) from None
    check_columns(domain, list(types), where, show=kind != "csv")
    return src, types


def _code_type(domain):
    """The narrowest signed integer type holding every code and sentinel: (numpy, SQL)."""
    top = max(a.size for a in domain.attributes) + 3
    return (np.int16, "SMALLINT") if top < 2**15 else (np.int32, "INTEGER")


def _codes_select(domain, codes_sql):
    """The codes as the narrow integer type and the drop flag as a boolean, ``c0`` … ``dropped``."""
    _, sql_type = _code_type(domain)
    cols = [f"CAST(c{j} AS {sql_type}) AS c{j}" for j in range(len(domain))]
    return f"SELECT {', '.join(cols)}, dropped = 1 AS dropped FROM ({codes_sql}) AS s"


def _batch_codes(batch, domain):
    """(codes (rows × attributes, Fortran order), dropped) of one Arrow record batch."""
    dtype, _ = _code_type(domain)
    d = len(domain)
    codes = np.empty((batch.num_rows, d), dtype=dtype, order="F")
    for j in range(d):
        codes[:, j] = batch.column(j).to_numpy(zero_copy_only=False)
    return codes, np.asarray(batch.column(d).to_numpy(zero_copy_only=False), dtype=bool)


def duckdb_tables(source, kind, domain, subsets, *, where, encoding, delimiter, memory=None):
    """{subset: int64 table} for ``subsets`` in one scan: DuckDB applies the domain
    (:func:`code_query`) and streams the codes, :data:`~matmech.sources.table_scan.SCAN_ROWS`
    records a chunk, into a :class:`~matmech.sources.table_scan.TableCounter`. Memory: the tables,
    one chunk and DuckDB's buffers (``memory`` bytes at most, spilling to disk past it; None:
    a quarter of the memory this process can still allocate, at least 256 MiB)."""
    if memory is None:
        memory = max(256 << 20, memory_room().bytes // 4)
    duckdb, con, spill = _duckdb_open(memory)
    try:
        src, types = _duckdb_prepare(duckdb, con, source, kind, domain, where, encoding, delimiter)
        query = _codes_select(domain, code_query(domain, src, "duckdb", types=types))
        counter = TableCounter(domain, subsets)
        try:
            rel = con.sql(query)  # a relation streams its Arrow batches without a copy
            reader = (  # DuckDB >= 1.4 names it to_arrow_reader
                rel.to_arrow_reader(SCAN_ROWS)
                if hasattr(rel, "to_arrow_reader")
                else rel.fetch_arrow_reader(SCAN_ROWS)
            )
        except duckdb.Error as exc:
            raise engine_error(where, exc, encoding if kind == "csv" else None) from None
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except Exception as exc:  # noqa: BLE001 - DuckDB or Arrow; none may leak records
                raise engine_error(where, exc, encoding if kind == "csv" else None) from None
            counter.add(*_batch_codes(batch, domain))
    finally:
        _duckdb_close(con, spill)
    return counter.tables()


def spark_tables(
    source, kind, domain, subsets, *, where=None, encoding=None, delimiter=None, memory=None
):
    """{subset: int64 table} for ``subsets`` as one distributed aggregation: the domain applied
    in Spark SQL (:func:`code_query`), a :class:`~matmech.sources.table_scan.TableCounter` per
    partition on the executors (``mapInArrow``), its non-zero cells summed by cell in a
    ``GROUP BY`` (partial aggregation before the shuffle); only the tables reach the driver,
    never a record. An "error" policy's defect found on an executor comes back as a flag
    (no value) and is refused here with the usual message."""
    import pyarrow as pa

    d = Dialect("spark")
    spark = source.sparkSession
    name = "matmech_src_" + uuid.uuid4().hex
    subsets = [tuple(s) for s in subsets]
    sizes = [math.prod(domain.subset_sizes(s)) for s in subsets]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    refused = [  # (attribute, the sentinel its "error" policies refuse)
        (j, c)
        for j, a in enumerate(domain.attributes)
        for c, p in ((OOD, a.policy), (MISS, a.missing))
        if p == "error"
    ]

    def count(batches):  # runs on an executor, once per partition
        counter = TableCounter(domain, subsets)
        flags = set()
        for batch in batches:
            codes, dropped = _batch_codes(batch, domain)
            for j, c in refused:  # flagged here, refused on the driver (the data is refused)
                bad = codes[:, j] == c
                if bad.any():
                    flags.add((j, c))
                    codes[bad, j] = 0
            counter.add(codes, dropped)
        flat = (
            np.concatenate([t.ravel() for t in counter.tables().values()])
            if subsets
            else np.zeros(0, np.int64)
        )
        nz = np.flatnonzero(flat)
        cells = np.concatenate([nz, [-1 - 4 * j - (c == MISS) for j, c in sorted(flags)]]).astype(
            np.int64
        )
        counts = np.concatenate([flat[nz], np.zeros(len(flags), np.int64)])
        yield pa.RecordBatch.from_arrays([pa.array(cells), pa.array(counts)], names=["cell", "n"])

    source.createOrReplaceTempView(name)
    try:
        query = _codes_select(
            domain, code_query(domain, d.ident(name), "spark", types=dict(source.dtypes))
        )
        try:
            partial = spark.sql(query).mapInArrow(count, "cell long, n long")
            totals = partial.groupBy("cell").sum("n").toArrow()
            cells = totals.column(0).to_numpy()
            counts = totals.column(1).to_numpy()
        except Exception as exc:  # noqa: BLE001 - Spark raises many types; none may leak records
            raise engine_error("the spark source", exc) from None
    finally:
        spark.catalog.dropTempView(name)
    for cell in cells[cells < 0].tolist():  # the flags: (attribute, defect), no value
        j, miss = divmod(-1 - int(cell), 4)
        refuse_defects(domain.attributes[j], np.array([MISS if miss else OOD]))
    flat = np.zeros(int(offsets[-1]), dtype=np.int64)
    keep = cells >= 0
    np.add.at(flat, cells[keep], np.asarray(counts[keep], dtype=np.int64))
    return {
        s: flat[offsets[i] : offsets[i + 1]].reshape(domain.subset_sizes(s))
        for i, s in enumerate(subsets)
    }


def _duckdb_groups(source, kind, domain, sets, where, encoding, delimiter):
    duckdb, con, _ = _duckdb_open()
    try:
        src, types = _duckdb_prepare(duckdb, con, source, kind, domain, where, encoding, delimiter)
        query, dims = compile_query(domain, sets, src, "duckdb", types=types)
        try:
            res = con.execute(query).fetchnumpy()
        except duckdb.Error as exc:
            raise engine_error(where, exc, encoding if kind == "csv" else None) from None
    finally:
        con.close()
    counts = np.asarray(res["n"], dtype=np.int64)
    return _split_groups(sets, dims, [res[f"k{i}"] for i in range(len(sets))], counts)


def _spark_groups(source, domain, sets):
    d = Dialect("spark")
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
            raise engine_error("the spark source", exc) from None
    finally:
        spark.catalog.dropTempView(name)
    counts = np.asarray(cols["n"], dtype=np.int64)
    return _split_groups(sets, dims, [cols[f"k{i}"] for i in range(len(sets))], counts)


def _duckdb_check(kind: str) -> None:
    not_spark(kind, "duckdb")
    if kind == "array":
        raise TypeError("a 2-D numpy array is counted by the numpy engine (or pass a DataFrame)")


def _spark_check(kind: str) -> None:
    if kind != "spark":
        raise TypeError(
            f"the spark engine counts a Spark DataFrame; got a {kind} source (use engine='duckdb' or 'auto')"
        )


def _duckdb(source, kind, domain, sets, *, where, encoding, delimiter):
    return _duckdb_groups(source, kind, domain, sets, where, encoding, delimiter)


def _spark(source, kind, domain, sets, *, where, encoding, delimiter):
    return _spark_groups(source, domain, sets)


#: The registry entries of the SQL engines.
DUCKDB = Engine("duckdb", _duckdb, _duckdb_check, duckdb_tables)
SPARK = Engine("spark", _spark, _spark_check, spark_tables)
