"""Per-period counts for a stream from a data engine: one GROUP BY time bucket (and category).

The period is a declared attribute (:mod:`matmech.io.domain`: ``integer_range`` over day
numbers, ``numeric_bins`` over timestamps with a width), the category an optional second
one; :func:`matmech.sources.engines.histogram` compiles both into one ``GROUP BY`` in DuckDB
(files and DataFrames, out of core), Spark or numpy, so memory is O(periods × categories),
never O(records). The result's rows are the steps in order; feed them with
:meth:`matmech.stream.release.StreamRelease.step` as each period closes (a past period can
be backfilled the same way). Errors name columns and kinds of defect, never values.
"""

from __future__ import annotations

import numpy as np

from matmech.io.domain import Attribute, Domain
from matmech.sources.engines import histogram


def period_counts(
    source,
    *,
    period: Attribute,
    category: Attribute | None = None,
    engine: str = "auto",
    encoding: str = "utf-8",
    delimiter: str | None = None,
) -> np.ndarray:
    """Counts per period (rows, in the period attribute's cell order) and category (columns):
    an int64 array of shape (period.size, category.size or 1)."""
    if not isinstance(period, Attribute) or (
        category is not None and not isinstance(category, Attribute)
    ):
        raise TypeError(
            "period and category must be declared attributes (matmech.io.domain: integer_range, "
            f"numeric_bins, categories), got {type(period).__name__} and {type(category).__name__}"
        )
    attrs = (period,) if category is None else (period, category)
    x = histogram(source, Domain(attrs), engine=engine, encoding=encoding, delimiter=delimiter)
    return np.asarray(x, dtype=np.int64).reshape(period.size, -1)
