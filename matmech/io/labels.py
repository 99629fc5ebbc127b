"""Row labels of a workload spec: one per query of every part, in the workload's row order.

Each ``[[queries]]`` part of a spec labels its own rows (issue 31: one ``product`` part used
to drop the labels of every part, leaving ``q0 … q1505``):

* a one-attribute part: its intervals' labels (``age 18-24``, ``[0, 5]``) or the names the
  spec gives (``ranges.labels``, a tree's nodes);
* ``marginals``: the cells of each marginal, ``sex=F, state=CA`` (``a1=0, a3=2`` without
  declared attributes), ``total`` for the empty marginal;
* ``product``: the labels of each factor's rows joined (``age 20-39, sex=F``), last
  attribute fastest as ``⊗ᵢ Aᵢ`` orders its rows; total factors leave no word, a product of
  totals is ``total``.

:class:`Labels` holds them as blocks computed on demand (a label a row, slices as tuples),
so a workload of 10⁸ rows costs its factors' labels, not 10⁸ strings; ``tuple(labels)``
materialises them. Data-independent: labels come from the declaration only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np


class _Block(Sequence):
    """A sequence of labels computed on demand: subclasses give ``__len__`` and
    ``_slice(a, b)`` (a list of the labels of rows a … b−1)."""

    def _slice(self, a: int, b: int) -> list:  # pragma: no cover - abstract
        raise NotImplementedError

    def __getitem__(self, i):
        n = len(self)
        if isinstance(i, slice):
            a, b, step = i.indices(n)
            if step != 1:
                return tuple(self[k] for k in range(a, b, step))
            return tuple(self._slice(a, max(a, b)))
        k = int(i)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError(f"label index {i} out of range for {n} labels")
        return self._slice(k, k + 1)[0]

    def __iter__(self):
        step = 1 << 16
        for a in range(0, len(self), step):
            yield from self._slice(a, min(len(self), a + step))

    def __repr__(self):
        return f"{type(self).__name__}({len(self):,} labels)"


class ProductLabels(_Block):
    """The labels of a Kronecker product's rows: ``", ".join`` of one label per factor,
    row-major (last factor fastest). ``factors``: one sequence of labels per factor;
    ``empty``: the label of a product of no factors."""

    def __init__(self, factors: Sequence[Sequence[str]], *, empty: str = "total"):
        self.factors = tuple(tuple(str(x) for x in f) for f in factors)
        self.empty = empty
        self._n = math.prod(len(f) for f in self.factors)

    def __len__(self):
        return self._n if self.factors else 1

    def _slice(self, a, b):
        if not self.factors:
            return [self.empty] * (b - a)
        rows = np.arange(a, b, dtype=np.int64)
        codes = np.unravel_index(rows, tuple(len(f) for f in self.factors))
        parts = [np.asarray(f, dtype=object)[c] for f, c in zip(self.factors, codes)]
        if len(parts) == 1:
            return list(parts[0])
        return [", ".join(t) for t in zip(*parts)]


class IntervalLabels(_Block):
    """The labels of inclusive cell intervals ``lo[i] … hi[i]``: ``label(lo, hi)`` (a
    vectorised labeller such as :meth:`matmech.io.attribute.Attribute.span_labels`) on the
    rows asked for."""

    def __init__(self, lo, hi, label: Callable):
        self.lo, self.hi, self.label = np.asarray(lo), np.asarray(hi), label

    def __len__(self):
        return int(self.lo.size)

    def _slice(self, a, b):
        return [str(x) for x in self.label(self.lo[a:b], self.hi[a:b])]


class Labels(_Block):
    """Blocks of labels (sequences of str) one after the other: a spec's parts in order."""

    def __init__(self, blocks: Sequence[Sequence[str]]):
        self.blocks = tuple(blocks)
        self.offsets = np.concatenate([[0], np.cumsum([len(b) for b in self.blocks])]).astype(
            np.int64
        )

    def __len__(self):
        return int(self.offsets[-1])

    def _slice(self, a, b):
        out: list = []
        j = int(np.searchsorted(self.offsets, a, side="right")) - 1
        while a < b and j < len(self.blocks):
            lo = int(self.offsets[j])
            stop = min(b, int(self.offsets[j + 1]))
            if stop > a:
                out.extend(self.blocks[j][a - lo : stop - lo])
                a = stop
            j += 1
        return out


def label_bytes(labels: Sequence[str]) -> tuple[int, int]:
    """(UTF-8 bytes, double quotes) of all ``labels`` together, without building them when
    they are computed on demand (a product's figures factor over its factors); for the size
    of a file that will hold them (the command line's answers, checked before a spend)."""
    if isinstance(labels, Labels):
        sums = [label_bytes(b) for b in labels.blocks]
        return sum(s[0] for s in sums), sum(s[1] for s in sums)
    if isinstance(labels, ProductLabels):
        if not labels.factors:
            return len(labels.empty.encode()), labels.empty.count('"')
        n, total, quotes = len(labels), 0, 0
        for f in labels.factors:
            total += (n // len(f)) * sum(len(x.encode()) for x in f)
            quotes += (n // len(f)) * sum(x.count('"') for x in f)
        return total + 2 * (len(labels.factors) - 1) * n, quotes  # ", " between factors
    total = quotes = 0
    step = 1 << 16
    for a in range(0, len(labels), step):
        chunk = labels[a : a + step]
        total += sum(len(str(x).encode()) for x in chunk)
        quotes += sum(str(x).count('"') for x in chunk)
    return total, quotes
