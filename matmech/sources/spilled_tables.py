"""A plan's marginal tables counted by a data engine before the spend, kept on disk, read after
it (issue 36).

A release that reads its tables batch by batch (the streamed residual release,
:mod:`matmech.plans.streamed`) may not let the engine count them after its spend: an
engine failure or an "error" policy's refusal would then come after the budget was charged.
:func:`spill_tables` therefore counts every table the plan reads (its maximal subsets, the
rest summed out of them: McKenna et al., PVLDB 2018, §3) in scans sized to a memory share
(:func:`matmech.sources.table_scan.scan_batches`, one scan a batch), writes them to an unlinked
file and checks them: every table must hold the same record total (the data did not change
between scans). The returned :class:`SpilledTables` is a checked reader
(``reader(subsets) → {subset: int64 table}``) that only reads the file and sums out.
"""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np

from matmech.sources.tables import maximal_subsets
from matmech.limits import check_disk


class SpilledTables:
    """Int64 tables on attribute subsets in one file, read on demand: ``reader(subsets)``
    → {subset: table}, a subset not stored summed out of its smallest stored superset (found
    among the subsets one attribute larger first, else by a search of every stored key)."""

    def __init__(self, fd: int, index: dict, sizes: tuple):
        self._fd, self._index, self._sizes = fd, index, tuple(sizes)

    def __del__(self):
        fd, self._fd = getattr(self, "_fd", -1), -1  # -1: closed
        if fd >= 0:
            os.close(fd)

    def _load(self, s):
        at, shape = self._index[s]
        n = math.prod(shape)
        buf = os.pread(self._fd, 8 * n, 8 * at)
        return np.frombuffer(buf, dtype=np.int64).reshape(shape).copy()

    def _holder(self, s):
        near = [
            t
            for t in (tuple(sorted((*s, a))) for a in range(len(self._sizes)) if a not in s)
            if t in self._index
        ]
        if not near:
            near = [k for k in self._index if set(s) <= set(k)]
        if not near:
            raise ValueError(f"no table was counted for attributes {s} nor for a superset of them")
        return min(near, key=lambda k: math.prod(self._sizes[i] for i in k))

    def __call__(self, subsets) -> dict:
        out = {}
        for s in (tuple(sorted(int(a) for a in s)) for s in subsets):
            if s in self._index:
                out[s] = self._load(s)
                continue
            k = self._holder(s)
            axes = tuple(i for i, a in enumerate(k) if a not in s)
            out[s] = self._load(k).sum(axis=axes)
        return out

    def check_covers(self, subsets) -> None:
        for s in maximal_subsets([tuple(sorted(s)) for s in subsets]):
            self._holder(s)


def spill_tables(count, sizes, subsets, *, cut, directory=None) -> SpilledTables:
    """Count the tables on the maximal subsets of ``subsets``, batch by batch: ``cut(tops)``
    → the batches (e.g. :func:`~matmech.sources.table_scan.scan_batches`), ``count(batch)`` →
    {subset: table} (one scan of the data each); write them to an unlinked file in
    ``directory`` (None: the system's temporary directory) and check them: shapes, and one
    record total for all (else ValueError, naming no count). Before any spend."""
    sizes = tuple(int(n) for n in sizes)
    tops = maximal_subsets([tuple(sorted(s)) for s in subsets]) or [()]
    cells = {s: math.prod(sizes[i] for i in s) for s in tops}
    total = sum(cells.values())
    directory = tempfile.gettempdir() if directory is None else str(directory)
    check_disk(
        8 * total,
        directory,
        f"the counted marginal tables (a file in {directory}; pass spill_dir=)",
        after="; nothing was spent",
    )
    fd, path = tempfile.mkstemp(prefix="matmech_tables_", dir=directory)
    os.unlink(path)  # freed with the descriptor, whatever happens
    index, at = {}, 0
    for s in tops:
        index[s] = (at, tuple(sizes[i] for i in s))
        at += cells[s]
    reader = SpilledTables(fd, index, sizes)
    first = None
    for batch in cut(tops):
        tables = count(batch)
        for s in batch:
            t = np.ascontiguousarray(tables[s], dtype=np.int64)
            if t.shape != index[s][1]:
                raise ValueError(
                    f"the engine's table for attributes {s} has shape {t.shape}, expected {index[s][1]}"
                )
            n_total = int(t.sum())
            if first is None:
                first = n_total
            elif n_total != first:
                raise ValueError(
                    "the marginal tables counted in separate scans disagree on the record total "
                    "(did the data change during the read?); nothing was spent"
                )
            os.pwrite(fd, t.tobytes(), 8 * index[s][0])
        del tables
    return reader
