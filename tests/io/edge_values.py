"""Values on, just below and just above bin edges, the bin exact arithmetic puts each in,
and the bin each engine puts it in (issue 31). Shared by test_bin_edges.py and test_spark.py."""

from __future__ import annotations

import bisect
import math
import re
from decimal import Decimal
from fractions import Fraction

import numpy as np

from matmech.io.domain import Domain, integer_range
from matmech.sources.engines import ENGINE_REGISTRY

#: (engine, source kind) pairs of the test extras (Spark is tested in test_spark.py).
ENGINE_SOURCES = [
    ("numpy", "columns"),
    ("numpy", "pandas"),
    ("numpy", "polars"),
    ("numpy", "arrow"),
    ("duckdb", "pandas"),
    ("duckdb", "polars"),
    ("duckdb", "arrow"),
    ("duckdb", "csv"),
]


def around(edges) -> list:
    """Each edge, the float just below it and the one just above (distinct, in order)."""
    out: list = []
    for e in edges:
        for v in (math.nextafter(e, -math.inf), e, math.nextafter(e, math.inf)):
            if v not in out:
                out.append(v)
    return out


def exact_codes(values, bins, other_code) -> np.ndarray:
    """The bin (a, b) with a <= v < b of each value (bins increasing, not overlapping),
    compared as exact fractions of the floats; ``other_code`` for values in no bin and NaN."""
    starts = [Fraction(a) for a, _ in bins]
    ends = [Fraction(b) for _, b in bins]
    out = []
    for v in values:
        code = other_code
        if not math.isnan(v):
            fv = Fraction(v)
            i = bisect.bisect_right(starts, fv) - 1
            if i >= 0 and fv < ends[i]:
                code = i
        out.append(code)
    return np.array(out, dtype=np.int64)


_SUFFIX = {"k": 10**3, "M": 10**6}


def label_number(text: str) -> float:
    """The float a bin label's number stands for: ``0.3``, ``1e-05``, ``20k``, ``1.5M``."""
    scale = _SUFFIX.get(text[-1], 1)
    digits = text[:-1] if scale != 1 else text
    return float(Fraction(Decimal(digits)) * scale)


def label_bins(attribute) -> list:
    """(a, b) of every declared bin as its label shows it: ``[a, b)``."""
    out = []
    for i in range(attribute.declared_size):
        m = re.fullmatch(r"\[(\S+), (\S+)\)", attribute.value_label(i))
        assert m, attribute.value_label(i)
        out.append((label_number(m.group(1)), label_number(m.group(2))))
    return out


def make_source(kind, columns: dict, tmp_path):
    """The columns as a source of ``kind`` (a CSV file writes each float's repr)."""
    import pandas as pd

    frame = pd.DataFrame(columns)
    if kind == "columns":
        return {k: np.asarray(v) for k, v in columns.items()}
    if kind == "pandas":
        return frame
    if kind == "polars":
        import polars as pl

        return pl.from_pandas(frame)
    if kind == "arrow":
        import pyarrow as pa

        return pa.Table.from_pandas(frame, preserve_index=False)
    if kind == "csv":
        path = tmp_path / f"edges_{len(list(tmp_path.iterdir()))}.csv"
        names = list(columns)
        lines = [",".join(names)]
        for row in zip(*(columns[c] for c in names)):
            lines.append(",".join("" if _nan(v) else _text(v) for v in row))
        path.write_text("\n".join(lines) + "\n")
        return str(path)
    raise ValueError(kind)


def _nan(v):
    return v is None or (isinstance(v, (float, np.floating)) and math.isnan(v))


def _text(v):
    """A value as CSV text: a float's shortest round-trip repr, anything else as str."""
    return repr(float(v)) if isinstance(v, (float, np.floating)) else str(v)


def engine_codes(engine, kind, source, attributes, n) -> list:
    """The code each engine gives value r (r = 0 … n − 1, read from column ``id``) of every
    attribute: one grouped count per engine (the registry's ``groups``, sparse), each
    (id, code) pair counted once."""
    dom = Domain((integer_range("id", 0, n - 1), *attributes))
    sets = [(0, j) for j in range(1, len(attributes) + 1)]
    groups = ENGINE_REGISTRY[engine].groups(
        source, kind, dom, sets, where="the test source", encoding="utf-8", delimiter=None
    )
    out = []
    for s in sets:
        codes, dropped, counts = groups[s]
        assert not dropped.any() and (counts == 1).all(), (engine, kind)
        order = np.argsort(codes[:, 0])
        assert (codes[order, 0] == np.arange(n)).all(), (engine, kind)
        out.append(codes[order, 1])
    return out
