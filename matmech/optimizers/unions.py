"""Gaussian ((ε, δ), L2) planning for unions of Kronecker products (issue 24).

A workload W = [v_k ⊗ᵢ W_ik] (per attribute a prefix, range, identity, custom factor, or a
total 1ᵀ) is planned in two strategy classes; :func:`optimize_unions` keeps the better.

**Residual products** (:func:`plan_residual_products`; ResidualPlanner, Xiao et al. NeurIPS
2023, and its extension to non-identity bases, He et al. arXiv 2305.08175). Per attribute
ℝⁿ = span(1) ⊕ 1^⊥, and a strategy measures, for every attribute subset S, the product
√w_S ⊗_{i∈S} Rᵢ ⊗_{i∉S} 1ᵀ with Rᵢ 1 = 0. The pieces live in orthogonal subspaces, so with
Xᵢ = RᵢᵀRᵢ

    (AᵀA)⁺ = Σ_S w_S⁻¹ ⊗_{i∈S} Xᵢ⁺ ⊗_{i∉S} 11ᵀ/nᵢ²

and the error of W is Σ_S η_S / w_S with η_S = Σ_k v_k² Π_{i∈S} b_ik Π_{i∉S} a_ik,
a_ik = 1ᵀG_ik1/nᵢ² (the total part of the factor gram G_ik) and b_ik = trace(G_ik Xᵢ⁺) (its
residual part). The squared L2 sensitivity is Σ_S w_S Π_{i∈S} sᵢ (sᵢ = max column norm² of
Rᵢ, all maxima at one cell), so the weights are in closed form (Lagrange / Cauchy–Schwarz):
w_S ∝ √(η_S / p_S), p_S = Π_{i∈S} sᵢ, error (Σ_S √(η_S p_S))². When every attribute's
non-total factor grams are proportional, η_S p_S is a constant times Π_{i∈S} bᵢ sᵢ, so the
best Rᵢ minimises trace(G_i^⊥ X⁺)·max diag X alone: the L2 program on the singular gram
G^⊥ = PGP (P = I − 11ᵀ/n), whose optimum has range 1^⊥ and is solved with a certified
duality gap by :func:`matmech.optimizers.l2.dual_l2`. The product of the factor duals is then
a certified lower bound *within this class* (``bound``). Otherwise Rᵢ is fitted to the
weighted sum of the grams (a heuristic; ``bound`` None).

With ``objective="max"`` the subset weights minimise the largest query variance instead
(exact worst query over per-attribute Pareto rows, a convex program solved by cutting planes;
the factors stay those of the total fit, a heuristic for this objective).

**Generalised marginals under L2** (:func:`refine_general_l2`). Rows θ_S ⊗_{i∈S} Qᵢ ⊗_{i∉S} 1ᵀ
with full-rank factors Qᵢ of unit column norms (so Δ₂² = Σθ_S²), scored exactly from the
factors (:func:`matmech.optimizers.general_marginal_error.general_marginal_error`). Starting from the
certified L2 optimum of every factor gram and the L2-optimal lattice weights
(:func:`matmech.optimizers.general_marginals.reweight_general_marginals_l2`), θ and every Qᵢ
(parametrised by columns normalised to norm one) descend jointly by L-BFGS on the exact
error (:class:`matmech.optimizers.joint_l2.JointDescent`). Non-convex: a heuristic without
certificate, never worse than its start. Two starts run in lockstep; after :data:`DECIDE_AT`
iterations only the one ahead continues (a heuristic, docs/guide/planning-unions.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from matmech.linalg.linop import Dense, Kron, Ones, VStack, register
from matmech.optimizers import general_marginal_error as gm_error
from matmech.optimizers.l2 import dual_l2
from matmech.optimizers.joint_l2 import JointDescent
from matmech.optimizers.marginal_workloads import subset_weights
from matmech.validate import choice, integer, linear, nonnegative_real, texts


#: Objectives of :func:`plan_residual_products`: the total (sum of the query variances) and the
#: largest query variance.
OBJECTIVES = ("total", "max")
#: Largest number of candidate worst queries (products of per-attribute Pareto rows) per term
#: of the max-variance plan.
MAX_CANDIDATE_ROWS = 1 << 21

#: L-BFGS iterations of the joint L2 descent.
JOINT_ITER = 400
#: Starts of the joint L2 descent: the L2 optimum of each attribute's factor gram G, and of
#: G with its cross terms between 1 and 1^⊥ dropped (the residual plan's view of the factor).
START_KINDS = ("factor grams", "split grams")
#: The starts :func:`refine_general_l2` runs by default: both. Neither dominates and neither
#: start value predicts the winner (issue 24's twelve rows: split ends lower on all, by up to
#: 0.2% in variance; HDMM's census_W2: factor grams ends 11.6% lower; the start values rank
#: them the other way on 6 of 16 workloads).
DEFAULT_STARTS = START_KINDS
#: The joint L2 descent stops when ten iterations lower the error by less than this fraction
#: (on issue 24's rows and HDMM's journal workloads the error ends at most 0.06% above the
#: 10⁻⁶ stop, CPS ≤3-way, at 25-75% of its iterations: Adult 3-way's winning start 100
#: instead of 208, and both starts mostly stop before DECIDE_AT).
JOINT_FTOL = 1e-4
#: Iterations for which every start of the joint L2 descent runs before only the one with the
#: lowest error so far continues (a heuristic; see docs/guide/planning-unions.md). On issue 24's
#: twelve rows and HDMM's journal workloads the start ahead at any iteration from 70 on ends
#: lowest or within 0.003% of it (the factor-gram start leads CPS ≤3-way until iteration 60-70
#: and ends 0.11% higher).
DECIDE_AT = 100


@register("ResidualProductStrategy")
class ResidualProductStrategy(VStack):
    """Rows √w_S ⊗_{i∈S} Rᵢ ⊗_{i∉S} 1ᵀ for every mask S with w_S > 0 (bit i: attribute i in S).

    ``factors[i]`` is the residual factor Rᵢ (dense, rows orthogonal to 1; None for an
    attribute of size 1, which has no residual). The squared L2 sensitivity is
    Σ_S w_S Π_{i∈S} sᵢ (:meth:`sensitivity2`)."""

    def __init__(self, domain, weights, factors):
        domain, k, w = subset_weights(domain, weights)
        if len(factors) != k:
            raise ValueError(f"need one residual factor per attribute ({k}), got {len(factors)}")
        fs: list[np.ndarray | None] = []
        for i, (f, d) in enumerate(zip(factors, domain)):
            if f is None:
                fs.append(None)
                continue
            m = np.asarray(f.matrix if isinstance(f, Dense) else f, dtype=np.float64)
            if m.ndim != 2 or m.shape[1] != d:
                raise ValueError(f"residual factor {i} must have {d} columns, got shape {m.shape}")
            if float(np.abs(m.sum(1)).max()) > 1e-8 * max(float(np.abs(m).max()), 1e-300) * d:
                raise ValueError(
                    f"residual factor {i} has rows not orthogonal to the all-ones vector"
                )
            fs.append(m)
        masks = np.flatnonzero(w > 0)
        for mask in masks:
            bad = [i for i in range(k) if (mask >> i) & 1 and fs[i] is None]
            if bad:
                raise ValueError(
                    f"weight on a subset with attribute {bad[0]} of size 1 (no residual)"
                )
        self.weights_by_mask, self.residual_factors, self.domain_sizes = w, tuple(fs), domain
        parts = [(Ones(1, d), None if f is None else Dense(f)) for f, d in zip(fs, domain)]
        blocks = [Kron(*[parts[i][(m >> i) & 1] for i in range(k)]) for m in masks]
        super().__init__(blocks, weights=np.sqrt(w[masks]))

    def sensitivity2(self):
        """Δ₂² = Σ_S w_S Π_{i∈S} sᵢ (exact: every term is maximal at the cell of per-attribute maxima)."""
        s = [1.0 if f is None else float((f * f).sum(0).max()) for f in self.residual_factors]
        return float(np.dot(self.weights_by_mask, gm_error.inside_products(s)))

    def to_dict(self, out):
        return {
            "domain": list(self.domain_sizes),
            "weights": out.array(self.weights_by_mask),
            "factors": [None if f is None else out.array(f) for f in self.residual_factors],
        }

    @classmethod
    def from_dict(cls, node, src):
        refs = src.field(node, "factors", list)
        fs = [
            None
            if ref is None
            else src.array({"type": "ResidualProductStrategy", "factor": ref}, "factor", "float", 2)
            for ref in refs
        ]
        return cls(tuple(src.ints(node, "domain")), src.array(node, "weights", "float", 1), fs)


@dataclass(frozen=True)
class UnionFit:
    """A planned strategy, its value sens₂² · trace(WᵀW (AᵀA)⁺) (σ = 1 per unit sensitivity),
    a certified lower bound within the strategy's class (None when not certified) and details."""

    strategy: object
    value: float
    bound: float | None
    kind: str
    params: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))


