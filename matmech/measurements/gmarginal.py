"""Secure measurement of a generalised marginal strategy from its marginal tables.

A :class:`~matmech.optimizers.general_marginal_error.GeneralMarginalStrategy` (HDMM's OPT_M with
per-attribute factors, McKenna et al., VLDB 2018, §6.3) has the rows θ_S ⊗ᵢ(Qᵢ if i ∈ S
else 1ᵀ): on x it measures, for every subset S with θ_S > 0, the marginal table t_S of x on S
through the per-attribute factors, (⊗_{i∈S} Qᵢ) t_S. Nothing domain-sized is needed.

Exactness (the rule of :mod:`matmech.privacy.measure`, factor by factor): every non-integer
factor Qᵢ is rounded to a power-of-two grid gᵢ, Q'ᵢ = Kᵢ·gᵢ with Kᵢ an integer matrix, the
same Q'ᵢ in every subset (so the strategy keeps its Kronecker structure and its closed-form
inverse). Block S is released on the lattice h_S = Π_{i∈S} gᵢ as the integers

    K_S t_S + Z_S,   K_S = ⊗_{i∈S} Kᵢ (exact in int64 for ``max_records`` records),

i.e. y_S = Q'_S t_S + h_S Z_S. The grids keep B bits of each factor's largest column norm,
B = min(20, ⌊(61 − log₂ max_records)/k⌋) with k the largest number of rounded factors in a
subset, lowered further until every block's noise fits the exact sampler (as the Kronecker
rule of :mod:`matmech.privacy.measure` splits its grid over the factors).

Noise, block S with its own scale (the θ_S of the strategy become noise scales, as the
weighted tables of :mod:`matmech.measurements.residual`):

* pure ε: Z_S discrete Laplace (CKS 2020) of scale b_S/h_S, b_S >= factor·Δ₁/(ε θ_S),
  Δ₁ = Σ_S θ_S Π_{i∈S} ‖Q'ᵢ‖₁ (largest column L1 norms; a sum of products of per-attribute
  norms is largest at the per-attribute maxima, :func:`matmech.linalg.residual.table_sensitivity1`).
  A neighbour moves one cell of every t_S, so the loss is at most factor·Σ_S Π‖Q'ᵢ‖₁/b_S <= ε,
  checked in exact rationals after the scales are rounded up to ``scale_bits`` bits.
* (ε, δ): Z_S discrete Gaussian of σ_S/h_S, σ_S >= σ₁/θ_S, σ₁ =
  :func:`matmech.privacy.calibration.gaussian_sigma` at Δ₂ = factor·(Σ_S θ_S² Π_{i∈S}
  ‖Q'ᵢ‖₂²)^{1/2} (:func:`matmech.optimizers.general_marginal_error.general_marginal_sensitivity2`, exact:
  attained at every attribute's largest column): independent coordinates,
  ρ = Σ_S ‖Q'_S Δt_S‖²/(2σ_S²) <= Δ₂²/(2σ₁²) (the argument of :mod:`matmech.measurements.residual`).
  σ_S/h_S is rounded up on the residual path's grid (1/(2σ²) to ``scale_bits`` bits,
  :func:`matmech.privacy.noise.gaussian_grid`) and every block is drawn in one sampler call.

Blocks sharing a scale are drawn in one sampler call, scales ascending, blocks in subset
order. The plan reads no data; :func:`measure_gmarginal` reads the tables (the caller has
checked them and charged the budget) and never branches on them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from matmech.measurements.residual import (
    DEFAULT_SCALE_BITS,
    bucket_up,
    check_laplace_loss,
    check_scale_bits,
)
from matmech.linalg.linop import Dense, Identity
from matmech.optimizers.general_marginal_error import (
    GeneralMarginalStrategy,
    general_marginal_sensitivity2,
)
from matmech.privacy import noise
from matmech.privacy.calibration import gaussian_sigma, neighbor_sensitivity
from matmech.privacy.events import ApproxDP, DiscreteGaussian
from matmech.privacy.measure import check_max_records
from matmech.privacy.params import check_neighbors, check_privacy_params


#: Bits of each factor's largest column norm kept by its grid (at most).
MAX_BITS = 20
_INT_BITS = 61  # |K_S t_S| < 2**61: exact in int64 with room for the noise
_LAPLACE_UNITS = 2.0**46  # b_S/h_S before bucketing (the sampler allows 2**48)
_GAUSS_UNITS = 2.0**22  # σ_S/h_S before bucketing (the sampler allows 2**24)
_SCALE_MARGIN = 1.0 + 1e-12


def _pow2_at_least(v):
    m, e = math.frexp(v)
    return math.ldexp(1.0, e - 1) if m == 0.5 else math.ldexp(1.0, e)


@dataclass(frozen=True, eq=False)
class GMarginalMeasurementPlan:
    """Everything about the measurement that does not read data.

    ``subsets[j]`` is the j-th measured attribute subset S (θ_S = ``theta[j]``), released on
    the lattice ``lattice[j]`` = h_S with noise parameter ``units[j]`` in lattice units
    (Laplace scale or Gaussian σ) and exact per-entry variance ``variances[j]`` (in the units
    of y). ``ints[i]`` is Kᵢ (int64) or None for an identity factor, ``grids[i]`` = gᵢ;
    ``factors[i]`` is Q'ᵢ = Kᵢ gᵢ as a LinOp. ``sensitivity`` is Δ₁ or Δ₂ (times the
    neighbours factor), ``bits`` the precision kept by the grids (None: nothing rounded).
    """

    strategy: GeneralMarginalStrategy
    domain: tuple
    subsets: tuple
    theta: np.ndarray
    ints: tuple
    grids: tuple
    factors: tuple
    lattice: np.ndarray
    units: np.ndarray
    variances: np.ndarray
    noise: str
    eps: float
    delta: float
    neighbors: str
    sensitivity: float
    max_records: int
    bits: int | None
    gauss: tuple = ()  # the discrete Gaussians drawn (noise.gaussian_grid): block j's is gauss[which[j]]
    which: np.ndarray | None = None

    @property
    def event(self):
        """The privacy event charged (:mod:`matmech.privacy.events`): (ε, δ) the discrete
        Gaussian at σ₁ per unit θ and L2 sensitivity Δ₂ (every block's σ is rounded up from
        σ₁/θ_S, so ρ = Δ₂²/(2σ₁²) bounds it), on lattices of its own per block; pure ε the
        ε the rounded Laplace scales were checked against (ρ = ε²/2)."""
        if self.noise == "discrete_gaussian":
            sigma1 = gaussian_sigma(self.eps, self.delta, self.sensitivity)
            return DiscreteGaussian(
                sigma1, self.sensitivity, eps=self.eps, delta=self.delta, grid=None
            )
        return ApproxDP(self.eps, 0.0)

    def measured_strategy(self):
        """The strategy actually measured: θ_S ⊗ᵢ(Q'ᵢ or 1ᵀ), a GeneralMarginalStrategy."""
        return GeneralMarginalStrategy(self.domain, self.strategy.theta, self.factors)

    def gls_strategy(self):
        """The same rows weighted by 1/std of their noise (θ_eff,S = variances⁻¹ᐟ²): its
        gram is the generalised least squares normal matrix AᵀΣ⁻¹A."""
        k = len(self.domain)
        w = np.zeros(1 << k)
        for S, v in zip(self.subsets, self.variances.tolist()):
            w[sum(1 << i for i in S)] = 1.0 / math.sqrt(v)
        return GeneralMarginalStrategy(self.domain, w, self.factors)


@dataclass(frozen=True, eq=False)
class GMarginalMeasurement:
    """The released blocks: ``y[S]`` (float64, shape (rows of Q'ᵢ, i ∈ S)) = Q'_S t_S + noise,
    exact on the lattice of the plan; ``secure`` is False with a seeded Generator."""

    plan: GMarginalMeasurementPlan
    y: dict
    secure: bool


def _check_strategy(A):
    if not isinstance(A, GeneralMarginalStrategy):
        raise TypeError(f"the strategy must be a GeneralMarginalStrategy, got {type(A).__name__}")
    k = len(A.domain_sizes)
    masks = np.flatnonzero(A.theta > 0)
    subsets = tuple(tuple(i for i in range(k) if (int(m) >> i) & 1) for m in masks)
    return subsets, np.asarray(A.theta[masks], dtype=np.float64)


def _dense_factor(f, i):
    q = np.asarray(f.dense(), dtype=np.float64)
    if not np.all(np.isfinite(q)):
        raise ValueError(f"factor {i} of the strategy holds a non-finite entry")
    return q


def _round_factors(dense, bits):
    """(ints, grids, l1, l2sq): per attribute Kᵢ, gᵢ and the largest column L1 / squared L2
    norm of Q'ᵢ = Kᵢgᵢ (exact: integer sums times powers of two)."""
    ints: list[np.ndarray | None] = []
    grids, l1, l2 = [], [], []
    for q in dense:
        if q is None:
            ints.append(None)
            grids.append(1.0)
            l1.append(Fraction(1))
            l2.append(Fraction(1))
            continue
        if np.array_equal(q, np.rint(q)):
            g = 1.0
        else:
            g = _pow2_at_least(float(np.abs(q).sum(axis=0).max())) * 2.0**-bits
        K = np.rint(q / g).astype(np.int64)
        ints.append(K)
        grids.append(g)
        l1.append(Fraction(int(np.abs(K).sum(axis=0).max())) * Fraction(g))
        l2.append(Fraction(int((K * K).sum(axis=0).max())) * Fraction(g) ** 2)
    return ints, grids, l1, l2


def plan_gmarginal(
    A, eps, delta=0.0, *, neighbors="add_remove", max_records=None, scale_bits=DEFAULT_SCALE_BITS
):
    """The data-independent plan of measuring the GeneralMarginalStrategy ``A`` →
    :class:`GMarginalMeasurementPlan`: grids, per-block noise, exact variances. Raises (before any data
    or budget) when no grid keeps the measurement exact within the samplers' range."""
    subsets, theta = _check_strategy(A)
    eps, delta = check_privacy_params(eps, delta)
    check_neighbors(neighbors)
    max_records = check_max_records(max_records)
    check_scale_bits(scale_bits)
    domain = A.domain_sizes
    dense = [
        None if isinstance(f, Identity) else _dense_factor(f, i) for i, f in enumerate(A.factors)
    ]
    real = [q is not None and not np.array_equal(q, np.rint(q)) for q in dense]
    kmax = max((sum(real[i] for i in S) for S in subsets), default=0)
    gauss = delta > 0
    if kmax == 0:
        bits = None
        candidates = [0]
    else:
        top = min(MAX_BITS, (_INT_BITS - math.ceil(math.log2(max_records))) // kmax)
        if top < 1:
            raise ValueError(
                f"max_records={max_records:,} is too many for exact integer arithmetic with "
                f"{kmax} rounded factors in one subset"
            )
        candidates = list(range(top, 0, -1))
    last = None
    for bits in candidates:
        ints, grids, l1, l2 = _round_factors(dense, bits)
        lattice = np.array([math.prod(grids[i] for i in S) for S in subsets], dtype=np.float64)
        # exactness: |K_S t_S| <= max_records · Π ‖Kᵢ‖₁ < 2**61
        worst = max(
            max_records * math.prod(float(l1[i] / Fraction(grids[i])) for i in S) for S in subsets
        )
        if worst >= 2.0**_INT_BITS:
            last = "exact integer arithmetic"
            continue
        if gauss:
            # Δ₂² from the rounded factors' column norms: the function the L2 weight optimiser
            # uses (exact; the float sums are covered by the margin)
            s2 = general_marginal_sensitivity2(A.theta, [float(v) for v in l2])
            sens = neighbor_sensitivity(math.sqrt(s2), neighbors, margin=True)
            sigma1 = gaussian_sigma(eps, delta, sens)
            raw = sigma1 / theta / lattice * _SCALE_MARGIN
            limit = _GAUSS_UNITS
        else:
            l1_sum = sum(
                Fraction(float(t)) * math.prod((l1[i] for i in S), start=Fraction(1))
                for S, t in zip(subsets, theta.tolist())
            )
            sens = neighbor_sensitivity(float(l1_sum), neighbors, margin=True)
            raw = sens / (eps * theta) / lattice * _SCALE_MARGIN
            limit = _LAPLACE_UNITS
        if not np.all(np.isfinite(raw)) or raw.max() > limit:
            last = "the exact sampler's range"
            continue
        break
    else:
        raise ValueError(
            f"no grid for the strategy's factors keeps the measurement within {last}; "
            f"eps={eps!r} is too small (or max_records={max_records:,} too large) for this strategy"
        )
    params, which = (), None
    if gauss:  # σ >= raw on the sampler's grid (the residual path's rule: shared tables)
        params, which = noise.gaussian_grid(raw, bits=scale_bits)
        unit_var = noise.gaussian_variances(params)[which]
        units = np.sqrt([p.a / p.b for p in params])[which]  # σ drawn (float, for display)
    else:  # the privacy loss of the rounded scales, in exact rationals
        units = bucket_up(raw, scale_bits)
        unit_var = np.array([noise.discrete_laplace_variance(u) for u in units.tolist()])
        check_laplace_loss(
            (
                math.prod((l1[i] for i in S), start=Fraction(1))
                / (Fraction(float(u)) * Fraction(float(h)))
                for S, u, h in zip(subsets, units.tolist(), lattice.tolist())
            ),
            eps,
            neighbors,
        )
    variances = unit_var * lattice * lattice
    factors = tuple(
        Identity(n)
        if K is None
        else (
            Identity(n)
            if K.shape == (n, n) and g == 1.0 and np.array_equal(K, np.eye(n, dtype=np.int64))
            else Dense(K * g)
        )
        for K, g, n in zip(ints, grids, domain)
    )
    for a in (theta, lattice, units, variances):
        a.setflags(write=False)
    return GMarginalMeasurementPlan(
        A,
        domain,
        subsets,
        theta,
        tuple(ints),
        tuple(grids),
        factors,
        lattice,
        units,
        variances,
        "discrete_gaussian" if gauss else "discrete_laplace",
        eps,
        delta,
        neighbors,
        float(sens),
        max_records,
        None if kmax == 0 else bits,
        params,
        which,
    )


def _apply_int(table, mats):
    """K_S t_S exactly in int64: ``mats[k]`` (int64 or None for the identity) along axis k."""
    arr = np.asarray(table, dtype=np.int64)
    for k, m in enumerate(mats):
        if m is not None:
            arr = np.moveaxis(np.tensordot(m, arr, axes=([1], [k])), 0, k)
    return np.array(arr, order="C")  # (ascontiguousarray would make a 0-d table 1-d)


def measure_gmarginal(plan, tables, *, rng=None):
    """Draw the noise of ``plan`` on the marginal ``tables`` ({S: int64 table}) →
    :class:`GMarginalMeasurement`. Reads data; the caller has checked the tables and charged
    the budget. Nothing here branches on the data."""
    if not isinstance(plan, GMarginalMeasurementPlan):
        raise TypeError(f"plan must be a GMarginalMeasurementPlan, got {type(plan).__name__}")
    src = noise.check_rng(rng)
    gauss = plan.noise == "discrete_gaussian"
    exact = [_apply_int(tables[S], [plan.ints[i] for i in S]) for S in plan.subsets]
    if gauss:  # every block in one sampler call, block j at its own σ (blocks in plan order)
        if plan.which is None:
            raise ValueError(
                "a discrete_gaussian plan needs which (block j's σ is gauss[which[j]])"
            )
        sizes = [e.size for e in exact]
        z = noise.discrete_gaussian_mixed(plan.gauss, np.repeat(plan.which, sizes), rng=src)
        groups = [(list(range(len(exact))), z)]
    else:  # scales ascending; one sampler call per distinct scale
        groups = []
        for u in np.unique(plan.units).tolist():
            idx = np.flatnonzero(plan.units == u).tolist()
            total = sum(exact[j].size for j in idx)
            groups.append((idx, noise.discrete_laplace(u, total, rng=src)))
    out = {}
    for idx, z in groups:
        at = 0
        for j in idx:
            e = exact[j]
            released = e + z[at : at + e.size].reshape(e.shape)  # the released integers
            at += e.size
            y = released.astype(np.float64) * float(plan.lattice[j])  # post-processing
            y.setflags(write=False)
            out[plan.subsets[j]] = y
    return GMarginalMeasurement(plan, out, bool(src.secure))
