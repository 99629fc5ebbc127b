"""Secure measurement of the residuals of a marginal lattice from its marginal tables.

Residual T of :mod:`matmech.linalg.residual` is measured on the integer contrast basis
H_T = ⊗_{i∈T} Hᵢ applied to the marginal table on T (exact integers: H_T x needs only that
table), row j with its own discrete Gaussian (Canonne, Kamath, Steinke, NeurIPS 2020):

    y_j = H_T[j]·x + Z_j,   Z_j ~ N_ℤ(0, τ_j²),   τ_j >= σ_T·λ_j,   λ_j = ‖H_T[j]‖,

σ_T = s_T·σ₁ with s_T² the plan's variance of residual T (Σ_T p_T/s_T² = 1,
:mod:`matmech.optimizers.residual`). Privacy: the coordinates are independent and a
neighbouring dataset shifts coordinate j by the integer H_T[j]·e (e a column, ±2 columns for
substitution), so the Rényi divergence of order α is at most α/2 · Σ_j (H_T[j]·e)²/τ_j²
<= α/2 · Δ²/σ₁² with Δ² = factor²·Σ_T p_T/s_T² (Q_T = rows of H_T over λ_j are orthonormal
and every column of Q_T has squared norm p_T): ρ-zCDP with ρ = Δ²/(2σ₁²), and σ₁ is
:func:`matmech.privacy.calibration.gaussian_sigma` for (ε, δ) at sensitivity Δ (with the
1e-9 margin of :mod:`matmech.privacy.measure`). y_j/λ_j is then the orthonormal coordinate
with variance Var(Z_j)/λ_j² (the exact discrete variance): post-processing.

Each τ_j is rounded up so that 1/(2τ_j²) keeps ``scale_bits`` significant bits
(:func:`matmech.privacy.noise.gaussian_grid`; default 9: the variance grows by 0.14% on
average, 0.39% at most, and is reported exactly): σ of one octave then share one exact
acceptance table and σ near one proposal scale one proposal table (≈25 + 100 tables for
τ from 1 to 5,000 instead of one pair per σ), and every row of a batch is drawn in one
sampler call, rows in residual-then-row order, each with its own σ. A plan that draws at
least 8,192 times per distinct σ (many attributes of equal size: few σ, many rows) instead
rounds σ itself to ``scale_bits`` bits with tables of its own, whose acceptance test is
about one digit shorter (``shared_tables``; :func:`_share_tables`). Nothing depends on
the data. The data-side
order (checks → budget → noise) is the release's (:mod:`matmech.plans.factored`).

Pure ε (:func:`plan_residual_laplace`, :func:`measure_residuals_laplace`): the marginal table
on each planned subset T (:func:`matmech.optimizers.residual.plan_residuals_laplace`) gets
per-cell discrete Laplace noise (Canonne, Kamath, Steinke 2020; exact sampler of
:mod:`matmech.privacy.noise`) of scale b_T >= factor·Δ₁/(ε θ_T), Δ₁ = Σ_T θ_T the L1
sensitivity of the stack [θ_T M_T] (:func:`matmech.linalg.residual.table_sensitivity1`, from
the factors: every identity or total column has L1 norm 1). A neighbour moves one cell of
each table by 1 (two cells for substitution), so the privacy loss is at most
factor·Σ_T 1/b_T <= ε, checked in exact rationals after each b_T is rounded up to
``scale_bits`` significant bits. Each residual T' is then the inverse-variance mean of
Q_{T'}(table T summed to T') over the tables T ⊇ T' (exact discrete variances, weights fixed
before any data is read): post-processing, the generalised least squares of the stack.
"""

from __future__ import annotations

import math
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fractions import Fraction

