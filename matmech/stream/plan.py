"""The data-independent plan of a stream: spec → rounded factorization, noise and its charge.

A stream of n steps over k categories measures y = (C_g ⊗ I_k)·x + z with C_g the chosen
factorization's C rounded to a power-of-two grid g, z exact discrete noise on g·Z, and
releases the running totals (B_g ⊗ I_k)·y, B_g = prefix·C_g⁻¹ (post-processing). One record
adds 1 to one cell x_{t,c} (add/remove neighbours; ``substitute`` doubles the sensitivity),
so the sensitivity is the largest column norm of C_g, computed on the rounded matrix.

Calibration is the library's one rule (:mod:`matmech.privacy.calibration`,
:func:`matmech.privacy.measure.laplace_scale_up`): δ = 0 → discrete Laplace, scale Δ₁/ε
rounded up; δ > 0 → discrete Gaussian with σ = ``gaussian_sigma(ε, δ, Δ₂)`` (zCDP, CKS 2020);
ρ given → charged as ε = ``zcdp_to_approx_dp(ρ, δ)`` at that δ and calibrated the same way.
Sensitivities carry :data:`~matmech.privacy.measure.SENS_MARGIN`.

The grid is the library's lattice rule too (:func:`matmech.privacy.calibration.sampler_grid`
with ``integer_exact=True``): the smallest power of two with scale/g ≤ 2^22 (Gaussian) or
2^46 (Laplace), a function of the privacy parameters and C only. C_g·x is computed exactly
in integers for any counts (:mod:`matmech.stream.exact`), so no bound on the data enters the
grid. Integer C (identity, prefix) are measured on g = 1, as
:func:`matmech.privacy.measure.plan_measurement` measures integer strategies. The exact
noise std and the sampler's range check are :func:`~matmech.privacy.calibration.lattice_std`.
The integer factor K = C_g/g and its limb layout are built once per plan
(:attr:`StreamPlan.integer_factor`, :attr:`StreamPlan.layout`).
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass

import numpy as np

from matmech.privacy.calibration import (
    _check_rho,
    lattice_std,
    neighbor_sensitivity,
    noise_for,
    sampler_grid,
    zcdp_to_approx_dp,
)
from matmech.privacy.measure import MAX_RECORDS, check_max_records
from matmech.privacy.params import (
    check_delta,
    check_neighbors,
    check_privacy_params,
)
from matmech.stream.exact import LimbLayout, integer_factor, limb_layout
from matmech.stream.factorizations import (
    FACTORIZATIONS,
    OBJECTIVES,
    StreamFactorization,
    build,
    check_horizon,
)
from matmech.validate import choice

__all__ = ["MAX_CATEGORIES", "StreamPlan", "StreamSpec", "plan_stream"]

#: Largest number of categories per step.
MAX_CATEGORIES = 2**16
#: Largest history a stream keeps (bytes), checked when the spec is declared.
MAX_STATE_BYTES = 2**32


@dataclass(frozen=True)
class StreamSpec:
    """What the curator declares before the stream starts (all public).

    ``eps``/``delta``: the whole stream's (ε, δ); or ``rho`` (zCDP) with ``delta`` for the
    ledger's (ε, δ) charge; or neither, and the stream takes all of the share given as
    ``budget=`` to :meth:`~matmech.stream.release.StreamRelease.create`. ``categories``: a count k or a tuple of labels.
    ``max_records``: a bound on the records over the whole stream; a step's cell above it is
    clamped to it (:func:`~matmech.stream.exact.clamp_counts`), never refused.
    """

    horizon: int
    eps: float | None = None
    delta: float = 0.0
    rho: float | None = None
    categories: tuple[str, ...] = ("count",)
    factorization: str = "sqrt"
    objective: str = "mean"
    neighbors: str = "add_remove"
    max_records: int = MAX_RECORDS

    def __post_init__(self):
        object.__setattr__(self, "horizon", check_horizon(self.horizon))
        choice(self.factorization, "factorization", FACTORIZATIONS)
        choice(self.objective, "objective", OBJECTIVES)
        cats = self.categories
        if isinstance(cats, numbers.Integral) and not isinstance(cats, bool):
            if not 1 <= int(cats) <= MAX_CATEGORIES:
                raise ValueError(
                    f"categories must be a count in [1, {MAX_CATEGORIES}] or a list of labels, got {cats!r}"
                )
            cats = tuple(f"c{i}" for i in range(int(cats))) if int(cats) > 1 else ("count",)
        if isinstance(cats, (str, bytes)) or not isinstance(cats, (list, tuple, np.ndarray)):
            raise TypeError(
                f"categories must be a count or a list of non-empty string labels, got {type(cats).__name__}: {cats!r}"
            )
        if not all(isinstance(c, str) and c for c in cats):
            raise TypeError(
                f"categories must be a count or a list of non-empty string labels, got {cats!r}"
            )
        cats = tuple(cats)
        if not 1 <= len(cats) <= MAX_CATEGORIES or len(set(cats)) != len(cats):
            raise ValueError(
                f"categories must be 1..{MAX_CATEGORIES} distinct labels, got {len(cats)} ({len(set(cats))} distinct)"
            )
        object.__setattr__(self, "categories", cats)
        need = self.horizon * len(cats) * 3 * 8  # counts, measurements, releases kept in memory
        if need > MAX_STATE_BYTES:
            raise ValueError(
                f"a stream of {self.horizon:,} steps x {len(cats):,} categories keeps {need / 2**30:.1f} GiB "
                f"of history (3 float64 per cell); at most {MAX_STATE_BYTES / 2**30:.0f} GiB is allowed"
            )
        if self.rho is None:
            if self.eps is not None:  # neither: a share's, filled in when the stream is created
                check_privacy_params(self.eps, self.delta)
        else:
            if self.eps is not None:
                raise ValueError(
                    f"give eps or rho, not both (got eps={self.eps!r}, rho={self.rho!r})"
                )
            check_delta(
                self.delta, positive=True, name="delta (needed with rho to charge the ledger)"
            )
            if _check_rho(self.rho) == 0:  # the privacy layer's rule (a real, finite, >= 0)
                raise ValueError(f"rho must be a positive finite number, got {self.rho!r}")
        check_neighbors(self.neighbors)
        object.__setattr__(self, "max_records", check_max_records(self.max_records))

    @property
    def charge(self) -> tuple[float, float]:
        """(ε, δ) charged to the budget for the whole stream."""
        if self.rho is None and self.eps is None:
            raise ValueError(
                "declare the stream's privacy: eps (with delta for Gaussian noise), rho with delta, "
                "or neither and create the stream with budget= a share (budget.split(k))"
            )
        if self.rho is not None:
            return zcdp_to_approx_dp(self.rho, self.delta), float(self.delta)
        return float(self.eps or 0.0), float(self.delta)


@dataclass(frozen=True, eq=False)
class StreamPlan:
    """The spec plus everything derived from it without data: the measured (rounded)
    factorization, its lattice ``grid``, the noise kind, ``scale`` (σ or Laplace b, value
    units), the exact per-entry noise ``std`` and the ``sensitivity`` used."""

    spec: StreamSpec
    factorization: StreamFactorization
    grid: float
    noise: str
    scale: float
    std: float
    sensitivity: float

    def step_stds(self) -> np.ndarray:
        """Exact std of the released running total at every step (every category)."""
        return self.std * np.sqrt(self.factorization.step_variances())

    @functools.cached_property
    def integer_factor(self) -> np.ndarray:
        """K = C_g/g as int64 (:func:`~matmech.stream.exact.integer_factor`), built once per
        plan and kept as :meth:`k_row` reads it: a Toeplitz column reversed and contiguous
        (row t is its last t + 1 entries, oldest step first), else the dense matrix."""
        k = integer_factor(self.factorization, self.grid)
        return np.ascontiguousarray(k[::-1]) if self.factorization.toeplitz else k

    def k_row(self, t: int) -> np.ndarray:
        """K[t, 0..t] (int64, contiguous: a strided row would make the product 10x slower)."""
        k = self.integer_factor
        return k[self.spec.horizon - 1 - t :] if self.factorization.toeplitz else k[t, : t + 1]

    @functools.cached_property
    def layout(self) -> LimbLayout:
        """The limbs a step splits its counts into (:func:`~matmech.stream.exact.limb_layout`)."""
        k = self.integer_factor
        k = k[::-1] if self.factorization.toeplitz else k  # K's own order (a view, no copy)
        return limb_layout(self.factorization, self.grid, self.spec.max_records, k=k)


def _scale(spec: StreamSpec, f: StreamFactorization) -> tuple[str, float, float]:
    """(noise, scale, sensitivity) for factorization f under spec."""
    eps, delta = spec.charge
    norm = f.sensitivity(1 if delta == 0 else 2)
    sens = neighbor_sensitivity(norm, spec.neighbors, margin=True)
    kind, scale = noise_for(eps, delta, sens)  # matmech.privacy.calibration's one rule
    return kind, scale, sens


def plan_stream(spec: StreamSpec, factorization: StreamFactorization | None = None) -> StreamPlan:
    """Round the factorization to its grid and calibrate the noise (no data, no budget)."""
    if not isinstance(spec, StreamSpec):
        raise TypeError(f"spec must be a StreamSpec, got {type(spec).__name__}")
    if factorization is not None and not isinstance(factorization, StreamFactorization):
        raise TypeError(
            "factorization must be None or a StreamFactorization "
            f"(matmech.stream.factorizations.build), got {type(factorization).__name__}"
        )
    f = (
        factorization
        if factorization is not None
        else build(spec.factorization, spec.horizon, objective=spec.objective)
    )
    if f.n != spec.horizon:
        raise ValueError(
            f"the factorization has horizon {f.n} but the spec declares {spec.horizon}"
        )
    kind, scale, sens = _scale(spec, f)
    entries = f.c if f.c is not None else f.dense()
    if np.all(np.mod(entries, 1.0) == 0.0):  # integer C: measured as it is, on the integers
        g = 1.0
    else:  # the sampler's range alone bounds g: K·x is exact in integers (sens is not used)
        g = sampler_grid(
            sens, scale, kind == "discrete_gaussian", spec.max_records, integer_exact=True
        )
        f = f.rounded(g)
        kind, scale, sens = _scale(spec, f)  # calibrated on the C_g actually measured
    std = lattice_std(kind, scale, g, remedy="raise eps")
    return StreamPlan(spec, f, g, kind, float(scale), float(std), float(sens))
