"""Lockstep projected L-BFGS over a stack of same-shape p-Identity starts (one multistart).

The p-Identity objective f(Θ) = trace(G (AᵀA)⁻¹), A = [I; Θ]D (McKenna et al., VLDB 2018,
eq. 7; :func:`matmech.optimizers.pure.objective`) is evaluated for S starts at once: Θ is an
(S, p, n) stack, the gram product runs on all S·p rows together (closed forms) or as one
stacked ``np.matmul`` (dense G), and ΘΘᵀ, R⁻¹Y, YΘᵀ, MΘ are ``np.matmul`` calls on stacks.
:func:`lockstep_lbfgs` runs :func:`matmech.optimizers.lbfgs.projected_lbfgs` (two-loop
recursion, Nocedal & Wright Alg. 7.4, on the free variables; multiplicative initial metric;
Armijo backtracking along the projected path, Bertsekas 1982) for every start in lockstep,
each with its own curvature pairs, step length, restarts and stopping rule (10 iterations
gaining less than 10·ftol·|f|, ``maxiter``, or 40 halvings without an Armijo step); finished
starts leave the stack. The IEEE operations are those of the sequential code: dot products
are BLAS ddot (stacked vector·vector ``matmul``), the two-loop updates BLAS daxpy per row
(fused multiply-add), R⁻¹ LAPACK dpotrf + dpotri per start, so each start ends with the
same Θ, f, iteration and evaluation counts as alone (tests/optimizers/test_multistart.py).
What is batched is the Python/numpy per-call overhead that dominates small fits (p ≤ 8,
n ≤ 128: the Kronecker factor multistart of :data:`matmech.optimizers.pure.QUAD_FILL_STARTS`).
"""

from __future__ import annotations

import numpy as np
from matmech.linalg.lazy import sla

from matmech.optimizers.lbfgs import WINDOW


#: Halvings of the step before a line search gives up (as in projected_lbfgs).
MAX_HALVINGS = 40


def stack_objective(gram, p):
    """``fun(X) -> (f, ∇f, ok)`` for a (k, p·n) stack of flattened Θ: the p-Identity value and
    gradient of :func:`matmech.optimizers.pure.objective` per row (f: (k,), ∇f: (k, p·n)),
    ``ok`` false where I + ΘΘᵀ is not positive definite (there f = nan, ∇f = 0)."""
    n, diag = gram.n, gram.diag
    dense = gram.dense() if gram.kind == "dense" else None
    eye = np.eye(p)
    diag_col = np.ascontiguousarray(diag, dtype=np.float64)[:, None]
    lower = np.tril_indices(p, -1)

    def fun(X):
        k = X.shape[0]
        th = X.reshape(k, p, n)
        s = th.sum(1)
        s += 1.0
        z = th * s[:, None, :]
        if dense is not None:  # one p×n-by-n×n product per start, as the sequential objective
            y = np.matmul(z, dense)
        else:  # closed forms act row by row: all starts' rows at once
            y = gram.rows(z.reshape(k * p, n)).reshape(k, p, n)
        y *= s[:, None, :]  # Y = Θ G̃ per start
        r = np.matmul(th, th.transpose(0, 2, 1))
        r += eye
        ri, ok = _spd_inverses(r, lower)
        u = np.matmul(ri, y)
        ybs = (u * th).sum(1)  # Σ_k U_kj Θ_kj per start
        f = np.matmul((s * s)[:, None, :], diag_col)[:, 0, 0] - ybs.sum(1)  # ddot per start
        m = np.matmul(np.matmul(ri, np.matmul(y, th.transpose(0, 2, 1))), ri)
        g = np.matmul(m, th)
        g -= u
        g *= 2.0
        ybs /= s
        np.subtract(s * diag, ybs, out=ybs)
        ybs *= 2.0
        g += ybs[:, None, :]
        if not ok.all():
            f[~ok] = np.nan
            g[~ok] = 0.0
        return f, g.reshape(k, p * n), ok

    return fun


def _spd_inverses(r, lower):
    """(R⁻¹ per matrix of the stack, ok) by LAPACK dpotrf + dpotri on each, as
    ``pidentity.spd_inverse`` (ok false where R is not positive definite; there R⁻¹ = I);
    ``lower``: the strict lower triangle's indices (the upper one is mirrored from it)."""
    potrf, potri = sla.lapack.dpotrf, sla.lapack.dpotri
    k, p, _ = r.shape
    out = np.empty_like(r)
    ok = np.ones(k, dtype=bool)
    for i in range(k):
        c, info = potrf(r[i], lower=1)
        if info != 0:
            ok[i] = False
            out[i] = np.eye(p)
            continue
        out[i], _ = potri(c, lower=1)
    out.transpose(0, 2, 1)[:, lower[0], lower[1]] = out[:, lower[0], lower[1]]
    return out, ok


