"""What a streamed residual release holds, and its answers on demand (issue 24).

:class:`ResidualStore`: the stored values of every residual — δ > 0 the released integers
in draw order (:func:`matmech.measurements.residual.residual_batches`, int64, appended); pure ε
the orthonormal coordinates combined from the noisy tables (float64, added to in place) —
in one array or in a spill file (read and written with ``pread``/``pwrite``: the pages read
never enter the process's resident set) removed with the store. A spill file is authenticated
in blocks of :data:`BLOCK` values, each with an HMAC-SHA256 under a random key that only the
store holds, in memory (``docs/guide/threat-model.md``): every block read back is checked
first, so a file altered, truncated or swapped while the release lives raises
:class:`~matmech.privacy.integrity.IntegrityError` instead of changing an answer. How the
values are read (coordinates, exact variances) is the measurement plan's kind
(:mod:`matmech.results.streamed_kinds`).
:class:`ResidualIndex`: residual tuple → lattice index, vectorised.
:class:`MarginalRelease`: the result of
:func:`matmech.release_marginals`, answers and exact std reconstructed from
the store marginal by marginal (the closed form of :mod:`matmech.estimators.reconstruct`,
vectorised over marginals of equal attribute sizes; a std pattern per signature). All of it
holds only released values and the plan's layout: post-processing.

M̂_S = Σ_{T⊆S} (⊗_{i∈T} Qᵢᵀ ⊗ ⊗_{i∈S∖T} 1/nᵢ) ŷ_T (Xiao et al., NeurIPS 2023, §4). The per-cell
variance of a marginal is data-independent and depends only on its attribute sizes and the σ
of its residuals, so it is computed once per such *signature* (four for all ≤3-way marginals
of a uniform domain) and shared: exact per cell (the σ rounded at ``scale_bits`` bits make
cells differ by < 0.4%; pure ε: each residual's exact combined discrete Laplace variance).
"""

from __future__ import annotations

import functools
import hmac
import itertools
import json
import math
import os
import secrets
import tempfile
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from matmech.measurements.residual import LaplaceMeasurementPlan, ResidualMeasurementPlan
from matmech.results.streamed_kinds import kind_of
from matmech.measurements.table_batches import accumulate
from matmech.measurements.residual import MAX_MEMORY
from matmech.limits import check_disk, check_memory

from matmech import validate
from matmech.linalg.linop import LinOp
from matmech.linalg.residual import apply_axes_batched, contrast_operators, lift_row_variances
from matmech.privacy.integrity import IntegrityError
from matmech.results.release import Release, spent_dict


#: Cells of marginals reconstructed as one stack (bounds the temporaries).
CHUNK = 1 << 21
#: Lifted lower-order residuals kept for reuse by the reconstruction (bytes).
CACHE_BYTES = 256 << 20
#: Values per authenticated block of a spill file (64 KiB).
BLOCK = 1 << 13


class ResidualStore:
    """The stored values of every residual at ``offsets``: one array, or an authenticated
    spill file (:class:`SealedFile`). Gaussian: the released integers (int64), written in
    draw order (:meth:`write`, appended); ``accumulate``: float64 sums, zero to start, added
    to in place (:meth:`add`)."""

    def __init__(self, offsets, total, directory=None, *, accumulate=False):
        self.offsets, self.total = offsets, int(total)
        self.dtype = np.dtype(np.float64 if accumulate else np.int64)
        self.array: np.ndarray | None = None
        self.file: SealedFile | None = None
        self.path: str | None = None
        if directory is None:
            self.array = np.zeros(self.total, dtype=self.dtype)
        else:
            self.file = SealedFile(directory, self.total, self.dtype, zeros=accumulate)
            self.path = self.file.path

    def write(self, J, y):
        if self.array is not None:
            pos = self.offsets[J][:, None] + np.arange(y.shape[1])[None, :]
            self.array[pos] = y
            return
        self.file.append(y)  # type: ignore[union-attr]  # in draw order: an append

    def add(self, starts: np.ndarray, rows: np.ndarray) -> None:
        """Add ``rows[i]`` to the values from ``starts[i]`` on
        (:func:`matmech.measurements.table_batches.accumulate`: the same numbers in RAM or on disk;
        on disk the blocks touched are read and checked, added to and sealed again)."""
        if self.array is not None:
            accumulate(self.array, starts, rows)
            return
        if rows.size == 0 or self.file is None:
            return
        blocks, local, at = self.file.gather(starts, rows.shape[1])
        accumulate(local, at, rows)
        self.file.scatter(blocks, local)

    def close(self):
        if self.file is not None:
            self.file.finish()

    def read(self, J, m):
        """(len(J), m): the stored values of residuals J (each with m coordinates)."""
        starts = self.offsets[J]
        if self.array is not None:
            src, at = self.array, starts
        elif J.size == 0 or m == 0:
            return np.zeros((J.size, m), dtype=self.dtype)
        elif self.file is not None:
            _, src, at = self.file.gather(starts, m)
        else:
            raise RuntimeError("this ResidualStore holds neither an array nor a spill file")
        if J.size and np.all(np.diff(at) == m):
            return np.array(src[int(at[0]) : int(at[0]) + m * J.size]).reshape(J.size, m)
        return np.asarray(src[at[:, None] + np.arange(m)[None, :]])