from matmech.linalg.linop import Dense, Identity, Kron
from matmech.measurements.table_batches import TableBatches, accumulate
from matmech.linalg.residual import (
    apply_axes_batched,
    contrast_operators,
    haar_contrasts,
    table_sensitivity1,
)
from matmech.optimizers.residual import LaplaceResidualAllocation, ResidualAllocation, table_pairs
from matmech.privacy import noise
from matmech.privacy.calibration import gaussian_sigma
from matmech.privacy.calibration import neighbor_sensitivity
from matmech.privacy.events import DiscreteGaussian
from matmech.privacy.measure import check_max_records
from matmech.privacy.params import calibrated_eps, check_neighbors, check_privacy_params
from matmech.measurements.record import MeasurementRecord


_SCALE_MARGIN = 1.0 + 1e-12  # τ_j = σ_T·λ_j computed in floats, rounded up
#: Significant bits of 1/(2σ²) when the per-row σ are rounded up (shared sampler tables;
#: the variance grows by less than 2**(1−bits), about 0.14% on average at 9 bits).
DEFAULT_SCALE_BITS = 9
_CHUNK = 1 << 22  # coordinates handled in one stack (bounds the temporaries)
_SUB = 1 << 19  # coordinates contrasted at once (4-8 MB temporaries, reused from the heap)
_EXACT = 2.0**53  # |H_T x| below this: BLAS in float64 is exact
#: The exact samplers' largest σ / scale on the integers (:mod:`matmech.privacy.noise`).
MAX_SIGMA = float(noise.MAX_SIGMA)
MAX_LAPLACE_SCALE = float(noise.MAX_LAPLACE_SCALE)


@dataclass(frozen=True, eq=False)
class ResidualMeasurementPlan:
    """Everything about the residual measurement that does not read data.

    ``sigma`` (σ₁) is the discrete Gaussian's σ per unit of the plan's scales: residual j
    gets σ_T = √plan.variances[j]·σ₁ per orthonormal coordinate; ``sensitivity`` the Δ
    used; ``max_records`` the declared bound that keeps H_T x exact.
    """

    plan: ResidualAllocation
    eps: float
    delta: float
    neighbors: str
    sigma: float
    sensitivity: float
    max_records: int
    scale_bits: int | None = DEFAULT_SCALE_BITS
    shared_tables: bool = True  # σ on the shared-table grid (noise.gaussian_grid)

    def residual_sigma(self, j):
        return math.sqrt(float(self.plan.variances[j])) * self.sigma

    @property
    def event(self):
        """The privacy event charged (:mod:`matmech.privacy.events`): the discrete Gaussian
        at σ₁ per unit scale and L2 sensitivity Δ (every row's σ is rounded up from σ_T·λ_j,
        so its ρ = Δ²/(2σ₁²) is an upper bound), on lattices of its own per row."""
        return DiscreteGaussian(
            self.sigma, self.sensitivity, eps=self.eps, delta=self.delta, grid=None
        )


@dataclass(frozen=True, eq=False)
class ResidualMeasurement:
    """The noisy residuals: ``coords[T]`` (orthonormal coordinates, shape (nᵢ−1, i ∈ T))
    and ``row_variances[T]`` (their exact noise variances), mappings (Gaussian: derived from
    the records on access); ``plan`` is the
    :class:`ResidualMeasurementPlan` (Gaussian) or :class:`LaplaceMeasurementPlan` (pure ε)
    that produced them; ``secure`` is False when a seeded Generator supplied the randomness."""

    plan: ResidualMeasurementPlan
    coords: Mapping
    row_variances: Mapping
    secure: bool
    records: tuple = ()  # the released noisy values (matmech.measurements.record.MeasurementRecord), one per residual / table


