"""The measurement kinds of the streamed residual release: how each is measured
into a :class:`~matmech.results.store.ResidualStore` and read back (issue 24).

One pipeline (:class:`~matmech.plans.streamed.StreamedPlan`, reconstruction in
:class:`~matmech.results.store.MarginalRelease`) serves both; what differs is looked up in
:data:`KINDS` by the type of the measurement plan:

* :class:`GaussianResiduals` ((ε, δ), δ > 0): every residual measured on its integer
  contrasts with exact discrete Gaussian noise (:mod:`matmech.measurements.residual`); the store
  holds the released integers H_T x + Z in draw order (appended), coordinate j of residual T
  is y_j/λ_j with variance Var(Z_j)/λ_j².
* :class:`LaplaceTables` (pure ε): weighted marginal tables with exact discrete Laplace
  noise (:mod:`matmech.measurements.table_batches`), combined into the residuals by
  inverse-variance means as each batch is drawn; the store holds the combined orthonormal
  coordinates (float64, lattice order, added to in place), each with the exact variance
  ``row_variance[T]`` of :func:`~matmech.measurements.residual.plan_residual_laplace`.

Everything here but :meth:`measure` is data-independent; :meth:`measure` reads the tables
batch by batch and never branches on them.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from matmech.estimators.answer_noise import GaussianResidualLaw, ResidualNoiseLaw, gaussian_law
from matmech.measurements.residual import (
    LaplaceMeasurementPlan,
    ResidualMeasurementPlan,
    row_keys,
    least_sigma,
    measure_batch,
    residual_batches,
    row_noise,
)
from matmech.measurements.table_batches import TableBatches


class GaussianResiduals:
    """(ε, δ): residuals on their integer contrasts, exact discrete Gaussian noise (Xiao et
    al., NeurIPS 2023, §4-5; :mod:`matmech.measurements.residual`)."""

    accumulate = False  # the store appends the released integers in draw order
    noise = "discrete_gaussian"

    def extra_bytes(self, mplan) -> int:
        return 0

    def noise_law(self, mplan, subsets, weights) -> GaussianResidualLaw:
        """The answers' law on the residual rows' draws (:func:`gaussian_law`)."""
        return gaussian_law(mplan, subsets, weights)

    def layout(self, mplan) -> tuple[np.ndarray, int]:
        """(first stored value of each residual, total): residuals in draw order."""
        offsets, at = np.empty(len(mplan.plan.lattice.residuals), dtype=np.int64), 0
        for batch in residual_batches(mplan):
            m = int(batch.cls.size)
            offsets[batch.J] = at + m * np.arange(batch.J.size)
            at += m * batch.J.size
        return offsets, at

    def measure(self, mplan, reader, store, src) -> None:
        """Every batch: its residuals' tables read, contrasted, noised and appended."""
        residuals = mplan.plan.lattice.residuals
        for batch in residual_batches(mplan):
            tables = reader([residuals[j] for j in batch.J.tolist()])
            y, _ = measure_batch(mplan, batch, tables, src)
            del tables
            store.write(batch.J, y)

    def variances(self, mplan) -> np.ndarray:
        """One number per residual that fixes its coordinates' variances (the plan's)."""
        return np.asarray(mplan.plan.variances, dtype=np.float64)

    def coordinates(self, mplan, y, sub) -> np.ndarray:
        """Orthonormal coordinates y_j/λ_j of stored rows ``y`` (attribute sizes ``sub``)."""
        return y.astype(np.float64) / _row_norms(sub)

    def row_variances(self, mplan, sub, v) -> np.ndarray:
        """Exact variance of each orthonormal coordinate of a residual with attribute sizes
        ``sub`` and plan variance ``v``: Var(Z_j)/λ_j², τ_j as :func:`residual_batches`."""
        l2, cls = row_keys(sub, range(len(sub)))
        _, index, var = row_noise(mplan, least_sigma(mplan, [v], l2))
        return (var[index[0]] / l2)[cls]

    def stored_variances(self, mplan, sub, v) -> np.ndarray:
        """Exact noise variance of each stored value (the integers: Var(Z_j))."""
        l2, cls = row_keys(sub, range(len(sub)))
        return self.row_variances(mplan, sub, v) * l2[cls]

    def summary(self, mplan, secure) -> tuple[dict, dict]:
        """The strategy and noise entries of :meth:`MarginalRelease.to_dict` (no data)."""
        strategy = {
            "name": "residual",
            "residuals": len(mplan.plan.lattice.residuals),
            "objective": mplan.plan.objective,
        }
        noise_ = {
            "distribution": self.noise,
            "scale": mplan.sigma,
            "per": "unit residual variance",
            "scale_bits": mplan.scale_bits,
            "shared_sampler_tables": mplan.shared_tables,
            "sensitivity": mplan.sensitivity,
            "secure_randomness": secure,
        }
        return strategy, noise_