def _rowdot(a, b):
    """Row-wise dot products: a stack of vector·vector matmuls (BLAS ddot per row, the same
    sums as ``np.dot`` of each row pair)."""
    return np.matmul(a[:, None, :], b[:, :, None])[:, 0, 0]


def lockstep_lbfgs(fun, X0, *, maxiter=300, memory=6, ftol=1e-10):
    """:func:`matmech.optimizers.lbfgs.projected_lbfgs` (without deadline or callback) on each
    row of the (S, size) array ``X0`` at once; ``fun`` as from :func:`stack_objective`.

    Returns a list of S entries: (x, f, iterations, evaluations) per start, or None for a
    start whose I + ΘΘᵀ lost positive definiteness (where projected_lbfgs raises).
    The curvature pairs are kept newest first (slot 0) rather than in a ring: the same pairs
    in the same order, without per-start gathers.
    """
    X0 = np.maximum(np.asarray(X0, dtype=np.float64), 0.0)
    if X0.ndim != 2:
        raise ValueError(f"X0 must be a (starts, size) array, got shape {X0.shape}")
    total, size = X0.shape
    axpy = sla.blas.daxpy
    results: list[tuple[np.ndarray, float, int, int] | None] = [None] * total
    ids = np.arange(total)  # original index of each live row
    x = X0.copy()
    f, g, ok = fun(x)
    evals = np.ones(total, dtype=np.int64)
    hs = np.zeros((total, memory, size))
    hy = np.zeros((total, memory, size))
    rho = np.zeros((total, memory))
    stored = np.zeros(total, dtype=np.int64)
    trail = np.empty((maxiter + 1, total))
    trail[0] = f

    def finish(mask, its):
        for r in np.flatnonzero(mask):
            results[ids[r]] = (x[r].copy(), float(f[r]), int(its), int(evals[r]))

    def keep(mask):
        nonlocal ids, x, f, g, evals, hs, hy, rho, stored, trail
        ids, x, f, g, evals = ids[mask], x[mask], f[mask], g[mask], evals[mask]
        hs, hy, rho, stored, trail = hs[mask], hy[mask], rho[mask], stored[mask], trail[:, mask]

    if not ok.all():  # broke down at the start: None
        keep(ok)
    for it in range(1, maxiter + 1):
        k = ids.size
        if k == 0:
            break
        free = (x > 0.0) | (g < 0.0)
        q = g * free
        depth = int(stored.max())
        alpha = np.zeros((k, memory))
        for j in range(depth):  # newest pair first
            a = rho[:, j] * _rowdot(hs[:, j], q)
            a[j >= stored] = 0.0
            alpha[:, j] = a
            for i in np.flatnonzero(j < stored).tolist():  # BLAS daxpy as projected_lbfgs (fused)
                q[i] = axpy(hy[i, j], q[i], a=-a[i])
        metric = x + (x.sum(1) / size + 1e-300)[:, None]
        q *= metric
        has = stored > 0
        if has.all():
            q *= (1.0 / (rho[:, 0] * _rowdot(hy[:, 0], hy[:, 0] * metric)))[:, None]
        else:
            q[has] *= (1.0 / (rho[has, 0] * _rowdot(hy[has, 0], hy[has, 0] * metric[has])))[:, None]
            q[~has] /= np.maximum(np.sqrt(_rowdot(q[~has], q[~has])), 1e-300)[:, None]
        for j in reversed(range(depth)):
            coef = alpha[:, j] - rho[:, j] * _rowdot(hy[:, j], q)
            for i in np.flatnonzero(j < stored).tolist():
                q[i] = axpy(hs[i, j], q[i], a=coef[i])
        q *= free
        stale = ~(-_rowdot(q, g) < 0)
        if stale.any():  # curvature pairs gone stale: restart from steepest descent
            stored[stale] = 0
            qs = g[stale] * free[stale] * metric[stale]
            qs /= np.maximum(np.sqrt(_rowdot(qs, qs)), 1e-300)[:, None]
            q[stale] = qs
        # per-start Armijo backtracking along the projected path
        xn = np.maximum(x - q, 0.0)
        step = xn - x
        fn, gn, okn = fun(xn)
        evals += 1
        with np.errstate(invalid="ignore"):
            acc = okn & np.isfinite(fn) & (fn <= f + 1e-4 * _rowdot(g, step))
        broken = ~okn
        pending = okn & ~acc
        if pending.any():
            t = np.ones(k)
            for _ in range(MAX_HALVINGS - 1):
                idx = np.flatnonzero(pending)
                t[idx] *= 0.5
                xi = x[idx]
                xt = np.maximum(xi - t[idx, None] * q[idx], 0.0)
                st = xt - xi
                ft, gt, okt = fun(xt)
                evals[idx] += 1
                with np.errstate(invalid="ignore"):
                    acct = okt & np.isfinite(ft) & (ft <= f[idx] + 1e-4 * _rowdot(g[idx], st))
                broken[idx[~okt]] = True
                pending[idx[~okt]] = False
                take = idx[acct]
                xn[take], fn[take], gn[take], step[take] = xt[acct], ft[acct], gt[acct], st[acct]
                pending[take] = False
                if not pending.any():
                    break
        failed = pending  # no acceptable step: stop where it is
        if failed.any():
            finish(failed, it)
        accepted = ~failed & ~broken
        if not accepted.all():
            keep(accepted)
            xn, fn, gn, step = xn[accepted], fn[accepted], gn[accepted], step[accepted]
            k = ids.size
            if k == 0:
                break
        yv = gn - g
        sy = _rowdot(step, yv)
        good = sy > 1e-12 * _rowdot(yv, yv)
        if good.any():  # the new pair becomes the newest; the oldest falls off a full memory
            gi = np.flatnonzero(good)
            hs[gi, 1:] = hs[gi, :-1]
            hy[gi, 1:] = hy[gi, :-1]
            rho[gi, 1:] = rho[gi, :-1]
            hs[gi, 0], hy[gi, 0], rho[gi, 0] = step[gi], yv[gi], 1.0 / sy[gi]
        # a rejected pair takes the oldest slot of a full memory (projected_lbfgs's ring)
        stored = np.where(good, np.minimum(stored + 1, memory), np.minimum(stored, memory - 1))
        x, f, g = xn, fn, gn
        trail[it] = f
        if it >= WINDOW:
            done = trail[it - WINDOW] - f <= ftol * WINDOW * np.maximum(np.abs(f), 1e-300)
        else:
            done = np.zeros(k, dtype=bool)
        if it == maxiter:
            done[:] = True
        if done.any():
            finish(done, it)
            keep(~done)
    return results


