"""From records to the histogram x that every measurement reads.

A domain is a tuple of attribute sizes; a record with attribute codes (c₁, …, c_d) falls
in cell ``((c₁·n₂ + c₂)·n₃ + …)·n_d + c_d``: row-major, the last attribute varying
fastest, the cell order of :class:`matmech.linalg.linop.Kron` and of
:func:`matmech.workloads.marginals`.

An attribute is given either as a number of categories ``n`` (values must be the integer
codes 0 … n−1) or as increasing bin ``edges`` e₀ < … < e_n (value v falls in bin i when
e_i ≤ v < e_{i+1}; the last bin is closed, as in ``numpy.histogram``). Nothing is clipped or
dropped: a value outside the domain, a NaN or a non-numeric entry raises an error that says
what was found and in which row and column.

A declared :class:`~matmech.io.domain.Domain` (raw values: integer ranges, bins, string
categories, with clip / other / drop / error policies) may be passed instead of sizes: the
counting is then :func:`matmech.sources.engines.histogram` (DataFrames, Arrow tables, CSV /
Parquet paths and Spark DataFrames are counted inside an engine).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

import numpy as np

from matmech.validate import memory, size, vector
from typing import Any


def _is_pandas(obj, kind):
    mod = type(obj).__module__
    return mod.startswith("pandas") and type(obj).__name__ == kind


def _where(pos, labels, column):
    """ "column 'age'" (or "the values" for unnamed 1-D data): where a defect is, told by the
    column only. The records are private (issue 21): no row position, index label or value
    appears in a message; ``pos`` and ``labels`` are not used for the text."""
    return "the values" if column is None else f"column {column!r}"


def _numeric(values, labels, column):
    """A 1-D float64 copy of ``values``; TypeError naming the first non-numeric entry."""
    arr = np.asarray(values)
    if arr.dtype == bool:
        return arr.astype(np.float64)
    if np.issubdtype(arr.dtype, np.number) and not np.issubdtype(arr.dtype, np.complexfloating):
        return arr.astype(np.float64)
    # object, string or complex data: find the first entry that is not a real number
    obj = arr.astype(object)
    for i, v in enumerate(obj):
        if v is None:
            raise ValueError(
                f"missing value (None) in {_where(i, labels, column)}; drop or impute it first"
            )
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(
                f"non-numeric value in {_where(i, labels, column)}; "
                "encode categories as integer codes (e.g. pandas .cat.codes) first"
            )
    return obj.astype(np.float64)


def _check_spec(spec, attr):
    """('codes', n) for an integer number of categories, ('edges', e) for bin edges."""
    if isinstance(spec, bool):
        raise TypeError(
            f"attribute {attr}: expected a number of categories or bin edges, got {spec!r}"
        )
    if isinstance(spec, numbers.Integral):
        return "codes", size(spec, f"attribute {attr}: the number of categories")
    if isinstance(spec, (str, bytes)) or not hasattr(spec, "__len__"):
        raise TypeError(
            f"attribute {attr}: expected a number of categories (int) or at least two numeric bin edges, "
            f"got {type(spec).__name__}"
        )
    edges = vector(spec, f"attribute {attr} bin edges", finite=False)
    if edges.ndim != 1 or edges.size < 2:
        raise TypeError(
            f"attribute {attr}: expected a number of categories (int) or at least two numeric bin edges, got {spec!r}"
        )
    edges = edges.astype(np.float64)
    if not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
        raise ValueError(
            f"attribute {attr}: bin edges must be finite and strictly increasing, got {edges.tolist()}"
        )
    return "edges", edges


def _codes(values, spec, labels, column):
    """Integer codes in [0, size) for one attribute, or an error naming the first bad row."""
    if _is_pandas(values, "Series") and str(values.dtype) == "category" and spec[0] == "codes":
        codes = np.asarray(values.cat.codes, dtype=np.int64)
        if codes.size and codes.min() < 0:
            i = int(np.flatnonzero(codes < 0)[0])
            raise ValueError(f"missing value (NaN) in {_where(i, labels, column)}")
        if codes.size and codes.max() >= spec[1]:
            i = int(np.argmax(codes))
            raise ValueError(
                f"a category in {_where(i, labels, column)} is outside the domain of {spec[1]} categories"
            )
        return codes
    v = _numeric(values, labels, column)
    nan = np.isnan(v)
    if nan.any():
        raise ValueError(
            f"missing value (NaN) in {_where(int(np.flatnonzero(nan)[0]), labels, column)}"
        )
    inf = np.isinf(v)
    if inf.any():
        i = int(np.flatnonzero(inf)[0])
        raise ValueError(f"infinite value in {_where(i, labels, column)}")
    kind, arg = spec
    if kind == "codes":
        frac = v != np.floor(v)
        if frac.any():
            i = int(np.flatnonzero(frac)[0])
            raise ValueError(
                f"non-integer value in {_where(i, labels, column)}: with {arg} categories the values "
                f"must be the integer codes 0..{arg - 1} (pass bin edges to bin real values)"
            )
        out = (v < 0) | (v >= arg)
        if out.any():
            i = int(np.flatnonzero(out)[0])
            raise ValueError(
                f"a value in {_where(i, labels, column)} is outside the domain 0..{arg - 1}"
            )
        return v.astype(np.int64)
    edges = arg
    out = (v < edges[0]) | (v > edges[-1])
    if out.any():
        i = int(np.flatnonzero(out)[0])
        raise ValueError(
            f"a value in {_where(i, labels, column)} is outside the bin edges [{edges[0]:g}, {edges[-1]:g}]"
        )
    return np.minimum(np.searchsorted(edges, v, side="right") - 1, edges.size - 2).astype(np.int64)


def _spec_size(spec):
    return spec[1] if spec[0] == "codes" else spec[1].size - 1


def _columns(data, specs):
    """[(values, labels, name)] for each attribute of 2-D ``data``, in the order of ``specs``."""
    if _is_pandas(data, "DataFrame"):
        labels = list(data.index)
        if isinstance(specs, Mapping):
            missing = [c for c in specs if c not in data.columns]
            if missing:
                raise ValueError(
                    f"column(s) {missing} not in the data frame (columns: {list(data.columns)})"
                )
            return [(data[c], labels, c) for c in specs], list(specs.values())
        if len(specs) != data.shape[1]:
            raise ValueError(
                f"the domain has {len(specs)} attributes but the data frame has {data.shape[1]} columns "
                f"{list(data.columns)}; select the columns or pass a mapping {{column: size}}"
            )
        return [(data[c], labels, c) for c in data.columns], list(specs)
    if isinstance(specs, Mapping):
        raise TypeError("a mapping {column: bins} domain needs a pandas DataFrame")
    if isinstance(data, (list, tuple)):
        cols = [
            (c, list(c.index) if _is_pandas(c, "Series") else None, getattr(c, "name", None) or j)
            for j, c in enumerate(data)
        ]
        lengths = {len(c[0]) for c in cols}
        if len(lengths) > 1:  # the lengths are record counts: not shown
            raise ValueError(
                "the columns have different lengths; pass one value per record in each"
            )
    else:
        arr = np.asarray(data)
        if arr.ndim != 2:
            raise ValueError(
                f"multi-dimensional data must be 2-D (records × attributes), got shape {arr.shape}"
            )
        cols = [(arr[:, j], None, j) for j in range(arr.shape[1])]
    if len(cols) != len(specs):
        raise ValueError(
            f"the domain has {len(specs)} attributes but the data has {len(cols)} columns"
        )
    return cols, list(specs)


def cell_index(data, bins):
    """Row-major cell index of every record (see :func:`histogram` for the arguments)."""
    one_d = (
        _is_pandas(data, "Series")
        or (
            not _is_pandas(data, "DataFrame")
            and not isinstance(data, (list, tuple))
            and np.ndim(data) == 1
        )
        or (isinstance(data, (list, tuple)) and not any(np.ndim(c) >= 1 for c in data))
    )
    if one_d:
        if isinstance(bins, tuple) and len(bins) == 1:  # a one-attribute domain
            bins = bins[0]
        labels = list(data.index) if _is_pandas(data, "Series") else None
        name = getattr(data, "name", None) if _is_pandas(data, "Series") else None
        spec = _check_spec(bins, 0 if name is None else repr(name))
        return _codes(data, spec, labels, name), (_spec_size(spec),)
    if isinstance(bins, (numbers.Integral, np.ndarray)) and not isinstance(bins, bool):
        bins = (bins,)
    if not isinstance(bins, (tuple, list, Mapping)) or not bins:
        raise TypeError(
            f"multi-dimensional data needs a domain: a sequence or mapping of per-attribute bins, got {bins!r}"
        )
    cols, raw = _columns(data, bins)
    specs = [_check_spec(s, name) for s, (_, _, name) in zip(raw, cols)]
    sizes = tuple(_spec_size(s) for s in specs)
    index = np.zeros(len(cols[0][0]), dtype=np.int64)
    for (values, labels, name), spec, n_cells in zip(cols, specs, sizes):
        index = index * n_cells + _codes(values, spec, labels, name)
    return index, sizes


def histogram(data: Any, bins: Any) -> np.ndarray:
    """Counts of records per cell: the vector x of the Matrix Mechanism (int64).

    ``histogram(values, bins)``: ``values`` a 1-D numpy array, list or pandas Series;
    ``bins`` the number of categories n (values are codes 0..n−1) or an array of bin edges.
    ``histogram(columns, domain)``: ``columns`` a 2-D array (records × attributes), a list of
    1-D columns or a pandas DataFrame; ``domain`` one entry per attribute (an int or edges),
    or for a DataFrame a mapping ``{column: bins}`` that also selects and orders the columns.
    Cells are row-major, the last attribute fastest (the order of :class:`~matmech.linalg.linop.Kron`).
    Values outside the domain, NaN/None, infinities and non-numeric entries raise
    ValueError/TypeError naming the column and the kind of defect, never a row, an index label
    or a value (the records are private).
    ``histogram(source, domain)`` with a declared :class:`~matmech.io.domain.Domain`: raw
    values mapped by the declaration and its policies (see :func:`matmech.sources.engines.histogram`;
    its errors name the column, never a value).

    Parameters
    ----------
    data : array_like, pandas object, or data source
        Integer codes (1-D), records × attributes (2-D / DataFrame), or with a declared
        :class:`~matmech.io.domain.Domain` a DataFrame, Arrow table or CSV/Parquet path.
    bins : int, array_like, sequence, mapping or Domain
        The declared domain: a number of cells, bin edges, one entry per attribute, or a
        Domain.

    Returns
    -------
    numpy.ndarray
        int64 counts, one per cell (row-major over the attributes).

    Raises
    ------
    ValueError
        A value outside the domain, a missing or non-finite value (naming row and column,
        or for a declared Domain only the column), or a domain too large for memory.
    TypeError
        Non-numeric values or an unsupported container.

    Examples
    --------
    >>> histogram([0, 1, 1, 3], 4).tolist()
    [1, 2, 0, 1]
    """
    from matmech.io.domain import Domain

    if isinstance(bins, Domain):
        from matmech.sources.engines import histogram as engine_histogram

        return engine_histogram(data, bins)
    index, sizes = cell_index(data, bins)
    total = int(np.prod(sizes, dtype=object))
    if total > 2**31:
        raise ValueError(f"the domain {sizes} has {total:,} cells; too many for a dense histogram")
    memory(total * 8, f"a histogram of {total:,} cells")
    return np.bincount(index, minlength=total).astype(np.int64)