def plan_residual_measurement(
    plan, eps, delta, *, neighbors="add_remove", max_records=None, scale_bits=DEFAULT_SCALE_BITS
):
    """The data-independent plan: σ₁, exactness of H_T x for ``max_records`` records and the
    sampler's range (every τ_j <= :data:`MAX_SIGMA`). Raises before any data or budget."""
    if not isinstance(plan, ResidualAllocation):
        raise TypeError(f"plan must be a ResidualAllocation, got {type(plan).__name__}")
    eps, delta = check_privacy_params(eps, delta)
    if delta == 0:
        raise ValueError(
            "the residual measurement is Gaussian: it needs delta > 0 (pure eps marginals go through "
            "the Kronecker path of release_factored)"
        )
    check_neighbors(neighbors)
    max_records = check_max_records(max_records)
    check_scale_bits(scale_bits)
    lat = plan.lattice
    s2 = float(np.sum(lat.norm2 / plan.variances))
    sens = neighbor_sensitivity(math.sqrt(s2), neighbors, margin=True)
    sigma = gaussian_sigma(eps, delta, sens)
    per_shape = {}  # (largest row norm, largest |entry|) of H_T: a function of the attribute sizes
    for j, T in enumerate(lat.residuals):
        shape = tuple(lat.domain[i] for i in T)
        if shape not in per_shape:
            per_shape[shape] = (
                math.sqrt(math.prod(float(haar_contrasts(n)[1].max()) for n in shape)),
                math.prod(float(np.abs(haar_contrasts(n)[0]).max()) for n in shape),
            )
        lam_max, hmax = per_shape[shape]
        tau = math.sqrt(float(plan.variances[j])) * sigma * lam_max * _SCALE_MARGIN * 2.0
        if tau > MAX_SIGMA:
            raise ValueError(
                f"residual {T} needs a discrete Gaussian σ of {tau:.4g}, beyond the exact sampler's "
                f"{MAX_SIGMA:.4g}; eps={eps!r} is too small for this lattice"
            )
        if max_records * neighbor_sensitivity(hmax, neighbors) >= 2.0**62:
            raise ValueError(
                f"max_records={max_records:,} is too many for exact integer contrasts on residual {T}"
            )
    return ResidualMeasurementPlan(
        plan,
        eps,
        delta,
        neighbors,
        float(sigma),
        float(sens),
        max_records,
        scale_bits,
        _share_tables(plan.variances, _by_shape(lat)),
    )


#: Draws per distinct σ from which σ rounded on their own (tables of their own) are cheaper
#: than the shared-table grid: a table pair costs about 0.55 ms to build, the grid's longer
#: acceptance test about 0.08 µs a draw (benchmarks/results/sampler_speed.md, 100 × 10).
_OWN_TABLES_DRAWS = 1 << 13


def _share_tables(variances, members) -> bool:
    """Whether the residuals' σ go on the shared-table grid: unless at least
    :data:`_OWN_TABLES_DRAWS` draws fall on each distinct σ (an upper bound on their number:
    distinct plan variances × row classes, per attribute sizes). Data-independent."""
    v = np.asarray(variances, dtype=np.float64)
    draws = sigmas = 0
    for shape, js in members.items():
        l2, cls = row_keys(shape, range(len(shape)))
        draws += len(js) * cls.size
        sigmas += np.unique(v[js]).size * l2.size
    return draws < _OWN_TABLES_DRAWS * sigmas


def _contrast(tables, domain, T, max_records):
    """H_T applied to each table on a stack of tables on attributes of sizes ``domain[i], i ∈
    T`` (axis 0 the stack): exact (float64 BLAS when every partial sum stays below 2**53 for
    ``max_records`` records, else int64)."""
    mats = [haar_contrasts(domain[i])[0] for i in T]
    hmax = math.prod(float(np.abs(m).max()) for m in mats)
    if max_records * hmax < _EXACT:
        return np.rint(
            apply_axes_batched(tables, [contrast_operators(domain[i])[0] for i in T])
        ).astype(np.int64)
    arr = tables.astype(np.int64)
    for k, m in enumerate(mats):
        arr = np.moveaxis(np.tensordot(m, arr, axes=([1], [k + 1])), 0, k + 1)
    return arr


def row_keys(domain, T):
    """(λ² per distinct row class, class index of every row): the classes are the
    combinations of per-attribute distinct norms, so no large array is sorted."""
    uniq, inv = [np.ones(1)], np.zeros((), dtype=np.int64)
    for i in T:
        u, k = np.unique(haar_contrasts(domain[i])[1], return_inverse=True)
        inv = np.add.outer(inv * u.size, k)
        uniq = [np.multiply.outer(uniq[0], u.astype(np.float64)).reshape(-1)]
    return uniq[0], inv.reshape(-1)


