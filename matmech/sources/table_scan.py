"""One scan of the data feeds many marginal tables (issue 36).

A marginal is x summed over the other attributes (McKenna et al., "Optimizing error of
high-dimensional statistical queries under differential privacy", PVLDB 2018, §3), so every
table a plan needs can be counted from one pass over the records' codes. The engine applies
the declared domain where the data lives (the ``CASE`` expressions of
:func:`matmech.sources.engine_sql.code_query`) and hands out the codes chunk by chunk; a
:class:`TableCounter` adds each chunk into every table at once
(:func:`count_tables`), so the memory is the tables plus one chunk,
whatever the row count. On Spark the counter runs on the executors, one per partition, and
only the tables travel (:func:`matmech.sources.engine_sql.spark_tables`).

:func:`scan_batches` splits the tables into batches that each fit a memory share; each batch
is one scan. Every choice here is a function of the declared domain and the subsets alone.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from matmech.sources.grouping import refuse_defects


#: Records per chunk handed from the engine to the counter.
SCAN_ROWS = 1 << 17
#: Bytes of one chunk at its peak, per record and attribute (Arrow's int16 codes, their
#: Fortran copy, the kept records' copy) and per record (the int64 indices of count_tables).
_CHUNK_BYTES = (6, 48)

#: Two tables sharing all but their last attribute are counted in one pass up to this many
#: cells of their joint table (a few L2-resident bins).
_PAIR_CELLS = 1 << 15
#: Largest marginal table (cells) built from records.
MAX_TABLE_CELLS = 1 << 28


def _from_codes(codes, domain, s):
    shape = tuple(domain[i] for i in s)
    cells = math.prod(shape)
    if cells > MAX_TABLE_CELLS:
        raise ValueError(
            f"the marginal on {s} has {cells:,} cells; at most {MAX_TABLE_CELLS:,} are built"
        )
    if not s:
        return np.array(codes.shape[0], dtype=np.int64)
    idx = _from_codes_index(codes, domain, s)
    return np.bincount(idx, minlength=cells).astype(np.int64, copy=False).reshape(shape)


def count_tables(codes, domain, subsets):
    """{s: table} for ``subsets``: those sharing all but their last attribute reuse one raveled
    index of the shared prefix, and two of them whose joint table has at most
    :data:`_PAIR_CELLS` cells are counted in one pass, as the table on the prefix and both
    last attributes summed over either (one bincount for two tables: the count over the
    records, not the sum over the small table, is the cost). Data-independent choices."""
    out: dict[Any, Any] = {}
    groups: dict[Any, Any] = {}
    for s in sorted(subsets):
        if len(s) < 2 or math.prod(domain[i] for i in s) > MAX_TABLE_CELLS:
            out[s] = _from_codes(codes, domain, s)
            continue
        groups.setdefault(s[:-1], []).append(s[-1])
    for head, lasts in groups.items():
        pre = _from_codes_index(codes, domain, head)
        hshape = tuple(domain[i] for i in head)
        hcells = math.prod(hshape)
        scaled, idx = {}, np.empty(codes.shape[0], dtype=np.int64)
        k = 0
        while k < len(lasts):
            a, na = lasts[k], domain[lasts[k]]
            b = lasts[k + 1] if k + 1 < len(lasts) else None
            if b is not None and hcells * na * domain[b] <= _PAIR_CELLS:
                nb = domain[b]
                if na * nb not in scaled:
                    scaled[na * nb] = pre * (na * nb)
                np.multiply(codes[:, a], nb, out=idx)
                idx += scaled[na * nb]
                idx += codes[:, b]
                t = np.bincount(idx, minlength=hcells * na * nb).astype(np.int64, copy=False)
                t = t.reshape(*hshape, na, nb)
                out[head + (a,)], out[head + (b,)] = t.sum(axis=-1), t.sum(axis=-2)
                k += 2
                continue
            idx = pre * na
            idx += codes[:, a]
            out[head + (a,)] = (
                np.bincount(idx, minlength=hcells * na)
                .astype(np.int64, copy=False)
                .reshape(*hshape, na)
            )
            k += 1
    return out


def _from_codes_index(codes, domain, s):
    """The raveled row-major index (int64) of every record's codes on ``s``."""
    idx = np.zeros(codes.shape[0], dtype=np.int64)
    for i in s:  # built in place
        idx *= domain[i]
        idx += codes[:, i]
    return idx


def scan_cells(domain, subsets) -> int:
    """Cells the counter holds for ``subsets``."""
    return sum(math.prod(domain.subset_sizes(s)) for s in subsets)


def scan_batches(domain, subsets, memory: int) -> list:
    """``subsets`` (in order) cut into batches whose tables (8 bytes a cell) and one chunk of
    codes fit ``memory`` bytes; a table larger than that is a batch of its own (the caller's
    memory check refuses it). One batch is one scan of the data."""
    chunk = SCAN_ROWS * (_CHUNK_BYTES[0] * len(domain) + _CHUNK_BYTES[1])
    room = max(1, int(memory) - chunk)
    out: list[list] = []
    cur: list = []
    used = 0
    for s in subsets:
        need = 8 * scan_cells(domain, [s])
        if cur and used + need > room:
            out.append(cur)
            cur, used = [], 0
        cur.append(s)
        used += need
    if cur:
        out.append(cur)
    return out


class TableCounter:
    """The marginal tables on ``subsets`` (sorted attribute tuples) of every chunk of codes
    added: ``add(codes, dropped)`` with ``codes`` (records × attributes, any signed integer
    type, the sentinels of :mod:`matmech.sources.grouping` included) and ``dropped`` (bool per
    record, or None); ``tables()`` → {subset: int64 table}. The "error" policies refuse a
    chunk as :func:`matmech.sources.grouping.grouped_tables` does (same messages, never a value)."""

    def __init__(self, domain, subsets):
        self.domain, self.subsets = domain, [tuple(s) for s in subsets]
        self._sizes = tuple(domain.sizes)
        self._checked = [
            (j, a) for j, a in enumerate(domain.attributes) if "error" in (a.policy, a.missing)
        ]
        self._sums = {s: np.zeros(domain.subset_sizes(s), dtype=np.int64) for s in self.subsets}

    def add(self, codes, dropped=None) -> None:
        for j, a in self._checked:  # every record, dropped or not, as the GROUP BY engines
            refuse_defects(a, codes[:, j])
        if dropped is not None and dropped.any():
            codes = codes[~dropped]
        # every code left is a cell: a sentinel is a drop (removed), a refusal (raised above)
        # or the other cell (a code); "clip" has no gaps (:class:`~matmech.io.attribute.Attribute`)
        for s, t in count_tables(np.asfortranarray(codes), self._sizes, self.subsets).items():
            self._sums[s] += t

    def tables(self) -> dict:
        return dict(self._sums)
