"""Where the records are: recognising a data source, its columns and its files.

The Matrix Mechanism reads the data only through the histogram x or marginal tables of it
(Li et al., "The matrix mechanism", VLDB J. 2015, §2; McKenna et al., "Optimizing error of
high-dimensional statistical queries under differential privacy", PVLDB 2018, §3); the counting engines of :mod:`matmech.sources.engines` read a
source of one of the kinds :func:`source_kind` names. Errors name the file or the column,
never a record.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np


CSV_SUFFIXES = (".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz")
PARQUET_SUFFIXES = (".parquet", ".pq")
ENGINES_HINT = 'pip install "matmech-dp[engines]"'


def _module(obj):
    return type(obj).__module__.split(".")[0]


def source_kind(source) -> str:
    """ "csv", "parquet", "pandas", "polars", "arrow", "spark", "columns" or "array"."""
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


def columns_of(source, kind):
    if kind in ("pandas", "polars", "arrow"):
        names = (
            source.column_names
            if kind == "arrow"
            else (
                source.collect_schema().names()
                if type(source).__name__ == "LazyFrame"
                else source.columns
            )
        )
        return [str(c) for c in names]
    if kind == "spark":
        return list(source.columns)
    if kind == "columns":
        return [str(c) for c in source]
    return None


def hidden_header(n: int) -> str:
    """How an error counts a CSV header's ``n`` names without quoting them: in a file without
    a header line the "names" are the first record's values."""
    return (
        f"{n} name(s), not shown: in a file without a header line they would be a record's values"
    )


def check_columns(domain, available, where, *, show=True):
    """Refuse a source without the domain's columns, naming the missing ones (declared, public).

    ``show=False`` (a CSV header): the available names are not quoted, only counted; in a file
    without a header line the "names" are the first record's values.
    """
    if available is None:
        return
    missing = [c for c in domain.columns if c not in available]
    if missing:
        have = (
            f"the columns are {available}"
            if show
            else f"its header line has {hidden_header(len(available))}"
        )
        raise ValueError(f"{where}: no column(s) {missing} for the domain's attributes; {have}")


def check_file(path):
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{path}: no such data file")
    with open(p, "rb"):  # permission errors name the file here, not inside the engine
        pass


def check_csv_options(encoding, delimiter):
    if encoding.lower().replace("_", "-") not in (
        "utf-8",
        "utf8",
        "utf-16",
        "utf16",
        "latin-1",
        "latin1",
        "iso-8859-1",
    ):
        raise ValueError(
            f"encoding must be utf-8, utf-16 or latin-1 for the duckdb engine, got {encoding!r}"
        )
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
        raise ValueError(
            f"{path}: not a readable gzip file"
        ) from None  # gzip.BadGzipFile, a truncated stream
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such data file") from None
    except LookupError:
        raise ValueError(f"encoding {encoding!r} is not a known text encoding") from None
    except UnicodeDecodeError:
        raise ValueError(
            f"{path}: not valid {encoding} text; give the file's encoding (encoding='latin-1', "
            "CLI --encoding latin-1)"
        ) from None
    if not first.strip():
        raise ValueError(
            f"{path}: the data file is empty (expected a header line naming the columns)"
        )
    if delimiter is None:
        try:
            delimiter = csv.Sniffer().sniff(first, delimiters=",;\t|").delimiter
        except csv.Error:
            delimiter = ","
    names = [h.strip() for h in next(csv.reader([first], delimiter=delimiter))]
    if len(set(names)) != len(names) or not all(names):
        bad = [i for i, h in enumerate(names) if not h or names.index(h) != i]
        raise ValueError(  # positions only: without a header line the names are a record
            f"{path}: the header line must name every column once; the name at position(s) "
            f"{bad} is empty or repeated (names are not shown)"
        )
    return names, delimiter
