"""Marginal strategies for marginal workloads: the weighted lattice (pure ε) and the residual basis ((ε, δ)).

Marginals (McKenna et al., "Optimizing error of high-dimensional statistical queries under
differential privacy", PVLDB 2018, §6.3 "OPT_M"; Xiao et al., NeurIPS 2023). Let a
strategy measure the marginal on every attribute subset S with weight θ_S. Its gram
Σ_S θ_S² ⊗ᵢ(I if i ∈ S else 11ᵀ) is diagonal in the basis that is constant or mean-zero
per attribute: on the class T (mean-zero exactly on the attributes in T, multiplicity
Πᵢ∈T(dᵢ−1)) it has the eigenvalue λ_T = Σ_{S ⊇ T} θ_S² Πᵢ∉S dᵢ
(:func:`matmech.linalg.marginal_spectrum.marginal_spectrum`). A marginal workload has eigenvalues μ_T of the
same form, so the error is Σ_T m_T μ_T / λ_T times the squared sensitivity:

* pure ε: sens₁ = Σ_S θ_S (every marginal has column L1 norm 1) — minimised over θ ≥ 0
  by L-BFGS-B;
* (ε, δ): sens₂² = Σ_S θ_S² — here the optimum over all strategies is in closed form:
  any strategy can be averaged over the per-attribute permutations without losing, which
  makes its gram Σ_T λ_T P_T; minimising Σ m_T μ_T/λ_T at Σ m_T λ_T = N gives
  λ_T ∝ √μ_T, the SVD bound (Σ σ)²/N of Li & Miklau (ICDT 2013) is attained, and the
  strategy is the residual basis of ResidualPlanner (Xiao et al. 2023).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from matmech.linalg.structured import (  # the lattice spectrum, shared with the error analysis
    lattice_masks,
    spectral_pinv,
    subset_inplace,
    superset_inplace,
    superset_sum,
    workload_spectrum,
)
from matmech.linalg.linop import Dense, Identity, Kron, LinOp, Ones, VStack, register
from matmech.optimizers.lbfgs import lbfgsb_nonneg
from matmech.optimizers.marginal_workloads import subset_weights, marginal_workload


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
WEYL_STEP = (math.sqrt(5.0) - 1.0) / 2.0


def marginal_objective(theta, mu, mult, out_prod, k, *, p=1, gradient=True):
    """(sens_p(θ)², Σ_T m_T μ_T/λ_T(θ)) product and its gradient in θ (pure: p=1, L2: p=2).

    Classes with μ_T = 0 are ignored; a class with μ_T > 0 and λ_T = 0 gives +inf.
    """
    return LatticeObjective(mu, mult, out_prod, k, p=p)(theta, gradient=gradient)


class LatticeObjective:
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
        lam = superset_inplace(th * th * out_prod, k)
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
        derr = -2.0 * th * out_prod * subset_inplace(q, k)
        if p == 1:
            return f, (2.0 * s) * err + sens2 * derr
        return f, 2.0 * th * err + sens2 * derr


def on_lattice_subset(obj, idx, k):
    """``fun(x)``: the (value, gradient) of the lattice objective ``obj`` of k attributes
    with the weights outside the masks ``idx`` held at zero (x: the weights on ``idx``)."""

    def fun(x):
        th = np.zeros(1 << k)
        th[idx] = x
        f, g = obj(th)
        return f, g[idx]

    return fun


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
        domain, k, w = subset_weights(domain, weights)
        self.theta = w
        masks = np.flatnonzero(w > 0)
        subsets = tuple(tuple(i for i in range(k) if (m >> i) & 1) for m in masks)
        blocks = [Kron(*[_factor(d, (m >> i) & 1) for i, d in enumerate(domain)]) for m in masks]
        super().__init__(blocks, weights=w[masks], domain=domain, subsets=subsets)

    def eigenvalues(self):
        out_prod, _ = lattice_masks(self.domain)
        return superset_sum(self.theta**2 * out_prod, len(self.domain))

    def gram_pinv(self):
        _, mult = lattice_masks(self.domain)
        return spectral_pinv(self.domain, self.eigenvalues(), mult)

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
        _, mult = lattice_masks(domain)
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
        blocks = [
            Kron(*[bases[d][1] if (m >> i) & 1 else bases[d][0] for i, d in enumerate(domain)])
            for m in masks
        ]
        super().__init__(blocks, weights=np.sqrt(self.lam[masks]))
        self.domain = (
            domain  # attribute sizes; no subsets: the blocks are eigenspaces, not marginals
        )

    def eigenvalues(self):
        return self.lam

    def gram_pinv(self):
        _, mult = lattice_masks(self.domain)
        return spectral_pinv(self.domain, self.lam, mult)

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
        raise ValueError(
            "the workload is not a weighted union of marginals (Kron products of identity/total factors)"
        )
    terms, domain = marg
    if len(domain) > MAX_ATTRIBUTES:
        raise ValueError(
            f"the marginal lattice has 2^{len(domain)} subsets; at most {MAX_ATTRIBUTES} attributes are supported"
        )
    return terms, domain


def optimize_marginals_pure(W, *, restarts=1, rng=None, maxiter=2000):
    """HDMM's OPT_M: min (Σθ_S)² Σ_T m_T μ_T/λ_T(θ) over θ ≥ 0 on every attribute subset. Starts: the workload's own marginals (so the result is never worse
    than measuring them), equal weights on the closure, all ℓ-way marginals above the
    workload's order, :data:`FIXED_RANDOM_STARTS` equidistributed θ (a deterministic Weyl
    fill, the same on every call), and ``restarts``−1 random θ from ``rng`` (none when ``rng`` is None)."""
    terms, domain = _check_marginals(W)
    k = len(domain)
    mu, mult, out_prod = workload_spectrum(terms, domain)
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
        name = (
            "workload marginals, "
            + "".join(str(i) for i in range(k) if (mask >> i) & 1)
            + " replacing its sub-marginals"
        )
        starts.append((name, th))
    for r in range(FIXED_RANDOM_STARTS):
        j = np.arange(r * (1 << k) + 1, (r + 1) * (1 << k) + 1, dtype=np.float64)
        starts.append((f"fixed random {r + 1}", np.mod(0.5 + j * WEYL_STEP, 1.0) * closure))
    if rng is not None:
        for r in range(max(0, restarts - 1)):
            starts.append((f"random {r + 1}", rng.uniform(0, 1, 1 << k) * closure))
    idx = np.flatnonzero(closure)
    obj = LatticeObjective(mu, mult, out_prod, k, p=1)
    fun = on_lattice_subset(obj, idx, k)

    def run(name, th0):
        f0 = obj(th0, gradient=False)
        x0 = th0[idx] / max(th0.sum(), 1e-300)
        x, fx = lbfgsb_nonneg(fun, x0, maxiter=maxiter, ftol=1e-14, gtol=1e-12)
        th = np.zeros(1 << k)
        th[idx] = x if fx <= f0 else x0
        f = min(float(fx), f0)
        records.append((name, f0, f))
        return th, f

    records: list[tuple[str, float, float]] = []
    # the first of equals wins, as a running best would keep it
    best = min((run(name, th0) for name, th0 in starts), key=lambda r: r[1])
    # greedy rounds: let one more unused larger marginal replace the positive-weight
    # marginals it contains, keep the re-optimised result when it is better
    for _ in range(MAX_GREEDY_ROUNDS):
        th_best, f_best = best
        improved = False
        for mask in [m for m in range(1 << k) if sizes[m] == order + 1 and th_best[m] == 0][
            :MAX_EXTRA_STARTS
        ]:
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
    mu, mult, _ = workload_spectrum(terms, domain)
    n_cells = math.prod(domain)
    need = (mu > 0) & (mult > 0)
    root = np.where(need, np.sqrt(np.clip(mu, 0, None)), 0.0)
    total = float((mult * root).sum())
    lam = root * n_cells / total  # diag of the gram = Σ_T m_T λ_T / N = 1
    value = total**2 / n_cells
    strategy = ResidualStrategy(domain, lam)
    return MarginalFit(strategy, value, lam, (("closed form", value, value),), 0.0)