def residual_factor(gram):
    """(R, value, dual) for one attribute: R with R1 = 0 and max column norm 1 minimising
    value = trace(G^⊥ (RᵀR)⁺), G^⊥ = PGP; ``dual`` a certified lower bound on that minimum.
    Grams a·I + b·11ᵀ in closed form (R = the scaled orthonormal contrasts, optimal by
    symmetry: value = a(n−1)²/n); others by :func:`matmech.optimizers.l2.dual_l2`."""
    g = np.asarray(gram, dtype=np.float64)
    n = g.shape[0]
    if n == 1:
        return None, 0.0, 0.0
    if gm_error.identity_total_gram(g):
        from matmech.linalg.residual import orthonormal_contrasts

        a = float(g[0, 0] - g[0, 1])
        value = a * (n - 1) ** 2 / n
        return orthonormal_contrasts(n) * math.sqrt(n / (n - 1)), value, value
    p = np.eye(n) - 1.0 / n
    gp = p @ g @ p
    gp = 0.5 * (gp + gp.T)
    fit = dual_l2(gp, tol=1e-9, maxiter=2000)
    r = fit.strategy.matrix
    r = r - r.mean(1, keepdims=True)  # remove rounding along 1 (rows are in 1^⊥ up to ~1e-12)
    s = float((r * r).sum(0).max())
    r = r / math.sqrt(s)
    xp = np.linalg.pinv(r.T @ r, hermitian=True)
    value = float((gp * xp).sum())
    return r, value, min(fit.dual, value)