def check_scale_bits(scale_bits):
    """Refuse (ValueError) a ``scale_bits`` that is neither None nor an integer in [2, 40]."""
    if scale_bits is not None and (
        isinstance(scale_bits, bool) or not isinstance(scale_bits, int) or not 2 <= scale_bits <= 40
    ):
        raise ValueError(f"scale_bits must be None or an integer in [2, 40], got {scale_bits!r}")


def check_laplace_loss(losses, eps, neighbors):
    """Refuse (ValueError) Laplace tables whose exact privacy losses (Fractions: sensitivity
    over scale, table by table) add up, under ``neighbors``, to more than the decimal ``eps``
    charged; with the scales rounded up from a margin below eps this cannot happen."""
    loss = neighbor_sensitivity(sum(losses, Fraction(0)), neighbors)
    if loss > Fraction(calibrated_eps(eps)):
        raise ValueError(f"the rounded Laplace scales spend more than eps={eps!r}")


def bucket_up(tau, bits):
    """τ rounded UP to the nearest m·2^e with an integer m of ``bits`` bits (None: τ as is).
    Fewer distinct σ means fewer sampler tables; more noise is always private."""
    tau = np.asarray(tau, dtype=np.float64)
    if bits is None:
        return tau
    f, k = np.frexp(tau)
    return np.ldexp(np.ceil(np.ldexp(f, bits)), k - bits)


@dataclass(frozen=True, eq=False)
class ResidualBatch:
    """Residuals ``J`` (lattice indices, all with attribute sizes ``shape``) measured in one
    stack; ``l2``/``cls``: λ² per row class and each row's class; ``tau``: the least σ of
    every (residual, class), shape (len(J), len(l2)). Data-independent."""

    shape: tuple
    J: np.ndarray
    l2: np.ndarray
    cls: np.ndarray
    tau: np.ndarray


