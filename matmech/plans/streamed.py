"""Residual releases larger than memory, marginal by marginal (issue 24).

All ≤3-way marginals of 200 attributes × 10 values are 1.3·10⁹ answers: their float64 values
and std alone are 19.6 GiB. :func:`release_marginals` runs the residual plan of
:mod:`matmech.plans.factored` (Xiao et al., NeurIPS 2023) in bounded memory, under
(ε, δ) or pure ε:

* measurement batch by batch, the same batches and draws as the in-memory release; how is
  the measurement plan's kind (:mod:`matmech.results.streamed_kinds`): δ > 0, residuals
  counted, contrasted and noised (:func:`matmech.measurements.residual.residual_batches`), the
  released integers appended; δ = 0, weighted marginal tables noised with discrete Laplace
  and added into the residuals they contain
  (:class:`matmech.measurements.table_batches.TableBatches`), the noisy tables dropped. The
  store is kept in RAM when it fits, else in a file (``spill_dir``);
* reconstruction on demand (:class:`~matmech.results.store.MarginalRelease`):
  ``marginal(S)``, ``iter_marginals()``, ``save(path)``, ``to_release()``.

The budget is charged
once, after every check (memory, disk, record codes, record count) and before the first draw:
:func:`release_marginals` is the :class:`StreamedPlan` run by
:func:`matmech.run.runner.run_plan`, which hands it the source's checked lazy reader.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from matmech.measurements.residual import (
    DEFAULT_SCALE_BITS,
    LaplaceMeasurementPlan,
    ResidualMeasurementPlan,
)
from matmech.measurements.residual import MAX_MEMORY
from matmech.plans.residual import check_search, lattice_plan, noise_plan
from matmech.results.store import CHUNK, CACHE_BYTES, MarginalRelease, ResidualStore
from matmech.results.streamed_kinds import kind_of
from matmech.linalg.terms import MarginalWorkload, as_terms
from matmech.limits import check_disk, check_memory, memory_room

from matmech import validate
from matmech.linalg.linop import LinOp
from matmech.plans.plan import Draws, MeasuredPlan, check_record_count
from matmech.privacy import noise
from matmech.privacy.measure import check_max_records
from matmech.privacy.params import check_neighbors, check_privacy_params

if TYPE_CHECKING:
    pass


#: Bytes the plan holds per residual and per (marginal, residual) pair (measured at 200
#: attributes: 1.3·10⁶ residuals, 1.1·10⁷ pairs, 1.2 GiB).
_PLAN_BYTES = (600, 48)
#: Bytes per coordinate of one measurement batch at its peak (tables, contrasts, noise, order).
_BATCH_BYTES = 120


def streamed_memory(plan, *, in_ram: bool, extra: int = 0) -> int:
    """Bytes :func:`release_marginals` holds at its peak, about (records not included): the
    plan (``plan`` the lattice plan; ``extra`` bytes of its measurement plan, e.g. the
    pure-ε (table, residual) pairs), one measurement batch (2**22 coordinates or table
    cells), the reconstruction's stack and cache, and the stored residuals when ``in_ram``
    (8 bytes a coordinate)."""
    lat = plan.lattice
    fixed = _PLAN_BYTES[0] * len(lat.residuals) + _PLAN_BYTES[1] * lat.pair_s.size + int(extra)
    coords = int(lat.sizes.sum())
    d = lat.domain
    tables = getattr(plan, "tables", None)
    largest = max((math.prod(d[i] for i in t) for t in lat.residuals), default=1)
    table = max((math.prod(d[i] for i in t) for t in tables), default=1) if tables else largest
    # a batch or a reconstruction chunk is at least one table or one marginal, however large
    batch = _BATCH_BYTES * max(min(1 << 22, coords), table) + 64 * max(
        min(CHUNK, int(plan.queries)), largest
    )
    return int(fixed + batch + min(CACHE_BYTES, 16 * coords) + (8 * coords if in_ram else 0))


class _Marginals:
    """A :class:`MarginalWorkload` read as :class:`~matmech.linalg.terms.Terms` are
    (``domain``, ``rows``, ``marginals()``) without one kind per attribute and term (10⁸
    tuples entries at 200 attributes)."""

    def __init__(self, W):
        self.domain, self.rows = W.domain, W.shape[0]
        self._m = (list(W.subsets), [float(w) for w in W.weights])

    def marginals(self):
        return self._m


@dataclass(frozen=True, eq=False)
class StreamedPlan(MeasuredPlan):
    """The streamed residual release as a plan (:class:`~matmech.plans.plan.Plan` with
    ``lazy = True``), run by :func:`matmech.run.runner.run_plan`: the source's checked
    reader, the record count checked, then the measurement batch by batch into a
    :class:`~matmech.results.store.ResidualStore`; its result is a :class:`MarginalRelease`.
    How the batches are measured and the store is read is the measurement plan's kind
    (:mod:`matmech.results.streamed_kinds`: residuals with discrete Gaussian noise for
    δ > 0, marginal tables with discrete Laplace noise combined into the residuals for pure
    ε). ``marginals``: W's subsets and their row weights; ``subsets``: the tables the
    measurement reads (and the total); ``directory``: where the store goes (None: RAM)."""

    workload: LinOp = field(repr=False)
    measurement: ResidualMeasurementPlan | LaplaceMeasurementPlan = field(repr=False)
    marginals: tuple = field(repr=False)
    sizes: tuple
    subsets: tuple = field(repr=False)
    rows: int
    directory: str | None
    note: str = ""
    #: bytes a data engine's scans may hold before the spend (tables + one chunk; its own
    #: buffers a quarter more): half what max_memory leaves beside the plan (the rest: the
    #: process, DuckDB and the chunk's temporaries), at least 128 MiB
    scan_memory: int = 1 << 30
    lazy: ClassVar[bool] = True

    @property
    def what(self) -> str:
        return f"release {self.rows} marginal queries (residual, streamed)"

    def check(self, reader):
        check_record_count(reader([()])[()], self.measurement.max_records)
        kind = kind_of(self.measurement)
        offsets, total = kind.layout(self.measurement)  # data-independent
        return reader, ResidualStore(offsets, total, self.directory, accumulate=kind.accumulate)

    def draw(self, checked, *, rng) -> Draws:
        """Every batch: its tables read and measured into the store (the measurement plan's
        kind). The records stay in the store (:meth:`MarginalRelease.residual`), so
        ``Draws.records`` is empty."""
        reader, store = checked
        src = noise.check_rng(rng)
        try:
            kind_of(self.measurement).measure(self.measurement, reader, store, src)
        finally:
            store.close()
        return Draws((), (store, bool(src.secure)))

    def estimate(self, draws: Draws) -> MarginalRelease:
        """The reconstruction on demand: a :class:`MarginalRelease` over the store."""
        store, secure = draws.state
        subsets, weights = self.marginals
        return MarginalRelease(
            workload=self.workload,
            subsets=tuple(tuple(s) for s in subsets),
            weights=np.asarray(weights, dtype=np.float64),
            measurement_plan=self.measurement,
            eps=self.eps,
            delta=self.delta,
            neighbors=self.neighbors,
            secure=secure,
            strategy_note=self.note,
            store=store,
        )

    def result(self, est: MarginalRelease, *, budget_remaining) -> MarginalRelease:
        return replace(est, budget_remaining=budget_remaining)


def streamed_plan(
    W,
    eps,
    delta,
    *,
    neighbors="add_remove",
    max_records=None,
    objective="sum",
    max_memory=MAX_MEMORY,
    scale_bits=DEFAULT_SCALE_BITS,
    spill_dir=None,
    search="auto",
) -> StreamedPlan:
    """The :class:`StreamedPlan` of W (data-independent): every check that needs no data —
    W a union of marginals, the noise within the exact samplers' range, the working set
    within ``max_memory``, the disk for the spill file — raises here, before anything is
    read or spent. δ > 0: residuals with discrete Gaussian noise; δ = 0: marginal tables
    with discrete Laplace noise (the plan of :func:`matmech.release.release_factored`'s
    pure-ε residual path). Options as :func:`release_marginals`."""
    eps, delta = check_privacy_params(eps, delta)
    check_neighbors(neighbors)
    max_records = check_max_records(max_records)
    check_search(search)
    max_memory = validate.integer(max_memory, "max_memory", min=1)
    if scale_bits is not None:
        validate.integer(scale_bits, "scale_bits", min=2, max=40)
    if spill_dir is not None and not validate.path(spill_dir, "spill_dir").is_dir():
        raise ValueError(f"spill_dir must be an existing directory, got {spill_dir!r}")
    wt = _Marginals(W) if isinstance(W, MarginalWorkload) else as_terms(W, name="W")
    if wt.marginals() is None:
        raise ValueError(
            "release_marginals needs W to be a union of marginals (identity and total factors)"
        )
    plan, subsets, rw = lattice_plan(wt, delta, objective, search)
    mplan, note, reads = noise_plan(
        plan,
        wt,
        eps,
        delta,
        neighbors=neighbors,
        max_records=max_records,
        objective=objective,
        scale_bits=scale_bits,
        search=search,
    )
    note += "; reconstructed marginal by marginal"
    extra = kind_of(mplan).extra_bytes(mplan)
    lat = plan.lattice
    total = int(lat.sizes.sum())
    room = min(max_memory, memory_room().bytes)  # the stored residuals in RAM only if they fit
    in_ram = spill_dir is None and streamed_memory(plan, in_ram=True, extra=extra) <= room
    need = streamed_memory(plan, in_ram=in_ram, extra=extra)
    if need > max_memory:
        raise ValueError(
            f"the streamed residual release would hold about {need / 2**30:.1f} GiB (> max_memory "
            f"{max_memory / 2**30:.1f} GiB) for {len(lat.residuals):,} residuals; nothing was spent"
        )
    what = f"the streamed residual release ({len(lat.residuals):,} residuals)"
    check_memory(need, what, after="; nothing was spent")
    directory = None if in_ram else (tempfile.gettempdir() if spill_dir is None else spill_dir)
    if directory is not None:
        check_disk(
            8 * total + (1 << 30),
            directory,
            f"the stored residuals (a file in {directory}; pass spill_dir=)",
            after="; nothing was spent",
        )
    fixed = streamed_memory(plan, in_ram=False, extra=extra)
    return StreamedPlan(
        W,
        mplan,
        (subsets, rw),
        tuple(wt.domain),
        reads + ((),),
        int(wt.rows),
        directory,
        note,
        scan_memory=max(128 << 20, (max_memory - fixed) // 2),
    )
