"""The frozen record of one noisy linear measurement a release made (its query operator, noisy
values, variance and privacy event): what every estimator reads and every release lists in
``Release.measurements``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from matmech.linalg.linop import LinOp


@dataclass(frozen=True, eq=False)
class MeasurementRecord:
    """One noisy linear measurement a release made: ``values = query · x + e`` with x the
    histogram over the workload's cells (or, when ``attributes`` is set, x's marginal on those
    attributes of ``domain``, row-major: :meth:`on_cells` composes the two), Cov(e) = diag(``variance``) + ``common_variance``·11ᵀ
    (``common_variance`` inf: an unknown common offset, as in Noisy Top-c's gaps; 0: none).

    ``event`` says what privacy it cost: ``eps``, ``delta``, ``noise``, ``scale``,
    ``sensitivity``, ``neighbors``, ``mechanism``. Every estimate a release reports is the
    generalised least squares of its records (docs/guide/estimation.md); a selection's free
    gaps or noisy values are not among them (biased given the selection: they stay in
    ``Release.selection.gap``). An independent dense GLS of ``Release.measurements``
    reproduces answers and variances on small inputs."""

    query: LinOp = field(repr=False)
    values: np.ndarray = field(repr=False)
    #: Per value, or one float for all (broadcast to the values' shape, so an array once built).
    variance: np.ndarray | float = field(repr=False)
    common_variance: float = 0.0
    event: Mapping = field(default_factory=lambda: MappingProxyType({}))
    domain: tuple | None = None
    attributes: tuple | None = None

    def on_cells(self) -> LinOp:
        """The query over all cells of the domain: ``query`` itself, or, when it acts on the
        marginal of x on ``attributes`` (the factored paths), its composition with that
        marginalisation (only for domains of at most 2**62 cells)."""
        if self.attributes is None:
            return self.query
        from matmech.linalg.linop import Identity, Kron, Ones

        return self.query @ Kron(
            *[
                Identity(n) if i in self.attributes else Ones(1, n)
                for i, n in enumerate(self.domain or ())
            ]
        )

    def __post_init__(self):
        v = np.broadcast_to(
            np.asarray(self.variance, dtype=np.float64), np.shape(self.values)
        ).copy()
        vals = np.asarray(self.values, dtype=np.float64).copy()
        for a in (v, vals):
            a.setflags(write=False)
        object.__setattr__(self, "variance", v)
        object.__setattr__(self, "values", vals)
        object.__setattr__(self, "event", MappingProxyType(dict(self.event)))

    def __repr__(self):
        return (
            f"MeasurementRecord({self.query.shape[0]}×{self.query.shape[1]} {type(self.query).__name__}, "
            f"{self.event.get('mechanism', '?')}, eps={self.event.get('eps', 0):g})"
        )


def strategy_record(meas, *, domain=None, attributes=None) -> MeasurementRecord:
    """The record of a :class:`~matmech.privacy.measure.Measurement` of the histogram (or, with
    ``domain`` and ``attributes``, of x's marginal on those attributes)."""
    return MeasurementRecord(
        query=meas.strategy,
        values=meas.y,
        variance=meas.variance,
        domain=domain,
        attributes=None if attributes is None else tuple(attributes),
        event={
            "mechanism": "matrix mechanism",
            "eps": meas.eps,
            "delta": meas.delta,
            "noise": meas.noise,
            "scale": meas.scale,
            "sensitivity": meas.sensitivity,
            "neighbors": meas.neighbors,
            "secure": meas.secure,
        },
    )