def _pinv_plus_total(r, n):
    """Xᵢ⁺ + 11ᵀ/n² for the residual factor r (the 'factor inverse' of the lattice numbers)."""
    out = np.full((n, n), 1.0 / n**2)
    if r is not None:
        out += np.linalg.pinv(r.T @ r, hermitian=True)
    return out


def plan_residual_products(W, *, objective="total"):
    """The residual-product plan of a union of Kronecker products W (module docstring) →
    :class:`UnionFit` (value in units of σ² per unit L2 sensitivity; ``bound`` certified within
    the class when every attribute's non-total grams are proportional, else None).

    ``objective="max"``: the subset weights minimise the largest query variance instead
    (:func:`_max_variance_weights`; the residual factors are those of the total-variance fit, a
    heuristic for this objective; ``bound`` None); ``value`` is that largest variance."""
    W = linear(W, "W")
    choice(objective, "objective", OBJECTIVES)
    prob, domain, blocks = gm_error.general_marginal_problem(W, free=())
    factors, values, duals, certified, fitted = [], [], [], True, {}
    for i, d in enumerate(domain):
        live = gm_error.live_grams(prob, i)
        if not live:  # only totals on this attribute: no residual needed
            factors.append(None if d == 1 else residual_factor(np.eye(d))[0])
            values.append(0.0)
            duals.append(0.0)
            continue
        g = sum(wt * c for c, wt in live)
        ref = live[0][0]
        certified &= all(_proportional(c, ref) for c, _ in live[1:])
        key = (g.shape, g.tobytes())  # equal attributes (Loans: four prefix(101)) fit once
        if key not in fitted:
            fitted[key] = residual_factor(g)
        r, v, dv = fitted[key]
        factors.append(r)
        values.append(v)
        duals.append(dv)
    minvs = [_pinv_plus_total(r, d) for r, d in zip(factors, domain)]
    if objective == "max":
        return _max_variance_plan(blocks, domain, factors)
    _, a_out, a_in, _ = prob.numbers(minvs)
    eta = prob.eta(a_out, a_in)
    s = [1.0 if r is None else float((r * r).sum(0).max()) for r in factors]
    p = gm_error.inside_products(s)
    root = np.sqrt(np.clip(eta, 0.0, None) * p)
    value = float(root.sum()) ** 2
    w = np.where(root > 0, np.sqrt(np.clip(eta, 0.0, None) / p), 0.0)
    w = w / float(np.dot(w, p))
    strategy = ResidualProductStrategy(domain, w, factors)
    bound = None
    if certified:
        ratio = [dv / v if v > 0 else 1.0 for v, dv in zip(values, duals)]
        bound = float((root * np.sqrt(gm_error.inside_products(ratio))).sum()) ** 2
    params = {
        "subsets": int((w > 0).sum()),
        "factor_gaps": tuple(
            max(0.0, (v - dv) / v) if v > 0 else 0.0 for v, dv in zip(values, duals)
        ),
        "certified": "within the residual-product class"
        if certified
        else "no (attributes with non-proportional grams: heuristic factor fit)",
    }
    return UnionFit(strategy, value, bound, "residual products", MappingProxyType(params))