def residual_batches(mplan):
    """The measurement's batches in draw order (a generator: the σ of one batch at a time):
    residuals grouped by attribute sizes in lattice order, at most :data:`_CHUNK`
    coordinates a batch. A function of the plan alone, so every consumer (the in-memory
    :func:`measure_residuals` and the streamed :mod:`matmech.plans.streamed`) draws the
    same noise for the same ``rng``."""
    variances = np.asarray(mplan.plan.variances, dtype=np.float64)
    for shape, members in _by_shape(mplan.plan.lattice).items():  # one stack per shape
        l2, cls = row_keys(shape, range(len(shape)))
        step = max(1, _CHUNK // cls.size)
        for at in range(0, len(members), step):  # chunks bound the temporary arrays
            J = np.array(members[at : at + step], dtype=np.int64)
            yield ResidualBatch(shape, J, l2, cls, least_sigma(mplan, variances[J], l2))


def _by_shape(lat):
    """{attribute sizes: the residuals (lattice indices, in order) with those sizes}."""
    groups: dict = {}
    for j, T in enumerate(lat.residuals):
        groups.setdefault(tuple(lat.domain[i] for i in T), []).append(j)
    return groups


def least_sigma(mplan, variances, l2):
    """τ = σ_T·λ_j (with the float margin) for residuals of plan variances ``variances``
    (σ_T = √variance·σ₁) and row classes of squared norms ``l2``: shape (residuals, classes)."""
    sig = np.sqrt(np.asarray(variances, dtype=np.float64)) * mplan.sigma
    return sig[:, None] * np.sqrt(l2)[None, :] * _SCALE_MARGIN


def row_noise(mplan, tau):
    """The discrete Gaussians of the σ lower bounds ``tau``: (parameters, each τ's
    position in them, their exact variances), σ rounded by
    :func:`matmech.privacy.noise.gaussian_grid` at ``mplan.scale_bits`` (on the shared-table
    grid unless the plan draws many times per σ: ``mplan.shared_tables``)."""
    params, index = noise.gaussian_grid(tau, bits=mplan.scale_bits, shared=mplan.shared_tables)
    return params, index, noise.gaussian_variances(params)


def measure_batch(mplan, batch, tables, src):
    """The released integers of one :class:`ResidualBatch` (shape (len(J), rows)) and each
    row's exact noise variance: H_T x from ``tables`` ({T: int64 table}), plus the discrete
    Gaussian of σ >= τ_j, every row in one sampler call (rows in residual-then-row order,
    each with its own σ). Reads data; never branches on it."""
    lat = mplan.plan.lattice
    params, index, var = row_noise(mplan, batch.tau)
    small = np.uint8 if len(params) <= 1 << 8 else np.uint16 if len(params) <= 1 << 16 else np.int64
    key = index.astype(small)[:, batch.cls]  # (residual, row) → its σ
    y = np.empty((batch.J.size, batch.cls.size), dtype=np.int64)
    axes, step = tuple(range(len(batch.shape))), max(1, _SUB // batch.cls.size)
    for at in range(0, batch.J.size, step):  # exact per residual: sub-stacks change nothing
        Js = batch.J[at : at + step].tolist()
        stack = np.stack([tables[lat.residuals[j]] for j in Js])
        y[at : at + len(Js)] = _contrast(stack, batch.shape, axes, mplan.max_records).reshape(
            len(Js), -1
        )
    del stack
    y += noise.discrete_gaussian_mixed(params, key, rng=src)  # the released integers
    return y, var[key]


def measure_residuals(mplan, tables, *, rng=None):
    """Draw the residual noise of ``mplan`` on the marginal ``tables`` ({T: int64 table}) →
    :class:`ResidualMeasurement`. Reads data; the caller has checked the tables and charged
    the budget. Nothing here branches on the data.

    Row j of residual T gets the discrete Gaussian at σ >= τ_j = σ_T·λ_j (1/(2σ²) of
    ``mplan.scale_bits`` significant bits), batch by batch (:func:`residual_batches`,
    :func:`measure_batch`).
    """
    src = noise.check_rng(rng)
    lat = mplan.plan.lattice
    d = lat.domain
    records: list[MeasurementRecord | None] = [None] * len(lat.residuals)
    event = {**residual_event(mplan), "secure": bool(src.secure)}
    for batch in residual_batches(mplan):
        yg, vg = measure_batch(mplan, batch, tables, src)
        query = _residual_query(d, lat.residuals[int(batch.J[0])])
        for k, j in enumerate(batch.J.tolist()):
            records[j] = MeasurementRecord(
                query=query,
                values=yg[k],
                variance=vg[k],
                event=event,
                domain=tuple(d),
                attributes=tuple(lat.residuals[j]),
            )
    return residual_measurement_of(mplan, tuple(records), secure=bool(src.secure))


def residual_measurement_of(mplan, records, *, secure):
    """The :class:`ResidualMeasurement` of ``mplan`` from its ``records`` (post-processing):
    δ > 0, the residuals' orthonormal coordinates and variances read from the records on
    access; pure ε (a :class:`LaplaceMeasurementPlan`), the noisy marginal tables combined
    into residuals (:func:`combine_tables`). ``secure``: the randomness the noise came from."""
    records = tuple(records)
    lat = mplan.plan.lattice
    if isinstance(mplan, LaplaceMeasurementPlan):
        d = lat.domain
        noisy = {
            tuple(r.attributes): r.values.reshape(tuple(d[i] for i in r.attributes))
            for r in records
        }
        return dataclasses.replace(combine_tables(mplan, noisy, secure=secure), records=records)
    coords, rowvar = _Scaled(lat, records, "values"), _Scaled(lat, records, "variance")
    return ResidualMeasurement(mplan, coords, rowvar, bool(secure), records)


def residual_event(mplan):
    """The privacy event of the residual measurement (one for all its records)."""
    return {
        "mechanism": "residual (Gaussian)",
        "eps": mplan.eps,
        "delta": mplan.delta,
        "noise": "discrete_gaussian",
        "sensitivity": mplan.sensitivity,
        "neighbors": mplan.neighbors,
    }


class _Scaled(Mapping):
    """{T: residual T's orthonormal coordinates (``field="values"``: y_j/λ_j) or their exact
    variances (``"variance"``: Var(Z_j)/λ_j²)}, shape (nᵢ−1, i ∈ T), read-only, computed from
    the released records on access (post-processing), so the measurement holds each released
    number once."""

    def __init__(self, lat, records, field):
        self._at = {T: j for j, T in enumerate(lat.residuals)}
        self._lat, self._records, self._field = lat, records, field

    def __getitem__(self, T):
        j = self._at[T]
        shape = tuple(self._lat.domain[i] for i in T)
        l2, cls = row_keys(shape, range(len(shape)))  # per access: no residual-size cache
        lam = np.sqrt(l2)[cls] if self._field == "values" else l2[cls]
        out = (getattr(self._records[j], self._field) / lam).reshape(tuple(n - 1 for n in shape))
        out.setflags(write=False)
        return out

    def __iter__(self):
        return iter(self._at)

    def __len__(self):
        return len(self._at)


def _residual_query(domain, T):
    """The operator of residual T's contrasts on the marginal on T: ⊗_{i ∈ T} Hᵢ (1×1 for T = ∅)."""
    return (
        Kron(*[Dense(haar_contrasts(domain[i])[0].astype(np.float64)) for i in T])
        if T
        else Dense(np.ones((1, 1)))
    )


@dataclass(frozen=True, eq=False)
class LaplaceMeasurementPlan:
    """The data-independent pure-ε measurement: table ``plan.tables[j]`` gets discrete
    Laplace noise of scale ``scales[j]`` (exact per-cell variance ``table_variances[j]``);
    pair k (table ``pair_table[k]`` ⊇ residual ``pair_residual[k]``, ``pair_rest[k]`` cells
    summed into one) enters that residual with weight ``pair_weight[k]``; ``row_variance[j]``
    is residual j's per-coordinate variance; ``sensitivity`` the L1 Δ₁ (× neighbours factor)."""

    plan: LaplaceResidualAllocation
    eps: float
    neighbors: str
    scales: np.ndarray
    table_variances: np.ndarray
    pair_table: np.ndarray
    pair_residual: np.ndarray
    pair_rest: np.ndarray
    pair_weight: np.ndarray
    row_variance: np.ndarray
    sensitivity: float
    max_records: int
    delta: float = 0.0


def plan_residual_laplace(
    plan, eps, *, neighbors="add_remove", max_records=None, scale_bits=DEFAULT_SCALE_BITS
):
    """Scales, exact variances and combination weights of the pure-ε table measurement;
    raises (before any data or budget) when the scales leave the exact sampler's range."""
    if not isinstance(plan, LaplaceResidualAllocation):
        raise TypeError(f"plan must be a LaplaceResidualAllocation, got {type(plan).__name__}")
    eps, delta = check_privacy_params(eps, 0.0)
    check_neighbors(neighbors)
    max_records = check_max_records(max_records)
    check_scale_bits(scale_bits)
    lat, theta = plan.lattice, np.asarray(plan.theta, dtype=np.float64)
    sens = neighbor_sensitivity(
        table_sensitivity1(lat.domain, plan.tables, theta), neighbors, margin=True
    )
    scales = bucket_up(sens / (eps * theta), scale_bits)
    if not np.all(np.isfinite(scales)) or scales.max() > MAX_LAPLACE_SCALE:
        raise ValueError(
            f"a table needs a discrete Laplace scale of {float(scales.max()):.4g}, beyond the exact "
            f"sampler's {MAX_LAPLACE_SCALE:.4g}; eps={eps!r} is too small for this plan"
        )
    uniq, counts = np.unique(scales, return_counts=True)
    check_laplace_loss(
        (Fraction(int(k)) / Fraction(float(b)) for b, k in zip(uniq.tolist(), counts.tolist())),
        eps,
        neighbors,
    )
    var_of = {b: noise.discrete_laplace_variance(b) for b in uniq.tolist()}
    tvar = np.array([var_of[b] for b in scales.tolist()])
    ps, pt, rest = table_pairs(lat, plan.tables)
    prec = 1.0 / (rest * tvar[ps])
    tot = np.bincount(pt, weights=prec, minlength=len(lat.residuals))
    out = LaplaceMeasurementPlan(
        plan,
        eps,
        neighbors,
        scales,
        tvar,
        ps,
        pt,
        rest,
        prec / tot[pt],
        1.0 / tot,
        float(sens),
        max_records,
    )
    for a in (scales, tvar, out.pair_weight, out.row_variance):
        a.setflags(write=False)
    return out


def measure_residuals_laplace(mplan, tables, *, rng=None):
    """Draw the discrete Laplace noise of ``mplan`` on the marginal ``tables``
    (:func:`laplace_table_records`) and combine the residuals → :class:`ResidualMeasurement`."""
    src = noise.check_rng(rng)
    records = laplace_table_records(mplan, tables, rng=src)
    return residual_measurement_of(mplan, records, secure=bool(src.secure))


def laplace_table_records(mplan, tables, *, rng=None):
    """Draw the discrete Laplace noise of ``mplan`` on the marginal ``tables`` ({T: int64
    table} for T in ``mplan.plan.tables``) → one record per noisy table. Reads data; the
    caller has checked the tables and charged the budget. The batches of
    :class:`~matmech.measurements.table_batches.TableBatches` (the streamed release's): tables
    sharing a scale in one sampler call per batch, scales ascending, tables in plan order.
    Nothing here branches on the data."""
    src = noise.check_rng(rng)
    steps = TableBatches(mplan)
    noisy = {}
    for batch in steps.batches():
        noisy.update(steps.draw(batch, tables, src))
    d = mplan.plan.lattice.domain
    event = {
        "mechanism": "marginal tables (Laplace)",
        "eps": mplan.eps,
        "delta": 0.0,
        "noise": "discrete_laplace",
        "sensitivity": mplan.sensitivity,
        "neighbors": mplan.neighbors,
        "secure": bool(src.secure),
    }
    return tuple(
        MeasurementRecord(
            query=Identity(math.prod(d[i] for i in t)),
            values=noisy[t].reshape(-1),
            domain=tuple(d),
            attributes=tuple(t),
            variance=float(mplan.table_variances[j]),
            event={**event, "scale": float(mplan.scales[j])},
        )
        for j, t in enumerate(mplan.plan.tables)
    )


def combine_tables(mplan, noisy, *, secure=False):
    """Post-processing of the noisy tables ({T: table}) of ``mplan`` → :class:`ResidualMeasurement`:
    each residual T' is the inverse-variance mean of Q_{T'}(table T summed to T') over the
    tables T ⊇ T' (the generalised least squares of the stacked tables, which decouples per
    residual because the residual subspaces are orthogonal), batch by batch
    (:meth:`~matmech.measurements.table_batches.TableBatches.combine`, as the streamed release)."""
    lat, d = mplan.plan.lattice, mplan.plan.lattice.domain
    steps = TableBatches(mplan)
    flat = np.zeros(steps.total)
    for batch in steps.batches():
        steps.combine(batch, noisy, lambda starts, rows: accumulate(flat, starts, rows))
    flat.setflags(write=False)
    coords, rowvar = {}, {}
    for j, R in enumerate(lat.residuals):
        shape, at = tuple(d[i] - 1 for i in R), int(steps.offsets[j])
        coords[R] = flat[at : at + math.prod(shape)].reshape(shape)
        v = np.full(shape, float(mplan.row_variance[j]))
        v.setflags(write=False)
        rowvar[R] = v
    return ResidualMeasurement(mplan, coords, rowvar, bool(secure))


#: Memory the residual path may plan to use (bytes): tables, lifted residuals, answers.
MAX_MEMORY = 8 << 30
