"""What a streamed residual release holds, and its answers on demand (issue 24).

:class:`ResidualStore`: the stored values of every residual — δ > 0 the released integers
in draw order (:func:`matmech.factored.measure.residual_batches`, int64, appended); pure ε
the orthonormal coordinates combined from the noisy tables (float64, added to in place) —
in one array or in a file read through a mapping opened per read (the pages read leave the
process's resident set) and removed with the store. How the values are read (coordinates,
exact variances) is the measurement plan's kind (:mod:`matmech.factored.streamed_kinds`).
:class:`ResidualIndex`: residual tuple → lattice index, vectorised.
:class:`MarginalRelease`: the result of
:func:`matmech.factored.streamed.release_marginals`, answers and exact std reconstructed from
the store marginal by marginal (the closed form of :mod:`matmech.factored.reconstruct`,
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
import itertools
import json
import math
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from matmech.factored.measure import LaplaceMeasurementPlan, ResidualMeasurementPlan
from matmech.factored.streamed_kinds import kind_of
from matmech.factored.table_batches import accumulate
from matmech.factored.release import MAX_MEMORY
from matmech import validate
from matmech.linalg.linop import LinOp
from matmech.linalg.residual import apply_axes_batched, contrast_operators, lift_row_variances
from matmech.record import Release

__all__ = ["ResidualStore", "ResidualIndex", "MarginalRelease", "CACHE_BYTES"]

#: Cells of marginals reconstructed as one stack (bounds the temporaries).
_CHUNK = 1 << 21
#: Lifted lower-order residuals kept for reuse by the reconstruction (bytes).
CACHE_BYTES = 256 << 20


class ResidualStore:
    """The stored values of every residual at ``offsets``: one array, or a file read through
    a mapping opened per read (so the pages read leave the resident set). Gaussian: the
    released integers (int64), written in draw order (:meth:`write`, appended to the file);
    ``accumulate``: float64 sums, zero to start, added to in place (:meth:`add`)."""

    def __init__(self, offsets, total, directory=None, *, accumulate=False):
        self.offsets, self.total, self._fh = offsets, int(total), None
        self.dtype = np.dtype(np.float64 if accumulate else np.int64)
        if directory is None:
            self.path, self.array = None, np.zeros(self.total, dtype=self.dtype)
            return
        fd, self.path = tempfile.mkstemp(prefix="matmech-residuals-", suffix=".bin", dir=directory)
        os.close(fd)
        self.array, self._at = None, 0
        self._finalizer = weakref.finalize(self, _remove, self.path)
        if accumulate:
            os.truncate(self.path, self.dtype.itemsize * self.total)  # zeros, sparse on disk
        else:
            self._fh = open(self.path, "wb")

    def write(self, J, y):
        if self.path is None:
            pos = self.offsets[J][:, None] + np.arange(y.shape[1])[None, :]
            self.array[pos] = y
            return
        y.tofile(self._fh)  # batches arrive in draw order: an append
        self._at += y.size

    def add(self, starts: np.ndarray, rows: np.ndarray) -> None:
        """Add ``rows[i]`` to the values from ``starts[i]`` on
        (:func:`matmech.factored.table_batches.accumulate`: the same numbers in RAM or on disk)."""
        if self.path is None:
            accumulate(self.array, starts, rows)
            return
        mm = np.memmap(self.path, dtype=self.dtype, mode="r+", shape=(self.total,))
        accumulate(mm, starts, rows)
        del mm  # unmapped (the kernel writes the shared pages back): they leave the resident set

    def close(self):
        if self._fh is not None:
            self._fh.close()

    def read(self, J, m):
        """(len(J), m): the stored values of residuals J (each with m coordinates)."""
        starts = self.offsets[J]
        src = (
            self.array
            if self.path is None
            else np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.total,))
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


@dataclass(frozen=True, eq=False)
class MarginalRelease:
    """A residual release of marginals, reconstructed marginal by marginal.

    ``marginal(S)`` → (values, std) of any marginal whose residuals were measured (every
    subset of a workload term), arrays of shape (nᵢ for i ∈ S); ``iter_marginals()`` yields
    ``(S, values, std)`` for W's terms in order (scaled by the term's weight: flattened and
    concatenated they are W's rows); ``save(path)`` writes them to ``answers.npy``,
    ``std.npy`` and ``index.json``; ``to_release()`` is the in-memory
    :class:`matmech.record.Release` when it fits. ``subsets``/``weights``: W's terms;
    ``offsets[k]``: the first row of term k. Holds only the stored residuals and the plan.

    Parameters
    ----------
    workload : LinOp
        W, a union of marginals.
    subsets, weights : tuple, numpy.ndarray
        W's terms (sorted attribute tuples) and their row weights.
    measurement_plan : ResidualMeasurementPlan or LaplaceMeasurementPlan
        The noise of every residual (δ > 0) or table (pure ε) and the privacy parameters
        (data-independent; its kind, :mod:`matmech.factored.streamed_kinds`, says how the
        store is read).
    store : ResidualStore
        The stored residuals (released integers, or pure-ε combined coordinates), in RAM
        or in a file.
    eps, delta, neighbors, budget_remaining, secure, strategy_note
        What was spent and how.

    Returns
    -------
    MarginalRelease
        Built by :func:`matmech.factored.streamed.release_marginals` (the streamed plan's
        result); its methods return numpy arrays (``marginal``, ``interval``), a
        :class:`~matmech.record.Release` (``to_release``) or the directory (``save``).

    Raises
    ------
    ValueError
        ``marginal(S)`` for attributes out of range or a residual that was not measured;
        ``to_release()`` above ``max_memory``; ``save(path)`` with too little free disk.

    Examples
    --------
    >>> import itertools, numpy as np
    >>> from matmech.factored import release_marginals
    >>> from matmech.factored.terms import marginal_workload
    >>> codes = np.random.default_rng(0).integers(0, 3, size=(500, 4))
    >>> W = marginal_workload((3,) * 4, list(itertools.combinations(range(4), 2)))
    >>> rel = release_marginals(codes, W, 1.0, 1e-6, rng=np.random.default_rng(1))
    >>> values, std = rel.marginal((0, 1))
    >>> values.shape, std.shape
    ((3, 3), (3, 3))
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
    def marginal(self, S) -> tuple[np.ndarray, np.ndarray]:
        """(values, std) of the marginal on ``S`` (attribute indices; unweighted)."""
        S = tuple(sorted(validate.subset(S, "S", len(self.domain))))
        shape = tuple(self.domain[i] for i in S)
        est, ids, pats = self._chunk(np.array([S], dtype=np.int64).reshape(1, len(S)), shape)
        values = est[0]
        values.setflags(write=False)
        return values, pats[ids[0]]

    def interval(self, S, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) of the marginal on ``S`` at ``level``, as
        :meth:`matmech.record.Release.interval` gives (:mod:`matmech.factored.answer_noise`):
        from the law of the draws actually made: pure ε the tables' discrete Laplace draws
        (every cell of a marginal shares it), (ε, δ) the residual rows' discrete Gaussians."""
        validate.real(level, "level")
        values, std = self.marginal(S)
        half = self._noise_law.marginal_half(S, std, level)
        return values - half, values + half

    @functools.cached_property
    def _noise_law(self):
        """The answers' noise law (:mod:`matmech.factored.answer_noise`); data-independent."""
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
        with equal attribute sizes, at most :data:`_CHUNK` cells a chunk."""
        d, k = self.domain, 0
        while k < len(self.subsets):
            shape = tuple(d[i] for i in self.subsets[k])
            step = max(1, _CHUNK // max(1, math.prod(shape)))
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
        """The in-memory :class:`matmech.record.Release` (answers and std of every row of W,
        in order); ValueError when they need more than ``max_memory`` bytes."""
        validate.integer(max_memory, "max_memory", min=1)
        need = 16 * self.rows
        if need > max_memory:
            raise ValueError(
                f"the release has {self.rows:,} answers: with their std {need / 2**30:.1f} GiB "
                f"(> max_memory {max_memory / 2**30:.1f} GiB); use marginal(), iter_marginals() or save()"
            )
        answers, std = np.empty(self.rows), np.empty(self.rows)
        for (S, v, s), lo, hi in zip(self.iter_marginals(), self.offsets[:-1], self.offsets[1:]):
            answers[lo:hi], std[lo:hi] = v.reshape(-1), s.reshape(-1)
        for a in (answers, std):
            a.setflags(write=False)
        return Release(
            answers=answers,
            std=std,
            expected_error=float(np.dot(std, std)),
            workload=self.workload,
            strategy=None,
            strategy_name="residual",
            strategy_note=self.strategy_note,
            eps=self.eps,
            delta=self.delta,
            neighbors=self.neighbors,
            budget_remaining=self.budget_remaining,
            measurement=None,
            estimate=None,
            noise_law=self._noise_law,
        )

    def save(self, path) -> Path:
        """Write ``answers.npy`` and ``std.npy`` (float64, W's rows in order; read them with
        ``numpy.load(..., mmap_mode="r")``) and ``index.json`` (domain, terms, row offsets,
        privacy parameters) into the directory ``path`` (created). Returns the directory."""
        out = validate.path(path)
        out.mkdir(parents=True, exist_ok=True)
        need = 16 * self.rows + (1 << 20)
        if shutil.disk_usage(out).free < need:
            raise ValueError(f"saving needs {need / 2**30:.1f} GiB free on {out}")
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
        (:mod:`matmech.factored.measure`); pure ε the orthonormal coordinates Q_T x + noise
        combined from the noisy tables (:mod:`matmech.factored.table_batches`)."""
        index = self._aux()
        T = tuple(sorted(validate.subset(T, "T", len(self.domain))))
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
            "eps": self.eps,
            "delta": self.delta,
            "neighbors": self.neighbors,
            "budget_remaining": None
            if self.budget_remaining is None
            else list(self.budget_remaining),
            "expected_error": err,
            "rmse": math.sqrt(err / rows) if rows else None,
            "answered": rows,
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

    # -- the measurement kind (matmech.factored.streamed_kinds) ----------------------------
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
        marginals in the rows of ``Ss``: the residual sum of :mod:`matmech.factored.reconstruct`
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
