"""Secure measurement y = A x + noise: the only step (with row selection) that reads x.

The Matrix Mechanism (Li et al., PODS 2010) measures a strategy A on the histogram x with
noise calibrated to A's sensitivity. Floating-point Laplace leaks x through its low bits
(Mironov, CCS 2012), so every sample here is exact (:mod:`matmech.privacy.noise`, Canonne, Kamath,
Steinke 2020):

* **integer-valued A** (identity, interval trees, Haar ±1, 0/1 workloads): A x is an
  integer vector and the noise is the discrete Laplace with scale Δ₁/ε (δ = 0) or the
  discrete Gaussian with σ from :func:`matmech.privacy.calibration.gaussian_sigma` and Δ₂ (δ > 0),
  on the integers. Shifting x by one record moves A x by a column of A, so the usual
  Laplace/Gaussian argument holds exactly on the lattice ℤᵖ.
* **real-valued A** (optimised strategies): A's entries are rounded to a power-of-two grid
  g, giving A_g with A_g x ∈ gℤᵖ exactly in float64 for integer x; the sensitivity is that
  of A_g itself, the noise lives on gℤ, and A_g is recorded as the measured strategy so that
  inference and error bars use what was actually measured. g keeps about 20 bits of A's
  largest column norm (fewer only when the sampler's range limits force a coarser grid).
* **Kronecker products of real factors** are rounded factor by factor, each on its own
  power-of-two grid gᵢ (at most 20 bits of its largest entry), so A_g keeps its structure;
  the lattice of A_g x is Π gᵢ. The bits the sampler's range and exactness allow are handed
  to the factor closest to losing rank (rounding error over its smallest singular value),
  one at a time. Exactness: every partial sum of the factor-by-factor product is a multiple
  of the lattice bounded by Σx · Π (largest |entry| of a rounded matrix factor, or L1 column
  norm of an integer one), kept at most 2**52 lattice steps for ``max_records``.

Order of every measurement: data-independent checks and the plan → an exhausted budget is
refused (the same error whatever x is) → checks on x, whose messages never carry a value of
x → the budget is charged → the noise is drawn. A refused spend or a bad input draws nothing.
Exactness of A_g x needs a bound on the number of records: it is the caller's declared
``max_records`` (default :data:`MAX_RECORDS`), never the actual total.

Randomness: ``rng=None`` (default) uses the secure CTR_DRBG seeded by the OS. A
``numpy.random.Generator`` makes experiments reproducible and is NOT secure: never use it
for a real release.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields

import numpy as np
import scipy.sparse as sp

from matmech.privacy import noise
from matmech.privacy.calibration import (
    EXACT_BITS,
    PRECISION_BITS,
    SENS_MARGIN,
    lattice_bits,
    pow2_at_least,
    gaussian_sigma,
    laplace_scale,
    lattice_std,
    neighbor_sensitivity,
    noise_for,
    sampler_grid,
)
from matmech.privacy.events import DiscreteGaussian, DiscreteLaplace
from matmech.privacy.params import check_neighbors, check_privacy_params
from matmech.linalg.linop import Dense, Kron, LinOp, Scaled, Sparse, as_linop
from matmech.linalg.operator import rint
from matmech.linalg.structured import RoundedDense, RoundedSparse
from matmech.validate import linear, operator, rectangular
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names used only in annotations
    from matmech.privacy.randomness import Rng


#: The declared bound on the number of records (Σx) when the caller gives none: the grid of
#: every measurement keeps A_g x exact in float64 for any histogram with at most this total.
MAX_RECORDS = 2**32
# The calibration rule (neighbour factor, SENS_MARGIN, noise scales, the sampler's grid) is
# matmech.privacy.calibration's; SENS_MARGIN and laplace_scale_up are re-exported here.


@dataclass(frozen=True, eq=False)
class Measurement:
    """A noisy measurement y = A x + z of the histogram x (Li et al., PODS 2010).

    A frozen record; :func:`measure` makes it.

    ``strategy`` is the matrix actually measured (for real-valued strategies, the rounded
    A_g). ``noise`` is ``"discrete_laplace"`` (δ = 0) or ``"discrete_gaussian"`` (δ > 0),
    ``scale`` its parameter in the units of y (Laplace scale b, or σ), ``std`` the exact
    standard deviation of each noise entry, ``grid`` the lattice spacing of y (1.0 for
    integer strategies), ``sensitivity`` the L1 (Laplace) or L2 (Gaussian) sensitivity
    of the measured strategy under ``neighbors``. ``secure`` is False when a seeded
    Generator supplied the randomness.

    Parameters
    ----------
    strategy : LinOp
        The matrix actually measured.
    y : numpy.ndarray
        The noisy measurements.
    eps, delta : float
        What the measurement spent.
    noise : str
        ``"discrete_laplace"`` or ``"discrete_gaussian"``.
    scale, std, grid, sensitivity : float
        The noise parameter, its standard deviation, the lattice spacing of y and the
        sensitivity used.
    neighbors : str
        The neighbouring relation.
    secure : bool
        False when a seeded Generator supplied the randomness.
    rounded : bool
        True when a real-valued strategy was rounded to a grid.
    note : str
        How the measurement was made.

    Examples
    --------
    >>> from matmech import strategies as S
    >>> m = measure([1, 2, 0, 1], S.identity(4), 1.0, rng=np.random.default_rng(0))
    >>> m.std == 2 ** 0.5 * m.scale or m.std > 0
    True
    """

    strategy: LinOp
    y: np.ndarray
    eps: float
    delta: float
    noise: str
    scale: float
    std: float
    grid: float
    sensitivity: float
    neighbors: str = "add_remove"
    secure: bool = True
    rounded: bool = False
    note: str = field(default="", repr=False)

    @property
    def variance(self):
        """Noise variance of every entry of y (exact for the discrete distribution)."""
        return self.std**2

    def __repr__(self):
        p, n = self.strategy.shape
        return (
            f"Measurement({p}×{n} {type(self.strategy).__name__}, {self.noise} scale={self.scale:.6g}, "
            f"std={self.std:.6g}, eps={self.eps:g}, delta={self.delta:g}, grid={self.grid:g}, secure={self.secure})"
        )


# -- input checks ------------------------------------------------------------------------


def check_counts(x, n=None, *, name="x"):
    """Return x as an int64 vector of non-negative integer counts, or raise naming the defect.

    Accepts integer, boolean and integral float arrays (and pandas Series); rejects NaN,
    infinities, negative or fractional entries and, when ``n`` is given, a wrong length.
    A message names the kind of defect and the expected form only: never the position of a
    bad cell (that would say which cell of the private histogram is malformed) nor a value.
    """
    if hasattr(x, "to_numpy") and not isinstance(x, np.ndarray):
        x = x.to_numpy()
    arr = np.asarray(rectangular(x, name))  # a ragged list: ValueError naming its row, not numpy's
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be a numeric vector of counts, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise TypeError(f"{name} must be real counts, got complex dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(
            f"{name} must be a 1-D vector of counts (the histogram), got shape {arr.shape}"
        )
    if n is not None and arr.shape[0] != n:
        raise ValueError(
            f"{name} has {arr.shape[0]} cells but the strategy/workload has {n} columns"
        )
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.isfinite(arr).all():
            raise ValueError(
                f"{name} holds an entry that is not finite; counts must be finite non-negative integers"
            )
        if (arr != np.floor(arr)).any():
            raise ValueError(
                f"{name} holds an entry that is not an integer; counts must be non-negative "
                "integers (build x with matmech.histogram)"
            )
        if np.abs(arr).max() >= 2.0**62:
            raise ValueError(f"{name} holds an entry too large for a count (at least 2**62)")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) >= 2**62:
        raise ValueError(f"{name} holds an entry too large for a count (at least 2**62)")
    if (arr < 0).any():
        raise ValueError(
            f"{name} holds an entry that is negative; counts must be non-negative integers"
        )
    return arr.astype(np.int64)


# -- integer-valued strategies and the grid rounding of real-valued ones ------------------


def integer_valued(A):
    """True when every entry of A is an integer (so A x is exact on the integer lattice):
    :meth:`~matmech.linalg.linop.LinOp.integer_valued`."""
    return isinstance(A, LinOp) and A.integer_valued()


def _round_to_grid(A, g):
    """A LinOp with every entry of A rounded to the nearest multiple of the power of two g."""
    if A.integer_valued() and g <= 1.0:
        return A
    if isinstance(A, Scaled) and A.base.integer_valued():
        return Scaled(A.base, float(rint(A.c, g)))  # keeps the base's structure (trees, Haar)
    structured = getattr(
        A, "rounded_operator", None
    )  # e.g. a weighted union of marginals: round the weights
    if structured is not None and (out := structured(g)) is not None:
        return out
    m = A.rounded_matrix(g)  # structured where A has a structured rounding, else by row blocks
    if sp.issparse(m) and m.nnz <= 0.3 * m.shape[0] * m.shape[1]:
        return RoundedSparse(m)
    return RoundedDense(m.toarray() if sp.issparse(m) else m)


def _quantise(A, p, eps, delta, neighbors, max_records):
    """(A_g, g, rounded, reach): the strategy that will actually be measured, its lattice and,
    for a Kronecker product rounded per factor, the bound on |A_g x| / (g·Σx) that makes
    A_g x exact (None: the Δ₁/g bound of :func:`plan_measurement`)."""
    if A.integer_valued():
        return A, 1.0, False, None
    sens1 = neighbor_sensitivity(A.sensitivity(1), neighbors)
    if not sens1 > 0:
        raise ValueError("the strategy has sensitivity 0 (all entries zero); it measures nothing")
    sens_p = sens1 if p == 1 else neighbor_sensitivity(A.sensitivity(2), neighbors)
    scale0 = laplace_scale(eps, sens_p) if p == 1 else gaussian_sigma(eps, delta, sens_p)
    if isinstance(A, Kron):
        return _quantise_kron(A, scale0, p == 2, max_records)
    g = sampler_grid(sens1, scale0, p == 2, max_records)
    return _round_to_grid(A, g), g, True, None


#: Factors up to this many entries are read densely to spread the grid's bits by need.
_DENSE_FACTOR = 1 << 20


def _entry_bound(f):
    """A bound on every partial sum of f·v per unit of Σ|v| over a fibre: the largest entry
    of a plain matrix (dense or sparse: its product is a sum of entry·value terms), else the
    L1 column norm (a structured operator's own algorithm)."""
    if isinstance(f, (Dense, Sparse)):
        lo, hi = f.entry_range()
        return max(abs(lo), abs(hi))
    return f.sensitivity(1)


def _quantise_kron(A, scale0, gaussian, max_records):
    """Round a Kronecker strategy factor by factor (module docstring; issue 22): the bits
    :func:`~matmech.privacy.calibration.lattice_bits` allows go one at a time to the factor
    whose ‖Fᵢ − Rᵢ‖_F over its smallest non-zero singular value is largest (≤ 20 each)."""
    factors = list(A.factors)
    real = [i for i, f in enumerate(factors) if not f.integer_valued()]
    reach = math.prod(factors[i].sensitivity(1) for i in range(len(factors)) if i not in real)
    tops = [pow2_at_least(_entry_bound(factors[i])) for i in real]
    B = lattice_bits(math.prod(tops), reach, scale0, gaussian, max_records)
    dense = [
        factors[i].dense() if factors[i].shape[0] * factors[i].shape[1] <= _DENSE_FACTOR else None
        for i in real
    ]
    floor = []
    for D in dense:
        sv = np.linalg.svd(D, compute_uv=False) if D is not None and max(D.shape) <= 1024 else None
        nz = None if sv is None else sv[sv > 1e-12 * sv[0]] if sv.size and sv[0] > 0 else None
        floor.append(float(nz[-1]) if nz is not None and nz.size else None)
    bits = [0] * len(real)

    def rounded(j):
        return _round_to_grid(factors[real[j]], math.ldexp(tops[j], -bits[j]))

    def badness(j, R):
        D = dense[j]
        if D is None:  # too large to read: spread the bits evenly
            return 1.0 / (1 + bits[j])
        err = float(np.linalg.norm(D - R.dense()))
        return err / (floor[j] if floor[j] else max(float(np.linalg.norm(D)), 1e-300))

    out = [rounded(j) for j in range(len(real))]
    bad = [badness(j, out[j]) for j in range(len(real))]
    for _ in range(B):
        open_ = [j for j in range(len(real)) if bits[j] < PRECISION_BITS and bad[j] > 0]
        if not open_:
            break
        top = max(bad[j] for j in open_)  # within 1e-9 of the worst: the first such factor,
        j = min(j for j in open_ if bad[j] >= top * (1 - 1e-9))  # so no ulp of an SVD decides
        bits[j] += 1
        out[j] = rounded(j)
        bad[j] = badness(j, out[j])
    for j, i in enumerate(real):
        factors[i] = out[j]
        reach *= _entry_bound(out[j]) / math.ldexp(tops[j], -bits[j])
    grid = math.prod(math.ldexp(t, -b) for t, b in zip(tops, bits))
    return Kron(*factors), grid, True, reach


# -- the plan (data-independent) and its execution ----------------------------------------
#
# The privacy boundary rule (README, "Privacy"): code that reads x lets out only noisy
# outputs. Every check on x runs before any spend and says only what kind of defect it
# found, never a count, a total or a value; exactness needs a bound on Σx, and that bound is
# the one the caller declares (``max_records``), so nothing depends on the actual total;
# the budget is charged once, before the first noise draw, and nothing after it branches on x.


@dataclass(frozen=True, eq=False)
class MeasurementPlan:
    """Everything about a measurement that does not read x (:func:`plan_measurement`).

    ``strategy`` is the matrix that will be measured (grid-rounded A_g for real-valued A),
    ``grid`` its lattice, ``noise``/``scale``/``std`` the exact noise, ``sensitivity`` the
    L1 (Laplace) or L2 (Gaussian) sensitivity used, ``sens1`` the L1 one, ``max_records``
    the declared bound on Σx for which A_g x is exact.
    """

    strategy: LinOp
    eps: float
    delta: float
    noise: str
    scale: float
    std: float
    grid: float
    sensitivity: float
    sens1: float
    neighbors: str
    rounded: bool
    max_records: int = MAX_RECORDS
    rho: float | None = None
    unit_shifts: int | None = None

    @property
    def event(self):
        """The privacy event this measurement charges (:mod:`matmech.privacy.events`): the
        discrete noise drawn, its scale, sensitivity and lattice, the (ε, δ) it was
        calibrated to."""
        if self.noise == "discrete_laplace":
            return DiscreteLaplace(
                self.scale,
                self.sensitivity,
                eps=self.eps,
                grid=self.grid,
                unit_shifts=self.unit_shifts,
            )
        return DiscreteGaussian(
            self.scale,
            self.sensitivity,
            eps=self.eps,
            delta=self.delta,
            grid=self.grid,
            unit_shifts=self.unit_shifts,
        )


def check_max_records(max_records):
    """The declared bound on the number of records: None → :data:`MAX_RECORDS`."""
    if max_records is None:
        return MAX_RECORDS
    if isinstance(max_records, (bool, np.bool_)) or not isinstance(max_records, numbers.Integral):
        raise TypeError(
            f"max_records must be a positive integer (a declared bound on the number of records), "
            f"got {type(max_records).__name__}: {max_records!r}"
        )
    if not 1 <= int(max_records) <= 2**50:
        raise ValueError(f"max_records must be an integer in [1, 2**50], got {max_records!r}")
    return int(max_records)


def _exact_total(x):
    """Σx as an exact Python int for int64 counts in [0, 2**62) (no overflow for any length)."""
    hi, lo = np.divmod(
        x, np.int64(1 << 31)
    )  # both < 2**31: their sums fit in int64 below 2**32 cells
    return (int(hi.sum(dtype=np.int64)) << 31) + int(lo.sum(dtype=np.int64))


def check_records(x, max_records):
    """Refuse counts x whose total exceeds the declared ``max_records``, before any spend.

    The message is the same for every such x: it says that the bound was exceeded, never by
    how much or what the total is.
    """
    if x.size >= 2**32:
        raise ValueError(f"x has {x.size:,} cells; at most 2**32 are supported")
    if _exact_total(x) > max_records:
        raise ValueError(
            f"x holds more records than the declared max_records={max_records:,} (default {MAX_RECORDS:,}); "
            "declare the true bound on the number of records with max_records= (the count itself is never shown)"
        )


def _exact_sensitivity(A, p, neighbors, exact_integer):
    s = neighbor_sensitivity(A.sensitivity(p), neighbors)
    if not math.isfinite(s) or s <= 0:
        raise ValueError(
            f"the measured strategy has L{p} sensitivity {s}; it must be positive and finite"
        )
    # integer-valued strategies have integer L1 sensitivities, summed exactly; anything
    # else (an L2 norm, grid sums, Kronecker products) gets a 1e-9 relative safety margin
    return s if exact_integer and p == 1 else s * SENS_MARGIN


def _unit_shifts(A, neighbors, rounded) -> int | None:
    """The most lattice coordinates a neighbour moves by one step when every entry of the
    measured A is in {0, ±1} (add/remove neighbours, integer A): its largest column L1 norm;
    None when that structure is absent or not cheap to check (:mod:`matmech.privacy.events`)."""
    if rounded or neighbors != "add_remove" or not A.integer_valued():
        return None
    if type(A).entry_range is LinOp.entry_range and A.shape[0] * A.shape[1] > 1 << 22:
        return None  # the default scans every row
    lo, hi = A.entry_range()
    if lo < -1 or hi > 1:
        return None
    k = A.sensitivity(1)
    return int(k) if k == int(k) and k >= 1 else None


def plan_measurement(A, eps, delta=0.0, *, neighbors="add_remove", max_records=None, rho=None):
    """The data-independent part of :func:`measure` → :class:`MeasurementPlan`.

    ``rho``: calibrate the discrete Gaussian to this zCDP ρ (a share of a zCDP budget);
    (``eps``, ``delta``) are then the guarantee it implies, recorded with it.

    Raises for bad privacy parameters, noise the exact samplers cannot produce, or a
    ``max_records`` for which A x cannot be exact, without touching any data or budget.
    """
    A = as_linop(linear(A, "the strategy A"))
    operator(
        A,
        "the strategy",
        per_row=32,
        per_col=32,
        what=f"measuring a strategy of {A.shape[0]:,} rows x {A.shape[1]:,} cells (y, noise: 32 bytes a row)",
    )
    eps, delta = check_privacy_params(eps, delta)
    check_neighbors(neighbors)
    max_records = check_max_records(max_records)
    p = 1 if delta == 0 else 2
    A_m, grid, rounded, reach = _quantise(A, p, eps, delta, neighbors, max_records)
    exact = not rounded
    sens = _exact_sensitivity(A_m, p, neighbors, exact)
    sens1 = sens if p == 1 else neighbor_sensitivity(A_m.sensitivity(1), neighbors, margin=True)
    # |A_g x| / grid <= Σx·Δ₁/grid must be an exact float64 integer (below 2**53); the grid
    # aims at 2**52, leaving a factor 2 for the sensitivity margin and float rounding
    if reach is not None:  # a Kronecker product rounded per factor: its own exactness bound
        if max_records * reach > 2.0**EXACT_BITS:
            raise ValueError(
                f"max_records={max_records:,} is too many for exact arithmetic with this Kronecker "
                f"strategy (|A_g x| / (grid·Σx) <= {reach:.6g}; need max_records times that <= 2**{EXACT_BITS})"
            )
    elif max_records * (sens1 / grid) >= 2.0 ** (EXACT_BITS + 1):
        raise ValueError(
            f"max_records={max_records:,} is too many for exact arithmetic with this strategy "
            f"(Δ₁/grid = {sens1 / grid:.6g}; need max_records·Δ₁/grid < 2**{EXACT_BITS + 1})"
        )
    if rho is not None and delta == 0:
        raise ValueError("a measurement calibrated to rho draws Gaussian noise: delta must be > 0")
    kind, scale = noise_for(eps, delta, sens, rho=rho)
    std = lattice_std(kind, scale, grid, remedy=f"eps={eps!r} is too small for this strategy")
    return MeasurementPlan(
        A_m,
        eps,
        delta,
        kind,
        float(scale),
        float(std),
        float(grid),
        float(sens),
        float(sens1),
        neighbors,
        rounded,
        max_records,
        None if rho is None else float(rho),
        _unit_shifts(A_m, neighbors, rounded),
    )


def lattice_noise(
    kind: str, scale: float, grid: float, size: int, *, rng: Rng = None
) -> np.ndarray:
    """``size`` exact draws of ``kind`` noise of ``scale`` on grid·ℤ, as float64: the integer
    samplers of :mod:`matmech.privacy.noise` when grid is 1, else grid times their draw at
    scale/grid. The one sampler rule of a measurement and of a stream's step."""
    gauss = kind == "discrete_gaussian"
    if grid == 1.0:
        exact = noise.discrete_gaussian if gauss else noise.discrete_laplace
        return exact(scale, size, rng=rng).astype(np.float64)
    return (noise.gaussian if gauss else noise.laplace)(scale, size, grid=grid, rng=rng)


def execute(plan, x, *, rng=None):
    """Draw the noise of ``plan`` and return y = A_g x + z as a :class:`Measurement`.

    Reads x; the caller has checked x (:func:`check_counts`, :func:`check_records`) and
    charged the budget. Nothing here branches on x.
    """
    src = noise.check_rng(rng)
    ax = plan.strategy.matvec(x.astype(np.float64))
    y = ax + lattice_noise(plan.noise, plan.scale, plan.grid, ax.shape[0], rng=src)
    y.setflags(write=False)
    return measurement_of(plan, y, secure=bool(src.secure))


#: The fields a :class:`Measurement` takes from its :class:`MeasurementPlan` as they are: all
#: but the draw's own (the noisy values, the randomness, the note).
_PLANNED = tuple(f.name for f in fields(Measurement) if f.name not in ("y", "secure", "note"))


def measurement_of(plan, y, *, secure):
    """The :class:`Measurement` of ``plan`` with noisy values ``y`` (drawn by :func:`execute`,
    or read back from its measurement record) and ``secure`` the randomness it was drawn with."""
    planned = {k: getattr(plan, k) for k in _PLANNED}
    note = "strategy rounded to the grid before measuring" if plan.rounded else ""
    return Measurement(y=y, secure=secure, note=note, **planned)
