"""Least-squares reconstruction x̂ from noisy measurements: post-processing, no privacy cost.

Given measurements yᵢ = Aᵢ x + zᵢ with independent noise of standard deviation σᵢ, the
generalised least-squares estimate is x̂ = argmin Σᵢ ‖(Aᵢ x − yᵢ)/σᵢ‖², the minimum-norm
solution when the stacked strategy is rank deficient (Li et al., PODS 2010, Sec. 3:
x̂ = A⁺y for one measurement). Measurements of the same strategy are first merged into
their inverse-variance weighted mean (a sufficient statistic), so a single strategy always
reduces to x̂ = A⁺ ȳ, for which structure gives fast exact paths:

* identity: x̂ = y, O(n);
* interval trees (:class:`matmech.strategies.Tree`): two passes over the tree, O(nodes)
  (Hay, Rastogi, Miklau, Suciu, VLDB 2010, Thm. 3, in the form of exact Gaussian belief
  propagation: a bottom-up pass combines each node's measurement with the sum of its
  children's subtree estimates by inverse variance, a top-down pass splits the parent's
  final estimate among the children in proportion to their subtree variances). Works for
  any tree, balanced or not;
* Haar (any n): A is square and invertible, so x̂ = A⁻¹ y, computed by splitting block
  sums top-down in O(n) (Xiao, Wang, Gehrke, ICDE 2010);
* Kronecker products: x̂ = (⊗ Aᵢ⁺) y, one attribute at a time, each with its own path;
* a strategy made of single-entry rows (a positive diagonal of AᵀA) plus r ≤ n/4 other
  rows, as HDMM's p-Identity strategies [I; Θ]D (McKenna et al., VLDB 2018): the
  Woodbury identity (D + RᵀR)⁻¹ = D⁻¹ − D⁻¹Rᵀ(I + RD⁻¹Rᵀ)⁻¹RD⁻¹, O(n r²);
* a square non-singular dense A: an LU solve x̂ = A⁻¹y (2n³/3 flops instead of forming AᵀA);
* anything else (and several different strategies): the normal equations
  (Σ AᵢᵀAᵢ/σᵢ²) x = Σ Aᵢᵀyᵢ/σᵢ² solved densely (Cholesky; an eigen-decomposition with
  relative cut-off 1e-10 when singular) for n <= ``DENSE_SOLVE_N``, else
  ``scipy.sparse.linalg.lsmr`` on the implicit weighted stack with ``atol = btol = tol``
  (default 1e-10: relative residual tolerances, see Fong & Saunders 2011), started at 0 so
  it converges to the minimum-norm solution; a RuntimeWarning is issued if it stops on the
  iteration limit.
"""

from __future__ import annotations

import math
import numbers
import warnings
import weakref

import numpy as np
from matmech.linalg.lazy import sla

from matmech.linalg.intervals import Intervals
from matmech.linalg.linop import Dense, Identity, Kron, LinOp, Scaled, Sparse, VStack
from matmech.linalg.structured import split_diagonal, woodbury_solve
from matmech.linalg.spectral import tree_depths
from matmech.privacy.measure import Measurement
from matmech.strategies import Haar, Tree
from matmech.optimizers.marginals import MarginalStrategy, ResidualStrategy

__all__ = ["least_squares", "solve", "tree_plan", "DENSE_SOLVE_N", "LSMR_TOL"]

#: Largest number of cells for which the generic path factorises the normal equations densely.
DENSE_SOLVE_N = 4096
#: Default LSMR tolerances (atol = btol) for the large generic path.
LSMR_TOL = 1e-10


