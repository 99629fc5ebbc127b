"""The data-independent plan of a stream: spec → rounded factorization, noise and its charge.

A stream of n steps over k categories measures y = (C_g ⊗ I_k)·x + z with C_g the chosen
factorization's C rounded to a power-of-two grid g, z exact discrete noise on g·Z, and
releases the running totals (B_g ⊗ I_k)·y, B_g = prefix·C_g⁻¹ (post-processing). One record
adds 1 to one cell x_{t,c} (add/remove neighbours; ``substitute`` doubles the sensitivity),
so the sensitivity is the largest column norm of C_g, computed on the rounded matrix.

Calibration is the library's one rule (:mod:`matmech.privacy.calibration`,
:func:`matmech.privacy.calibration.laplace_scale_up`): δ = 0 → discrete Laplace, scale Δ₁/ε
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

The default factorization, ``"auto"``, is chosen from the privacy parameters and the
objective (:func:`best_plan`): every candidate of :func:`auto_candidates` is planned as above
(built for the norm of the noise: L1 for pure ε, L2 for δ > 0, then rounded and calibrated)
and the one with the smallest exact expected error (:meth:`StreamPlan.errors`: the variance
of a released running total under the noise actually drawn, mean or max over the steps) is
kept. Under pure ε this is usually the m-ary tree (the square root, an L2 design, has
Δ₁ ≈ 2√(n/π)); under δ > 0 the dense optimum up to :data:`AUTO_DENSE_N` steps, the square
root or its band above.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass

import numpy as np

from matmech.privacy.calibration import (
    check_rho,
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
    MAX_DENSE_N,
    OBJECTIVES,
    StreamFactorization,
    build,
    check_horizon,
)
from matmech.validate import choice


#: Largest number of categories per step.
MAX_CATEGORIES = 2**16
#: Largest history a stream keeps (bytes), checked when the spec is declared.
MAX_STATE_BYTES = 2**32
#: The factorization name that asks for the best one for the spec (the default).
AUTO = "auto"
#: Largest horizon at which ``"auto"`` weighs the dense optimum under δ > 0 (O(n³): seconds
#: at 1024) and the m-ary tree under δ > 0 (an L1 design; under pure ε it is weighed at any n).
AUTO_DENSE_N = 1024
#: Largest horizon at which ``"auto"`` weighs the band (a scan of ~log₂ n widths, each an
#: O(n log n) series inverse: seconds at 2^16, a minute and a half at 2^20, for < 1% RMSE).
AUTO_SCAN_N = 2**16


def auto_candidates(n: int, delta: float) -> tuple[str, ...]:
    """The factorizations ``"auto"`` weighs for horizon n: the identity and the square root
    always (never the prefix: Δ₁²·mean = n², Δ₂²·mean = n, Δ₂²·max = n against the
    identity's (n + 1)/2, (n + 1)/2 and n); the band up to :data:`AUTO_SCAN_N` (its width scan plans ~log₂ n series);
    the m-ary tree under pure ε at any n, under δ > 0 up to :data:`AUTO_DENSE_N`; the dense
    optimum under δ > 0 up to :data:`AUTO_DENSE_N` (the L2 optimum it is). BLT is left out: its optimiser takes seconds to win a few percent on the
    square root, and only under δ > 0 (``advise_stream`` ranks it)."""
    names = ["identity", "sqrt"]
    if n <= AUTO_SCAN_N:
        names.append("banded")
    if delta == 0 or n <= AUTO_DENSE_N:
        names.append("hierarchical")
    if delta > 0 and n <= min(AUTO_DENSE_N, MAX_DENSE_N):
        names.append("dense")
    return tuple(names)


@dataclass(frozen=True)
class StreamSpec:
    """What the curator declares before the stream starts (all public).

    ``eps``/``delta``: the whole stream's (ε, δ); or ``rho`` (zCDP) with ``delta`` for the
    ledger's (ε, δ) charge; or neither, and the stream takes all of the share given as
    ``budget=`` to :meth:`~matmech.stream.release.StreamRelease.create`. ``categories``: a count k or a tuple of labels.
    ``max_records``: a bound on the records over the whole stream; a step's cell above it is
    clamped to it (:func:`~matmech.stream.exact.clamp_counts`), never refused.
    ``factorization``: a name of :data:`~matmech.stream.factorizations.FACTORIZATIONS`, or
    ``"auto"`` (the default): the smallest exact expected error for these privacy parameters
    and ``objective`` (:func:`best_plan`).
    """

    horizon: int
    eps: float | None = None
    delta: float = 0.0
    rho: float | None = None
    categories: tuple[str, ...] = ("count",)
    factorization: str = AUTO
    objective: str = "mean"
    neighbors: str = "add_remove"
    max_records: int = MAX_RECORDS

    def __post_init__(self):
        object.__setattr__(self, "horizon", check_horizon(self.horizon))
        choice(self.factorization, "factorization", (AUTO, *FACTORIZATIONS))
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
            if check_rho(self.rho) == 0:  # the privacy layer's rule (a real, finite, >= 0)
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

    @property
    def norm(self) -> int:
        """The norm of the sensitivity: 1 under pure ε (Laplace noise), 2 under δ > 0."""
        return 1 if self.charge[1] == 0 else 2


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

    def errors(self) -> tuple[float, float]:
        """(mean, max) over the steps of the exact variance of a released running total (one
        category), in counts², under the noise this plan draws (Laplace or Gaussian, on its
        lattice): std²·‖B_g[t]‖²."""
        v = self.std**2 * self.factorization.step_variances()
        return float(v.mean()), float(v.max())

    @functools.cached_property
    def integer_factor(self) -> np.ndarray:
        """K = C_g/g as int64 (:func:`~matmech.stream.exact.integer_factor`), built once per
        plan and kept as :meth:`k_row` reads it: a Toeplitz column reversed and contiguous
        (row t is its last t + 1 entries, oldest step first), else the dense matrix."""
        if self.factorization.form == "windows":  # rows are built by k_row (O(n) state)
            return np.empty(0, dtype=np.int64)
        k = integer_factor(self.factorization, self.grid)
        return np.ascontiguousarray(k[::-1]) if self.factorization.toeplitz else k

    def k_row(self, t: int) -> np.ndarray:
        """K[t, 0..t] (int64, contiguous: a strided row would make the product 10x slower)."""
        f = self.factorization
        if f.windows is not None:  # ones over the window (measured on grid 1)
            row = np.zeros(t + 1, dtype=np.int64)
            row[t + 1 - int(f.windows[t]) :] = 1
            return row
        k = self.integer_factor
        return k[self.spec.horizon - 1 - t :] if self.factorization.toeplitz else k[t, : t + 1]

    @functools.cached_property
    def layout(self) -> LimbLayout:
        """The limbs a step splits its counts into (:func:`~matmech.stream.exact.limb_layout`)."""
        if self.factorization.form == "windows":
            return limb_layout(self.factorization, self.grid, self.spec.max_records)
        k = self.integer_factor
        k = k[::-1] if self.factorization.toeplitz else k  # K's own order (a view, no copy)
        return limb_layout(self.factorization, self.grid, self.spec.max_records, k=k)


def stream_noise(spec: StreamSpec, f: StreamFactorization) -> tuple[str, float, float]:
    """(noise, scale, sensitivity) for factorization f under spec."""
    eps, delta = spec.charge
    norm = f.sensitivity(1 if delta == 0 else 2)
    sens = neighbor_sensitivity(norm, spec.neighbors, margin=True)
    kind, scale = noise_for(eps, delta, sens)  # matmech.privacy.calibration's one rule
    return kind, scale, sens


def best_plan(spec: StreamSpec, names: tuple[str, ...]) -> StreamPlan:
    """The plan of the factorization among ``names`` (each built for ``spec.objective`` and
    ``spec.norm``) with the smallest exact expected error (:meth:`StreamPlan.errors`, the
    spec's objective); the first of equals in ``names`` order."""
    which = OBJECTIVES.index(spec.objective)
    plans = [
        plan_stream(spec, build(name, spec.horizon, objective=spec.objective, norm=spec.norm))
        for name in names
    ]
    return min(plans, key=lambda p: p.errors()[which])


def plan_stream(spec: StreamSpec, factorization: StreamFactorization | None = None) -> StreamPlan:
    """Round the factorization to its grid and calibrate the noise (no data, no budget);
    ``spec.factorization == "auto"`` and no ``factorization``: the best plan
    (:func:`best_plan` over :func:`auto_candidates`)."""
    if not isinstance(spec, StreamSpec):
        raise TypeError(f"spec must be a StreamSpec, got {type(spec).__name__}")
    if factorization is not None and not isinstance(factorization, StreamFactorization):
        raise TypeError(
            "factorization must be None or a StreamFactorization "
            f"(matmech.stream.factorizations.build), got {type(factorization).__name__}"
        )
    if factorization is None and spec.factorization == AUTO:
        return best_plan(spec, auto_candidates(spec.horizon, spec.charge[1]))
    f = (
        factorization
        if factorization is not None
        else build(spec.factorization, spec.horizon, objective=spec.objective, norm=spec.norm)
    )
    if f.n != spec.horizon:
        raise ValueError(
            f"the factorization has horizon {f.n} but the spec declares {spec.horizon}"
        )
    kind, scale, sens = stream_noise(spec, f)
    if f.integer_valued():  # integer C: measured as it is, on the integers
        g = 1.0
    else:  # the sampler's range alone bounds g: K·x is exact in integers (sens is not used)
        g = sampler_grid(
            sens, scale, kind == "discrete_gaussian", spec.max_records, integer_exact=True
        )
        f = f.rounded(g)
        kind, scale, sens = stream_noise(spec, f)  # calibrated on the C_g actually measured
    std = lattice_std(kind, scale, g, remedy="raise eps")
    return StreamPlan(spec, f, g, kind, float(scale), float(std), float(sens))
