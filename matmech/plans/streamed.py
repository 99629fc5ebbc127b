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
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from matmech.measurements.residual import (
    DEFAULT_SCALE_BITS,
    LaplaceMeasurementPlan,
    ResidualMeasurementPlan,
)
from matmech.plans.residual import MAX_MEMORY, check_search, given_search, lattice_plan, noise_plan
from matmech.results.store import _CHUNK, CACHE_BYTES, MarginalRelease, ResidualStore
from matmech.results.streamed_kinds import kind_of
from matmech.linalg.terms import MarginalWorkload, as_terms
from matmech.limits import check_disk, check_memory, memory_room

from matmech import validate
from matmech.linalg.linop import LinOp
from matmech.plans.plan import Draws, MeasuredPlan, check_record_count
from matmech.run.runner import run_plan
from matmech.sources.source import as_source
from matmech.privacy import noise
from matmech.privacy.budget import check_budget, privacy_target
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
        min(_CHUNK, int(plan.queries)), largest
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
    with discrete Laplace noise (the plan of :func:`matmech.plans.factored.release_factored`'s
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
    return StreamedPlan(
        W, mplan, (subsets, rw), tuple(wt.domain), reads + ((),), int(wt.rows), directory, note
    )


def release_marginals(
    data: Any,
    W: LinOp,
    eps: float | None = None,
    delta: float | None = None,
    *,
    budget: PrivacyBudget | None = None,
    rng: Rng = None,
    neighbors: str = "add_remove",
    max_records: int | None = None,
    objective: str = "sum",
    max_memory: int = MAX_MEMORY,
    scale_bits: int = DEFAULT_SCALE_BITS,
    spill_dir: str | None = None,
    search: str = "auto",
) -> MarginalRelease:
    """Answer W (a union of marginals, any size) under (ε, δ)-DP or pure ε-DP with the
    residual plan, in bounded memory → :class:`MarginalRelease`.

    The same plan, noise and draws as :func:`matmech.plans.factored.release_factored`'s
    residual path (equal answers for equal ``rng``), but the answers are reconstructed on
    demand. δ > 0: every residual measured with exact discrete Gaussian noise; δ = 0: the
    weighted marginal tables of the pure-ε plan with exact discrete Laplace noise, each
    batch combined into the residuals (inverse-variance means) as it is drawn, the noisy
    tables dropped. It is the :class:`StreamedPlan` run by
    :func:`matmech.run.runner.run_plan`: affordability → the data checked once → one
    spend → draws batch by batch.

    Parameters
    ----------
    data : numpy.ndarray or Mapping
        Records as a 2-D integer code array (records × attributes), a mapping subset →
        marginal table, or a histogram (1-D counts over the cells), all checked once before
        the spend. Data engines are refused: their tables would be checked batch by batch
        after the spend.
    W : LinOp
        A union of marginals (:func:`matmech.linalg.terms.marginal_workload` or Kron terms
        of identities and totals).
    eps, delta : float
        The privacy parameters (delta > 0: Gaussian residuals; delta = 0: pure ε, Laplace
        tables). Both left out with ``budget`` a share (``budget.split(k)``): all of the
        share, as :func:`matmech.release` takes it (Gaussian residuals at the (ε, δ) its ρ
        implies; ``delta=0``: pure ε = sqrt(2ρ)).
    budget : PrivacyBudget, optional
        Charged its privacy events once (the residuals' discrete Gaussian: its zCDP ρ under
        the ``"zcdp"`` accountant), after every check and before the first draw.
    rng : numpy.random.Generator or None
        The randomness (None: the secure default, an AES-256 CTR_DRBG seeded from os.urandom; a seeded generator is NOT secure).
    neighbors, max_records, objective, scale_bits
        As :func:`matmech.plans.factored.release_factored` (pure ε: ``objective="sum"``
        only; ``scale_bits`` rounds the Laplace scales up).
    max_memory : int
        Bytes the release may hold (:func:`streamed_memory`); the stored residuals stay in
        RAM when they fit with the rest, else they go to a file in ``spill_dir``.
    spill_dir : str or None
        Where the stored residuals go: None keeps them in RAM when they fit, else in a file
        in the system's temporary directory; a directory always puts them in a file there.
        The file is removed with the release.
    search : str
        Pure ε: the tables' weights over the lattice (``"lattice"``) or every attribute
        subset (``"all"``); ``"auto"`` as :func:`~matmech.plans.factored.release_factored`
        (given tables without the full table: ``"lattice"``).

    Returns
    -------
    MarginalRelease
        The answers on demand (``marginal(S)``, ``iter_marginals()``, ``save(path)``,
        ``to_release()``); std in the units of the answers (counts).

    Raises
    ------
    ValueError
        Before any spend: W not a union of marginals, eps too small for the exact samplers,
        the working set over ``max_memory``, too little disk for the spill file, bad record
        codes or tables, records beyond ``max_records``.
    TypeError
        A data engine (nothing is read or spent).
    BudgetExceededError
        The budget cannot afford (eps, delta); nothing is read.

    Examples
    --------
    >>> import itertools, numpy as np
    >>> from matmech import release_marginals
    >>> from matmech.linalg.terms import marginal_workload
    >>> codes = np.random.default_rng(0).integers(0, 3, size=(500, 4))
    >>> W = marginal_workload((3,) * 4, list(itertools.combinations(range(4), 2)))
    >>> rel = release_marginals(codes, W, 1.0, 1e-6, rng=np.random.default_rng(1))
    >>> rel.rows
    54
    >>> pure = release_marginals(codes, W, 1.0, 0.0, rng=np.random.default_rng(1))
    >>> pure.delta, pure.marginal((0, 1))[1].shape
    (0.0, (3, 3))
    """
    check_budget(budget)
    if eps is None or delta is None:
        target = privacy_target(eps, delta, budget)
        eps, delta = target.eps, target.delta
    noise.check_rng(rng)
    source = as_source(data, name="data")
    if search == "auto":  # an unknown search is refused by streamed_plan
        d = len(W.domain if isinstance(W, MarginalWorkload) else as_terms(W, name="W").domain)
        search = given_search(source, d, search)
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
        search=search,
    )
    return run_plan(plan, source, budget=budget, rng=rng)
