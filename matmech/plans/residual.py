"""The tables route's residual plan for a union of marginals (data-independent until run).

The residual basis of Xiao et al. (NeurIPS 2023) measured from marginal tables: under
(ε, δ) each residual with exact discrete Gaussian noise (the Gaussian optimum, which attains
the SVD bound), under pure ε weighted marginal tables with exact discrete Laplace noise
(HDMM's OPT_M, McKenna et al. VLDB 2018 §6.3), each residual the inverse-variance mean of the
tables that contain it; answers reconstructed in closed form
(:class:`~matmech.estimators.reconstruct.MarginalReconstructor`). The lattice plan (noise
scales per residual or table weights) is :func:`matmech.optimizers.residual.marginal_lattice_plan`;
this module adds the exact noise, the memory check and the :class:`ResidualPlan` that
:func:`matmech.run.runner.run_plan` runs. Shared by :func:`matmech.release`, the factored
release, the planner's plans and the streamed release.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from matmech.measurements.residual import (
    LaplaceMeasurementPlan,
    ResidualMeasurementPlan,
    laplace_table_records,
    measure_residuals,
    residual_measurement_of,
    plan_residual_laplace,
    plan_residual_measurement,
)
from matmech.estimators.reconstruct import MarginalReconstructor
from matmech.results.streamed_kinds import kind_of
from matmech.limits import check_memory
from matmech.linalg.linop import LinOp
from matmech.linalg.residual import total_variance_coefficients
from matmech.linalg.terms import as_terms
from matmech.optimizers.residual import (
    marginal_lattice_plan,
    table_search,
)
from matmech.plans.plan import Draws, Estimate, MeasuredPlan, check_record_count
from matmech.privacy.params import check_neighbors, check_privacy_params


def _cells(domain, U):
    return math.prod(domain[i] for i in U)


#: Cells the measurement draws in one batch and the reconstruction builds in one stack, at
#: least one table or marginal (matmech.measurements.residual, table_batches, reconstruct).
_BATCH_CELLS = 1 << 22
#: Bytes per cell of the largest batch of the draw (sampler output, stacked tables, parts
#: summed out of them) and of the largest stack of the reconstruction (lifted values and
#: variances, their products): measured peaks, rounded up (benchmarks/release_memory.py).
_DRAW_TEMP, _STACK_TEMP = 40, 64
#: Bytes any release holds whatever its size: the exact samplers' tables
#: (matmech.privacy.draws.FIXED_BYTES), the plan's objects, worker threads' stacks and
#: allocator arenas (address space, which ``ulimit -v`` bounds).
_FIXED = 192 << 20

#: What a refusal for size says: nothing was spent, and the release that fits.
MARGINAL_BY_MARGINAL = (
    "; nothing was spent. A union of marginals this large is answered marginal by marginal "
    "(pure eps or delta > 0): `from matmech import release_marginals; rel = "
    "release_marginals(data, W, eps, delta, budget=budget, rng=rng)` (data: the record codes, "
    "a mapping of marginal tables or the histogram) returns a MarginalRelease: "
    "rel.marginal(S), rel.iter_marginals(), rel.save(path)"
)


def residual_memory(plan, W_subsets, rows) -> int:
    """Bytes the in-memory residual release (:class:`ResidualPlan` run by
    :func:`~matmech.run.runner.run_plan`) allocates at its peak, about; data-independent.
    The larger of its two phases (Xiao et al. 2023's residual plan):

    * draw: the tables read (8 bytes a cell; pure ε also their noisy copies, 8 more), the
      residual coordinates (8 each) and the temporaries of the largest batch
      (``_DRAW_TEMP`` a cell);
    * estimate: the noisy tables the records keep (pure ε), three numbers per residual
      coordinate (value, variance, lifted draw), the answers and their std (16 bytes a
      row) and the temporaries of the largest reconstruction stack (``_STACK_TEMP`` a cell);

    plus ``_FIXED`` bytes of any release (sampler tables, threads).

    ``W_subsets``: the attribute subsets of W's marginals. Measured peaks are at most this
    (``benchmarks/release_memory.py``)."""
    d = plan.lattice.domain
    tables = getattr(plan, "tables", None)
    pure = tables is not None
    read = [_cells(d, t) for t in (plan.lattice.residuals if tables is None else tables)] or [0]
    coords = int(np.asarray(plan.lattice.sizes, dtype=np.int64).sum())
    batch = max(min(_BATCH_CELLS, sum(read)), max(read))
    stack = max(min(_BATCH_CELLS, rows), max((_cells(d, S) for S in W_subsets), default=1))
    draw = 8 * (2 if pure else 1) * sum(read) + 8 * coords + _DRAW_TEMP * batch
    kept = 8 * sum(read) if pure else 0
    estimate = kept + 24 * coords + 16 * rows + _STACK_TEMP * stack
    return int(_FIXED + max(draw, estimate))


def residual_error(W, eps, delta=0.0, *, neighbors="add_remove", objective="sum", search="auto"):
    """The expected total squared error of the tables route's residual plan for W (a union
    of marginals), data-independent, for :func:`matmech.advise`-style comparisons. Pure ε:
    exactly the release's figure (each residual's exact discrete-Laplace variance times its
    total-variance coefficient). (ε, δ): the plan's continuous figure σ₁²·Σ c_T u_T; the
    release's per-row σ are rounded up (1/(2σ²) to ``scale_bits`` bits), so it reports up to
    0.4% more."""
    eps, delta = check_privacy_params(eps, delta)
    check_neighbors(neighbors)
    wt = as_terms(W, name="W")
    if wt.marginals() is None:
        raise ValueError(
            "the residual plan needs W to be a union of marginals (identity and total factors)"
        )
    if delta == 0:
        plan = lattice_plan(wt, delta, objective, search)[0]
        mplan = plan_residual_laplace(plan, eps, neighbors=neighbors)
        return float(np.dot(total_variance_coefficients(plan.lattice), mplan.row_variance))
    plan = lattice_plan(wt, delta, objective, search)[0]
    mplan = plan_residual_measurement(plan, eps, delta, neighbors=neighbors)
    return float(plan.weighted_total * mplan.sigma**2)


class _ReadOnce(Mapping):
    """The checked tables as the residual draw reads them: each table is released as it is
    read (:func:`~matmech.measurements.residual.measure_residuals` stacks each residual's table
    once), so its memory holds the released values next instead of fresh pages; a second
    read raises naming the subset."""

    def __init__(self, tables):
        self._tables = dict(tables)  # its own references: the caller's mapping is untouched
        self._keys = tuple(self._tables)

    def __getitem__(self, key):
        try:
            return self._tables.pop(key)
        except KeyError:
            raise KeyError(f"the table on {key} was read already or never counted") from None

    def __iter__(self):
        return iter(self._keys)

    def __len__(self):
        return len(self._keys)


@dataclass(frozen=True, eq=False)
class ResidualPlan(MeasuredPlan):
    """The tables route's plan (:class:`~matmech.plans.plan.Plan`): the residual basis of
    Xiao et al. (2023) measured from marginal tables — (ε, δ): each residual with exact
    discrete Gaussian noise; pure ε: weighted marginal tables with exact discrete Laplace
    noise — reconstructed in closed form (:class:`~matmech.estimators.reconstruct.MarginalReconstructor`)."""

    workload: LinOp = field(repr=False)
    lattice_plan: object = field(repr=False)
    measurement: ResidualMeasurementPlan | LaplaceMeasurementPlan = field(repr=False)
    marginals: tuple = field(repr=False)  # (W's subsets, their row weights)
    sizes: tuple
    subsets: tuple = field(repr=False)
    note: str = ""

    @property
    def what(self) -> str:
        return f"release {self.workload.shape[0]} marginal queries (residual, factored)"

    @property
    def pure(self) -> bool:
        return self.delta == 0

    def check(self, tables):
        check_record_count(tables[()], self.measurement.max_records)
        return tables if self.pure else _ReadOnce(tables)

    def draw(self, tables, *, rng) -> Draws:
        if self.pure:
            return Draws(laplace_table_records(self.measurement, tables, rng=rng))
        return Draws(measure_residuals(self.measurement, tables, rng=rng).records)

    def estimate(self, draws: Draws) -> Estimate:
        """The residual reconstruction (Xiao et al. 2023) of the records: the residuals'
        coordinates read from them (δ > 0) or the noisy tables combined (pure ε)."""
        secure = all(r.event["secure"] for r in draws.records)
        meas = residual_measurement_of(self.measurement, draws.records, secure=secure)
        answers, var = MarginalReconstructor(meas).stacked(*self.marginals)
        fields = dict(
            strategy_name="residual",
            strategy_note=self.note,
            measured=_residual_record(self.lattice_plan, self.measurement, meas, self.pure),
            noise_law=kind_of(self.measurement).noise_law(self.measurement, *self.marginals),
        )
        # std in var's buffer: one array of the answers' size fewer
        return Estimate.of_variances(answers, var, fields, overwrite_var=True)


def lattice_plan(wt, delta, objective, search):
    """(lattice plan, W's subsets, their row weights) of the residual path
    (:func:`matmech.optimizers.residual.marginal_lattice_plan`: pure ε the weighted marginal
    tables, δ > 0 the Gaussian residuals); data-independent. Shared with the streamed release."""
    subsets, rw = wt.marginals()
    plan = marginal_lattice_plan(wt.domain, subsets, rw, delta, objective=objective, search=search)
    return plan, subsets, rw


def noise_plan(plan, wt, eps, delta, *, neighbors, max_records, objective, scale_bits, search):
    """(measurement plan, note, the tables the measurement reads) of the lattice ``plan``:
    exact discrete Laplace per table (δ = 0, :func:`plan_residual_laplace`) or discrete
    Gaussian per residual (:func:`plan_residual_measurement`); data-independent. Shared
    with the streamed release."""
    if delta == 0:
        mplan = plan_residual_laplace(
            plan, eps, neighbors=neighbors, max_records=max_records, scale_bits=scale_bits
        )
        note = (
            f"residual basis of Xiao et al. 2023 ({len(plan.lattice.residuals)} residuals from {len(plan.tables)} "
            f"marginal tables, weights optimised for the sum of variances over {table_search(wt.domain, search)!r} subsets); exact discrete Laplace per table, "
            f"L1 sensitivity {mplan.sensitivity:.6g}"
        )
        return mplan, note, tuple(plan.tables)
    mplan = plan_residual_measurement(
        plan, eps, delta, neighbors=neighbors, max_records=max_records, scale_bits=scale_bits
    )
    note = (
        f"residual basis of Xiao et al. 2023 ({len(plan.lattice.residuals)} residuals, {objective} of variances, "
        f"{plan.weighted_total / plan.svd_bound:.6f} × the SVD bound); exact discrete Gaussian, "
        f"σ₁ = {mplan.sigma:.6g} per unit scale, sensitivity {mplan.sensitivity:.6g}"
    )
    return mplan, note, tuple(plan.lattice.residuals)


def residual_plan(
    W, wt, eps, delta, *, neighbors, max_records, objective, max_memory, scale_bits, search
) -> ResidualPlan:
    """The :class:`ResidualPlan` of W (its terms ``wt``, a union of marginals): the lattice
    plan, its memory (refused above ``max_memory``), the exact noise; data-independent."""
    plan, subsets, rw = lattice_plan(wt, delta, objective, search)
    rows = wt.rows
    need = residual_memory(plan, subsets, rows)
    what = f"the residual release ({rows:,} answers over {len(plan.lattice.residuals):,} residuals)"
    if need > max_memory:
        raise ValueError(
            f"the residual release would use about {need / 2**30:.1f} GiB (> max_memory "
            f"{max_memory / 2**30:.1f} GiB): {rows:,} answers over {len(plan.lattice.residuals):,} residuals"
            + MARGINAL_BY_MARGINAL
        )
    check_memory(need, what, after=MARGINAL_BY_MARGINAL)
    mplan, note, needed = noise_plan(
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
    return ResidualPlan(
        W,
        plan,
        mplan,
        (subsets, rw),
        tuple(wt.domain),
        tuple(needed) + ((),),
        note,
    )


def _residual_record(plan, mplan, meas, pure):
    """What the residual path measured, for :meth:`Release.to_dict` and re-analysis: the
    marginal tables (pure ε) or residuals (δ > 0) with their exact noise; no data in it."""
    lat = plan.lattice
    if pure:
        strategy = {
            "type": "weighted marginal tables",
            "tables": [list(t) for t in plan.tables],
            "weights": [float(v) for v in np.asarray(plan.theta)],
        }
        noise_ = {
            "distribution": "discrete_laplace",
            "scale": [float(b) for b in mplan.scales],
            "std": [math.sqrt(v) for v in mplan.table_variances],
            "grid": 1.0,
            "sensitivity": mplan.sensitivity,
            "secure_randomness": meas.secure,
        }
    else:
        strategy = {
            "type": "residual basis",
            "residuals": [list(t) for t in lat.residuals],
            "variances": [float(v) for v in np.asarray(plan.variances)],
        }
        noise_ = {
            "distribution": "discrete_gaussian",
            "scale": mplan.sigma,
            "per": "unit residual variance",
            "scale_bits": mplan.scale_bits,
            "shared_sampler_tables": mplan.shared_tables,
            "grid": 1.0,
            "sensitivity": mplan.sensitivity,
            "secure_randomness": meas.secure,
        }
    return {"strategy": strategy, "noise": noise_}


def check_search(search) -> None:
    """ValueError unless ``search`` (the pure-ε table weights' search) is one of
    "auto", "lattice", "all"."""
    if not isinstance(search, str):
        raise TypeError(
            f"search must be 'auto', 'lattice' or 'all', got {type(search).__name__}: {search!r}"
        )
    if search not in ("auto", "lattice", "all"):
        raise ValueError(f"search must be 'auto', 'lattice' or 'all', got {search!r}")


def given_search(source, d: int, search):
    """``search`` checked, "auto" read as "lattice" when the source holds given marginal
    tables none of which covers all ``d`` attributes (the keys, not the counts, decide):
    only W's lattice can then be summed out. The rule of the in-memory and the streamed
    release."""
    check_search(search)
    if search == "auto" and not covers_attributes(source, tuple(range(d))):
        return "lattice"
    return search


def covers_attributes(source, U) -> bool:
    """False when the source holds a mapping of marginal tables none of which covers every
    attribute of U (decided from the keys only); True for records, engines and malformed keys
    (the table reader then names the problem)."""
    data = getattr(source, "data", None)
    if not isinstance(data, Mapping):
        return True
    try:
        keys = [{int(a) for a in k} for k in data]
    except (TypeError, ValueError):
        return True
    return any(set(U) <= k for k in keys)
