"""The joint L2 descent of a generalised marginal strategy from one start (issue 24).

Rows θ_S ⊗_{i∈S} Qᵢ ⊗_{i∉S} 1ᵀ with full-rank factors Qᵢ of unit column norms (so Δ₂² = Σθ_S²):
θ and every free Qᵢ (parametrised by columns normalised to norm one) descend jointly by L-BFGS
on the exact factored error of :mod:`matmech.optimizers.general_marginal_error`, one iteration
at a time (:class:`JointDescent`), from the L2-optimal factors of :func:`start_factors` and the
L2-optimal lattice weights (:func:`matmech.optimizers.general_marginals.reweight_general_marginals_l2`).
:func:`matmech.optimizers.unions.refine_general_l2` runs one descent per start in lockstep.
"""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np

from matmech.linalg.linop import Dense
from matmech.optimizers import general_marginal_error as gm_error, general_marginals as gm_opt
from matmech.optimizers.l2 import dual_l2
from matmech.optimizers.lbfgs import armijo_lbfgs_steps, stalled
from matmech.optimizers.pidentity import spd_inverse


#: Rows of a factor gram up to which the joint L2 descent also frees identity-gram attributes.
FREE_IDENTITY_MAX_N = 128
#: Largest squared-cell count Σᵢ nᵢ² of the free factors of the joint L2 descent.
MAX_JOINT_VARIABLES = 1 << 20


def start_factors(prob, domain, split=False):
    """Per attribute: the certified L2 optimum of its weighted factor gram G (dense, unit column
    norms), or None (the identity) for identity/total grams; ``split``: of the gram with its
    cross terms between 1 and 1^⊥ dropped, P₁GP₁ + PGP (the residual plan's view of G)."""
    out: list[np.ndarray | None] = []
    fitted: dict[tuple, np.ndarray] = {}
    for i, d in enumerate(domain):
        live = gm_error.live_grams(prob, i)
        if not live or all(gm_error.identity_total_gram(c) for c, _ in live):
            out.append(None)
            continue
        g = sum(wt * c for c, wt in live)
        if split:
            p = np.eye(d) - 1.0 / d
            g = p @ g @ p + float(g.sum()) / d**3 * np.ones((d, d))
            g = 0.5 * (g + g.T)
        key = (g.shape, g.tobytes())  # equal attributes (Loans: four prefix(101)) fit once
        if key not in fitted:
            q = dual_l2(g, tol=1e-9, maxiter=2000).strategy.matrix
            # a square factor with the same gram; a rank-deficient gram (fewer queries than
            # cells) gets its null directions at 10⁻⁶ of the top eigenvalue, so that it inverts
            lam, vec = np.linalg.eigh(q.T @ q)
            lam = np.maximum(lam, 1e-6 * float(lam.max()))
            q = (vec * np.sqrt(lam)[None, :]) @ vec.T
            fitted[key] = q / np.linalg.norm(q, axis=0)[None, :]
        out.append(fitted[key])
    return out


