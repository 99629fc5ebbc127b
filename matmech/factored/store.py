"""Where a streamed residual release keeps what it measured (issue 24).

:class:`ResidualStore`: the released integers of every residual, in draw order
(:func:`matmech.factored.measure.residual_batches`), in one int64 array or appended to a file
that is read through a mapping opened per read (the pages read leave the process's resident
set) and removed with the store. :class:`ResidualIndex`: residual tuple → lattice index,
vectorised. Both hold only released values and the plan's layout: post-processing.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import weakref

import numpy as np

__all__ = ["ResidualStore", "ResidualIndex"]


class ResidualStore:
    """The released integers of every residual in draw order: one int64 array, or a file
    read through a mapping opened per read (so the pages read leave the resident set)."""

    def __init__(self, offsets, total, directory=None):
        self.offsets, self.total = offsets, int(total)
        if directory is None:
            self.path, self.array = None, np.empty(self.total, dtype=np.int64)
            return
        fd, self.path = tempfile.mkstemp(prefix="matmech-residuals-", suffix=".i64", dir=directory)
        os.close(fd)
        self.array, self._at = None, 0
        self._fh = open(self.path, "wb")
        self._finalizer = weakref.finalize(self, _remove, self.path)

    def write(self, J, y):
        if self.path is None:
            pos = self.offsets[J][:, None] + np.arange(y.shape[1])[None, :]
            self.array[pos] = y
            return
        y.tofile(self._fh)  # batches arrive in draw order: an append
        self._at += y.size

    def close(self):
        if self.path is not None:
            self._fh.close()

    def read(self, J, m):
        """(len(J), m) int64: the integers of residuals J (each with m coordinates)."""
        starts = self.offsets[J]
        src = (
            self.array
            if self.path is None
            else np.memmap(self.path, dtype=np.int64, mode="r", shape=(self.total,))
        )
        if J.size and np.all(np.diff(starts) == m):
            out = np.array(src[int(starts[0]) : int(starts[0]) + m * J.size]).reshape(J.size, m)
        else:
            out = np.asarray(src[starts[:, None] + np.arange(m)[None, :]])
        del src  # the mapping is closed: its pages leave this process's resident set
        return out


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


class ResidualIndex:
    """Residual tuple → lattice index, vectorised: within each size the residuals are sorted,
    so their positional keys (base d+1) are too."""

    def __init__(self, lat):
        self.base, res = len(lat.domain) + 1, lat.residuals
        self.lo, self.keys, at = {}, {}, 0
        for k, grp in itertools.groupby(res, key=len):
            grp = list(grp)
            arr = np.array(grp, dtype=np.int64).reshape(len(grp), k)
            self.lo[k], self.keys[k] = at, self._key(arr)
            at += arr.shape[0]

    def _key(self, arr):
        key = np.zeros(arr.shape[0], dtype=np.int64)
        for j in range(arr.shape[1]):
            key = key * self.base + arr[:, j] + 1
        return key

    def __call__(self, Ts):
        """Lattice indices of the residuals in the rows of ``Ts`` (K × r), or ValueError."""
        k = Ts.shape[1]
        keys = self._key(Ts)
        have = self.keys.get(k, np.zeros(0, dtype=np.int64))
        at = np.searchsorted(have, keys)
        ok = at < have.size
        ok[ok] = have[at[ok]] == keys[ok]
        if not ok.all():
            raise ValueError(f"residual {tuple(Ts[~ok][0].tolist())} was not measured")
        return self.lo[k] + at
