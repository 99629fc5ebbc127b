"""Residual releases larger than memory, marginal by marginal (issue 24).

All ≤3-way marginals of 200 attributes × 10 values are 1.3·10⁹ answers: their float64 values
and std alone are 19.6 GiB. :func:`release_marginals` runs the residual plan of
:mod:`matmech.factored.release` (Xiao et al., NeurIPS 2023) in bounded memory:

* measurement batch by batch (:func:`matmech.factored.measure.residual_batches`, the same
  batches and draws as the in-memory :func:`~matmech.factored.measure.measure_residuals`):
  the tables of one batch are counted, contrasted and noised, and the released integers
  kept in RAM when they fit, else appended to a file (``spill_dir``);
* reconstruction on demand (:class:`MarginalRelease`): ``marginal(S)``, ``iter_marginals()``,
  ``save(path)``, ``to_release()``; the closed form of
  :mod:`matmech.factored.reconstruct` (M̂_S = Σ_{T⊆S} (⊗_{i∈T} Qᵢᵀ ⊗ ⊗_{i∈S∖T} 1/nᵢ) ŷ_T),
  vectorised over marginals of equal attribute sizes.

The per-cell variance of a marginal is data-independent and depends only on its attribute
sizes and the σ of its residuals, so it is computed once per such *signature* (four for all
≤3-way marginals of a uniform domain) and shared: exact per cell (the σ rounded to
``scale_bits`` bits make cells differ by < 1%), stored per marginal. The budget is charged
once, after every check (memory, disk, record codes, record count) and before the first draw.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from matmech.factored.measure import (
    _SCALE_MARGIN,
    DEFAULT_SCALE_BITS,
    ResidualMeasurementPlan,
    _row_keys,
    bucket_up,
    measure_batch,
    plan_residual_measurement,
    residual_batches,
)
from matmech.factored.release import MAX_MEMORY, _residual_plan
from matmech.factored.store import ResidualIndex, ResidualStore
from matmech.factored.tables import table_reader
from matmech.factored.terms import MarginalWorkload, as_terms
from matmech.linalg.linop import LinOp
from matmech.linalg.residual import apply_axes, apply_axes_batched, contrast_operators
from matmech.privacy import noise
from matmech.privacy.budget import check_affordable, check_budget
from matmech.privacy.confidence import normal_intervals
from matmech.privacy.measure import check_counts, check_max_records, check_records
from matmech.privacy.params import check_neighbors, check_privacy_params
from matmech.record import Release

__all__ = ["release_marginals", "MarginalRelease", "streamed_memory", "CACHE_BYTES"]

#: Cells of marginals reconstructed as one stack (bounds the temporaries).
_CHUNK = 1 << 21
#: Bytes the plan holds per residual and per (marginal, residual) pair (measured at 200
#: attributes: 1.3·10⁶ residuals, 1.1·10⁷ pairs, 1.2 GiB).
_PLAN_BYTES = (600, 48)
#: Bytes per coordinate of one measurement batch at its peak (tables, contrasts, noise, order).
_BATCH_BYTES = 120
#: Lifted lower-order residuals kept for reuse by the reconstruction (bytes).
CACHE_BYTES = 256 << 20


def streamed_memory(plan, *, in_ram: bool) -> int:
    """Bytes :func:`release_marginals` holds at its peak, about (records not included): the
    plan, one measurement batch (2**22 coordinates), the reconstruction's stack and cache,
    and the released integers when ``in_ram`` (8 bytes a coordinate)."""
    lat = plan.lattice
    fixed = _PLAN_BYTES[0] * len(lat.residuals) + _PLAN_BYTES[1] * lat.pair_s.size
    coords = int(lat.sizes.sum())
    batch = _BATCH_BYTES * min(1 << 22, coords) + 64 * min(_CHUNK, int(plan.queries))
    return int(fixed + batch + min(CACHE_BYTES, 16 * coords) + (8 * coords if in_ram else 0))


@dataclass(frozen=True, eq=False)
class MarginalRelease:
    """A residual release of marginals, reconstructed marginal by marginal.

    ``marginal(S)`` → (values, std) of any marginal whose residuals were measured (every
    subset of a workload term), arrays of shape (nᵢ for i ∈ S); ``iter_marginals()`` yields
    ``(S, values, std)`` for W's terms in order (scaled by the term's weight: flattened and
    concatenated they are W's rows); ``save(path)`` writes them to ``answers.npy``,
    ``std.npy`` and ``index.json``; ``to_release()`` is the in-memory
    :class:`matmech.record.Release` when it fits. ``subsets``/``weights``: W's terms;
    ``offsets[k]``: the first row of term k. Holds only the released integers and the plan.

    Parameters
    ----------
    workload : LinOp
        W, a union of marginals.
    subsets, weights : tuple, numpy.ndarray
        W's terms (sorted attribute tuples) and their row weights.
    measurement_plan : ResidualMeasurementPlan
        σ per residual and the privacy parameters (data-independent).
    store : ResidualStore
        The released integers (:mod:`matmech.factored.store`), in RAM or in a file.
    eps, delta, neighbors, budget_remaining, secure, strategy_note
        What was spent and how.

    Examples
    --------
    >>> import itertools, numpy as np
    >>> from matmech.factored.streamed import release_marginals
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
    measurement_plan: ResidualMeasurementPlan = field(repr=False)
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

    @property
    def offsets(self) -> np.ndarray:
        """First row of each term of W (and the row count at the end)."""
        d = self.domain
        sizes = [math.prod(d[i] for i in S) for S in self.subsets]
        return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])

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
        S = tuple(sorted(int(a) for a in S))
        if len(set(S)) != len(S) or any(not 0 <= a < len(self.domain) for a in S):
            raise ValueError(
                f"S must hold distinct attribute indices in 0..{len(self.domain) - 1}, got {S}"
            )
        shape = tuple(self.domain[i] for i in S)
        est, ids, pats = self._chunk(np.array([S], dtype=np.int64).reshape(1, len(S)), shape)
        values = est[0]
        values.setflags(write=False)
        return values, pats[ids[0]]

    def interval(self, S, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) of the marginal on ``S`` at ``level``: values ∓ z·std, the normal
        quantile, as :meth:`matmech.record.Release.interval` gives for residual answers."""
        values, std = self.marginal(S)
        half = normal_intervals(std.reshape(-1), level).half.reshape(std.shape)
        return values - half, values + half

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
        )

    def save(self, path) -> Path:
        """Write ``answers.npy`` and ``std.npy`` (float64, W's rows in order; read them with
        ``numpy.load(..., mmap_mode="r")``) and ``index.json`` (domain, terms, row offsets,
        privacy parameters) into the directory ``path`` (created). Returns the directory."""
        out = Path(path)
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
            "noise": "discrete_gaussian",
            "secure_randomness": self.secure,
        }
        (out / "index.json").write_text(json.dumps(index) + "\n")
        return out

    def residual(self, T) -> tuple[np.ndarray, np.ndarray]:
        """(released integers H_T x + Z, their exact noise variances) of residual ``T``, in
        the row order of ⊗_{i∈T} Hᵢ (:mod:`matmech.factored.measure`): the measurement itself,
        for re-analysis."""
        index = self._aux()
        T = tuple(sorted(int(a) for a in T))
        j = index(np.array([T], dtype=np.int64).reshape(1, len(T)))
        sub = tuple(self.domain[i] for i in T)
        y = self.store.read(j, math.prod(n - 1 for n in sub))[0]
        l2, cls = _row_keys(sub, range(len(sub)))
        v = float(self.measurement_plan.plan.variances[int(j[0])])
        return y, self._row_variances(sub, v) * l2[cls]

    def to_dict(self) -> dict:
        """A JSON-ready summary (no answers: :meth:`save` writes those): privacy spent, the
        plan, the noise, the size and the expected error."""
        mp = self.measurement_plan
        rows = self.rows
        err = self.expected_error
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
            "strategy": {
                "name": "residual",
                "note": self.strategy_note,
                "residuals": len(mp.plan.lattice.residuals),
                "objective": mp.plan.objective,
            },
            "noise": {
                "distribution": "discrete_gaussian",
                "scale": mp.sigma,
                "per": "unit residual variance",
                "scale_bits": mp.scale_bits,
                "sensitivity": mp.sensitivity,
                "secure_randomness": self.secure,
            },
            "residuals_on_disk": self.store.path is not None,
        }

    def __repr__(self):
        return (
            f"MarginalRelease({len(self.subsets):,} marginals, {self.rows:,} answers, "
            f"eps={self.eps:g}, delta={self.delta:g}, residuals "
            f"{'in memory' if self.store.path is None else 'on disk'})"
        )

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
        y = self.store.read(J, m).astype(np.float64)
        lam = self._cache.get(("lam", sub))
        if lam is None:
            l2, cls = _row_keys(sub, range(len(sub)))
            lam = self._cache[("lam", sub)] = np.sqrt(l2[cls])
        coords = (y / lam).reshape(J.size, *(n - 1 for n in sub))
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
        u = np.asarray(self.measurement_plan.plan.variances, dtype=np.float64)
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
                rowvar = self._row_variances(sub, v).reshape(tuple(n - 1 for n in sub))
                e = apply_axes(rowvar, [contrast_operators(n)[2] for n in sub])
                rest = math.prod(shape[j] for j in range(k) if j not in m)
                var += e.reshape(tuple(shape[j] if j in m else 1 for j in range(k))) / rest**2
            std = np.sqrt(var)
            std.setflags(write=False)
            patterns[key] = std
            self._cache["std bytes"] = self._cache.get("std bytes", 0) + std.nbytes
        return patterns[key]

    def _row_variances(self, sub, v):
        """Exact variance of each orthonormal coordinate of a residual with attribute sizes
        ``sub`` and plan variance ``v``: Var(Z_j)/λ_j², τ_j as :func:`residual_batches`."""
        mp = self.measurement_plan
        l2, cls = _row_keys(sub, range(len(sub)))
        sig = np.sqrt(np.array([v])) * mp.sigma
        tau = bucket_up(sig[:, None] * np.sqrt(l2)[None, :] * _SCALE_MARGIN, mp.scale_bits)[0]
        var = np.array([noise.discrete_gaussian_variance(float(t)) for t in tau.tolist()])
        return (var / l2)[cls]


class _Marginals:
    """A :class:`MarginalWorkload` read as :class:`~matmech.factored.terms.Terms` are
    (``domain``, ``rows``, ``marginals()``) without one kind per attribute and term (10⁸
    tuples entries at 200 attributes)."""

    def __init__(self, W):
        self.domain, self.rows = W.domain, W.shape[0]
        self._m = (list(W.subsets), [float(w) for w in W.weights])

    def marginals(self):
        return self._m


def release_marginals(
    data,
    W,
    eps,
    delta,
    *,
    budget=None,
    rng=None,
    neighbors="add_remove",
    max_records=None,
    objective="sum",
    max_memory=MAX_MEMORY,
    scale_bits=DEFAULT_SCALE_BITS,
    spill_dir=None,
) -> MarginalRelease:
    """Answer W (a union of marginals, any size) under (ε, δ)-DP with the residual plan, in
    bounded memory → :class:`MarginalRelease`.

    The same plan, noise and draws as :func:`matmech.factored.release_factored`'s residual
    path (equal answers for equal ``rng``), but the answers are reconstructed on demand.

    Parameters
    ----------
    data : numpy.ndarray or Mapping
        Records as a 2-D integer code array (records × attributes), or a mapping subset →
        marginal table (checked before the spend). Data engines are refused: their tables
        would be checked batch by batch after the spend.
    W : LinOp
        A union of marginals (:func:`matmech.factored.marginal_workload` or Kron terms of
        identities and totals).
    eps, delta : float
        The privacy parameters (delta > 0: the measurement is Gaussian).
    budget, rng, neighbors, max_records, objective, scale_bits
        As :func:`matmech.factored.release_factored`.
    max_memory : int
        Bytes the release may hold (:func:`streamed_memory`); the released integers stay in
        RAM when they fit with the rest, else they go to a file in ``spill_dir``.
    spill_dir : str or None
        Where the released integers go: None keeps them in RAM when they fit, else in a file
        in the system's temporary directory; a directory always puts them in a file there.
        The file is removed with the release.

    Returns
    -------
    MarginalRelease

    Raises
    ------
    ValueError
        Before any spend: delta = 0, W not a union of marginals, the working set over
        ``max_memory``, too little disk for the spill file, records beyond ``max_records``.

    Examples
    --------
    >>> import itertools, numpy as np
    >>> from matmech.factored.streamed import release_marginals
    >>> from matmech.factored.terms import marginal_workload
    >>> codes = np.random.default_rng(0).integers(0, 3, size=(500, 4))
    >>> W = marginal_workload((3,) * 4, list(itertools.combinations(range(4), 2)))
    >>> rel = release_marginals(codes, W, 1.0, 1e-6, rng=np.random.default_rng(1))
    >>> rel.rows
    54
    """
    eps, delta = check_privacy_params(eps, delta)
    if delta == 0:
        raise ValueError(
            "release_marginals measures residuals with Gaussian noise: it needs delta > 0 "
            "(pure eps marginals: matmech.factored.release_factored)"
        )
    check_neighbors(neighbors)
    check_budget(budget)
    max_records = check_max_records(max_records)
    noise.check_rng(rng)
    wt = _Marginals(W) if isinstance(W, MarginalWorkload) else as_terms(W, name="W")
    if wt.marginals() is None:
        raise ValueError(
            "release_marginals needs W to be a union of marginals (identity and total factors)"
        )
    plan, subsets, rw = _residual_plan(wt, objective)
    mplan = plan_residual_measurement(
        plan, eps, delta, neighbors=neighbors, max_records=max_records, scale_bits=scale_bits
    )
    lat = plan.lattice
    total = int(lat.sizes.sum())
    in_ram = spill_dir is None and streamed_memory(plan, in_ram=True) <= max_memory
    need = streamed_memory(plan, in_ram=in_ram)
    if need > max_memory:
        raise ValueError(
            f"the streamed residual release would hold about {need / 2**30:.1f} GiB (> max_memory "
            f"{max_memory / 2**30:.1f} GiB) for {len(lat.residuals):,} residuals; nothing was spent"
        )
    directory = None if in_ram else (tempfile.gettempdir() if spill_dir is None else spill_dir)
    if directory is not None and shutil.disk_usage(directory).free < 8 * total + (1 << 30):
        raise ValueError(
            f"the released integers need {8 * total / 2**30:.1f} GiB on disk and {directory} has "
            "less free; pass spill_dir= (nothing was spent)"
        )
    what = f"release {wt.rows} marginal queries (residual, streamed)"
    check_affordable(budget, eps, delta, what=what)
    # -- reads data from here on -------------------------------------------------------------
    reader = table_reader(data, wt.domain, engines=False)  # every check on the data, once
    reader.check_covers(lat.residuals)
    count = reader([()])[()]
    check_records(check_counts(np.atleast_1d(count), 1, name="the record count"), mplan.max_records)
    offsets, at = np.empty(len(lat.residuals), dtype=np.int64), 0
    for batch in residual_batches(mplan):  # storage in draw order (data-independent)
        m = int(batch.cls.size)
        offsets[batch.J] = at + m * np.arange(batch.J.size)
        at += m * batch.J.size
    store = ResidualStore(offsets, total, directory)
    if budget is not None:
        budget.spend(eps, delta, what=what)
    src = noise.check_rng(rng)
    try:
        for batch in residual_batches(mplan):
            tables = reader([lat.residuals[j] for j in batch.J.tolist()])
            y, _ = measure_batch(mplan, batch, tables, src)
            del tables
            store.write(batch.J, y)
    finally:
        store.close()
    note = (
        f"residual basis of Xiao et al. 2023 ({len(lat.residuals)} residuals, {objective} of "
        f"variances, {plan.weighted_total / plan.svd_bound:.6f} × the SVD bound); exact discrete "
        f"Gaussian, σ₁ = {mplan.sigma:.6g} per unit scale, sensitivity {mplan.sensitivity:.6g}; "
        "reconstructed marginal by marginal"
    )
    return MarginalRelease(
        workload=W,
        subsets=tuple(tuple(s) for s in subsets),
        weights=np.asarray(rw, dtype=np.float64),
        measurement_plan=mplan,
        eps=eps,
        delta=delta,
        neighbors=neighbors,
        budget_remaining=None if budget is None else budget.remaining,
        secure=bool(src.secure),
        strategy_note=note,
        store=store,
    )