def _pareto_rows(f, xp, n):
    """(α, β) of the rows q of one factor that no other row dominates in both: α = (q·1/n)² (its
    total part) and β = q X⁺ qᵀ (its residual part; 0 without a residual)."""
    from matmech.linalg.linop import as_linop

    q = np.asarray(as_linop(f).dense(), dtype=np.float64)
    alpha = (q.sum(1) / n) ** 2
    beta = np.einsum("ij,jk,ik->i", q, xp, q) if xp is not None else np.zeros(q.shape[0])
    order = np.lexsort((-beta, -alpha))  # α descending, ties by β descending
    b = beta[order]
    prev = np.concatenate([[-np.inf], np.maximum.accumulate(b)[:-1]])
    keep = order[b > prev]
    return alpha[keep], np.maximum(beta[keep], 0.0)


def _max_variance_plan(blocks, domain, factors):
    """Subset weights minimising the largest query variance of W for fixed residual factors.

    The variance of query q = v ⊗ᵢ qᵢ of a term with non-total attributes Z is
    v² Π_{i∉Z} αᵢ Σ_{S⊆Z} u_S Π_{i∈S} βᵢ(qᵢ) Π_{i∈Z∖S} αᵢ(qᵢ) with u_S = 1/w_S: non-decreasing in
    every (αᵢ, βᵢ), so its maximum is over products of per-attribute Pareto rows (enumerated).
    min_u max_q var(q) subject to Σ_S p_S/u_S ≤ 1 is convex; it is solved by cvxpy on a growing
    set of worst queries (cutting planes) until no query exceeds the optimum."""
    import cvxpy as cp

    k = len(domain)
    xps = [None if r is None else np.linalg.pinv(r.T @ r, hermitian=True) for r in factors]
    rows, cols, vals, nrow = [], [], [], 0
    for v2, fs in blocks:
        z = [
            i
            for i, f in enumerate(fs)
            if not gm_error.total_gram(np.atleast_2d(np.asarray(f.gram().dense())))
        ]
        const = v2
        for i in range(k):
            if i not in z:
                const *= float(_pareto_rows(fs[i], None, domain[i])[0].max())
        pairs = [_pareto_rows(fs[i], xps[i], domain[i]) for i in z]
        count = math.prod(len(a) for a, _ in pairs)
        if count > MAX_CANDIDATE_ROWS:
            raise ValueError(
                f"a term has {count:,} candidate worst queries, more than {MAX_CANDIDATE_ROWS:,} (MAX_CANDIDATE_ROWS)"
            )
        grids = np.meshgrid(*[np.arange(len(a)) for a, _ in pairs], indexing="ij") if z else []
        idx = [g.ravel() for g in grids]
        for local in range(1 << len(z)):
            val = np.full(count, const)
            mask = 0
            for j, i in enumerate(z):
                a, b = pairs[j]
                if (local >> j) & 1:
                    val = val * b[idx[j]]
                    mask |= 1 << i
                else:
                    val = val * a[idx[j]]
            rows.append(nrow + np.arange(count))
            cols.append(np.full(count, mask))
            vals.append(val)
        nrow += count
    import scipy.sparse as sp

    F = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(nrow, 1 << k)
    )
    live = np.flatnonzero(np.asarray(abs(F).sum(0)).ravel() > 0)
    F = F[:, live].tocsr()
    s = [1.0 if r is None else float((r * r).sum(0).max()) for r in factors]
    p = gm_error.inside_products(s)[live]
    scale = float(F.max())
    F = F / scale
    u0 = np.ones(live.size) * float(p.sum())  # uniform: Σ p/u = 1
    active = set(np.argsort(-(F @ u0))[: min(nrow, 64)].tolist())
    u = cp.Variable(live.size, pos=True)
    t = cp.Variable()
    cur = u0
    for _ in range(100):
        sub = F[sorted(active)]
        prob = cp.Problem(
            cp.Minimize(t), [sub @ u <= t, cp.sum(cp.multiply(p, cp.inv_pos(u))) <= 1]
        )
        prob.solve()
        if u.value is None or t.value is None:
            raise ValueError(f"the max-variance weight program failed ({prob.status})")
        cur = np.maximum(np.asarray(u.value, dtype=np.float64), 1e-300)
        var = F @ cur
        worst = np.argsort(-var)[:64]
        top = float(t.value)
        new = [int(j) for j in worst if var[j] > top * (1 + 1e-7) and int(j) not in active]
        if not new:
            break
        active.update(new)
    w = np.zeros(1 << k)
    w[live] = 1.0 / cur
    w = w / float(np.dot(w[live], p))  # Δ₂² = 1
    value = scale * float((F @ (1.0 / w[live])).max())
    strategy = ResidualProductStrategy(domain, w, factors)
    params = {
        "subsets": int(live.size),
        "candidate_queries": int(nrow),
        "cutting_plane_rows": len(active),
        "objective": "max",
    }
    return UnionFit(
        strategy, value, None, "residual products (max variance)", MappingProxyType(params)
    )