@functools.lru_cache(maxsize=64)
def _row_norms(sub):
    """λ_j of every row of ⊗_{i} Hᵢ for attribute sizes ``sub`` (read-only)."""
    l2, cls = row_keys(sub, range(len(sub)))
    out = np.sqrt(l2[cls])
    out.setflags(write=False)
    return out


class LaplaceTables:
    """Pure ε: weighted marginal tables with exact discrete Laplace noise, each residual the
    inverse-variance mean of the tables containing it (:func:`plan_residual_laplace`)."""

    accumulate = True  # the store adds each batch's contributions in place
    noise = "discrete_laplace"

    def noise_law(self, mplan, subsets, weights) -> ResidualNoiseLaw:
        """The answers' law on the tables' draws (:mod:`matmech.estimators.answer_noise`)."""
        return ResidualNoiseLaw(mplan, tuple(subsets), tuple(float(w) for w in weights))

    def extra_bytes(self, mplan) -> int:
        """The (table, residual) pairs' arrays and sort keys, the residuals' keys."""
        return 80 * int(mplan.pair_table.size) + 32 * len(mplan.plan.lattice.residuals)

    def layout(self, mplan) -> tuple[np.ndarray, int]:
        """(first coordinate of each residual, total): residuals in lattice order."""
        lat = mplan.plan.lattice
        sizes = np.asarray(lat.sizes, dtype=np.int64)
        return np.concatenate([[0], np.cumsum(sizes)])[:-1].astype(np.int64), int(sizes.sum())

    def measure(self, mplan, reader, store, src) -> None:
        """Every batch: its tables read and noised (one sampler call), then added to the
        residuals they contain; the noisy tables are dropped with the batch."""
        steps = TableBatches(mplan)
        for batch in steps.batches():
            tables = reader([steps.names[j] for j in batch.J.tolist()])
            noisy = steps.draw(batch, tables, src)
            del tables
            steps.combine(batch, noisy, store.add)

    def variances(self, mplan) -> np.ndarray:
        """Each residual's exact per-coordinate variance (discrete Laplace, combined)."""
        return np.asarray(mplan.row_variance, dtype=np.float64)

    def coordinates(self, mplan, y, sub) -> np.ndarray:
        return y

    def row_variances(self, mplan, sub, v) -> np.ndarray:
        return np.full(math.prod(n - 1 for n in sub), float(v))

    def stored_variances(self, mplan, sub, v) -> np.ndarray:
        return self.row_variances(mplan, sub, v)

    def summary(self, mplan, secure) -> tuple[dict, dict]:
        plan = mplan.plan
        strategy = {
            "name": "residual",
            "residuals": len(plan.lattice.residuals),
            "objective": "sum",
            "tables": len(plan.tables),
        }
        noise_ = {
            "distribution": self.noise,
            "scale": sorted({float(b) for b in mplan.scales}),
            "per": "marginal table cell",
            "sensitivity": mplan.sensitivity,
            "secure_randomness": secure,
        }
        return strategy, noise_


#: Measurement-plan type → its kind.
Kind = GaussianResiduals | LaplaceTables
KINDS: dict[type, Kind] = {
    ResidualMeasurementPlan: GaussianResiduals(),
    LaplaceMeasurementPlan: LaplaceTables(),
}


def kind_of(mplan: Any) -> Kind:
    """The kind of a measurement plan (TypeError for any other object)."""
    kind = KINDS.get(type(mplan))
    if kind is None:
        raise TypeError(
            "the streamed release reads a ResidualMeasurementPlan or a LaplaceMeasurementPlan, "
            f"got {type(mplan).__name__}"
        )
    return kind