class JointDescent:
    """One start's joint L2 descent of θ and the free factors Qᵢ (module docstring), advanced
    one L-BFGS iteration at a time (:meth:`step`); :meth:`finish` builds the strategy."""

    def __init__(self, W, *, split):
        self.W = W
        prob0, domain, _ = gm_error.general_marginal_problem(W, free=())
        k = len(domain)
        qs = start_factors(prob0, domain, split=split)
        # the workload's own subsets as A0's weights (reweighting also starts from uniform
        # weights): a strategy of 2^k products costs 0.3 s to build on 12 attributes
        own = np.zeros(1 << k)
        own[prob0.support] = 1.0
        A0 = gm_error.GeneralMarginalStrategy(
            domain, own, [None if q is None else Dense(q) for q in qs]
        )
        self.start = start = gm_opt.reweight_general_marginals_l2(W, A0)
        # free factors: every non-identity one, and identity ones up to FREE_IDENTITY_MAX_N cells
        free = [
            i
            for i, d in enumerate(domain)
            if d > 1 and (qs[i] is not None or d <= FREE_IDENTITY_MAX_N)
        ]
        while free and sum(domain[i] ** 2 for i in free) > MAX_JOINT_VARIABLES:
            free.pop()
        prob, _, _ = gm_error.general_marginal_problem(W, free=free)
        th0 = np.asarray(start.theta, dtype=np.float64)
        col = gm_error.inside_products(
            [gm_error.factor_col_norm2(f) for f in start.strategy.factors]
        )
        th0 = th0 * np.sqrt(col)  # unit column norms below: θ absorbs the factors' scale
        idx = np.flatnonzero(th0 > 0)
        z0 = [qs[i] if qs[i] is not None else np.eye(domain[i]) for i in free]
        sizes = [domain[i] ** 2 for i in free]
        fixed_minv = [
            np.eye(d) if q is None else np.linalg.inv(q.T @ q) for q, d in zip(qs, domain)
        ]
        self.domain, self.qs, self.free, self.sizes, self.idx = domain, qs, free, sizes, idx
        self.prob, self.fixed_minv = prob, fixed_minv
        x0 = np.concatenate([np.sqrt(th0[idx])] + [z.ravel() for z in z0])
        f0 = self.fun(x0)[0]
        self.scale = f0 if math.isfinite(f0) and f0 > 0 else 1.0
        self.steps = armijo_lbfgs_steps(self.scaled, x0)
        self.x, f = next(self.steps)
        self.hist, self.stopped = [f], not math.isfinite(f)

    @property
    def value(self):
        """The error (same unit as :attr:`UnionFit.value`) at the current iterate."""
        return self.hist[-1] * self.scale

    def step(self, maxiter, ftol):
        """One more iteration unless stopped (stall, ``maxiter``, no step) → still running."""
        if not self.stopped:
            nxt = next(self.steps, None)
            if nxt is None:
                self.stopped = True
            else:
                self.x, f = nxt
                self.hist.append(f)
                self.stopped = len(self.hist) > maxiter or stalled(self.hist, ftol)
        return not self.stopped

    def unpack(self, x):
        th = np.zeros(1 << len(self.domain))
        idx = self.idx
        th[idx] = x[: idx.size] ** 2
        off, zs = idx.size, []
        for i, s in zip(self.free, self.sizes):
            zs.append(x[off : off + s].reshape(self.domain[i], self.domain[i]))
            off += s
        return th, zs

    def fun(self, x):
        th, zs = self.unpack(x)
        minvs, parts = list(self.fixed_minv), {}
        for i, z in zip(self.free, zs):
            nz = np.linalg.norm(z, axis=0)
            if not np.all(nz > 0):
                return math.inf, None
            q = z / nz[None, :]
            try:
                mi = spd_inverse(q.T @ q, lower=0)
            except np.linalg.LinAlgError:
                return math.inf, None
            minvs[i] = mi
            parts[i] = (q, nz, mi)
        F, dth, grads = self.prob.full(th, minvs)
        if not math.isfinite(F):
            return math.inf, None
        s1, s2 = float(th.sum()), float((th * th).sum())
        err = F / (s1 * s1)
        derr = (dth - 2.0 * s1 * err) / (s1 * s1)
        gth = 2.0 * th * err + s2 * derr
        idx = self.idx
        out = [(gth[idx] * 2.0 * x[: idx.size])]
        for i in self.free:
            q, nz, mi = parts[i]
            dx = -mi @ (grads[i] * (s2 / (s1 * s1))) @ mi
            dq = 2.0 * q @ dx
            out.append(((dq - q * (q * dq).sum(0)[None, :]) / nz[None, :]).ravel())
        return s2 * err, np.concatenate(out)

    def scaled(self, v):
        f, g = self.fun(v)
        return f / self.scale, None if g is None else g / self.scale

    def finish(self):
        """(strategy, its exact error, params) at the current iterate, or the start's when that
        is lower (the descent is never worse than its start)."""
        th, zs = self.unpack(self.x)
        factors = [None if q is None else Dense(q) for q in self.qs]
        for i, z in zip(self.free, zs):
            factors[i] = Dense(z / np.linalg.norm(z, axis=0)[None, :])
        strategy = gm_error.GeneralMarginalStrategy(self.domain, th / th.sum(), factors)
        value = gm_error.general_marginal_error(self.W, strategy, p=2)
        start = self.start
        params = {"start": float(start.value), "free_factors": tuple(self.free)}
        if not value <= start.value:  # never worse than the start
            strategy, value = start.strategy, float(start.value)
            params["kept_start"] = True
        return strategy, float(value), MappingProxyType(params)