def least_squares(
    *measurements: Measurement,
    nonneg: bool = False,
    tol: float = LSMR_TOL,
    maxiter: int | None = None,
) -> np.ndarray:
    """Generalised least-squares estimate x̂ of the histogram from one or more measurements.

    Each measurement is weighted by 1/its noise std (GLS). Structure-aware fast paths are
    used where they apply (see the module notes); they agree with the dense pseudo-inverse.
    ``nonneg=True`` clips negative cells to 0 afterwards: post-processing that keeps
    privacy but makes x̂ biased, so the analytic variances no longer describe it.
    ``tol``/``maxiter`` only affect the LSMR path (n > DENSE_SOLVE_N without structure).

    Parameters
    ----------
    *measurements : Measurement
        One or more measurements of the same histogram.
    nonneg : bool, default False
        Clip negative cells to 0 afterwards (biased post-processing).
    tol : float, default 1e-10
        Tolerance of the iterative (LSMR) path.
    maxiter : int, optional
        Iteration cap of the iterative path.

    Returns
    -------
    numpy.ndarray
        The estimate x̂ (float64, one value per cell).

    Raises
    ------
    ValueError
        No measurement, measurements over different domains, or a strategy whose
        columns are not all measured.
    TypeError
        An argument that is not a Measurement.

    Examples
    --------
    >>> from matmech import strategies as S
    >>> m = measure([1, 2, 0, 1], S.identity(4), 1.0, rng=np.random.default_rng(0))
    >>> least_squares(m).shape
    (4,)
    """
    if len(measurements) == 1 and isinstance(measurements[0], (list, tuple)):
        measurements = tuple(measurements[0])
    if not measurements:
        raise ValueError("least_squares needs at least one Measurement")
    for i, m in enumerate(measurements):
        if not isinstance(m, Measurement):
            raise TypeError(f"argument {i} must be a matmech Measurement, got {type(m).__name__}")
    n = measurements[0].strategy.shape[1]
    for i, m in enumerate(measurements):
        if m.strategy.shape[1] != n:
            raise ValueError(
                f"measurements cover different domains: measurement 0 has {n} cells, measurement {i} has "
                f"{m.strategy.shape[1]}"
            )
    if not isinstance(nonneg, (bool, np.bool_)):
        raise TypeError(f"nonneg must be True or False, got {nonneg!r}")
    _check_tol(tol, maxiter)
    groups = _merge(
        [(m.strategy, np.asarray(m.y, dtype=np.float64), float(m.std)) for m in measurements]
    )
    if len(groups) == 1:
        A, y, _ = groups[0]
        xhat = solve(A, y, tol=tol, maxiter=maxiter)
    else:
        xhat = _generic(
            [g[0] for g in groups],
            [g[1][:, None] for g in groups],
            [g[2] for g in groups],
            tol,
            maxiter,
        )[:, 0]
    if nonneg:
        np.clip(xhat, 0.0, None, out=xhat)
    return xhat


def _check_tol(tol, maxiter):
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not 0 < tol < 1:
        raise ValueError(f"tol must be a number in (0, 1), got {tol!r}")
    if maxiter is not None and (
        isinstance(maxiter, bool) or not isinstance(maxiter, numbers.Integral) or maxiter < 1
    ):
        raise ValueError(f"maxiter must be a positive integer or None, got {maxiter!r}")


# -- merging measurements of the same strategy ----------------------------------------------


def _same(A, B):
    """Whether two operators are the same matrix (cheap structural comparison; False if unsure)."""
    if A is B:
        return True
    if type(A) is not type(B) or A.shape != B.shape:
        return False
    if isinstance(A, (Identity, Haar)):
        return True  # same type and shape: the same matrix
    if isinstance(A, Intervals) and type(A) is type(B):
        la, ha = A.bounds()
        lb, hb = B.bounds()
        same = np.array_equal(la, lb) and np.array_equal(ha, hb)
        if isinstance(A, Tree):
            same = same and np.array_equal(A.parent, B.parent)
        return same
    if isinstance(A, Dense):
        return np.array_equal(A.matrix, B.matrix)
    if isinstance(A, Sparse):
        return (A.matrix != B.matrix).nnz == 0
    if isinstance(A, Scaled):
        return A.c == B.c and _same(A.base, B.base)
    if isinstance(A, Kron):
        return len(A.factors) == len(B.factors) and all(
            _same(a, b) for a, b in zip(A.factors, B.factors)
        )
    return False


