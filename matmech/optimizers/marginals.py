"""Strategies for multi-attribute workloads: marginal lattices and Kronecker products.

Marginals (McKenna et al., VLDB 2018, §6.3 "OPT_M"; Xiao et al., NeurIPS 2023). Let a
strategy measure the marginal on every attribute subset S with weight θ_S. Its gram
Σ_S θ_S² ⊗ᵢ(I if i ∈ S else 11ᵀ) is diagonal in the basis that is constant or mean-zero
per attribute: on the class T (mean-zero exactly on the attributes in T, multiplicity
Πᵢ∈T(dᵢ−1)) it has the eigenvalue λ_T = Σ_{S ⊇ T} θ_S² Πᵢ∉S dᵢ
(:func:`matmech.error.marginal_spectrum`). A marginal workload has eigenvalues μ_T of the
same form, so the error is Σ_T m_T μ_T / λ_T times the squared sensitivity:

* pure ε: sens₁ = Σ_S θ_S (every marginal has column L1 norm 1) — minimised over θ ≥ 0
  by L-BFGS-B;
* (ε, δ): sens₂² = Σ_S θ_S² — here the optimum over all strategies is in closed form:
  any strategy can be averaged over the per-attribute permutations without losing, which
  makes its gram Σ_T λ_T P_T; minimising Σ m_T μ_T/λ_T at Σ m_T λ_T = N gives
  λ_T ∝ √μ_T, the SVD bound (Σ σ)²/N of Li & Miklau (ICDT 2013) is attained, and the
  strategy is the residual basis of ResidualPlanner (Xiao et al. 2023).

Kronecker workloads W = W₁ ⊗ … ⊗ W_d: a Kronecker strategy's error factors,
Πᵢ sens(Aᵢ)² trace(Gᵢ (AᵢᵀAᵢ)⁻¹), so each factor is optimised alone (HDMM "OPT⊗"). A
union Σⱼ wⱼ² ⊗ᵢ Gᵢⱼ is handled by block coordinate descent: with the other factors fixed,
factor i sees the 1-D gram Σⱼ cⱼ Gᵢⱼ (HDMM §6.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from matmech.error import _marginal_terms
from matmech.linalg.structured import (  # the lattice spectrum, shared with the error analysis
    _class_projector_factors,
    _masks,
    _spectral_pinv,
    _subset_inplace,
    _superset_inplace,
    _superset_sum,
    _workload_spectrum,
)
from matmech.linalg.linop import Dense, Identity, Kron, LinOp, Ones, Scaled, Sum, VStack, as_linop, register
from matmech.optimizers.lbfgs import lbfgsb_nonneg

__all__ = [
    "MarginalStrategy",
    "ResidualStrategy",
    "MarginalFit",
    "marginal_workload",
    "expand_marginals",
    "optimize_marginals_pure",
    "optimize_marginals_l2",
    "marginal_objective",
    "kron_blocks",
    "GeneralMarginalStrategy",
    "GeneralMarginalFit",
    "general_marginal_error",
    "optimize_general_marginals",
    "factor_col_norm2",
    "general_marginal_sensitivity2",
    "general_marginal_l2_objective",
    "reweight_general_marginals_l2",
]

#: Largest number of attributes for the lattice optimiser (2^k subsets).
MAX_ATTRIBUTES = 16
#: At most this many "workload plus one larger marginal" starting points.
MAX_EXTRA_STARTS = 32
#: Rounds of greedy "replace by a larger marginal" moves after the starts.
MAX_GREEDY_ROUNDS = 4
#: Deterministic equidistributed starts θ ∈ [0, 1)^(2^k) (a Weyl sequence, no generator, so
#: reproducible) besides the structured ones: the lattice objective is non-convex and, on
#: HDMM's Kron[IT, …, IT] workloads, the structured starts stop at 5.00 (cps_W1) where
#: uniform random starts reach 4.77-4.84.
FIXED_RANDOM_STARTS = 16
_WEYL_STEP = (math.sqrt(5.0) - 1.0) / 2.0
#: Largest number of marginals a product of [identity; total]-type factors is expanded into.
MAX_EXPANDED_TERMS = 1 << 14


def marginal_workload(W):
    """(terms, domain) if W is a weighted union of marginals, else None.

    ``terms`` is a list of (weight², frozenset of attributes).
    """
    if not isinstance(W, (VStack, Kron)):
        return None
    if isinstance(W, VStack) and not all(isinstance(b, Kron) for b in W.blocks):
        return None
    return _marginal_terms(W)


def _factor_options(f):
    """[(weight², in_subset)] if the 1-D workload f is an identity, a total, or a weighted
    stack of them (e.g. [I; T]), else None: the rows of f as marginals on one attribute."""
    from matmech.linalg.intervals import Intervals

    if isinstance(f, Scaled):
        sub = _factor_options(f.base)
        return None if sub is None else [(f.c**2 * w2, s) for w2, s in sub]
    if isinstance(f, VStack):
        out = []
        for w, b in zip(f.weights, f.blocks):
            sub = _factor_options(b)
            if sub is None:
                return None
            out += [(float(w) ** 2 * w2, s) for w2, s in sub]
        return out
    if isinstance(f, Intervals):
        lo, hi = f.bounds()
        if f.shape[0] == f.n and np.array_equal(lo, np.arange(f.n)) and np.array_equal(hi, lo):
            return [(1.0, True)]
        if f.shape[0] == 1 and lo[0] == 0 and hi[0] == f.n - 1:
            return [(1.0, False)]
    if isinstance(f, Identity):
        return [(1.0, True)]
    if isinstance(f, Ones) and f.shape[0] == 1:
        return [(1.0, False)]
    return None


def expand_marginals(W, *, max_terms=MAX_EXPANDED_TERMS):
    """A union of marginals with the same gram as W (so the same error for every strategy),
    or None. W itself when it is one; otherwise a weighted union of Kronecker products whose
    factors are identities, totals or stacks of them (HDMM's Kron[IT, …, IT] workloads):
    each product expands into the marginals on the attribute subsets it covers, equal
    subsets merged (their weights² add). None beyond ``max_terms`` expanded products."""
    W = as_linop(W)
    if marginal_workload(W) is not None:
        return W
    blocks = kron_blocks(W)
    if blocks is None:
        return None
    domain = tuple(f.shape[1] for f in blocks[0][1])
    acc, count = {}, 0
    for w2, fs in blocks:
        opts = [_factor_options(f) for f in fs]
        if any(o is None for o in opts):
            return None
        count += math.prod(len(o) for o in opts)
        if count > max_terms:
            return None
        terms = {(): w2}
        for o in opts:
            nxt = {}
            for key, v in terms.items():
                for w, inside in o:
                    k2 = key + (inside,)
                    nxt[k2] = nxt.get(k2, 0.0) + v * w
            terms = nxt
        for key, v in terms.items():
            s = tuple(i for i, inside in enumerate(key) if inside)
            acc[s] = acc.get(s, 0.0) + v
    from matmech.linalg.intervals import Intervals

    # built from the interval operators directly: the marginals of a 10¹⁸-cell domain are
    # an ordinary (factored) workload here, whatever limit the user-facing builders apply
    ident = {d: Intervals(d, np.arange(d), np.arange(d)) for d in set(domain)}
    tot = {d: Intervals(d, np.array([0]), np.array([d - 1])) for d in set(domain)}
    subsets = sorted(acc, key=lambda s: (len(s), s))
    blocks = [Kron(*[ident[d] if i in s else tot[d] for i, d in enumerate(domain)]) for s in subsets]
    weights = np.sqrt([acc[s] for s in subsets])
    return VStack(blocks, weights=weights, domain=domain, subsets=subsets)


def marginal_objective(theta, mu, mult, out_prod, k, *, p=1, gradient=True):
    """(sens_p(θ)², Σ_T m_T μ_T/λ_T(θ)) product and its gradient in θ (pure: p=1, L2: p=2).

    Classes with μ_T = 0 are ignored; a class with μ_T > 0 and λ_T = 0 gives +inf.
    """
    return _LatticeObjective(mu, mult, out_prod, k, p=p)(theta, gradient=gradient)


class _LatticeObjective:
    """:func:`marginal_objective` for fixed (μ, mult, out_prod): the class mask and m_T μ_T are
    computed once (the optimisers call it hundreds of times on 2^k ≤ 65536 entries, where the
    per-call overhead dominated). The same floating-point operations as before."""

    def __init__(self, mu, mult, out_prod, k, *, p=1):
        self.mu, self.mult, self.out_prod, self.k, self.p = mu, mult, out_prod, k, p
        self.need = (mu > 0) & (mult > 0)
        self.mm = mult[self.need] * mu[self.need]

    def __call__(self, theta, gradient=True):
        need, out_prod, k, p = self.need, self.out_prod, self.k, self.p
        th = np.asarray(theta, dtype=np.float64)
        lam = _superset_inplace(th * th * out_prod, k)
        lam_need = lam[need]
        if np.any(lam_need <= 0):
            return (math.inf, np.zeros_like(th)) if gradient else math.inf
        ratio = np.zeros_like(lam)
        r_need = self.mm / lam_need
        ratio[need] = r_need
        err = float(ratio.sum())
        s = th.sum()
        sens2 = float(s) ** 2 if p == 1 else float((th * th).sum())
        f = sens2 * err
        if not gradient:
            return f
        # ∂err/∂θ_S = −2 θ_S Πᵢ∉S dᵢ Σ_{T ⊆ S} m_T μ_T / λ_T²
        q = np.zeros_like(lam)
        q[need] = r_need / lam_need
        derr = -2.0 * th * out_prod * _subset_inplace(q, k)
        if p == 1:
            return f, (2.0 * s) * err + sens2 * derr
        return f, 2.0 * th * err + sens2 * derr


def _factor(d, in_subset):
    return Identity(d) if in_subset else Ones(1, d)


@register("MarginalStrategy")
class MarginalStrategy(VStack):
    """Weighted union of marginals: the rows θ_S ⊗ᵢ(I if i ∈ S else 1ᵀ) for θ_S > 0.

    Sensitivity Σθ_S (L1) or √Σθ_S² (L2); ``gram_pinv()`` is the spectral form
    Σ_T λ_T⁻¹ P_T, a Sum of Krons of dᵢ×dᵢ factors, so the error of a 10⁵-cell marginal
    workload costs a few thousand small matrix products.
    """

    def __init__(self, domain, weights):
        domain = tuple(int(d) for d in domain)
        k = len(domain)
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (1 << k,) or not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
            raise ValueError(f"need {1 << k} non-negative finite weights (one per attribute subset), not all zero")
        self.theta = w
        masks = np.flatnonzero(w > 0)
        subsets = tuple(tuple(i for i in range(k) if (m >> i) & 1) for m in masks)
        blocks = [Kron(*[_factor(d, (m >> i) & 1) for i, d in enumerate(domain)]) for m in masks]
        super().__init__(blocks, weights=w[masks], domain=domain, subsets=subsets)

    def eigenvalues(self):
        out_prod, _ = _masks(self.domain)
        return _superset_sum(self.theta**2 * out_prod, len(self.domain))

    def gram_pinv(self):
        _, mult = _masks(self.domain)
        return _spectral_pinv(self.domain, self.eigenvalues(), mult)

    def rounded_operator(self, g):
        """The strategy with every entry on the grid g: its entries are the weights θ_S, so
        round those (to the nearest multiple, at least g) and keep the lattice structure
        (:mod:`matmech.privacy.measure` measures it; the error analysis stays spectral)."""
        th = np.where(self.theta > 0, np.maximum(np.rint(self.theta / g), 1.0) * g, 0.0)
        return MarginalStrategy(self.domain, th)

    def to_dict(self, out):
        return {"domain": list(self.domain), "theta": out.array(self.theta)}

    @classmethod
    def from_dict(cls, node, src):
        return cls(tuple(src.ints(node, "domain")), src.array(node, "theta", "float", 1))


@register("ResidualStrategy")
class ResidualStrategy(VStack):
    """Σ_T √λ_T · ⊗ᵢ Bᵢ^T with Bᵢ an orthonormal basis of the mean-zero vectors (i ∈ T) or
    1ᵀ/√dᵢ (i ∉ T): gram exactly Σ_T λ_T P_T (ResidualPlanner's residual basis)."""

    def __init__(self, domain, lam):
        domain = tuple(int(d) for d in domain)
        lam = np.asarray(lam, dtype=np.float64)
        _, mult = _masks(domain)
        self.lam = np.where(mult > 0, lam, 0.0)
        bases = {}
        for d in set(domain):
            # rows 1..d−1 of an orthonormal basis whose first row is 1ᵀ/√d
            q, _ = np.linalg.qr(np.column_stack([np.ones(d), np.eye(d)[:, : d - 1]]))
            q = q * np.sign(q[0, 0])
            bases[d] = (Dense(q[:, :1].T), Dense(q[:, 1:].T) if d > 1 else None)
        masks = np.flatnonzero(self.lam > 0)
        if masks.size == 0:
            raise ValueError("a residual strategy needs at least one positive eigenvalue")
        blocks = [Kron(*[bases[d][1] if (m >> i) & 1 else bases[d][0] for i, d in enumerate(domain)]) for m in masks]
        super().__init__(blocks, weights=np.sqrt(self.lam[masks]))
        self.domain = domain  # attribute sizes; no subsets: the blocks are eigenspaces, not marginals

    def eigenvalues(self):
        return self.lam

    def gram_pinv(self):
        _, mult = _masks(self.domain)
        return _spectral_pinv(self.domain, self.lam, mult)

    def to_dict(self, out):
        return {"domain": list(self.domain), "lam": out.array(self.lam)}

    @classmethod
    def from_dict(cls, node, src):
        return cls(tuple(src.ints(node, "domain")), src.array(node, "lam", "float", 1))


@dataclass(frozen=True)
class MarginalFit:
    """Outcome of a marginal-lattice optimisation (value = sens² · trace(G (AᵀA)⁺))."""

    strategy: LinOp
    value: float
    theta: np.ndarray
    starts: tuple
    gap: float | None


def _check_marginals(W):
    marg = marginal_workload(W)
    if marg is None:
        raise ValueError("the workload is not a weighted union of marginals (Kron products of identity/total factors)")
    terms, domain = marg
    if len(domain) > MAX_ATTRIBUTES:
        raise ValueError(f"the marginal lattice has 2^{len(domain)} subsets; at most {MAX_ATTRIBUTES} attributes are supported")
    return terms, domain


def optimize_marginals_pure(W, *, restarts=1, rng=None, maxiter=2000):
    """HDMM's OPT_M: min (Σθ_S)² Σ_T m_T μ_T/λ_T(θ) over θ ≥ 0 on every attribute subset. Starts: the workload's own marginals (so the result is never worse
    than measuring them), equal weights on the closure, all ℓ-way marginals above the
    workload's order, :data:`FIXED_RANDOM_STARTS` equidistributed θ (a deterministic Weyl
    fill, the same on every call), and ``restarts``−1 random θ from ``rng`` (none when ``rng`` is None)."""
    terms, domain = _check_marginals(W)
    k = len(domain)
    mu, mult, out_prod = _workload_spectrum(terms, domain)
    wanted = [sum(1 << i for i in s) for _, s in terms]
    # every subset is a variable: under L1 a larger marginal can serve several workload
    # marginals at the sensitivity cost of one (e.g. 4-way marginals for 3-way queries)
    closure = np.ones(1 << k, dtype=bool)
    starts = []
    own = np.zeros(1 << k)
    for (w2, _), mask in zip(terms, wanted):
        own[mask] += math.sqrt(w2)
    starts.append(("workload marginals", own))
    starts.append(("uniform on the lattice", closure.astype(np.float64)))
    # θ enters λ squared, so a zero weight never becomes positive by first-order moves; give
    # the larger marginals a chance explicitly: all ℓ-way marginals for every ℓ above the
    # workload's order, and the workload plus one marginal of the next order
    sizes = np.array([bin(mask).count("1") for mask in range(1 << k)])
    order = max(len(s) for _, s in terms)
    for level in range(order + 1, k + 1):
        starts.append((f"all {level}-way marginals", (sizes == level).astype(np.float64)))
    extra = [mask for mask in range(1 << k) if sizes[mask] == order + 1][:MAX_EXTRA_STARTS]
    for mask in extra:
        # the larger marginal replaces the workload marginals it contains
        th = own.copy()
        inside = [w for w in wanted if w & mask == w]
        th[inside] = 0.0
        th[mask] = own[inside].sum()
        name = "workload marginals, " + "".join(str(i) for i in range(k) if (mask >> i) & 1) + " replacing its sub-marginals"
        starts.append((name, th))
    for r in range(FIXED_RANDOM_STARTS):
        j = np.arange(r * (1 << k) + 1, (r + 1) * (1 << k) + 1, dtype=np.float64)
        starts.append((f"fixed random {r + 1}", np.mod(0.5 + j * _WEYL_STEP, 1.0) * closure))
    if rng is not None:
        for r in range(max(0, restarts - 1)):
            starts.append((f"random {r + 1}", rng.uniform(0, 1, 1 << k) * closure))
    idx = np.flatnonzero(closure)
    obj = _LatticeObjective(mu, mult, out_prod, k, p=1)

    def fun(x):
        th = np.zeros(1 << k)
        th[idx] = x
        f, g = obj(th)
        return f, g[idx]

    def run(name, th0):
        f0 = obj(th0, gradient=False)
        x0 = th0[idx] / max(th0.sum(), 1e-300)
        x, fx = lbfgsb_nonneg(fun, x0, maxiter=maxiter, ftol=1e-14, gtol=1e-12)
        th = np.zeros(1 << k)
        th[idx] = x if fx <= f0 else x0
        f = min(float(fx), f0)
        records.append((name, f0, f))
        return th, f

    best, records = None, []
    for name, th0 in starts:
        th, f = run(name, th0)
        if best is None or f < best[1]:
            best = (th, f)
    # greedy rounds: let one more unused larger marginal replace the positive-weight
    # marginals it contains, keep the re-optimised result when it is better
    for _ in range(MAX_GREEDY_ROUNDS):
        th_best, f_best = best
        improved = False
        for mask in [m for m in range(1 << k) if sizes[m] == order + 1 and th_best[m] == 0][:MAX_EXTRA_STARTS]:
            inside = [t for t in range(1 << k) if t != mask and t & mask == t and th_best[t] > 0]
            if not inside:
                continue
            th0 = th_best.copy()
            th0[mask] = th0[inside].sum()
            th0[inside] = 0.0
            th, f = run("greedy: " + "".join(str(i) for i in range(k) if (mask >> i) & 1), th0)
            if f < best[1] * (1 - 1e-9):
                best, improved = (th, f), True
        if not improved:
            break
    th, f = best
    th = th / th.sum()
    th[th < 1e-12] = 0.0
    strategy = MarginalStrategy(domain, th)
    return MarginalFit(strategy, f, th, tuple(records), None)


def optimize_marginals_l2(W):
    """The L2-optimal strategy for a marginal workload, in closed form: λ_T ∝ √μ_T, scaled to
    max column norm 1. Its error equals the SVD lower bound, so the gap is 0."""
    terms, domain = _check_marginals(W)
    mu, mult, _ = _workload_spectrum(terms, domain)
    n_cells = math.prod(domain)
    need = (mu > 0) & (mult > 0)
    root = np.where(need, np.sqrt(np.clip(mu, 0, None)), 0.0)
    total = float((mult * root).sum())
    lam = root * n_cells / total  # diag of the gram = Σ_T m_T λ_T / N = 1
    value = total**2 / n_cells
    strategy = ResidualStrategy(domain, lam)
    return MarginalFit(strategy, value, lam, (("closed form", value, value),), 0.0)


# -- Kronecker products and their unions ----------------------------------------------------------


def kron_blocks(W):
    """[(weight², [factor workloads])] if W is a Kron or a weighted union of Krons over the
    same attribute sizes (single-attribute unions count as one factor), else None."""
    W = as_linop(W)
    if isinstance(W, Kron):
        return [(1.0, list(W.factors))]
    if isinstance(W, Scaled) and isinstance(W.base, Kron):
        return [(W.c**2, list(W.base.factors))]
    if isinstance(W, VStack):
        out, dims = [], None
        for w, b in zip(W.weights, W.blocks):
            sub = kron_blocks(b)
            if sub is None:
                return None
            for w2, fs in sub:
                d = tuple(f.shape[1] for f in fs)
                if dims not in (None, d):
                    return None
                dims = d
                out.append((float(w) ** 2 * w2, fs))
        return out
    return None


# -- generalised marginals: per-attribute factor strategies -----------------------------------------
#
# A generalised marginal strategy measures, for every attribute subset S with θ_S > 0, the rows
# θ_S ⊗ᵢ(Qᵢ if i ∈ S else 1ᵀ), with one factor strategy Qᵢ per attribute (identity, or HDMM's
# p-Identity [I; Θ]D for ordered attributes), shared by every subset containing i. With
# Bᵢ = QᵢᵀQᵢ = LᵢᵀLᵢ (invertible) the gram Σ_S θ_S² ⊗_{i∈S} Bᵢ ⊗_{i∉S} 11ᵀ is
# (⊗Lᵢ)ᵀ [Σ_S θ_S² ⊗_{i∈S} I ⊗_{i∉S} uᵢuᵢᵀ] (⊗Lᵢ) with uᵢ = Lᵢ⁻ᵀ1: a marginal lattice in which
# the "total" direction of attribute i is uᵢ (of squared length gᵢ = 1ᵀBᵢ⁻¹1) instead of 1.
# The bracket is diagonal on the classes T (complement of uᵢ on the attributes in T, uᵢ
# elsewhere) with λ_T = Σ_{S ⊇ T} θ_S² Π_{i∉S} gᵢ, so a symmetric generalised inverse of the
# gram is Σ_T λ_T⁻¹ ⊗ᵢ Nᵢ^{[i∈T]} with, for yᵢ = Bᵢ⁻¹1,
#     Nᵢ^out = yᵢyᵢᵀ/gᵢ,  Nᵢ^in = Bᵢ⁻¹ − yᵢyᵢᵀ/gᵢ,
# and the error of any union of Kronecker products W = [v₁ ⊗ᵢWᵢ₁; …] is, exactly,
#     trace(G_W (AᵀA)⁻) = Σ_T η_T / λ_T,   η_T = Σ_k v_k² Πᵢ a_ik^{[i∈T]},
#     a_ik^out = yᵢᵀC_ik yᵢ/gᵢ,  a_ik^in = trace(C_ik Bᵢ⁻¹) − a_ik^out   (C_ik = Wᵢₖᵀ Wᵢₖ),
# a product over the attributes per lattice class: no domain-sized object (2^k classes × K
# terms). Qᵢ = I gives the marginal lattice above (gᵢ = dᵢ). Every factor has column L1 norm 1
# (p-Identity, identity, 1ᵀ), so sens₁ = Σ θ_S. The Θᵢ are optimised jointly with θ: F
# depends on Bᵢ⁻¹ only through gᵢ and the a_ik, whose gradient Γᵢ = ∂F/∂Bᵢ⁻¹ turns the
# p-Identity objective of :mod:`matmech.optimizers.pure` (linear in its gram) into ∂F/∂Θᵢ.

#: Largest number of attributes of a generalised marginal strategy (2^k lattice classes).
MAX_GENERAL_ATTRIBUTES = 16
#: Largest attribute size given a p-Identity factor (dense dᵢ×dᵢ algebra per attribute).
MAX_FACTOR_N = 1024
#: Largest number of (workload term, lattice class) pairs of the generalised marginal error.
MAX_GENERAL_WORK = 1 << 25
#: Numerical floor (relative) below which a per-class trace counts as zero.
_ZERO = 1e-11


def _identity_like(f):
    """True if the 1-D workload factor f is the identity (as Intervals or Identity)."""
    from matmech.linalg.intervals import Intervals

    if isinstance(f, Identity):
        return True
    if isinstance(f, Intervals):
        lo, hi = f.bounds()
        return f.shape[0] == f.n and np.array_equal(lo, np.arange(f.n)) and np.array_equal(hi, lo)
    return False


def _total_like(f):
    """True if the 1-D workload factor f is (a multiple of) the total query 1ᵀ (rank one, all ones)."""
    from matmech.linalg.intervals import Intervals

    if isinstance(f, Scaled):
        return _total_like(f.base)
    if isinstance(f, Ones):
        return True
    if isinstance(f, Intervals):
        lo, hi = f.bounds()
        return bool(np.all(lo == 0) and np.all(hi == f.n - 1))
    return False


class _FactorGrams:
    """Dense grams of the 1-D workload factors, computed once per distinct factor."""

    def __init__(self):
        self.cache, self.by_content = {}, {}

    def __call__(self, f):
        key = id(f)
        if key not in self.cache:
            n = f.shape[1]
            if _total_like(f):
                c2 = f.c**2 if isinstance(f, Scaled) else 1.0
                base = f.base if isinstance(f, Scaled) else f
                g = np.full((n, n), c2 * float(base.shape[0]))
            elif _identity_like(f):
                g = np.eye(n)
            else:
                g = f.gram().dense(max_entries=MAX_FACTOR_N**2)
            g = np.asarray(g, dtype=np.float64)
            # equal grams share one array, so that per-attribute work runs once per distinct gram
            g = self.by_content.setdefault((g.shape, g.tobytes()), g)
            self.cache[key] = (f, g)  # keep f alive: ids stay unique
        return self.cache[key][1]


def _factor_inverse(Q, n):
    """B⁻¹ = (QᵀQ)⁻¹ of one attribute's factor strategy (dense n×n), Q = None meaning I."""
    from matmech.optimizers.pure import PIdentity

    if Q is None or isinstance(Q, Identity):
        return np.eye(n)
    if isinstance(Q, PIdentity):
        return Q.gram_pinv()[0]._dense()
    b = Q.gram().dense(max_entries=MAX_FACTOR_N**2)
    return np.linalg.inv(b)


def _total_gram(c):
    """True if the dense gram c is a multiple of 11ᵀ (a total query, or copies of it)."""
    return bool(np.all(c == c.flat[0]))


def _outer_products(g):
    """Π_{i∉S} gᵢ for every mask S (bit i = attribute i in S)."""
    out = np.ones(1)
    for gi in g:
        out = np.concatenate([out * float(gi), out])
    return out


class _GeneralProblem:
    """The exact error of generalised marginal strategies for one union of Kronecker products.

    ``terms``: [(v_k², [C_1k, …, C_dk])] dense factor grams; ``free``: the attributes whose
    factor is a p-Identity [I; Θᵢ]D (the others are the identity). Evaluates
    F(θ, Θ) = (Σθ)² Σ_T η_T/λ_T and its gradient in θ and every Θᵢ.
    """

    def __init__(self, terms, domain, free):
        self.domain = tuple(int(d) for d in domain)
        self.k = len(self.domain)
        self.v2 = np.array([w2 for w2, _ in terms], dtype=np.float64)
        self.C = [[cs[i] for _, cs in terms] for i in range(self.k)]  # C[i][k]
        self.free = tuple(free)
        # per attribute: the distinct grams (by object) and their index per term
        self.uniq = []
        for i in range(self.k):
            seen, idx, lst = {}, [], []
            for c in self.C[i]:
                key = id(c)
                if key not in seen:
                    seen[key] = len(lst)
                    lst.append(c)
                idx.append(seen[key])
            self.uniq.append((lst, np.array(idx)))
        # the classes a term reaches: T ⊆ Z_k, Z_k = the attributes where C_ik is not ∝ 11ᵀ
        # (a_in = trace(C N_in) = 0 exactly when C ∝ 11ᵀ, since N_in 1 = 0): η and its
        # gradient are sums over these Σ_k 2^|Z_k| entries, not over K × 2^k
        term_idx, masks = [], []
        for kk in range(self.v2.size):
            z = [i for i in range(self.k) if not _total_gram(self.C[i][kk])]
            sub = np.zeros(1, dtype=np.int64)
            for i in z:
                sub = np.concatenate([sub, sub | (1 << i)])
            term_idx.append(np.full(sub.size, kk))
            masks.append(sub)
        self.term_idx = np.concatenate(term_idx)
        self.masks = np.concatenate(masks)
        if self.masks.size > MAX_GENERAL_WORK:
            raise ValueError(f"the workload reaches {self.masks.size:,} (term, lattice class) pairs, more than {MAX_GENERAL_WORK:,}")
        self.bits = ((self.masks[:, None] >> np.arange(self.k)[None, :]) & 1).astype(bool)

    def attribute_numbers(self, i, minv):
        """(g, a_out[K], a_in[K], y) of attribute i for the factor inverse B⁻¹ = minv."""
        y = minv.sum(1)
        g = float(y.sum())
        lst, idx = self.uniq[i]
        ao = np.empty(len(lst))
        ai = np.empty(len(lst))
        for j, c in enumerate(lst):
            cy = c @ y
            ao[j] = float(y @ cy) / g
            tr = float((c * minv).sum())
            ai[j] = tr - ao[j]
            scale = max(tr, 1e-300)
            if ai[j] <= _ZERO * scale:
                ai[j] = 0.0
            if ao[j] <= _ZERO * scale:
                ao[j] = 0.0
        return g, ao[idx], ai[idx], y

    def numbers(self, minvs, fixed=None):
        """(g, a_out, a_in, ys) of every attribute; ``fixed``: {i: attribute_numbers(i, ·)} of
        attributes whose factor inverse does not change (reused, not recomputed)."""
        g = np.empty(self.k)
        K = self.v2.size
        a_out, a_in, ys = np.empty((K, self.k)), np.empty((K, self.k)), []
        for i in range(self.k):
            nums = fixed[i] if fixed is not None and i in fixed else self.attribute_numbers(i, minvs[i])
            g[i], a_out[:, i], a_in[:, i], y = nums
            ys.append(y)
        return g, a_out, a_in, ys

    def entries(self, a_out, a_in):
        """Πᵢ a_ik^{[i∈T]} for every (term k, class T ⊆ Z_k) entry."""
        t = self.term_idx
        return np.where(self.bits, a_in[t], a_out[t]).prod(1)

    def eta(self, a_out, a_in):
        w = self.v2[self.term_idx] * self.entries(a_out, a_in)
        return np.bincount(self.masks, weights=w, minlength=1 << self.k)

    def value(self, theta, minvs):
        """F = (Σθ)² Σ_T η_T/λ_T (inf when a class with workload mass has λ_T = 0)."""
        g, a_out, a_in, _ = self.numbers(minvs)
        eta = self.eta(a_out, a_in)
        lam = _superset_sum(np.asarray(theta) ** 2 * _outer_products(g), self.k)
        need = eta > 0
        if np.any(lam[need] <= 1e-300):
            return math.inf
        return float(np.sum(theta)) ** 2 * float((eta[need] / lam[need]).sum())

    def theta_objective(self, minvs):
        """(μ, mult, out_prod) for :func:`marginal_objective` with the factors fixed."""
        g, a_out, a_in, _ = self.numbers(minvs)
        eta = self.eta(a_out, a_in)
        return eta, np.ones_like(eta), _outer_products(g)

    def full(self, theta, minvs, fixed=None):
        """(F, ∂F/∂θ, {i: Γᵢ = ∂F/∂Bᵢ⁻¹} for the free attributes); ``fixed`` as in :meth:`numbers`."""
        k, K = self.k, self.v2.size
        g, a_out, a_in, ys = self.numbers(minvs, fixed)
        E = self.entries(a_out, a_in)
        eta = np.bincount(self.masks, weights=self.v2[self.term_idx] * E, minlength=1 << k)
        outg = _outer_products(g)
        th = np.asarray(theta, dtype=np.float64)
        lam = _superset_inplace(th * th * outg, k)
        need = eta > 0
        if np.any(lam[need] <= 1e-300):
            return math.inf, np.zeros_like(th), {}
        R = np.zeros_like(lam)
        R[need] = 1.0 / lam[need]
        s = float(th.sum())
        err = float((eta * R).sum())
        F = s * s * err
        # θ: as marginal_objective with μ = η, out_prod = Π_{i∉S} gᵢ
        sub = _subset_inplace(eta * R * R, k)
        dth = 2.0 * s * err - s * s * 2.0 * th * outg * sub
        grads = {}
        if self.free:
            # ∂F/∂a_ik^b = s² v_k² Σ_{T: bit i of T = b} R_T Π_{j≠i} a_jk^{T_j}: the class sums of
            # E·R divided by a_ik^b. Where a_ik^b = 0 its derivative is not needed: a_in = 0 only
            # for totals (C ∝ 11ᵀ, then ∂a_in/∂B⁻¹ = 0) and a_out = 0 only when C y = 0 (then
            # ∂a_out/∂B⁻¹ = 0), so those entries are set to 0.
            wanted = list(self.free)
            ER = E * R[self.masks]
            all_sums = np.bincount(self.term_idx, weights=ER, minlength=K)
            dA = {}
            for i in wanted:
                in_sums = np.bincount(self.term_idx, weights=ER * self.bits[:, i], minlength=K)
                ai, ao = a_in[:, i], a_out[:, i]
                d_in = np.divide(in_sums, ai, out=np.zeros(K), where=ai > 0)
                d_out = np.divide(all_sums - in_sums, ao, out=np.zeros(K), where=ao > 0)
                dA[i] = (s * s) * self.v2[:, None] * np.stack([d_out, d_in], axis=1)
            # ∂F/∂gᵢ = −s² Σ_{S ∌ i} θ_S² (Π_{j∉S} g_j)/gᵢ Σ_{T⊆S} η_T/λ_T²
            base = th * th * outg * sub
            masks = np.arange(1 << k)
            for i in wanted:
                dg = -s * s * float(base[(masks >> i) & 1 == 0].sum()) / g[i]
                y = ys[i]
                lst, idx = self.uniq[i]
                beta = np.bincount(idx, weights=dA[i][:, 1], minlength=len(lst))
                cvec = np.bincount(idx, weights=dA[i][:, 0] - dA[i][:, 1], minlength=len(lst))
                n = self.domain[i]
                Cb = np.zeros((n, n))
                Cc = np.zeros((n, n))
                for j, c in enumerate(lst):
                    if beta[j] != 0.0:
                        Cb += beta[j] * c
                    if cvec[j] != 0.0:
                        Cc += cvec[j] * c
                cy = Cc @ y
                one = np.ones(n)
                gam = Cb + (np.outer(cy, one) + np.outer(one, cy)) / g[i] + (dg - float(y @ cy) / g[i] ** 2) * np.ones((n, n))
                grads[i] = 0.5 * (gam + gam.T)
        return F, dth, grads


def _pidentity_minv(theta):
    """(B⁻¹, s) of the p-Identity [I; Θ]D: D⁻¹(I + ΘᵀΘ)⁻¹D⁻¹ with D⁻¹ = diag(1 + 1ᵀΘ)."""
    s = 1.0 + theta.sum(0)
    p = theta.shape[0]
    r = np.eye(p) + theta @ theta.T
    mid = -theta.T @ np.linalg.solve(r, theta)
    mid[np.diag_indices_from(mid)] += 1.0
    return s[:, None] * mid * s[None, :]


@register("GeneralMarginalStrategy")
class GeneralMarginalStrategy(VStack):
    """Weighted union of generalised marginals: rows θ_S ⊗ᵢ(Qᵢ if i ∈ S else 1ᵀ) for θ_S > 0.

    ``factors[i]`` is attribute i's factor strategy Qᵢ (an Identity or a
    :class:`~matmech.optimizers.pure.PIdentity`; every column of L1 norm 1, so sens₁ = Σθ_S).
    ``gram_pinv()`` is the factored generalised inverse Σ_T λ_T⁻¹ ⊗ᵢ Nᵢ^{[i∈T]} (see the
    comment above; the Moore–Penrose inverse when every λ_T > 0, otherwise a symmetric
    generalised inverse giving the same W(AᵀA)⁻Wᵀ for every W in the row space), and
    :func:`general_marginal_error` scores unions of Kronecker products against it from the
    factors. With identity factors it is the :class:`MarginalStrategy` of the same θ.
    """

    def __init__(self, domain, weights, factors):
        domain = tuple(int(d) for d in domain)
        k = len(domain)
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (1 << k,) or not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
            raise ValueError(f"need {1 << k} non-negative finite weights (one per attribute subset), not all zero")
        factors = tuple(Identity(d) if f is None else as_linop(f) for f, d in zip(factors, domain))
        if len(factors) != k:
            raise ValueError(f"need one factor strategy per attribute ({k}), got {len(factors)}")
        for i, (f, d) in enumerate(zip(factors, domain)):
            if f.shape[1] != d:
                raise ValueError(f"factor {i} has {f.shape[1]} columns, expected the attribute size {d}")
            if d > MAX_FACTOR_N and not isinstance(f, Identity):
                raise ValueError(f"factor {i}: attribute size {d} exceeds {MAX_FACTOR_N} for a non-identity factor")
        self.theta, self.factors = w, factors
        masks = np.flatnonzero(w > 0)
        subsets = tuple(tuple(i for i in range(k) if (m >> i) & 1) for m in masks)
        blocks = [Kron(*[factors[i] if (m >> i) & 1 else Ones(1, d) for i, d in enumerate(domain)]) for m in masks]
        super().__init__(blocks, weights=w[masks])
        self.domain_sizes = domain
        self.attribute_subsets = subsets

    def factor_inverses(self):
        """[Bᵢ⁻¹] (dense dᵢ×dᵢ; the identity for identity factors)."""
        return [_factor_inverse(f, d) for f, d in zip(self.factors, self.domain_sizes)]

    def eigenvalues(self):
        """λ_T for every class mask T (bit i: attribute i in the complement of uᵢ)."""
        minvs = self.factor_inverses()
        g = [float(m.sum()) for m in minvs]
        return _superset_sum(self.theta**2 * _outer_products(g), len(self.domain_sizes))

    def sensitivity_details(self, p=1):
        from matmech.linalg.normmax import factored_sensitivity
        from matmech.linalg.linop import kron_terms

        return factored_sensitivity(kron_terms(self), p)

    def gram_pinv(self):
        domain, k = self.domain_sizes, len(self.domain_sizes)
        minvs = self.factor_inverses()
        parts = []
        for m in minvs:
            y = m.sum(1)
            out = np.outer(y, y) / float(y.sum())
            parts.append((Dense(out), Dense(m - out) if m.shape[0] > 1 else None))
        lam = _superset_sum(self.theta**2 * _outer_products([float(m.sum()) for m in minvs]), k)
        top = float(lam.max())
        pos, null = [], []
        for mask in range(1 << k):
            if any((mask >> i) & 1 and parts[i][1] is None for i in range(k)):
                continue  # an attribute of size 1 has no complement: empty class
            if lam[mask] > 1e-12 * top:
                pos.append(Scaled(Kron(*[parts[i][(mask >> i) & 1] for i in range(k)]), 1.0 / lam[mask]))
            else:
                # a PSD operator whose range is the class's share of null(A): yᵢ on attributes
                # outside T, the mean-zero vectors on T (its range, not an orthogonal projector)
                null.append(Kron(*_class_projector_factors(domain, mask)) if all(isinstance(f, Identity) for f in self.factors)
                            else Kron(*[Dense(np.eye(d) - 1.0 / d) if (mask >> i) & 1 else parts[i][0] for i, d in enumerate(domain)]))
        return Sum(pos), (Sum(null) if null else None)

    def factored_trace(self, W):
        """trace(WᵀW (AᵀA)⁻) from the factors (see :func:`general_marginal_error`) when W is
        a union of Kronecker products over the same attributes, else None. Raises ValueError
        when a query of W is outside the row space. A hook for the error analysis: it costs
        2^k classes × K terms, never a domain-sized vector."""
        if kron_blocks(W) is None or tuple(f.shape[1] for f in kron_blocks(W)[0][1]) != self.domain_sizes:
            return None
        return _general_trace(W, self)

    def to_dict(self, out):
        return {"domain": list(self.domain_sizes), "theta": out.array(self.theta), "factors": [out.node(f) for f in self.factors]}

    @classmethod
    def from_dict(cls, node, src):
        return cls(tuple(src.ints(node, "domain")), src.array(node, "theta", "float", 1), src.children(node, "factors"))


def _identity_total_gram(c):
    """True if the dense gram c is a·I + b·11ᵀ (identities, totals and stacks of them)."""
    n = c.shape[0]
    if n == 1:
        return True
    b = c[0, 1]
    a = c[0, 0] - b
    return bool(np.allclose(c, a * np.eye(n) + b, rtol=1e-12, atol=1e-12 * max(abs(a) + abs(b), 1e-300)))


def _problem(W, free=None):
    """(problem, domain) of the generalised marginal error for a union of Kronecker products W."""
    blocks = kron_blocks(W)
    if blocks is None:
        raise ValueError("generalised marginals need a Kronecker workload or a union of Kronecker products over the same attributes")
    domain = tuple(f.shape[1] for f in blocks[0][1])
    k = len(domain)
    if k > MAX_GENERAL_ATTRIBUTES:
        raise ValueError(f"generalised marginals support at most {MAX_GENERAL_ATTRIBUTES} attributes, got {k}")
    big = [d for i, d in enumerate(domain) if d > MAX_FACTOR_N and not all(_identity_like(fs[i]) or _total_like(fs[i]) for _, fs in blocks)]
    if big:
        raise ValueError(f"generalised marginals need attribute sizes <= {MAX_FACTOR_N} for non-identity factors, got {big[0]}")
    grams = _FactorGrams()
    terms = []
    for w2, fs in blocks:
        cs = []
        for f in fs:
            if f.shape[1] > MAX_FACTOR_N:  # identity or total on a large attribute: closed forms
                raise ValueError(f"attribute size {f.shape[1]} exceeds {MAX_FACTOR_N}")
            cs.append(grams(f))
        terms.append((w2, cs))
    if free is None:  # attributes queried by more than identities and totals (grams aI + b11ᵀ)
        free = [i for i in range(k) if not all(_identity_total_gram(cs[i]) for _, cs in terms)]
    return _GeneralProblem(terms, domain, free), domain, blocks


def general_marginal_error(W, A, *, p=1):
    """sens_p(A)² · trace(WᵀW (AᵀA)⁻) for a union of Kronecker products W on a
    :class:`GeneralMarginalStrategy` A, exactly, from the factors: the total error in units of
    the noise variance of a unit-sensitivity measurement (times 2/ε² for Laplace; σ² of the
    unit-L2 Gaussian for p=2, where sens₂² is :func:`general_marginal_sensitivity2`).
    Raises ValueError if some query of W is outside A's row space."""
    if not isinstance(A, GeneralMarginalStrategy):
        raise TypeError(f"expected a GeneralMarginalStrategy, got {type(A).__name__}")
    if p not in (1, 2):
        raise ValueError(f"p must be 1 (pure eps) or 2 (Gaussian), got {p!r}")
    if p == 2:
        return general_marginal_sensitivity2(A.theta, [factor_col_norm2(f) for f in A.factors]) * _general_trace(W, A)
    return float(A.sensitivity(1)) ** 2 * _general_trace(W, A)


def factor_col_norm2(Q):
    """Largest squared column L2 norm maxⱼ ‖Q eⱼ‖² of one attribute's factor strategy (1 for
    the identity and for the total 1ᵀ)."""
    if isinstance(Q, Identity):
        return 1.0
    return float(np.max(np.asarray(Q.col_norms(2), dtype=np.float64))) ** 2


def _inside_products(c):
    """Π_{i∈S} cᵢ for every mask S (bit i = attribute i in S)."""
    out = np.ones(1)
    for ci in c:
        out = np.concatenate([out, out * float(ci)])
    return out


def general_marginal_sensitivity2(theta, col2):
    """The squared L2 sensitivity Δ₂² = Σ_S θ_S² Π_{i∈S} cᵢ of the strategy with lattice weights
    ``theta`` (one per mask S, bit i = attribute i in S) and per-attribute factors whose largest
    squared column L2 norms are ``col2`` (cᵢ, :func:`factor_col_norm2`).

    Exact, not a bound: the column (j₁, …, j_k) of θ_S ⊗ᵢ(Qᵢ if i ∈ S else 1ᵀ) stacked over S has
    squared norm Σ_S θ_S² Π_{i∈S} ‖Qᵢ e_{jᵢ}‖² (the total 1ᵀ has unit columns), a sum of products
    of non-negative per-attribute numbers, non-decreasing in each; so its maximum over the product
    domain is attained jointly at every attribute's largest column. The one function used by the
    L2 weight optimiser here and by the (ε, δ) measurement
    (:func:`matmech.factored.gmarginal_measure.plan_gmarginal`), so the two agree."""
    th = np.asarray(theta, dtype=np.float64)
    c = [float(v) for v in col2]
    if th.shape != (1 << len(c),):
        raise ValueError(f"need {1 << len(c)} lattice weights for {len(c)} attributes, got shape {th.shape}")
    return float(np.dot(th * th, _inside_products(c)))


def _general_trace(W, A):
    """trace(WᵀW (AᵀA)⁻) of :func:`general_marginal_error` (no sensitivity)."""
    prob, domain, _ = _problem(W, free=())
    if domain != A.domain_sizes:
        raise ValueError(f"workload attributes {domain} differ from the strategy's {A.domain_sizes}")
    minvs = A.factor_inverses()
    g, a_out, a_in, _ = prob.numbers(minvs)
    eta = prob.eta(a_out, a_in)
    lam = _superset_sum(A.theta**2 * _outer_products(g), prob.k)
    need = eta > 0
    zero = lam <= 1e-12 * float(lam.max())
    if np.any(need & zero):
        r = float(eta[need & zero].sum() / eta[need].sum())
        raise ValueError(
            f"the workload's rows are not in the strategy's row space (relative residual {r:.3g}): "
            "some queries cannot be answered from these measurements"
        )
    ok = need & ~zero
    return float((eta[ok] / lam[ok]).sum())


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


def _fit_factor(prob, i, supports, *, restarts=1, rng=None):
    """A p-Identity Θ for attribute i: HDMM's OPT₀ on Σ_k v_k² (Π_{j≠i} trace C_jk) C_ik over
    the terms that query attribute i (the 1-D problem of a Kronecker strategy with identity
    factors elsewhere), from :func:`matmech.optimizers.pure.fit_pidentity`."""
    from matmech.optimizers.gram import GramOperator
    from matmech.optimizers.pure import fit_pidentity

    n = prob.domain[i]
    acc = np.zeros((n, n))
    for kk in range(prob.v2.size):
        if i not in supports[kk]:
            continue
        other = math.prod(float(np.trace(prob.C[j][kk])) for j in range(prob.k) if j != i)
        acc += prob.v2[kk] * other * prob.C[i][kk]
    acc /= max(float(np.trace(acc)), 1e-300)
    # no quadratic-fill multistart here (unlike the kron family): a better isolated 1-D fit is
    # not a better start for the joint (θ, Θ) descent (adult_W2: RMSE 391.8 without, 412.0 with)
    fit = fit_pidentity(GramOperator.from_gram(0.5 * (acc + acc.T)), restarts=restarts, rng=rng)
    return np.asarray(fit.theta, dtype=np.float64)


def optimize_general_marginals(W, *, restarts=1, rng=None, maxiter=GENERAL_JOINT_ITER, factor_thetas=None, norm=1):
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
    prob, domain, blocks = _problem(W)
    k = prob.k
    supports = [frozenset(i for i, f in enumerate(fs) if not _total_like(f)) for _, fs in blocks]
    given = {} if factor_thetas is None else dict(factor_thetas)
    for i, th in given.items():
        if not (isinstance(i, (int, np.integer)) and 0 <= i < k):
            raise ValueError(f"factor_thetas keys must be attribute indices 0..{k - 1}, got {i!r}")
        arr = np.asarray(th, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != domain[i] or arr.shape[0] == 0 or not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError(f"factor_thetas[{i}] must be a finite non-negative p×{domain[i]} matrix, got shape {arr.shape}")
    given = {i: th for i, th in given.items() if i in prob.free}
    thetas = {i: (np.array(given[i], dtype=np.float64) if i in given else _fit_factor(prob, i, supports, restarts=restarts, rng=rng)) for i in prob.free}
    minvs = [np.eye(d) for d in domain]
    for i, th in thetas.items():
        minvs[i] = _pidentity_minv(th)
    records = []

    sizes = np.array([bin(m).count("1") for m in range(1 << k)])
    order = max(len(s) for s in supports)
    # the variables: every subset up to GENERAL_EXTRA_ORDER attributes above the workload's
    # order (the whole lattice when k ≤ GENERAL_FULL_LATTICE)
    closure = np.ones(1 << k, dtype=bool) if k <= GENERAL_FULL_LATTICE else sizes <= order + GENERAL_EXTRA_ORDER
    idx = np.flatnonzero(closure)

    def theta_only(th0, name, minvs):
        obj = _LatticeObjective(*prob.theta_objective(minvs), k, p=1)

        def fun(x):
            th = np.zeros(1 << k)
            th[idx] = x
            f, g = obj(th)
            return f, g[idx]

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
        starts.append((f"fixed random {r + 1}", np.mod(0.5 + j * _WEYL_STEP, 1.0)))
    if rng is not None:
        for r in range(max(0, restarts - 1)):
            starts.append((f"random {r + 1}", rng.uniform(0, 1, 1 << k)))
    best = None
    for name, th0 in starts:
        th, f = theta_only(th0, name, minvs)
        if best is None or f < best[1]:
            best = (th, f)
    th, f = best
    if prob.free and np.isfinite(f):
        th, thetas, f = _joint_descent(prob, th, thetas, maxiter, records, idx)
        minvs = [np.eye(d) for d in domain]
        for i, t in thetas.items():
            minvs[i] = _pidentity_minv(t)
        th2, f2 = theta_only(th, "θ polish", minvs)
        if f2 < f:
            th, f = th2, f2
    th = th / th.sum()
    th[th < 1e-12] = 0.0
    from matmech.optimizers.pure import PIdentity

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
    from matmech.optimizers.pure import objective

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
            m[i] = _pidentity_minv(t)
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
# objective of :class:`_LatticeObjective` with out_prod divided by c_S.


class _L2Weights:
    """θ ↦ (Δ₂(θ)² Σ_T η_T/λ_T(θ), gradient in θ) for W's problem ``prob`` and A's factors."""

    def __init__(self, prob, A):
        eta, mult, outg = prob.theta_objective(A.factor_inverses())
        c = _inside_products([factor_col_norm2(f) for f in A.factors])
        self.root = np.sqrt(c)
        self.phi = _LatticeObjective(eta, mult, outg / c, prob.k, p=2)  # the objective in φ = θ√c

    def __call__(self, theta, gradient=True):
        r = self.phi(np.asarray(theta, dtype=np.float64) * self.root, gradient=gradient)
        return (r[0], r[1] * self.root) if gradient else r


def general_marginal_l2_objective(W, A, theta=None):
    """(value, gradient) of the (ε, δ) objective Δ₂(θ)² · trace(WᵀW (AᵀA)⁻) of the lattice
    weights ``theta`` (default A's own; one per mask, bit i = attribute i in S) with the factors
    of the :class:`GeneralMarginalStrategy` A fixed; Δ₂² is :func:`general_marginal_sensitivity2`.
    The value is +inf (gradient zero) when θ cannot answer W."""
    if not isinstance(A, GeneralMarginalStrategy):
        raise TypeError(f"expected a GeneralMarginalStrategy, got {type(A).__name__}")
    prob, domain, _ = _problem(W, free=())
    if domain != A.domain_sizes:
        raise ValueError(f"workload attributes {domain} differ from the strategy's {A.domain_sizes}")
    th = A.theta if theta is None else np.asarray(theta, dtype=np.float64)
    if th.shape != A.theta.shape or not np.all(np.isfinite(th)) or np.any(th < 0):
        raise ValueError(f"theta must be {A.theta.size} non-negative finite weights, got shape {th.shape}")
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
    if not isinstance(A, GeneralMarginalStrategy):
        raise TypeError(f"expected a GeneralMarginalStrategy, got {type(A).__name__}")
    prob, domain, blocks = _problem(W, free=())
    if domain != A.domain_sizes:
        raise ValueError(f"workload attributes {domain} differ from the strategy's {A.domain_sizes}")
    k = prob.k
    obj = _L2Weights(prob, A)
    root = obj.root
    supports = [frozenset(i for i, f in enumerate(fs) if not _total_like(f)) for _, fs in blocks]
    sizes = np.array([bin(m).count("1") for m in range(1 << k)])
    order = max(len(s) for s in supports)
    closure = np.ones(1 << k, dtype=bool) if k <= GENERAL_FULL_LATTICE else (sizes <= order + GENERAL_EXTRA_ORDER) | (A.theta > 0)
    idx = np.flatnonzero(closure)

    def fun(x):
        phi = np.zeros(1 << k)
        phi[idx] = x
        f, g = obj.phi(phi)
        return f, g[idx]

    own = np.zeros(1 << k)
    for (w2, _), s in zip(blocks, supports):
        own[sum(1 << i for i in s)] += math.sqrt(w2)
    starts = [("given weights", A.theta), ("workload subsets", own), ("uniform on the lattice", np.ones(1 << k))]
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
