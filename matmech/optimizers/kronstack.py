"""Unions of Kronecker products as strategies (HDMM's OPT₊; McKenna et al., VLDB 2018, §6.2).

A workload W = [v₁ ⊗ᵢWᵢ₁; …; v_K ⊗ᵢWᵢ_K] (stacked 1-D factors such as [I; T] expanded into
their terms first) is answered by a strategy A = [w₁ ⊗ᵢQᵢ₁; …; w_J ⊗ᵢQᵢ_J]: one Kronecker
term per group of workload terms, each factor Qᵢⱼ the identity, the total 1ᵀ or HDMM's
p-Identity [I; Θ]D (:func:`matmech.optimizers.pure.fit_pidentity`), all of column L1 norm 1,
so sens₁(A) = Σⱼ wⱼ (with w ≥ 0 summing to 1: sensitivity 1).

The error of W under A has no closed form over a large domain (the gram of A is a sum of
Kronecker products). As HDMM does, each group is scored as if answered from its own term
only, which can only over-state the least-squares error (dropping measurements never
helps): with cⱼ = Σ_{k ∈ group j} v_k² Πᵢ trace(Gᵢₖ (QᵢⱼᵀQᵢⱼ)⁺) the bound is Σⱼ cⱼ/wⱼ²,
minimised at wⱼ ∝ cⱼ^{1/3} to (Σⱼ cⱼ^{1/3})³ (HDMM's budget split). Workload terms whose
fitted strategy terms coincide share one term (cⱼ add, which lowers the bound). On domains
of at most :data:`EXACT_N` cells the error is also computed exactly (dense gram) and that
figure is reported; :attr:`KronStackFit.exact` says which.

Under (ε, δ) (``norm=2``, issue 24) the factors are the certified L2 optima
(:func:`matmech.optimizers.l2.dual_l2`, column L2 norm 1), the squared L2 sensitivity of the
stack is Σⱼ wⱼ² (every term's columns have unit norm), and the bound Σⱼ cⱼ/wⱼ² at Σ wⱼ² = 1 is
minimised at wⱼ² ∝ √cⱼ, to (Σⱼ √cⱼ)².
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from matmech.linalg.linop import (
    Dense,
    Identity,
    Kron,
    LinOp,
    Ones,
    VStack,
    as_linop,
)
from matmech.optimizers.gram import GramOperator, structure_key
from matmech.optimizers.l2 import dual_l2
from matmech.linalg.products import product_terms
from matmech.optimizers.marginal_workloads import identity_like, total_like
from matmech.optimizers.pure import MAX_PIDENTITY_N, fit_pidentity
from matmech.optimizers.pidentity import PIdentity


#: Largest domain on which the union's error is evaluated exactly (dense n×n pseudo-inverse).
EXACT_N = 2048
#: Largest number of workload terms after expanding stacked factors.
MAX_TERMS = 1 << 14


@dataclass(frozen=True)
class KronStackFit:
    """A union-of-Kronecker strategy: ``value`` = sens₁² · trace(G_W (AᵀA)⁺) when ``exact``,
    else HDMM's upper bound (each group answered by its own term); ``bound`` is that upper
    bound, ``terms`` the number of strategy terms, ``weights`` their weights (Σ = 1)."""

    strategy: LinOp
    value: float
    exact: bool
    bound: float
    terms: int
    weights: tuple


def _parts(f):
    """[(weight², 1-D block)] of a 1-D factor: the blocks of a weighted stack, else f
    (:func:`matmech.linalg.products.product_terms` with ``leaf=True``)."""
    terms = product_terms(f, leaf=True)
    if terms is None:  # a stack of blocks of different sizes: not one attribute's factor
        raise ValueError(f"a 1-D factor must be one operator or a stack of them, got {f!r}")
    return [(t.weight2, t.factors[0]) for t in terms]


def expand_terms(W, *, max_terms=MAX_TERMS, expand=True):
    """[(v², [factors])]: the Kronecker terms of W, with every stacked 1-D factor (e.g. [I; T])
    expanded into its blocks when ``expand`` (the gram is unchanged: ⊗ distributes over the
    stack's Σ)."""
    terms = product_terms(as_linop(W))
    if terms is None:
        raise ValueError(
            "a union of Kronecker products strategy needs a Kronecker workload or a union of them over the same attributes"
        )
    out: list[tuple[float, list]] = []
    for t in terms:
        combos: list[tuple[float, list]] = [(t.weight2, [])]
        for f in t.factors:
            parts = _parts(f) if expand else [(1.0, f)]
            combos = [(c * v, lst + [b]) for c, lst in combos for v, b in parts]
            if len(out) + len(combos) > max_terms:
                raise ValueError(
                    f"expanding the workload's stacked factors gives more than {max_terms} Kronecker terms"
                )
        out += combos
    return out


class _FactorFits:
    """1-D strategy factors and their traces, fitted once per distinct workload gram.

    ``prefit``: optional {(n, gram bytes): (factor strategy, trace)} fitted elsewhere (e.g. by
    the ``kron`` family of ``method="auto"``, whose factor fits run a superset of the starts
    used here), taken instead of a new fit of the same dense gram."""

    def __init__(self, prefit=None, norm=1):
        self.fits = {("P", n, b): v for (n, b), v in (prefit or {}).items()} if norm == 1 else {}
        self.norm = norm
        self.by_structure = {}  # factors of equal structure (structure_key) share one answer

    def __call__(self, f):
        """(strategy factor, key, trace(G (QᵀQ)⁺) with sens(Q) = 1) for the 1-D workload f."""
        skey = structure_key(f)
        if skey is None:
            return self._fit(f)
        if skey not in self.by_structure:
            self.by_structure[skey] = self._fit(f)
        return self.by_structure[skey]

    def _fit(self, f):
        n = f.shape[1]
        if total_like(f):
            g = f.gram().dense(max_entries=max(n * n, 1))
            return Ones(1, n), ("T", n), float(g[0, 0])  # G = m·11ᵀ, (11ᵀ)⁺ = 11ᵀ/n²
        if identity_like(f):
            return Identity(n), ("I", n), float(n)
        if n > MAX_PIDENTITY_N:
            raise ValueError(
                f"a union of Kronecker products strategy needs attribute sizes <= {MAX_PIDENTITY_N} for factor workloads other than identity or total, got {n}"
            )
        op = GramOperator.from_workload(f)
        g = op.dense()
        key = ("P", n, g.tobytes())
        if key not in self.fits and self.norm == 2:
            fit = dual_l2(g, tol=1e-9, maxiter=2000)
            self.fits[key] = (Dense(fit.strategy.matrix), float(fit.value))
        if key not in self.fits:
            fit = fit_pidentity(op)
            ident = float(np.trace(g))
            self.fits[key] = (
                (Identity(n), float(ident))
                if ident <= fit.value
                else (PIdentity(fit.theta), float(fit.value))
            )
        q, v = self.fits[key]
        return q, ("P", n, id(q)), v


def optimize_kron_stack(W, *, single=None, prefit=None, norm=1):
    """HDMM's OPT₊ for a union of Kronecker products W (pure ε, ``norm=1``; (ε, δ) with
    ``norm=2``): one strategy term per distinct fitted factor signature, weights by the
    cube-root (L1) or square-root (L2) rule (see the module).

    ``single``: an optional (strategy, value) of a single Kronecker strategy (e.g. from
    ``method="kron"``) returned instead when its value is lower than the union's, so the
    result is never worse than it. ``prefit``: optional 1-D factor fits to reuse,
    {(n, dense gram bytes): (strategy factor of sensitivity 1, trace(G (QᵀQ)⁺))} (see
    :class:`_FactorFits`). Returns a :class:`KronStackFit`.
    """
    if norm not in (1, 2):
        raise ValueError(f"norm must be 1 (pure eps) or 2 (Gaussian), got {norm!r}")
    fits = _FactorFits(prefit, norm)
    # the workload's own terms, and (when different) its stacked factors expanded: HDMM's
    # grouping keeps [I; T] factors whole, the expansion gives each part its own budget
    grouped, expanded = expand_terms(W, expand=False), expand_terms(W)
    strategy, bound, weights = _union(grouped, fits, norm)
    if len(expanded) != len(grouped):
        cand = _union(expanded, fits, norm)
        if cand[1] < bound:
            strategy, bound, weights = cand
    value, exact = bound, len(weights) == 1  # one term answers everything: the bound is exact
    W = as_linop(W)
    if not exact and W.shape[1] <= EXACT_N:
        value, exact = exact_error(W, strategy, p=norm), True
    if single is not None and single[1] < value:
        return KronStackFit(single[0], float(single[1]), True, bound, 1, (1.0,))
    return KronStackFit(
        strategy, float(value), exact, bound, len(weights), tuple(float(w) for w in weights)
    )


class _FactorBounds(_FactorFits):
    """Lower bounds on the traces :class:`_FactorFits` fits, under the same keys (so the same
    groups, decided by the factors' grams alone), without fitting: the total and identity
    factors exactly, any other factor Q of unit column norm (L2, or L1, which is at least the
    L2 norm) has trace(G (QᵀQ)⁺) ≥ (trace √G)²/n (Li & Miklau's SVD bound in one dimension:
    Cauchy–Schwarz with trace QᵀQ ≤ n)."""

    def _fit(self, f):
        n = f.shape[1]
        if total_like(f) or identity_like(f) or n > MAX_PIDENTITY_N:
            return super()._fit(f)  # exact, or the same refusal
        g = GramOperator.from_workload(f).dense()
        eig = np.clip(np.linalg.eigvalsh(g), 0.0, None)
        return None, ("P", n, g.tobytes()), float(np.sqrt(eig).sum()) ** 2 / n


def value_lower_bound(W, *, norm=1):
    """A lower bound on ``optimize_kron_stack(W, norm=norm).value`` when W has more than
    :data:`EXACT_N` cells (below, the value may be the exact error, which this does not
    bound): the module's figure with every fitted trace replaced by its lower bound
    (:class:`_FactorBounds`), the least over the two term lists; the figure is increasing in
    every trace. Costs one symmetric eigenvalue problem per distinct factor gram."""
    bounds = _FactorBounds(None, norm)
    return min(
        _union(terms, bounds, norm, build=False)[1]
        for terms in (expand_terms(W, expand=False), expand_terms(W))
    )


def _union(terms, fits, norm=1, build=True):
    """(strategy, upper bound, weights) of one term per distinct fitted factor signature
    (``build=False``: no strategy, None)."""
    groups: dict[tuple, list] = {}
    for v2, fs in terms:
        parts = [fits(f) for f in fs]
        key = tuple(p[1] for p in parts)
        c = v2 * math.prod(p[2] for p in parts)
        if key in groups:
            groups[key][1] += c
        else:
            groups[key] = [[p[0] for p in parts], c]
    cs = np.array([c for _, c in groups.values()])
    if not build:
        value = float(np.sqrt(cs).sum()) ** 2 if norm == 2 else float(np.cbrt(cs).sum()) ** 3
        return None, value, None
    if norm == 2:  # Σ cⱼ/wⱼ² at Σ wⱼ² = 1: wⱼ² ∝ √cⱼ, value (Σ √cⱼ)²
        roots = np.sqrt(cs)
        weights = np.sqrt(roots / roots.sum())
        keep = weights > 0
        blocks = [Kron(*fs) for (fs, _), k in zip(groups.values(), keep) if k]
        strategy = blocks[0] if len(blocks) == 1 else VStack(blocks, weights=weights[keep])
        return strategy, float(roots.sum()) ** 2, weights[keep]
    roots = np.cbrt(cs)
    weights = roots / roots.sum()
    keep = weights > 0
    blocks = [Kron(*fs) for (fs, _), k in zip(groups.values(), keep) if k]
    strategy = blocks[0] if len(blocks) == 1 else VStack(blocks, weights=weights[keep])
    return strategy, float(roots.sum()) ** 3, weights[keep]


def exact_error(W, A, p=1):
    """sens_p(A)² · trace(WᵀW (AᵀA)⁺) densely (n ≤ :data:`EXACT_N`; p = 1 or 2)."""
    n = A.shape[1]
    if n > EXACT_N:
        raise ValueError(
            f"the exact error of a union of Kronecker products is dense: n={n} exceeds {EXACT_N}"
        )
    a = A.dense(max_entries=max(A.shape[0], 1) * n)
    g = as_linop(W).gram().dense(max_entries=n * n)
    sens = float(np.abs(a).sum(0).max()) if p == 1 else math.sqrt(float((a * a).sum(0).max()))
    return sens**2 * float((g * np.linalg.pinv(a.T @ a, hermitian=True)).sum())
