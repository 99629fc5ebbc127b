"""The pure-ε table measurement in data-independent batches (Xiao et al., NeurIPS 2023, with
the Laplace table plan of :mod:`matmech.optimizers.residual`).

:func:`matmech.measurements.residual.measure_residuals_laplace` (in memory) and the streamed
release (:mod:`matmech.plans.streamed`) run the same steps, batch by batch:

* :meth:`TableBatches.batches`: the draw order, a function of the plan alone — scales
  ascending, tables in plan order within a scale, at most :data:`_CHUNK` cells a batch (at
  least one table); every batch is one call of the exact discrete Laplace sampler;
* :meth:`TableBatches.draw`: the batch's tables + their noise (reads data, never branches
  on it);
* :meth:`TableBatches.combine`: each noisy table T added to every residual T' ⊆ T of the
  lattice with its inverse-variance weight, on the orthonormal coordinates:
  ŷ_{T'} += w_{T,T'}·Q_{T'}(table T summed to T') — the generalised least squares of the
  stacked tables, which decouples per residual (post-processing). Tables of equal attribute
  sizes are combined as one stack, one residual position of the table at a time.

:func:`accumulate` adds rows into a flat float64 array (RAM or a file mapping) in one fixed
order, so every holder of the sums gets the same numbers bit for bit.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from matmech.linalg.residual import apply_axes_batched, contrast_operators
from matmech.privacy import noise


#: Noisy table cells drawn and combined as one batch (bounds the temporaries).
_CHUNK = 1 << 22


@dataclass(frozen=True, eq=False)
class TableBatch:
    """Tables ``J`` (indices into the plan's ``tables``) drawn in one sampler call at the
    discrete Laplace scale ``scale``. Data-independent."""

    scale: float
    J: np.ndarray


class TableBatches:
    """The batches of a :class:`~matmech.measurements.residual.LaplaceMeasurementPlan` and the
    look-ups their combination needs (residual and (table, residual) pair keys, sorted once;
    data-independent)."""

    def __init__(self, mplan: Any):
        plan = mplan.plan
        lat = plan.lattice
        self.mplan, self.names, self.domain = mplan, tuple(plan.tables), tuple(lat.domain)
        self.cells = np.array(
            [math.prod(self.domain[i] for i in t) for t in self.names], dtype=np.int64
        )
        self.base = len(self.domain) + 1
        keys = np.zeros(len(lat.residuals), dtype=np.int64)
        for j, R in enumerate(lat.residuals):
            for i in R:
                keys[j] = keys[j] * self.base + i + 1
        self._res_order = np.argsort(keys, kind="stable")
        self._res_keys = keys[self._res_order]
        self.n_res = len(lat.residuals)
        pk = mplan.pair_table.astype(np.int64) * self.n_res + mplan.pair_residual
        self._pair_order = np.argsort(pk, kind="stable")
        self._pair_keys = pk[self._pair_order]
        #: first orthonormal coordinate of each residual (lattice order) in a flat array
        sizes = np.asarray(lat.sizes, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)])[:-1].astype(np.int64)
        self.total = int(sizes.sum())

    def batches(self) -> Iterator[TableBatch]:
        """The batches in draw order (a generator; a function of the plan alone)."""
        scales = np.asarray(self.mplan.scales, dtype=np.float64)
        for b in np.unique(scales).tolist():
            idx, at = np.flatnonzero(scales == b), 0
            cells = self.cells[idx].tolist()
            while at < idx.size:  # at least one table; at most _CHUNK cells otherwise
                stop, size = at + 1, cells[at]
                while stop < idx.size and size + cells[stop] <= _CHUNK:
                    size, stop = size + cells[stop], stop + 1
                yield TableBatch(float(b), idx[at:stop])
                at = stop

    def draw(self, batch: TableBatch, tables: Mapping, src: Any) -> dict:
        """{T: int64 noisy table} of the batch: ``tables[T]`` plus exact discrete Laplace noise
        of the batch's scale, all its cells in one sampler call (tables in batch order).
        Reads data; never branches on it."""
        z = noise.discrete_laplace(batch.scale, int(self.cells[batch.J].sum()), rng=src)
        noisy, at = {}, 0
        for j in batch.J.tolist():
            t, m = self.names[j], int(self.cells[j])
            table = np.asarray(tables[t], dtype=np.int64)
            noisy[t] = table + z[at : at + m].reshape(table.shape)
            at += m
        return noisy

    def combine(self, batch: TableBatch, noisy: Mapping, add: Callable) -> None:
        """Add the batch's noisy tables (``noisy[T]``) to the residuals they contain:
        ``add(starts, rows)`` with ``starts`` the flat offsets (:attr:`offsets`) of the
        residuals and ``rows`` their weighted orthonormal coordinates, (len(starts), m)."""
        d = self.domain
        groups: dict[tuple, list] = {}
        for j in batch.J.tolist():
            groups.setdefault(tuple(d[i] for i in self.names[j]), []).append(j)
        for shape, js in groups.items():
            k, J = len(shape), np.array(js, dtype=np.int64)
            T = np.array([self.names[j] for j in js], dtype=np.int64).reshape(J.size, k)
            stack = np.stack([np.asarray(noisy[self.names[j]]).reshape(shape) for j in js])
            for mask in (m for r in range(k + 1) for m in itertools.combinations(range(k), r)):
                r, w, ok = self._pairs(J, T[:, list(mask)])
                if not ok.any():
                    continue  # a residual position with a size-1 attribute, or not in the lattice
                rest = tuple(a + 1 for a in range(k) if a not in mask)
                part = stack[ok].sum(axis=rest) if rest else stack[ok]
                ops = [_q(shape[a]) for a in mask]
                rows = apply_axes_batched(part, ops).reshape(int(ok.sum()), -1)
                add(self.offsets[r[ok]], rows * w[ok][:, None])

    def _pairs(self, J, R):
        """(residual index, pair weight, found) of tables J and the attribute tuples in the
        rows of R (a residual of the lattice inside its table, or not found)."""
        key = np.zeros(R.shape[0], dtype=np.int64)
        for c in range(R.shape[1]):
            key = key * self.base + R[:, c] + 1
        at = np.minimum(np.searchsorted(self._res_keys, key), self._res_keys.size - 1)
        ok = self._res_keys[at] == key
        r = self._res_order[at]
        pk = J * self.n_res + r
        pat = np.minimum(np.searchsorted(self._pair_keys, pk), self._pair_keys.size - 1)
        ok &= self._pair_keys[pat] == pk
        return r, np.asarray(self.mplan.pair_weight)[self._pair_order[pat]], ok


@functools.lru_cache(maxsize=512)
def _q(n):
    """Q of attribute size n, (n−1)×n sparse (CSR): the orthonormal contrast rows."""
    return contrast_operators(n)[1].T.tocsr()


def accumulate(target: np.ndarray, starts: np.ndarray, rows: np.ndarray) -> None:
    """target[starts[i] : starts[i] + m] += rows[i] for every i (``target`` a flat float64
    array or file mapping): rows for one residual summed first, in order, so the numbers do
    not depend on where ``target`` lives."""
    uniq, inv = np.unique(starts, return_inverse=True)
    if uniq.size < starts.size:
        sums = np.zeros((uniq.size, rows.shape[1]))
        np.add.at(sums, inv.reshape(-1), rows)
        starts, rows = uniq, sums
    target[starts[:, None] + np.arange(rows.shape[1])[None, :]] += rows