def _proportional(c, ref):
    a, b = float(c.ravel() @ ref.ravel()), float(ref.ravel() @ ref.ravel())
    return b > 0 and np.allclose(c, (a / b) * ref, rtol=1e-10, atol=1e-12 * float(np.abs(c).max()))


def refine_general_l2(
    W, *, maxiter=JOINT_ITER, starts=DEFAULT_STARTS, decide_at=DECIDE_AT, ftol=JOINT_FTOL
):
    """Generalised marginals fitted for the (ε, δ) error (module docstring) → :class:`UnionFit`
    whose strategy is a :class:`matmech.optimizers.general_marginal_error.GeneralMarginalStrategy` and value
    :func:`matmech.optimizers.general_marginal_error.general_marginal_error` with p = 2 (``bound`` None).

    One descent per start in ``starts`` (a subset of :data:`START_KINDS`, default
    :data:`DEFAULT_STARTS`), advanced in lockstep for ``decide_at`` iterations (or until each
    stops); then only the start with the lowest error so far continues, until ten iterations
    gain less than ``ftol`` of it or ``maxiter`` iterations (:data:`DECIDE_AT`, a heuristic).
    ``decide_at=None`` runs every start to its end and keeps the best. ``params["starts"]``
    holds each start's exact error where it stopped, ``params["iterations"]`` its iterations
    and ``params["continued"]`` the start that continued. Raises ValueError for an unknown or
    empty ``starts``, a negative or non-integer ``decide_at`` or a negative ``ftol``."""
    W = linear(W, "W")
    maxiter = integer(maxiter, "maxiter", min=1)
    for kind in texts(starts, "starts"):
        if kind not in START_KINDS:
            raise ValueError(f"starts must be a subset of {START_KINDS}, got {kind!r}")
    if not starts:
        raise ValueError("starts must name at least one start")
    if decide_at is not None:
        integer(decide_at, "decide_at", min=0)
    ftol = nonnegative_real(ftol, "ftol")
    runs = {kind: JointDescent(W, split=kind == "split grams") for kind in dict.fromkeys(starts)}
    until = maxiter if decide_at is None else min(maxiter, decide_at)
    for _ in range(until):
        if not [r for r in runs.values() if r.step(maxiter, ftol)]:
            break
    lead = min(runs, key=lambda kind: runs[kind].value)
    while runs[lead].step(maxiter, ftol):
        pass
    fits = {kind: r.finish() for kind, r in runs.items()}
    record = {kind: fit[1] for kind, fit in fits.items()}
    strategy, value, params = min(fits.values(), key=lambda fit: fit[1])
    return UnionFit(
        strategy,
        value,
        None,
        "generalised marginals (L2 joint descent)",
        MappingProxyType(
            {
                **params,
                "starts": MappingProxyType(record),
                "iterations": MappingProxyType({k: len(r.hist) - 1 for k, r in runs.items()}),
                "continued": lead,
            }
        ),
    )


def optimize_unions(W, *, maxiter=JOINT_ITER):
    """Both plans for a union of Kronecker products under (ε, δ); the lower error kept →
    :class:`UnionFit` whose ``params["tried"]`` lists both values."""
    W, maxiter = linear(W, "W"), integer(maxiter, "maxiter", min=1)
    res = plan_residual_products(W)
    gen = refine_general_l2(W, maxiter=maxiter)
    best = res if res.value <= gen.value else gen
    params = dict(best.params)
    params["tried"] = MappingProxyType({res.kind: res.value, gen.kind: gen.value})
    return UnionFit(best.strategy, best.value, best.bound, best.kind, MappingProxyType(params))
