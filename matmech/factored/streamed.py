"""Residual releases larger than memory, marginal by marginal (issue 24).

All ≤3-way marginals of 200 attributes × 10 values are 1.3·10⁹ answers: their float64 values
and std alone are 19.6 GiB. :func:`release_marginals` runs the residual plan of
:mod:`matmech.factored.release` (Xiao et al., NeurIPS 2023) in bounded memory:

* measurement batch by batch (:func:`matmech.factored.measure.residual_batches`, the same
  batches and draws as the in-memory :func:`~matmech.factored.measure.measure_residuals`):
  the tables of one batch are counted, contrasted and noised, and the released integers
  kept in RAM when they fit, else appended to a file (``spill_dir``);
* reconstruction on demand (:class:`~matmech.factored.store.MarginalRelease`):
  ``marginal(S)``, ``iter_marginals()``, ``save(path)``, ``to_release()``.

The budget is charged
once, after every check (memory, disk, record codes, record count) and before the first draw:
:func:`release_marginals` is the :class:`StreamedPlan` run by
:func:`matmech.pipeline.run.run_plan`, which hands it the source's checked lazy reader.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from matmech.factored.measure import (
    DEFAULT_SCALE_BITS,
    ResidualMeasurementPlan,
    measure_batch,
    plan_residual_measurement,
    residual_batches,
)
from matmech.factored.release import MAX_MEMORY, _residual_plan
from matmech.factored.store import _CHUNK, CACHE_BYTES, MarginalRelease, ResidualStore
from matmech.factored.terms import MarginalWorkload, as_terms
from matmech.linalg.linop import LinOp
from matmech.pipeline.plan import Draws, MeasuredPlan, check_record_count
from matmech.pipeline.run import run_plan
from matmech.pipeline.source import as_source
from matmech.privacy import noise
from matmech.privacy.budget import check_budget
from matmech.privacy.measure import check_max_records
from matmech.privacy.params import check_neighbors, check_privacy_params

if TYPE_CHECKING:
    from matmech.privacy.budget import PrivacyBudget
    from matmech.privacy.randomness import Rng

__all__ = [
    "release_marginals",
    "MarginalRelease",
    "StreamedPlan",
    "streamed_plan",
    "streamed_memory",
]

#: Bytes the plan holds per residual and per (marginal, residual) pair (measured at 200
#: attributes: 1.3·10⁶ residuals, 1.1·10⁷ pairs, 1.2 GiB).
_PLAN_BYTES = (600, 48)
#: Bytes per coordinate of one measurement batch at its peak (tables, contrasts, noise, order).
_BATCH_BYTES = 120


def streamed_memory(plan, *, in_ram: bool) -> int:
    """Bytes :func:`release_marginals` holds at its peak, about (records not included): the
    plan, one measurement batch (2**22 coordinates), the reconstruction's stack and cache,
    and the released integers when ``in_ram`` (8 bytes a coordinate)."""
    lat = plan.lattice
    fixed = _PLAN_BYTES[0] * len(lat.residuals) + _PLAN_BYTES[1] * lat.pair_s.size
    coords = int(lat.sizes.sum())
    batch = _BATCH_BYTES * min(1 << 22, coords) + 64 * min(_CHUNK, int(plan.queries))
    return int(fixed + batch + min(CACHE_BYTES, 16 * coords) + (8 * coords if in_ram else 0))


class _Marginals:
    """A :class:`MarginalWorkload` read as :class:`~matmech.factored.terms.Terms` are
    (``domain``, ``rows``, ``marginals()``) without one kind per attribute and term (10⁸
    tuples entries at 200 attributes)."""

    def __init__(self, W):
        self.domain, self.rows = W.domain, W.shape[0]
        self._m = (list(W.subsets), [float(w) for w in W.weights])

    def marginals(self):
        return self._m


@dataclass(frozen=True, eq=False)
class StreamedPlan(MeasuredPlan):
    """The streamed residual release as a plan (:class:`~matmech.pipeline.plan.Plan` with
    ``lazy = True``), run by :func:`matmech.pipeline.run.run_plan`: the source's checked
    reader, the record count checked, then the residuals measured batch by batch
    (:func:`~matmech.factored.measure.residual_batches`) into a
    :class:`~matmech.factored.store.ResidualStore`; its result is a :class:`MarginalRelease`.
    ``marginals``: W's subsets and their row weights; ``directory``: where the released
    integers go (None: in RAM)."""

    workload: LinOp = field(repr=False)
    measurement: ResidualMeasurementPlan = field(repr=False)
    marginals: tuple = field(repr=False)
    sizes: tuple
    subsets: tuple = field(repr=False)
    rows: int
    directory: str | None
    note: str = ""
    lazy: ClassVar[bool] = True

    @property
    def what(self) -> str:
        return f"release {self.rows} marginal queries (residual, streamed)"

    def check(self, reader):
        check_record_count(reader([()])[()], self.measurement.max_records)
        mplan, offsets, at = self.measurement, np.empty(len(self.subsets) - 1, dtype=np.int64), 0
        for batch in residual_batches(mplan):  # storage in draw order (data-independent)
            m = int(batch.cls.size)
            offsets[batch.J] = at + m * np.arange(batch.J.size)
            at += m * batch.J.size
        return reader, ResidualStore(offsets, at, self.directory)

    def draw(self, checked, *, rng) -> Draws:
        """Every batch: its tables read, contrasted, noised and stored. The records stay in
        the store (:meth:`MarginalRelease.residual`), so ``Draws.records`` is empty."""
        reader, store = checked
        src, residuals = noise.check_rng(rng), self.subsets
        try:
            for batch in residual_batches(self.measurement):
                tables = reader([residuals[j] for j in batch.J.tolist()])
                y, _ = measure_batch(self.measurement, batch, tables, src)
                del tables
                store.write(batch.J, y)
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
) -> StreamedPlan:
    """The :class:`StreamedPlan` of W (data-independent): every check that needs no data —
    delta > 0, W a union of marginals, the working set within ``max_memory``, the disk for
    the spill file — raises here, before anything is read or spent. Options as
    :func:`release_marginals`."""
    eps, delta = check_privacy_params(eps, delta)
    if delta == 0:
        raise ValueError(
            "release_marginals measures residuals with Gaussian noise: it needs delta > 0 "
            "(pure eps marginals: matmech.factored.release_factored)"
        )
    check_neighbors(neighbors)
    max_records = check_max_records(max_records)
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
    note = (
        f"residual basis of Xiao et al. 2023 ({len(lat.residuals)} residuals, {objective} of "
        f"variances, {plan.weighted_total / plan.svd_bound:.6f} × the SVD bound); exact discrete "
        f"Gaussian, σ₁ = {mplan.sigma:.6g} per unit scale, sensitivity {mplan.sensitivity:.6g}; "
        "reconstructed marginal by marginal"
    )
    return StreamedPlan(
        W,
        mplan,
        (subsets, rw),
        tuple(wt.domain),
        tuple(lat.residuals) + ((),),
        int(wt.rows),
        directory,
        note,
    )


def release_marginals(
    data: Any,
    W: LinOp,
    eps: float,
    delta: float,
    *,
    budget: PrivacyBudget | None = None,
    rng: Rng = None,
    neighbors: str = "add_remove",
    max_records: int | None = None,
    objective: str = "sum",
    max_memory: int = MAX_MEMORY,
    scale_bits: int = DEFAULT_SCALE_BITS,
    spill_dir: str | None = None,
) -> MarginalRelease:
    """Answer W (a union of marginals, any size) under (ε, δ)-DP with the residual plan, in
    bounded memory → :class:`MarginalRelease`.

    The same plan, noise and draws as :func:`matmech.factored.release.release_factored`'s
    residual path (equal answers for equal ``rng``), but the answers are reconstructed on
    demand. It is the :class:`StreamedPlan` run by :func:`matmech.pipeline.run.run_plan`:
    affordability → the data checked once → one spend → draws batch by batch.

    Parameters
    ----------
    data : numpy.ndarray or Mapping
        Records as a 2-D integer code array (records × attributes), a mapping subset →
        marginal table, or a histogram (1-D counts over the cells), all checked once before
        the spend. Data engines are refused: their tables would be checked batch by batch
        after the spend.
    W : LinOp
        A union of marginals (:func:`matmech.factored.terms.marginal_workload` or Kron terms
        of identities and totals).
    eps, delta : float
        The privacy parameters (delta > 0: the measurement is Gaussian).
    budget : PrivacyBudget, optional
        Charged once, after every check and before the first draw.
    rng : numpy.random.Generator or None
        The randomness (None: the secure default, an AES-256 CTR_DRBG seeded from os.urandom; a seeded generator is NOT secure).
    neighbors, max_records, objective, scale_bits
        As :func:`matmech.factored.release.release_factored`.
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
        The answers on demand (``marginal(S)``, ``iter_marginals()``, ``save(path)``,
        ``to_release()``).

    Raises
    ------
    ValueError
        Before any spend: delta = 0, W not a union of marginals, the working set over
        ``max_memory``, too little disk for the spill file, bad record codes or tables,
        records beyond ``max_records``.
    TypeError
        A data engine (nothing is read or spent).
    BudgetExceededError
        The budget cannot afford (eps, delta); nothing is read.

    Examples
    --------
    >>> import itertools, numpy as np
    >>> from matmech.factored import release_marginals
    >>> from matmech.factored.terms import marginal_workload
    >>> codes = np.random.default_rng(0).integers(0, 3, size=(500, 4))
    >>> W = marginal_workload((3,) * 4, list(itertools.combinations(range(4), 2)))
    >>> rel = release_marginals(codes, W, 1.0, 1e-6, rng=np.random.default_rng(1))
    >>> rel.rows
    54
    """
    check_budget(budget)
    noise.check_rng(rng)
    plan = streamed_plan(
        W,
        eps,
        delta,
        neighbors=neighbors,
        max_records=max_records,
        objective=objective,
        max_memory=max_memory,
        scale_bits=scale_bits,
        spill_dir=spill_dir,
    )
    return run_plan(plan, as_source(data), budget=budget, rng=rng)