def pidentity_multistart(gram, thetas, *, maxiter, ftol, memory=6):
    """Projected L-BFGS from each p×n Θ of ``thetas`` (all the same shape), in lockstep.

    Returns, per start, (Θ, f, iterations, evaluations) as ``pure._lbfgs`` would (evaluations
    include the first), or None where I + ΘΘᵀ stopped being positive definite."""
    thetas = [np.asarray(th, dtype=np.float64) for th in thetas]
    if not thetas:
        return []
    shape = thetas[0].shape
    if any(th.shape != shape for th in thetas) or len(shape) != 2 or shape[1] != gram.n:
        raise ValueError(
            f"all starts must be p×{gram.n} arrays of one shape, got {sorted({th.shape for th in thetas})}"
        )
    X0 = np.stack([th.ravel() for th in thetas])
    out = lockstep_lbfgs(
        stack_objective(gram, shape[0]), X0, maxiter=maxiter, memory=memory, ftol=ftol
    )
    return [None if r is None else (r[0].reshape(shape), r[1], r[2], r[3]) for r in out]


#: Fewest same-shape starts run in lockstep by :func:`lockstep_starts`: below it the per-row
#: bookkeeping costs more than the Python overhead saved (3 starts at n = 64-115: ≈1.5× slower).
MIN_LOCKSTEP = 8
#: Largest p·n run in lockstep: the stack holds about 20 p·n arrays per start (13 MB for 10
#: starts at this size), and from there the arithmetic, not the overhead, dominates.
MAX_LOCKSTEP_SIZE = 8192


def lockstep_starts(gram, starts, *, maxiter, ftol, min_starts=MIN_LOCKSTEP):
    """{i: (Θ, f, iterations, evaluations)} for the starts i of the largest group of same-shape
    starts of ``starts`` (``fit_pidentity``'s list of (name, Θ)) when it has at least
    ``min_starts`` starts of at most :data:`MAX_LOCKSTEP_SIZE` entries, run by
    :func:`pidentity_multistart`; otherwise {}. Starts that broke down are left out, so that
    the caller's sequential run of them reproduces the breakdown."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (_, th) in enumerate(starts):
        groups.setdefault(np.shape(th), []).append(i)
    group = max(groups.values(), key=len, default=[])
    if len(group) < max(int(min_starts), 2) or np.size(starts[group[0]][1]) > MAX_LOCKSTEP_SIZE:
        return {}
    out = pidentity_multistart(gram, [starts[i][1] for i in group], maxiter=maxiter, ftol=ftol)
    return {i: r for i, r in zip(group, out) if r is not None}
