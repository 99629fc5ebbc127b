"""Optimising generalised marginal strategies: joint lattice weights and p-Identity factors.

HDMM's OPT_M over generalised marginals (McKenna et al., "Optimizing error of
high-dimensional statistical queries under differential privacy", PVLDB 2018, §6.3, with the
p-Identity factors of §5.1 optimised jointly): :func:`optimize_general_marginals` (pure ε, and
(ε, δ) by re-weighting) and :func:`reweight_general_marginals_l2` (the lattice weights for the
Gaussian error, factors fixed). The strategy and its exact error are in
:mod:`matmech.optimizers.general_marginal_error`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from matmech.optimizers.general_marginal_error import (
    GeneralMarginalStrategy,
    inside_products,
    pidentity_minv,
    general_marginal_problem,
    factor_col_norm2,
)
from matmech.optimizers.lbfgs import lbfgsb_nonneg
from matmech.optimizers.marginal_lattice import WEYL_STEP, LatticeObjective, on_lattice_subset
from matmech.optimizers.gram import structure_key
from matmech.optimizers.marginal_workloads import total_like


@dataclass(frozen=True)
class GeneralMarginalFit:
    """Outcome of :func:`optimize_general_marginals`: value = sens₁² · trace(G (AᵀA)⁻)
    (sens₂² · trace(G (AᵀA)⁻) with ``norm=2`` and from :func:`reweight_general_marginals_l2`)."""

    strategy: GeneralMarginalStrategy
    value: float
    theta: np.ndarray
    starts: tuple  # ((name, start value, final value), ...)


#: L-BFGS-B iterations of the joint (θ, Θ) descent and of each θ-only start.
GENERAL_JOINT_ITER = 300
GENERAL_THETA_ITER = 500
#: Up to this many attributes the generalised marginal optimiser weighs every subset; above,
#: the subsets of at most (workload order + GENERAL_EXTRA_ORDER) attributes.
GENERAL_FULL_LATTICE = 10
GENERAL_EXTRA_ORDER = 2
#: Deterministic equidistributed θ starts of the generalised marginal optimiser.
GENERAL_FILL_STARTS = 4


def _fit_factor(prob, i, supports, *, restarts=1, rng=None, memo=None):
    """A p-Identity Θ for attribute i: HDMM's OPT₀ on Σ_k v_k² (Π_{j≠i} trace C_jk) C_ik over
    the terms that query attribute i (the 1-D problem of a Kronecker strategy with identity
    factors elsewhere), from :func:`matmech.optimizers.pure.fit_pidentity`; ``memo``: {gram
    rounded to 10⁻¹² (it has unit trace): Θ} shared by attributes with equal grams (rng None)."""
    from matmech.optimizers.gram import GramOperator
    from matmech.optimizers.pure import fit_pidentity

    n = prob.domain[i]
    acc = np.zeros((n, n))
    for kk in range(prob.v2.size):
        if i not in supports[kk]:
            continue
        other = math.prod(
            prob.traces[j][prob.uniq[j][1][kk]] for j in range(prob.k) if j != i
        )  # the traces of the distinct grams, computed once on the problem
        acc += prob.v2[kk] * other * prob.C[i][kk]
    acc /= max(float(np.trace(acc)), 1e-300)
    # attributes with the same weighted gram up to rounding in the order of the terms' sums
    # (Loans: four prefix(101)) share one deterministic fit (rng None)
    key = None if rng is not None or memo is None else np.round(acc, 12).tobytes()
    if key is not None and key in memo:
        return memo[key].copy()
    # no quadratic-fill multistart here (unlike the kron family): a better isolated 1-D fit is
    # not a better start for the joint (θ, Θ) descent (adult_W2: RMSE 391.8 without, 412.0 with)
    fit = fit_pidentity(GramOperator.from_gram(0.5 * (acc + acc.T)), restarts=restarts, rng=rng)
    theta = np.asarray(fit.theta, dtype=np.float64)
    if key is not None:
        memo[key] = theta.copy()
    return theta


def optimize_general_marginals(
    W, *, restarts=1, rng=None, maxiter=GENERAL_JOINT_ITER, factor_thetas=None, norm=1
):
    """Generalised marginals for a union of Kronecker products W (pure ε): minimise
    (Σθ_S)² trace(G_W (AᵀA)⁻) over the lattice weights θ ≥ 0 and, jointly, the p-Identity
    factors Θᵢ ≥ 0 of the attributes whose workload factors are neither identities nor totals
    (prefixes, ranges, custom predicates); identities elsewhere.

    Starts (θ, with the factors fitted per attribute by :func:`_fit_factor`): the workload's
    own subsets, uniform weights, all ℓ-way subsets above the workload's order,
    :data:`GENERAL_FILL_STARTS` Weyl fills and ``restarts``−1 random θ from ``rng``; the best
    then descends jointly in (θ, Θ) by L-BFGS-B with the exact gradient, and θ is polished
    once more. Every value is the exact factored error (no domain-sized object).

    ``factor_thetas``: optional {attribute: Θᵢ (p×dᵢ, ≥ 0)} taken instead of :func:`_fit_factor`
    for the free attributes among them (the others keep the identity), e.g. the ``kron``
    family's factor fits of a single Kronecker workload (where :func:`_fit_factor` solves the
    same 1-D problem with fewer starts: cps_W2 RMSE 40.5396 in 0.08 s instead of 40.6064 in 0.4 s).

    ``norm=2`` ((ε, δ), Gaussian noise): the pure-ε strategy above, then its lattice weights
    re-optimised for the L2 error with its factors fixed (:func:`reweight_general_marginals_l2`);
    ``value`` is then Δ₂² · trace(G_W (AᵀA)⁻)."""
    if isinstance(norm, bool) or norm not in (1, 2):
        raise ValueError(f"norm must be 1 (pure eps) or 2 (Gaussian, delta > 0), got {norm!r}")
    prob, domain, blocks = general_marginal_problem(W)
    k = prob.k
    total = {}  # total_like per factor structure (structure_key), else per factor

    def is_total(f):
        key = structure_key(f) or id(f)
        if key not in total:
            total[key] = total_like(f)
        return total[key]

    supports = [frozenset(i for i, f in enumerate(fs) if not is_total(f)) for _, fs in blocks]
    given = {} if factor_thetas is None else dict(factor_thetas)
    for i, th in given.items():
        if not (isinstance(i, (int, np.integer)) and 0 <= i < k):
            raise ValueError(f"factor_thetas keys must be attribute indices 0..{k - 1}, got {i!r}")
        arr = np.asarray(th, dtype=np.float64)
        if (
            arr.ndim != 2
            or arr.shape[1] != domain[i]
            or arr.shape[0] == 0
            or not np.all(np.isfinite(arr))
            or np.any(arr < 0)
        ):
            raise ValueError(
                f"factor_thetas[{i}] must be a finite non-negative p×{domain[i]} matrix, got shape {arr.shape}"
            )
    given = {i: th for i, th in given.items() if i in prob.free}
    fitted: dict = {}  # _fit_factor's fits by weighted gram
    thetas = {
        i: (
            np.array(given[i], dtype=np.float64)
            if i in given
            else _fit_factor(prob, i, supports, restarts=restarts, rng=rng, memo=fitted)
        )
        for i in prob.free
    }
    minvs = [np.eye(d) for d in domain]
    for i, th in thetas.items():
        minvs[i] = pidentity_minv(th)
    records = []

    sizes = np.array([bin(m).count("1") for m in range(1 << k)])
    order = max(len(s) for s in supports)
    # the variables: every subset up to GENERAL_EXTRA_ORDER attributes above the workload's
    # order (the whole lattice when k ≤ GENERAL_FULL_LATTICE)
    closure = (
        np.ones(1 << k, dtype=bool)
        if k <= GENERAL_FULL_LATTICE
        else sizes <= order + GENERAL_EXTRA_ORDER
    )
    idx = np.flatnonzero(closure)

    def theta_only(th0, name, minvs):
        mu, mult, out_prod = prob.theta_objective(minvs)
        fun = on_lattice_subset(LatticeObjective(mu, mult, out_prod, k, p=1), idx, k)
        th0 = th0 * closure
        x0 = th0[idx] / max(th0.sum(), 1e-300)
        f0 = fun(x0)[0]
        if not np.isfinite(f0):  # a start that cannot answer the workload
            records.append((name, f0, f0))
            return th0, f0
        x, fx = lbfgsb_nonneg(fun, x0, maxiter=GENERAL_THETA_ITER, ftol=1e-13, gtol=1e-12)
        x, f = (x, float(fx)) if fx <= f0 else (x0, f0)
        th = np.zeros(1 << k)
        th[idx] = x
        records.append((name, f0, f))
        return th, f

    own = np.zeros(1 << k)
    for (w2, _), s in zip(blocks, supports):
        own[sum(1 << i for i in s)] += math.sqrt(w2)
    starts = [("workload subsets", own), ("uniform on the lattice", np.ones(1 << k))]
    for level in range(order + 1, min(k, order + 2) + 1):
        starts.append((f"all {level}-way subsets", (sizes == level).astype(np.float64)))
    for r in range(GENERAL_FILL_STARTS):
        j = np.arange(r * (1 << k) + 1, (r + 1) * (1 << k) + 1, dtype=np.float64)
        starts.append((f"fixed random {r + 1}", np.mod(0.5 + j * WEYL_STEP, 1.0)))
    if rng is not None:
        for r in range(max(0, restarts - 1)):
            starts.append((f"random {r + 1}", rng.uniform(0, 1, 1 << k)))
    # the first of equals wins, as a running best would keep it
    th, f = min((theta_only(th0, name, minvs) for name, th0 in starts), key=lambda r: r[1])
    if prob.free and np.isfinite(f):
        th, thetas, f = _joint_descent(prob, th, thetas, maxiter, records, idx)
        minvs = [np.eye(d) for d in domain]
        for i, t in thetas.items():
            minvs[i] = pidentity_minv(t)
        th2, f2 = theta_only(th, "θ polish", minvs)
        if f2 < f:
            th, f = th2, f2
    th = th / th.sum()
    th[th < 1e-12] = 0.0
    from matmech.optimizers.pidentity import PIdentity

    factors = [PIdentity(thetas[i]) if i in thetas else None for i in range(k)]
    strategy = GeneralMarginalStrategy(domain, th, factors)
    value = prob.value(th, strategy.factor_inverses())
    if norm == 2:
        fit = reweight_general_marginals_l2(W, strategy)
        return GeneralMarginalFit(fit.strategy, fit.value, fit.theta, tuple(records) + fit.starts)
    return GeneralMarginalFit(strategy, value, th, tuple(records))


def _joint_descent(prob, th0, thetas0, maxiter, records, idx):
    """L-BFGS-B over (θ on the subsets ``idx``, Θ_free) ≥ 0 with the exact gradient of
    :meth:`_GeneralProblem.full`."""
    from matmech.optimizers.gram import GramOperator
    from matmech.optimizers.pidentity import objective

    free = list(prob.free)
    shapes = [thetas0[i].shape for i in free]
    nth = idx.size
    full_size = 1 << prob.k

    def unpack(x):
        out, o = {}, nth
        for i, sh in zip(free, shapes):
            sz = sh[0] * sh[1]
            out[i] = x[o : o + sz].reshape(sh)
            o += sz
        th = np.zeros(full_size)
        th[idx] = x[:nth]
        return th, out

    # the attributes without a free factor keep the identity: their numbers are computed once
    eyes = {i: np.eye(d) for i, d in enumerate(prob.domain) if i not in thetas0}
    fixed = {i: prob.attribute_numbers(i, m) for i, m in eyes.items()}

    def minv_list(ths):
        m = [eyes.get(i) for i in range(prob.k)]
        for i, t in ths.items():
            m[i] = pidentity_minv(t)
        return m

    def fun(x):
        th, ths = unpack(x)
        F, dth, grads = prob.full(th, minv_list(ths), fixed)
        if not np.isfinite(F):
            return math.inf, np.zeros_like(x)
        parts = [dth[idx]]
        for i in free:
            gam = grads[i]
            op = GramOperator("dense", gam.shape[0], np.diag(gam).copy(), dense=gam)
            parts.append(objective(ths[i], op)[1].ravel())
        return F, np.concatenate(parts)

    x0 = np.concatenate([th0[idx] / max(th0.sum(), 1e-300)] + [thetas0[i].ravel() for i in free])
    f0 = fun(x0)[0]
    x, fx = lbfgsb_nonneg(fun, x0, maxiter=maxiter, ftol=1e-13, gtol=1e-12)
    x, f = (x, float(fx)) if fx < f0 else (x0, f0)
    records.append(("joint (θ, Θ) descent", f0, f))
    th, ths = unpack(x)
    return th, {i: t.copy() for i, t in ths.items()}, f


# -- (ε, δ): the lattice weights for the L2 (Gaussian) error, the factors fixed ----------------------
#
# Under Gaussian noise the error of θ with fixed factors is Δ₂(θ)² · Σ_T η_T/λ_T(θ) with
# Δ₂² = Σ_S θ_S² c_S, c_S = Π_{i∈S} cᵢ (:func:`general_marginal_sensitivity2`). With
# φ_S = θ_S √c_S it is ‖φ‖² · Σ_T η_T/λ_T, λ_T = Σ_{S ⊇ T} φ_S² (Π_{i∉S} gᵢ)/c_S: the p=2 lattice
# objective of :class:`LatticeObjective` with out_prod divided by c_S.


class _L2Weights:
    """θ ↦ (Δ₂(θ)² Σ_T η_T/λ_T(θ), gradient in θ) for W's problem ``prob`` and A's factors."""

    def __init__(self, prob, A):
        eta, mult, outg = prob.theta_objective(A.factor_inverses())
        c = inside_products([factor_col_norm2(f) for f in A.factors])
        self.root = np.sqrt(c)
        self.phi = LatticeObjective(eta, mult, outg / c, prob.k, p=2)  # the objective in φ = θ√c

    def __call__(self, theta, gradient=True):
        r = self.phi(np.asarray(theta, dtype=np.float64) * self.root, gradient=gradient)
        return (r[0], r[1] * self.root) if gradient else r


def _fixed_factors_problem(W, A):
    """The lattice problem of W and its attribute sizes for re-weighting the GeneralMarginalStrategy A (its factors
    fixed): TypeError for another A, ValueError when W's attributes differ from A's."""
    if not isinstance(A, GeneralMarginalStrategy):
        raise TypeError(f"expected a GeneralMarginalStrategy, got {type(A).__name__}")
    prob, domain, _ = general_marginal_problem(W, free=())
    if domain != A.domain_sizes:
        raise ValueError(
            f"workload attributes {domain} differ from the strategy's {A.domain_sizes}"
        )
    return prob, domain


def general_marginal_l2_objective(W, A, theta=None):
    """(value, gradient) of the (ε, δ) objective Δ₂(θ)² · trace(WᵀW (AᵀA)⁻) of the lattice
    weights ``theta`` (default A's own; one per mask, bit i = attribute i in S) with the factors
    of the :class:`GeneralMarginalStrategy` A fixed; Δ₂² is :func:`general_marginal_sensitivity2`.
    The value is +inf (gradient zero) when θ cannot answer W."""
    prob, _ = _fixed_factors_problem(W, A)
    th = A.theta if theta is None else np.asarray(theta, dtype=np.float64)
    if th.shape != A.theta.shape or not np.all(np.isfinite(th)) or np.any(th < 0):
        raise ValueError(
            f"theta must be {A.theta.size} non-negative finite weights, got shape {th.shape}"
        )
    f, g = _L2Weights(prob, A)(th)
    return float(f), g


def reweight_general_marginals_l2(W, A, *, maxiter=GENERAL_THETA_ITER):
    """The lattice weights θ ≥ 0 of a :class:`GeneralMarginalStrategy` re-optimised for the
    (ε, δ) error Δ₂(θ)² · trace(WᵀW (AᵀA)⁻), A's factors kept →
    :class:`GeneralMarginalFit` (``value`` that L2 objective; never above A's own: its θ is a
    start and the better of the two is kept). Deterministic: L-BFGS-B from A's θ, the
    workload's subsets and uniform weights on the variables (every subset when k ≤
    :data:`GENERAL_FULL_LATTICE`, else those of at most workload order + :data:`GENERAL_EXTRA_ORDER`
    attributes, plus A's own subsets)."""
    prob, domain = _fixed_factors_problem(W, A)
    k = prob.k
    obj = _L2Weights(prob, A)
    root = obj.root
    sizes = np.array([bin(m).count("1") for m in range(1 << k)])
    order = int(sizes[prob.support].max())
    closure = (
        np.ones(1 << k, dtype=bool)
        if k <= GENERAL_FULL_LATTICE
        else (sizes <= order + GENERAL_EXTRA_ORDER) | (A.theta > 0)
    )
    idx = np.flatnonzero(closure)

    def fun(x):
        phi = np.zeros(1 << k)
        phi[idx] = x
        f, g = obj.phi(phi)
        return f, g[idx]

    own = np.zeros(1 << k)
    np.add.at(own, prob.support, np.sqrt(prob.v2))
    starts = [
        ("given weights", A.theta),
        ("workload subsets", own),
        ("uniform on the lattice", np.ones(1 << k)),
    ]
    records, best = [], None
    for name, th0 in starts:
        phi0 = (th0 * closure * root)[idx]
        x0 = phi0 / max(float(np.sqrt((phi0 * phi0).sum())), 1e-300)
        f0 = fun(x0)[0]
        if not np.isfinite(f0):  # a start that cannot answer the workload
            records.append(("L2 weights: " + name, f0, f0))
            continue
        x, fx = lbfgsb_nonneg(fun, x0, maxiter=maxiter, ftol=1e-13, gtol=1e-12)
        x, f = (x, float(fx)) if fx <= f0 else (x0, f0)
        records.append(("L2 weights: " + name, f0, f))
        if best is None or f < best[1]:
            best = (x, f)
    given = float(obj(A.theta, gradient=False))
    th = None
    if best is not None:
        th = np.zeros(1 << k)
        th[idx] = best[0]
        th = th / root
        th = th / th.sum()
        th[th < 1e-12] = 0.0
        value = float(obj(th, gradient=False)) if np.any(th > 0) else math.inf
    if th is None or not value < given:  # keep A's θ unless strictly better
        th, value = np.array(A.theta, dtype=np.float64), given
    strategy = GeneralMarginalStrategy(domain, th, A.factors)
    return GeneralMarginalFit(strategy, value, strategy.theta, tuple(records))