def _blocks_of(starts: np.ndarray, m: int) -> np.ndarray:
    """The sorted blocks that the ranges [s, s + m) touch."""
    b0, b1 = starts // BLOCK, (starts + (m - 1)) // BLOCK
    if np.array_equal(b0, b1):
        return np.unique(b0)
    n = b1 - b0 + 1
    step = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    return np.unique(np.repeat(b0, n) + step)


class SealedFile:
    """A temporary file of ``total`` values of ``dtype``, in blocks of :data:`BLOCK` values,
    each sealed by an HMAC-SHA256 (the block's index and bytes) under a random key held only
    here, in memory. Read with :meth:`gather` (every block read is checked first), written by
    :meth:`append` (in order; :meth:`finish` seals the last block) or :meth:`scatter` (blocks
    rewritten and sealed again). ``zeros``: the file starts as zeros (a block never written
    must still read as zeros). The file (0600) is removed with the object."""

    def __init__(self, directory, total: int, dtype, *, zeros: bool):
        fd, self.path = tempfile.mkstemp(prefix="matmech-residuals-", suffix=".bin", dir=directory)
        self.total, self.dtype, self._fd = int(total), np.dtype(dtype), fd
        self._finalizer = weakref.finalize(self, _remove, self.path, fd)
        self._key = secrets.token_bytes(32)
        self.blocks = -(-self.total // BLOCK)
        self._macs: list[bytes | None] = [None] * self.blocks  # None: never written
        self._zeros, self._at, self._tail = zeros, 0, bytearray()
        if zeros:
            os.ftruncate(fd, self.dtype.itemsize * self.total)  # zeros, sparse on disk

    def _seal(self, i: int, data) -> bytes:
        mac = hmac.new(self._key, i.to_bytes(8, "big"), "sha256")
        mac.update(data)
        return mac.digest()

    def _size(self, i: int) -> int:
        """Bytes of block i (the last one may be short)."""
        return self.dtype.itemsize * min(BLOCK, self.total - i * BLOCK)

    def _refuse(self, why: str) -> IntegrityError:
        return IntegrityError(
            f"{self.path}: the spill file of this release {why}; no answer is read from it "
            "(make the release again)"
        )

    # -- writing -----------------------------------------------------------------------
    def append(self, values: np.ndarray) -> None:
        """Write ``values`` after those written so far and seal every block they complete."""
        data = np.ascontiguousarray(values, dtype=self.dtype).reshape(-1).view(np.uint8)
        _pwrite(self._fd, data, self._at)
        block = BLOCK * self.dtype.itemsize
        i, done = divmod(self._at, block)
        self._at += len(data)
        if done:  # complete the block begun by an earlier append
            take = min(len(data), block - done)
            self._tail += data[:take].data
            data = data[take:]
            if len(self._tail) < block:
                return
            self._macs[i] = self._seal(i, self._tail)
            self._tail, i = bytearray(), i + 1
        while len(data) >= block:
            self._macs[i] = self._seal(i, data[:block])
            data, i = data[block:], i + 1
        self._tail = bytearray(data)

    def finish(self) -> None:
        """Seal the last, partly filled block of an append-written file."""
        if self._tail:
            i = self._at // (BLOCK * self.dtype.itemsize)
            self._macs[i] = self._seal(i, self._tail)
            self._tail = bytearray()

    def scatter(self, blocks: np.ndarray, local: np.ndarray) -> None:
        """Write ``local`` (the blocks ``blocks``, concatenated, as :meth:`gather` gave them)
        back and seal them."""
        raw = local.view(np.uint8)
        at = 0
        for run in _runs(blocks):
            size = sum(self._size(int(i)) for i in run)
            _pwrite(self._fd, raw[at : at + size], int(run[0]) * BLOCK * self.dtype.itemsize)
            for i in run.tolist():
                n = self._size(i)
                self._macs[i] = self._seal(i, raw[at : at + n])
                at += n

    # -- reading -----------------------------------------------------------------------
    def gather(self, starts: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(blocks, their values concatenated and checked, each start's position in them)
        for the ranges [s, s + m): IntegrityError if a block does not verify."""
        starts = np.asarray(starts, dtype=np.int64)
        blocks = _blocks_of(starts, m)
        size = self.dtype.itemsize
        local = np.empty(sum(self._size(int(i)) for i in blocks) // size, self.dtype)
        raw = local.view(np.uint8)
        at = 0
        for run in _runs(blocks):
            want = sum(self._size(int(i)) for i in run)
            if _pread(self._fd, raw[at : at + want], int(run[0]) * BLOCK * size) < want:
                raise self._refuse("was truncated after matmech wrote it")
            for i in run.tolist():
                n, mac = self._size(i), self._macs[i]
                if mac is None:
                    if not self._zeros or local[at // size : (at + n) // size].any():
                        raise self._refuse(
                            f"was changed after matmech made it (block {i} of {self.blocks}, "
                            "never written, is not zeros)"
                        )
                elif not hmac.compare_digest(mac, self._seal(i, raw[at : at + n])):
                    raise self._refuse(
                        f"was changed after matmech wrote it (block {i} of {self.blocks} fails "
                        "its check)"
                    )
                at += n
        rank = np.searchsorted(blocks, starts // BLOCK)
        return blocks, local, rank * BLOCK + starts % BLOCK


def _runs(blocks: np.ndarray) -> list:
    """Sorted block ids cut into runs of consecutive ones."""
    return np.split(blocks, np.flatnonzero(np.diff(blocks) != 1) + 1) if blocks.size else []


_SEEK_LOCK = threading.Lock()  # where there is no pread/pwrite (Windows): seek, then read


def _os_pwrite(fd: int, data, offset: int) -> int:
    if hasattr(os, "pwrite"):
        return os.pwrite(fd, data, offset)
    with _SEEK_LOCK:  # pragma: no cover - Windows
        os.lseek(fd, offset, os.SEEK_SET)
        return os.write(fd, data)


def _os_pread(fd: int, n: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, n, offset)
    with _SEEK_LOCK:  # pragma: no cover - Windows
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, n)


def _pwrite(fd: int, data: np.ndarray, offset: int) -> None:
    while len(data):
        n = _os_pwrite(fd, data.data, offset)
        data, offset = data[n:], offset + n


def _pread(fd: int, buf: np.ndarray, offset: int) -> int:
    """Fill ``buf`` (uint8) from ``offset``; the bytes read (fewer at the end of the file)."""
    got = 0
    while got < len(buf):
        chunk = _os_pread(fd, len(buf) - got, offset + got)
        if not chunk:
            break
        buf[got : got + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
        got += len(chunk)
    return got


def _remove(path, fd=None):
    for undo in ((lambda: os.close(fd)) if fd is not None else None, lambda: os.remove(path)):
        if undo is not None:
            try:
                undo()
            except OSError:
                pass


class ResidualIndex:
    """Residual tuple → lattice index, vectorised: within each size the residuals are sorted,
    so their positional keys (base d+1) are too."""

    def __init__(self, lat):
        self.base, res = len(lat.domain) + 1, lat.residuals
        self.lo, self.keys, at = {}, {}, 0
        for k, group in itertools.groupby(res, key=len):
            grp = list(group)
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


@dataclass(frozen=True, eq=False)
class MarginalRelease:
    """A residual release of marginals, reconstructed marginal by marginal.

    ``marginal(S)`` → (values, std) of any marginal whose residuals were measured (every
    subset of a workload term), arrays of shape (nᵢ for i ∈ S); ``iter_marginals()`` yields
    ``(S, values, std)`` for W's terms in order (scaled by the term's weight: flattened and
    concatenated they are W's rows); ``save(path)`` writes them to ``answers.npy``,
    ``std.npy`` and ``index.json``; ``to_release()`` is the in-memory
    :class:`matmech.results.release.Release` when it fits. ``subsets``/``weights``: W's terms;
    ``offsets[k]``: the first row of term k. Holds only the stored residuals and the plan.

    Parameters
    ----------
    workload : LinOp
        W, a union of marginals.
    subsets, weights : tuple, numpy.ndarray
        W's terms (sorted attribute tuples) and their row weights.
    measurement_plan : ResidualMeasurementPlan or LaplaceMeasurementPlan
        The noise of every residual (δ > 0) or table (pure ε) and the privacy parameters
        (data-independent; its kind, :mod:`matmech.results.streamed_kinds`, says how the
        store is read).
    store : ResidualStore
        The stored residuals (released integers, or pure-ε combined coordinates), in RAM
        or in a file.
    eps, delta, neighbors, budget_remaining, secure, strategy_note
        What was spent and how.

    Returns
    -------
    MarginalRelease
        Built by :func:`matmech.release_marginals` (the streamed plan's
        result); its methods return numpy arrays (``marginal``, ``interval``), a
        :class:`~matmech.results.release.Release` (``to_release``) or the directory (``save``).

    Raises
    ------
    ValueError
        ``marginal(S)`` for attributes out of range or a residual that was not measured;
        ``to_release()`` above ``max_memory``; ``save(path)`` with too little free disk.

    Examples
    --------
    >>> from matmech import release_marginals, workloads
    >>> codes = np.random.default_rng(0).integers(0, 3, size=(500, 4))
    >>> rel = release_marginals(codes, workloads.marginals([3] * 4, 2), 1.0, 1e-6)
    >>> [a.shape for a in rel.marginal((0, 1))]
    [(3, 3), (3, 3)]
    """

    workload: LinOp = field(repr=False)
    subsets: tuple = field(repr=False)
    weights: np.ndarray = field(repr=False)
    measurement_plan: ResidualMeasurementPlan | LaplaceMeasurementPlan = field(repr=False)
    store: ResidualStore = field(repr=False)
    eps: float = 0.0
    delta: float = 0.0
    neighbors: str = "add_remove"
    budget_remaining: tuple | None = None
    secure: bool = True
    strategy_note: str = ""
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    # -- sizes ---------------------------------------------------------------------------
    @property
    def domain(self) -> tuple:
        return self.measurement_plan.plan.lattice.domain

    @functools.cached_property
    def offsets(self) -> np.ndarray:
        """First row of each term of W (and the row count at the end; computed once)."""
        d = self.domain
        sizes = [math.prod(d[i] for i in S) for S in self.subsets]
        out = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        out.setflags(write=False)
        return out

    @property
    def rows(self) -> int:
        return int(self.offsets[-1])

    @property
    def expected_error(self) -> float:
        """Σ over W's rows of the exact answer variances (squared counts)."""
        total = 0.0
        for k, end, Ss, shape in self._chunks():
            _, ids, pats = self._chunk(Ss, shape, values=False)
            sums = np.array([float(np.sum(p**2)) for p in pats])
            total += float(np.dot(self.weights[k:end] ** 2, sums[ids]))
        return total

    # -- reconstruction ------------------------------------------------------------------
    def _subset(self, S) -> tuple[tuple, tuple]:
        """(S sorted, the axes that put the sorted marginal in ``S``'s order); TypeError for
        anything but a sequence of integers, ValueError for repeated or out-of-range ones."""
        asked = validate.subset(S, "S", len(self.domain))
        order = tuple(sorted(asked))
        return order, tuple(order.index(a) for a in asked)

    def marginal(self, S) -> tuple[np.ndarray, np.ndarray]:
        """(values, std) of the marginal on ``S`` (attribute indices; unweighted), its axes
        in the order of ``S``: ``marginal((1, 0))`` is ``marginal((0, 1))`` transposed."""
        S, axes = self._subset(S)
        shape = tuple(self.domain[i] for i in S)
        est, ids, pats = self._chunk(np.array([S], dtype=np.int64).reshape(1, len(S)), shape)
        values = est[0]
        values.setflags(write=False)
        return values.transpose(axes), pats[ids[0]].transpose(axes)

    def interval(self, S, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) of the marginal on ``S`` at ``level`` (axes in the order of
        ``S``), as :meth:`matmech.results.release.Release.interval` gives
        (:mod:`matmech.estimators.answer_noise`): from the law of the draws actually made:
        pure ε the tables' discrete Laplace draws (every cell of a marginal shares it),
        (ε, δ) the residual rows' discrete Gaussians."""
        validate.real(level, "level")
        S, axes = self._subset(S)
        values, std = self.marginal(S)
        half = self._noise_law.marginal_half(S, std, level)
        return (values - half).transpose(axes), (values + half).transpose(axes)

    @functools.cached_property
    def _noise_law(self):
        """The answers' noise law (:mod:`matmech.estimators.answer_noise`); data-independent."""
        return self._kind.noise_law(self.measurement_plan, self.subsets, self.weights)

    def iter_marginals(self) -> Iterator[tuple[tuple, np.ndarray, np.ndarray]]:
        """(S, values, std) for every term of W in order, values × the term's weight and std
        × its absolute value; terms of equal attribute sizes reconstructed as one stack."""
        for k, end, Ss, shape in self._chunks():
            est, ids, pats = self._chunk(Ss, shape)
            for r in range(end - k):
                w = float(self.weights[k + r])
                v = est[r] * w if w != 1.0 else est[r]
                v.setflags(write=False)
                s = pats[ids[r]]
                yield self.subsets[k + r], v, (s * abs(w) if w != 1.0 else s)

    def _chunks(self):
        """(first, end, subsets as a (K × k) array, attribute sizes): consecutive terms of W
        with equal attribute sizes, at most :data:`CHUNK` cells a chunk."""
        d, k = self.domain, 0
        while k < len(self.subsets):
            shape = tuple(d[i] for i in self.subsets[k])
            step = max(1, CHUNK // max(1, math.prod(shape)))
            end = k + 1
            while (
                end < len(self.subsets)
                and end - k < step
                and tuple(d[i] for i in self.subsets[end]) == shape
            ):
                end += 1
            yield (
                k,
                end,
                np.array(self.subsets[k:end], dtype=np.int64).reshape(end - k, len(shape)),
                shape,
            )
            k = end

    def to_release(self, *, max_memory: int = MAX_MEMORY) -> Release:
        """The in-memory :class:`matmech.results.release.Release` (answers and std of every row of W,
        in order); ValueError when they need more than ``max_memory`` bytes."""
        validate.integer(max_memory, "max_memory", min=1)
        need = 16 * self.rows
        if need > max_memory:
            raise ValueError(
                f"the release has {self.rows:,} answers: with their std {need / 2**30:.1f} GiB "
                f"(> max_memory {max_memory / 2**30:.1f} GiB); use marginal(), iter_marginals() or save()"
            )
        check_memory(
            need,
            f"the {self.rows:,} answers and their std",
            after="; use marginal(), iter_marginals() or save()",
        )
        answers, std = np.empty(self.rows), np.empty(self.rows)
        for (S, v, s), lo, hi in zip(self.iter_marginals(), self.offsets[:-1], self.offsets[1:]):
            answers[lo:hi], std[lo:hi] = v.reshape(-1), s.reshape(-1)
        for a in (answers, std):
            a.setflags(write=False)
        kept = ("workload", "strategy_note", "eps", "delta", "neighbors", "budget_remaining")
        return Release(
            answers=answers,
            std=std,
            expected_error=float(np.dot(std, std)),
            strategy=None,
            strategy_name="residual",
            measurement=None,
            estimate=None,
            noise_law=self._noise_law,
            **{k: getattr(self, k) for k in kept},
        )

    def save(self, path) -> Path:
        """Write ``answers.npy`` and ``std.npy`` (float64, W's rows in order; read them with
        ``numpy.load(..., mmap_mode="r")``) and ``index.json`` (domain, terms, row offsets,
        privacy parameters) into the directory ``path`` (created). Returns the directory."""
        out = validate.path(path)
        out.mkdir(parents=True, exist_ok=True)
        check_disk(16 * self.rows + (1 << 20), out, f"saving {self.rows:,} answers and their std")
        header = {"descr": "<f8", "fortran_order": False, "shape": (self.rows,)}
        with open(out / "answers.npy", "wb") as fa, open(out / "std.npy", "wb") as fs:
            np.lib.format.write_array_header_2_0(fa, header)
            np.lib.format.write_array_header_2_0(fs, header)
            for _, v, s in self.iter_marginals():
                np.ascontiguousarray(v, dtype=np.float64).tofile(fa)
                np.ascontiguousarray(s, dtype=np.float64).tofile(fs)
        index = {
            "domain": list(self.domain),
            "subsets": [list(S) for S in self.subsets],
            "weights": [float(w) for w in self.weights],
            "offsets": [int(o) for o in self.offsets],
            "eps": self.eps,
            "delta": self.delta,
            "neighbors": self.neighbors,
            "strategy": "residual",
            "note": self.strategy_note,
            "noise": self._kind.noise,
            "secure_randomness": self.secure,
        }
        (out / "index.json").write_text(json.dumps(index) + "\n")
        return out

    def residual(self, T) -> tuple[np.ndarray, np.ndarray]:
        """(stored values, their exact noise variances) of residual ``T``, for re-analysis:
        δ > 0 the released integers H_T x + Z in the row order of ⊗_{i∈T} Hᵢ
        (:mod:`matmech.measurements.residual`); pure ε the orthonormal coordinates Q_T x + noise
        combined from the noisy tables (:mod:`matmech.measurements.table_batches`)."""
        index = self._aux()
        T, axes = self._subset(T)
        if axes != tuple(range(len(T))):  # a flat vector: no axes to put in the asked order
            raise ValueError(
                f"T must list its attributes in increasing order (the stored row order), got "
                f"{tuple(T[a] for a in axes)}; ask for {T}"
            )
        j = index(np.array([T], dtype=np.int64).reshape(1, len(T)))
        sub = tuple(self.domain[i] for i in T)
        y = self.store.read(j, math.prod(n - 1 for n in sub))[0]
        v = float(self._variances[int(j[0])])
        return y, self._kind.stored_variances(self.measurement_plan, sub, v)

    def to_dict(self) -> dict:
        """A JSON-ready summary (no answers: :meth:`save` writes those): privacy spent, the
        plan, the noise, the size and the expected error."""
        rows = self.rows
        err = self.expected_error
        strategy, noise_ = self._kind.summary(self.measurement_plan, self.secure)
        return {
            **spent_dict(self, err, rows),
            "marginals": len(self.subsets),
            "strategy": {**strategy, "note": self.strategy_note},
            "noise": noise_,
            "residuals_on_disk": self.store.path is not None,
        }

    def __repr__(self):
        return (
            f"MarginalRelease({len(self.subsets):,} marginals, {self.rows:,} answers, "
            f"eps={self.eps:g}, delta={self.delta:g}, residuals "
            f"{'in memory' if self.store.path is None else 'on disk'})"
        )

    # -- the measurement kind (matmech.results.streamed_kinds) ----------------------------
    @property
    def _kind(self):
        return kind_of(self.measurement_plan)

    @functools.cached_property
    def _variances(self) -> np.ndarray:
        """One number per residual that fixes its coordinates' variances."""
        return self._kind.variances(self.measurement_plan)

    # -- closed form (Xiao et al. 2023, §4), vectorised over marginals of one shape ---------
    def _aux(self):
        if "index" not in self._cache:
            self._cache["index"] = ResidualIndex(self.measurement_plan.plan.lattice)
            self._cache["lifted"], self._cache["bytes"] = {}, 0
        return self._cache["index"]

    def _lift(self, J, sub):
        """(len(J), *sub) float64: the noisy residuals J (attribute sizes ``sub``) in the
        marginal's cells, Qᵀ applied on every axis to y/λ."""
        m = math.prod(n - 1 for n in sub)
        y = self._kind.coordinates(self.measurement_plan, self.store.read(J, m), sub)
        coords = y.reshape(J.size, *(n - 1 for n in sub))
        return apply_axes_batched(coords, [contrast_operators(n)[1] for n in sub])

    def _lower(self, J, sub):
        """Lifted residuals J (shared by many marginals): from the cache, the missing ones
        lifted as one stack; the cache is emptied past :data:`CACHE_BYTES`."""
        lifted = self._cache["lifted"]
        uniq, inv = np.unique(J, return_inverse=True)
        missing = np.array([j for j in uniq.tolist() if j not in lifted], dtype=np.int64)
        if missing.size:
            if self._cache["bytes"] > CACHE_BYTES:
                lifted.clear()
                self._cache["bytes"] = 0
                missing = uniq
            for j, arr in zip(missing.tolist(), self._lift(missing, sub)):
                lifted[j] = arr
                self._cache["bytes"] += arr.nbytes
        return np.stack([lifted[j] for j in uniq.tolist()])[inv.reshape(-1)]

    def _chunk(self, Ss, shape, *, values=True):
        """(estimates (K, *shape) or None, pattern id per marginal, std patterns) of the
        marginals in the rows of ``Ss``: the residual sum of :mod:`matmech.estimators.reconstruct`
        term by term; a std pattern per distinct signature (the σ of its residuals)."""
        index = self._aux()
        K, k = Ss.shape
        masks = [
            m
            for r in range(k + 1)
            for m in itertools.combinations(range(k), r)
            if all(shape[j] > 1 for j in m)
        ]
        u = self._variances
        sig = np.empty((K, len(masks)))
        est = np.zeros((K, *shape)) if values else None
        for c, mask in enumerate(masks):
            J = index(Ss[:, list(mask)])
            sig[:, c] = u[J]
            if not values:
                continue
            sub = tuple(shape[j] for j in mask)
            e = self._lift(J, sub) if len(mask) == k else self._lower(J, sub)
            view = (K, *(shape[j] if j in mask else 1 for j in range(k)))
            rest = math.prod(shape[j] for j in range(k) if j not in mask)
            est += e.reshape(view) / rest
        uniq, ids = np.unique(sig, axis=0, return_inverse=True)
        pats = [self._pattern(shape, masks, tuple(row)) for row in uniq.tolist()]
        return est, ids.reshape(-1), pats

    def _pattern(self, shape, masks, sig):
        """Exact per-cell std of a marginal with attribute sizes ``shape`` whose residual
        ``masks[c]`` has plan variance ``sig[c]`` (read-only, cached)."""
        patterns = self._cache.setdefault("std", {})
        key = (shape, sig)
        if key not in patterns:
            if self._cache.get("std bytes", 0) > CACHE_BYTES:  # e.g. a max-variance plan:
                patterns.clear()  # σ differ from residual to residual
                self._cache["std bytes"] = 0
            k = len(shape)
            var = np.zeros(shape)
            for m, v in zip(masks, sig):
                sub = tuple(shape[j] for j in m)
                rowvar = self._kind.row_variances(self.measurement_plan, sub, v)
                rowvar = rowvar.reshape(tuple(n - 1 for n in sub))
                e = lift_row_variances(sub, rowvar)
                rest = math.prod(shape[j] for j in range(k) if j not in m)
                var += e.reshape(tuple(shape[j] if j in m else 1 for j in range(k))) / rest**2
            std = np.sqrt(var)
            std.setflags(write=False)
            patterns[key] = std
            self._cache["std bytes"] = self._cache.get("std bytes", 0) + std.nbytes
        return patterns[key]