def _merge(items):
    """Combine measurements of the same strategy into their inverse-variance weighted mean."""
    groups = []
    for A, y, std in items:
        for g in groups:
            if _same(g[0], A):
                g[1].append(y)
                g[2].append(std)
                break
        else:
            groups.append((A, [y], [std]))
    out = []
    for A, ys, stds in groups:
        w = np.array([1.0 / s**2 for s in stds])
        y = sum(wi * yi for wi, yi in zip(w, ys)) / w.sum()
        out.append((A, y, 1.0 / math.sqrt(w.sum())))
    return out


# -- x̂ = A⁺ Y for one strategy ---------------------------------------------------------------


#: Strategies whose gram pseudo-inverse is the spectral form over the marginal lattice.
_SPECTRAL = (MarginalStrategy, ResidualStrategy)


def solve(A, y, *, tol=LSMR_TOL, maxiter=None):
    """Minimum-norm least-squares solution A⁺ y (y a vector or a p×k block), fastest path."""
    if not isinstance(A, LinOp):
        raise TypeError(f"A must be a LinOp, got {type(A).__name__}")
    y = np.asarray(y, dtype=np.float64)
    if y.ndim not in (1, 2) or y.shape[0] != A.shape[0]:
        raise ValueError(
            f"shape mismatch: strategy of shape {A.shape} cannot be solved against y of shape {y.shape}"
        )
    out = _pinv_apply(A, y.reshape(A.shape[0], -1), tol, maxiter)
    return out[:, 0] if y.ndim == 1 else out


def _pinv_apply(A, Y, tol=LSMR_TOL, maxiter=None):
    if isinstance(A, Identity):
        return Y.copy()
    if isinstance(A, Scaled):
        if A.c == 0:
            return np.zeros((A.shape[1], Y.shape[1]))
        return _pinv_apply(A.base, Y, tol, maxiter) / A.c
    if isinstance(A, Tree):
        plan = tree_plan(A)
        if plan is not None:
            return _tree_solve(plan, Y)
    if isinstance(A, Haar):
        return _haar_solve(A, Y)
    if isinstance(A, Kron):
        return _kron_solve(A, Y, tol, maxiter)
    if isinstance(A, _SPECTRAL):  # (AᵀA)⁺Aᵀ Y with the lattice's spectral (AᵀA)⁺: no n×n matrix
        return A.gram_pinv()[0].matmat(A.rmatmat(Y))
    if isinstance(A, Dense) and A.shape[0] == A.shape[1]:
        out = _square_solve(A.matrix, Y)
        if out is not None:
            return out
    return _generic([A], [Y], [1.0], tol, maxiter)


def _square_solve(a, Y):
    """A⁻¹Y by LU for a well-conditioned square A; None when (nearly) singular."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", sla.LinAlgWarning)
        try:
            lu = sla.lu_factor(a, check_finite=False)
        except (sla.LinAlgError, sla.LinAlgWarning):
            return None
    # LAPACK's reciprocal condition estimate (1-norm) of the LU factors
    gecon = sla.get_lapack_funcs("gecon", (lu[0],))
    rcond, info = gecon(lu[0], np.abs(a).sum(0).max(), norm="1")
    if info != 0 or not rcond > 1e-10:
        return None
    return sla.lu_solve(lu, Y, check_finite=False)


# -- trees: two passes (Hay et al. 2010) ---------------------------------------------------------


class _TreePlan:
    """Levels of a tree grouped by parent, the leaf → cell map; None from tree_plan if invalid."""

    __slots__ = ("n", "levels", "leaves", "cells", "size")

    def __init__(self, n, levels, leaves, cells, size):
        self.n, self.levels, self.leaves, self.cells, self.size = n, levels, leaves, cells, size


def tree_plan(T):
    """Check that T's rows form a tree whose leaves are the n cells, and group it by level.

    Returns None (so callers fall back to the generic path) when ``parent`` is not a tree
    or a node's interval is not the disjoint union of its children's intervals. The result
    is cached per Tree object (keyed weakly, checked against its arrays).
    """
    key = (id(T.parent), id(T._lo) if hasattr(T, "_lo") else None, T.shape)
    hit = _PLANS.get(T)
    if hit is not None and hit[0] == key:
        return hit[1]
    plan = _tree_plan(T)
    try:
        _PLANS[T] = (key, plan)
    except TypeError:  # not weak-referenceable
        pass
    return plan


_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _tree_plan(T):
    N, n = T.shape
    parent = np.asarray(T.parent)
    if parent.shape != (N,) or (N and (parent.min() < -1 or parent.max() >= N)):
        return None
    depth = tree_depths(parent)
    if depth is None:
        return None
    lo, hi = T.bounds()
    child = parent >= 0
    has_child = np.bincount(parent[child], minlength=N) > 0
    leaves = np.flatnonzero(~has_child)
    if leaves.size != n or np.any(lo[leaves] != hi[leaves]):
        return None
    cells = lo[leaves]
    if np.any(np.bincount(cells, minlength=n) != 1):
        return None
    # children of each node, sorted by their left end, must tile the node's interval
    kids = np.flatnonzero(child)
    pk, lk, dk = parent[kids], lo[kids], depth[kids]
    # breadth-first trees (hierarchical()) are already sorted: skip the O(N log N) sorts
    if np.all((pk[1:] > pk[:-1]) | ((pk[1:] == pk[:-1]) & (lk[1:] > lk[:-1]))):
        order = kids
    else:
        order = kids[np.lexsort((lk, pk))]
    par = parent[order]
    first = np.r_[True, par[1:] != par[:-1]] if order.size else np.zeros(0, bool)
    last = np.r_[par[1:] != par[:-1], True] if order.size else np.zeros(0, bool)
    if order.size:
        if np.any(lo[order[first]] != lo[par[first]]) or np.any(hi[order[last]] != hi[par[last]]):
            return None
        inner = ~first
        if np.any(lo[order[inner]] != hi[order[np.flatnonzero(inner) - 1]] + 1):
            return None
    levels = []
    if np.all((dk[1:] > dk[:-1]) | ((dk[1:] == dk[:-1]) & (pk[1:] >= pk[:-1]))):
        by_depth = kids
    else:
        by_depth = kids[np.lexsort((pk, dk))]
    dsort = depth[by_depth]
    for d in range(int(dsort.max()) if dsort.size else 0, 0, -1):
        a, b = np.searchsorted(dsort, [d, d + 1])
        seg = by_depth[a:b]
        p = parent[seg]
        starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])
        levels.append((seg, starts, p[starts]))
    return _TreePlan(n, levels, leaves, cells, N)


def _tree_solve(plan, Y, node_var=None):
    """x̂ = T⁺Y for a tree with independent per-node noise variances (default all equal).

    Bottom-up: z_v = (y_v·S_V + S_z·v_v)/(S_V + v_v), V_v = v_v·S_V/(v_v + S_V) with S_z, S_V
    the sums over the children of their z and V. Top-down: x̂_c = z_c + V_c/S_V·(x̂_p − S_z).
    This is the generalised least-squares (BLUE) solution (Hay et al. 2010, Sec. 4).
    """
    N, k = plan.size, Y.shape[1]
    var = np.ones(N) if node_var is None else np.asarray(node_var, dtype=np.float64)
    z = Y.copy()
    V = var.copy()
    sum_z = np.zeros((N, k))
    sum_v = np.ones(N)
    for seg, starts, parents in plan.levels:  # deepest level first
        sz = np.add.reduceat(z[seg], starts, axis=0)
        sv = np.add.reduceat(V[seg], starts)
        own = var[parents]
        z[parents] = (Y[parents] * sv[:, None] + sz * own[:, None]) / (sv + own)[:, None]
        V[parents] = own * sv / (own + sv)
        sum_z[parents], sum_v[parents] = sz, sv
    est = z  # roots keep their bottom-up estimate; refine every other node top-down
    for seg, starts, parents in reversed(plan.levels):  # shallowest level first
        counts = np.diff(np.r_[starts, seg.size])
        par = np.repeat(parents, counts)
        est[seg] = z[seg] + (V[seg] / sum_v[par])[:, None] * (est[par] - sum_z[par])
    out = np.empty((plan.n, k))
    out[plan.cells] = est[plan.leaves]
    return out


# -- Haar: split block sums top-down --------------------------------------------------------------


def _haar_solve(A, Y):
    """A⁻¹Y for the Haar matrix (:class:`matmech.strategies.Haar`, any n): the total, then per
    dyadic level the block sums split top-down, left = (sum + detail)/2, right = (sum − detail)/2;
    a block without a right half passes its sum to its left half. O(n) after the levels."""
    n, k = A.n, Y.shape[1]
    sums = Y[0:1]
    r = 1
    for s, kept in A.levels:
        blocks = -(-n // (s // 2))  # blocks of size s/2 below
        nxt = np.empty((blocks, k))
        d = Y[r : r + kept]
        nxt[0 : 2 * kept : 2] = (sums[:kept] + d) / 2.0
        nxt[1 : 2 * kept : 2] = (sums[:kept] - d) / 2.0
        if 2 * kept < blocks:  # the last block at this level has no right half
            nxt[2 * kept :] = sums[kept:]
        sums, r = nxt, r + kept
    return sums


# -- Kronecker: one attribute at a time --------------------------------------------------------------


def _kron_solve(A, Y, tol, maxiter):
    """(⊗Aᵢ)⁺ Y = (⊗Aᵢ⁺) Y, applying Aᵢ⁺ along attribute i (cells row-major, last fastest)."""
    k = Y.shape[1]
    t = Y.reshape(*[f.shape[0] for f in A.factors], k)
    for axis, f in enumerate(A.factors):
        t = np.moveaxis(t, axis, 0)
        rest = t.shape[1:]
        flat = _pinv_apply(f, np.ascontiguousarray(t).reshape(t.shape[0], -1), tol, maxiter)
        t = np.moveaxis(flat.reshape(f.shape[1], *rest), 0, axis)
    return t.reshape(A.shape[1], k)


# -- generic: dense normal equations or LSMR --------------------------------------------------------


def _generic(As, Ys, stds, tol, maxiter):
    """argmin Σ ‖(Aᵢx − Yᵢ)/σᵢ‖² (minimum norm), column by column of the blocks Yᵢ."""
    n = As[0].shape[1]
    w = np.array([1.0 / s for s in stds])
    B = As[0] if len(As) == 1 and w[0] == 1.0 else VStack(As, weights=w)
    b = np.vstack([wi * Yi for wi, Yi in zip(w, Ys)])
    split = split_diagonal(B)
    if split is not None:
        out = woodbury_solve(*split, B.rmatvec(b))
        if out is not None:
            return out
    if n <= DENSE_SOLVE_N:
        return _dense_normal(B, b)
    return _lsmr(B, b, tol, maxiter)


def _dense_normal(B, b):
    gram = B.gram().dense(max_entries=DENSE_SOLVE_N**2)
    gram = 0.5 * (gram + gram.T)
    rhs = B.rmatvec(b)
    try:
        L = sla.cholesky(gram, lower=True, check_finite=False)
        d = np.diag(L) ** 2
        if d.min() > 1e-10 * d.max():
            return sla.cho_solve((L, True), rhs, check_finite=False)
    except sla.LinAlgError:
        pass
    lam, vec = np.linalg.eigh(gram)
    keep = lam > 1e-10 * max(lam.max(), 1e-300)
    return vec[:, keep] @ ((vec[:, keep].T @ rhs) / lam[keep][:, None])


def _lsmr(B, b, tol, maxiter):
    from scipy.sparse.linalg import aslinearoperator, lsmr  # imported when needed (import time)

    op = aslinearoperator(B)
    out = np.empty((B.shape[1], b.shape[1]))
    for j in range(b.shape[1]):
        res = lsmr(op, b[:, j], atol=tol, btol=tol, maxiter=maxiter)
        if res[1] == 7:
            warnings.warn(
                f"LSMR stopped at the iteration limit ({res[2]} iterations) with residual norm {res[3]:.3g}; "
                "the estimate may be inaccurate (raise maxiter or use a structured strategy)",
                RuntimeWarning,
                stacklevel=3,
            )
        out[:, j] = res[0]
    return out
