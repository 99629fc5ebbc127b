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

import functools
import math
import numbers
import warnings

import numpy as np
from matmech.linalg.lazy import sla

from matmech.error import measured_variances
from matmech.linalg.answers import Answers
from matmech.linalg.gls import cell_gls, precision, psd_solve
from matmech.linalg.linop import Identity, LinOp, VStack, as_linop
from matmech.linalg.structured import split_diagonal, woodbury_solve
from matmech.linalg.tree_solve import haar_solve as _haar_solve
from matmech.linalg.tree_solve import tree_plan
from matmech.linalg.tree_solve import tree_solve as _tree_solve
from matmech.privacy.measure import Measurement
from matmech.strategies import Haar, Tree
from matmech.optimizers.marginal_lattice import MarginalStrategy, ResidualStrategy


#: Largest number of cells for which the generic path factorises the normal equations densely.
DENSE_SOLVE_N = 4096
#: Default LSMR tolerances (atol = btol) for the large generic path.
LSMR_TOL = 1e-10
#: Largest number of cells of the dense GLS of records with per-row or correlated noise.
MAX_DENSE_GLS_N = 4096


# -- the estimator over measurement records ----------------------------------------------------


def _record_parts(rec):
    """(query over the cells, values, per-row variances, common variance) of a record:
    a :class:`matmech.measurements.record.MeasurementRecord` or anything with the same fields."""
    on_cells = getattr(rec, "on_cells", None)
    query = on_cells() if on_cells is not None else rec.query
    if not isinstance(query, LinOp):
        raise TypeError(f"a record's query must be a LinOp, got {type(query).__name__}")
    values = np.asarray(rec.values, dtype=np.float64)
    var = np.broadcast_to(np.asarray(rec.variance, dtype=np.float64), values.shape)
    if values.ndim != 1 or values.shape[0] != query.shape[0]:
        raise ValueError(f"a record has {values.shape} values for a query of {query.shape[0]} rows")
    if not (np.all(np.isfinite(var)) and np.all(var > 0)):
        raise ValueError("a record's noise variances must be positive and finite")
    return query, values, var, float(getattr(rec, "common_variance", 0.0))


def estimate(
    records,
    workload: LinOp | None = None,
    *,
    nonneg: bool = False,
    variances: bool = True,
    tol: float = LSMR_TOL,
    maxiter: int | None = None,
) -> Answers:
    """The generalised least squares of measurement records → :class:`~matmech.linalg.answers.Answers`.

    Every record says ``values = Q x + e`` with Cov(e) = diag(variance) + common_variance·11ᵀ
    (:class:`matmech.measurements.record.MeasurementRecord`; ``Q`` over the cells of x, or composed with
    the marginalisation on its ``attributes``). The estimate is x̂ = J⁺ Σᵢ Qᵢᵀ Pᵢ yᵢ,
    J = Σᵢ Qᵢᵀ Pᵢ Qᵢ (Aitken 1935; Li et al., PODS 2010), the minimum-norm solution when J
    is singular; with ``workload`` W the answers W x̂ with covariance W J⁺ Wᵀ.

    Records whose noise is i.i.d. per record (one variance, no common offset, as every
    strategy measurement) take the structured paths of :func:`solve` (module notes) and the
    structured variances of :func:`matmech.error.measured_variances`; records with per-row or
    correlated noise (a selection's free gaps) the dense GLS
    (:func:`matmech.linalg.gls.cell_gls`, at most :data:`MAX_DENSE_GLS_N` cells).

    Parameters
    ----------
    records : sequence of MeasurementRecord
        The noisy measurements of one histogram.
    workload : LinOp, optional
        W: return the answers W x̂ instead of x̂.
    nonneg : bool, default False
        Clip negative estimates at 0 (biased post-processing; the variances no longer
        describe them).
    variances : bool, default True
        Compute the variances (False: the values alone, as :func:`least_squares`).
    tol, maxiter
        The LSMR path's tolerance and iteration cap (large n without structure).

    Returns
    -------
    Answers
        ``values`` (x̂ or W x̂), ``variances`` (None when not asked for), ``method``; the
        dense GLS forms the covariance on demand (``cov()``, its memory checked first).

    Raises
    ------
    ValueError
        No record, records over different domains, a row of W the records do not
        determine, or a dense GLS beyond its size limit.
    TypeError
        A record without a LinOp query.

    Examples
    --------
    >>> from matmech import strategies as S, workloads as W
    >>> from matmech.measurements.record import strategy_record
    >>> m = measure([1, 2, 0, 1], S.identity(4), 1.0, rng=np.random.default_rng(0))
    >>> a = estimate([strategy_record(m)], W.prefix(4))
    >>> bool(np.allclose(a.variances, m.variance * np.arange(1, 5)))
    True
    """
    parts = [_record_parts(r) for r in records]
    if not parts:
        raise ValueError("estimate needs at least one measurement record")
    n = parts[0][0].shape[1]
    for i, p in enumerate(parts):
        if p[0].shape[1] != n:
            raise ValueError(
                f"records cover different domains: record 0 has {n} cells, record {i} has "
                f"{p[0].shape[1]}"
            )
    W = None if workload is None else as_linop(workload)
    if W is not None and W.shape[1] != n:
        raise ValueError(f"the workload has {W.shape[1]} columns but the records {n} cells")
    if not isinstance(nonneg, (bool, np.bool_)):
        raise TypeError(f"nonneg must be True or False, got {nonneg!r}")
    _check_tol(tol, maxiter)
    iid = all(c == 0 and np.all(v == v[0]) for _, y, v, c in parts if y.size)
    if iid:
        out = _structured(
            [(Q, y, float(v[0]) if v.size else 1.0) for Q, y, v, _ in parts],
            W,
            variances,
            tol,
            maxiter,
        )
    else:
        if n > MAX_DENSE_GLS_N:
            raise ValueError(
                f"records with per-row or correlated noise are combined densely; {n:,} cells "
                f"exceed the limit {MAX_DENSE_GLS_N:,}"
            )
        dense = [(Q.dense(), y, precision(v, c)) for Q, y, v, c in parts]
        out = cell_gls(dense, None if W is None else W.dense(), variances=variances)
    if nonneg:
        vals = np.clip(out.values, 0.0, None)
        out = Answers(vals, out.variances, out.covariance, out.method + ", clipped at 0")
    return out


def _structured(items, W, variances, tol, maxiter):
    """x̂ (or W x̂) of i.i.d.-noise records by the structured paths, with their variances."""
    xhat, gram_op, unit = _structured_solve(items, tol, maxiter)
    values = xhat if W is None else W.matvec(xhat)
    var = None
    if variances:
        rows = Identity(xhat.shape[0]) if W is None else W
        var = measured_variances(rows, gram_op, unit)
    return Answers(values, var, method="least squares (structured)")


def _structured_solve(items, tol, maxiter):
    """(x̂, the stacked strategy's gram operator, its unit variance) of i.i.d.-noise records
    (``items``: (strategy, values, noise variance))."""
    groups = _merge(items)
    if len(groups) == 1:
        A, y, std = groups[0]
        xhat = solve(A, y, tol=tol, maxiter=maxiter)
        gram_op, unit = A, std**2
    else:
        xhat = _generic(
            [g[0] for g in groups],
            [g[1][:, None] for g in groups],
            [g[2] for g in groups],
            tol,
            maxiter,
        )[:, 0]
        gram_op, unit = VStack([g[0] for g in groups], weights=[1.0 / g[2] for g in groups]), 1.0
    return xhat, gram_op, unit


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
    The values of :func:`estimate` over the measurements' records.

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
    items = [(m.strategy, np.asarray(m.y, dtype=np.float64), m.variance) for m in measurements]
    xhat = np.array(_structured_solve(items, tol, maxiter)[0], dtype=np.float64)  # own copy
    if nonneg:
        np.clip(xhat, 0.0, None, out=xhat)
    return xhat


def _check_tol(tol, maxiter):
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not 0 < float(tol) < 1:
        raise ValueError(f"tol must be a number in (0, 1), got {tol!r}")
    if maxiter is not None and (
        isinstance(maxiter, bool) or not isinstance(maxiter, numbers.Integral) or maxiter < 1
    ):
        raise ValueError(f"maxiter must be a positive integer or None, got {maxiter!r}")


# -- merging measurements of the same strategy ----------------------------------------------


@functools.singledispatch
def _same_kind(A, B):
    """Hook: whether A and B (same type and shape) are the same matrix, for strategy classes
    outside :mod:`matmech.linalg`; the default: unknown (None)."""
    return None


@_same_kind.register(Haar)
def _(A, B):
    return True  # same type and shape: the same matrix


@_same_kind.register(Tree)
def _(A, B):
    la, ha = A.bounds()
    lb, hb = B.bounds()
    return np.array_equal(la, lb) and np.array_equal(ha, hb) and np.array_equal(A.parent, B.parent)


def _same(A, B):
    """Whether two operators are the same matrix (cheap structural comparison through the
    operator hooks; False if unsure)."""
    if A is B:
        return True
    if type(A) is not type(B) or A.shape != B.shape:
        return False
    kind = _same_kind(A, B)
    if kind is not None:
        return bool(kind)
    if getattr(A, "is_identity", False):
        return True
    fa, fb = getattr(A, "kron_factors", None), getattr(B, "kron_factors", None)
    if fa is not None and fb is not None:
        fa, fb = fa(), fb()
        return len(fa) == len(fb) and all(_same(a, b) for a, b in zip(fa, fb))
    ta, tb = A.linear_terms(), B.linear_terms()
    if ta is not None and tb is not None:
        return len(ta) == len(tb) == 1 and ta[0][0] == tb[0][0] and _same(ta[0][1], tb[0][1])
    if getattr(A, "bounds", None) is not None and A.row_blocks() is None:  # interval rows
        la, ha = A.bounds()
        lb, hb = B.bounds()
        return np.array_equal(la, lb) and np.array_equal(ha, hb)
    ea = getattr(A, "matrix", None)
    eb = getattr(B, "matrix", None)
    if ea is not None and eb is not None:
        if hasattr(ea, "nnz"):
            return (ea != eb).nnz == 0
        return np.array_equal(ea, eb)
    return False


def _merge(items):
    """Combine measurements (strategy, values, noise variance) of the same strategy into their
    inverse-variance weighted mean → (strategy, mean, its noise std)."""
    groups: list[tuple[LinOp, list[np.ndarray], list[float]]] = []
    for A, y, var in items:
        for g in groups:
            if _same(g[0], A):
                g[1].append(y)
                g[2].append(var)
                break
        else:
            groups.append((A, [y], [var]))
    out = []
    for A, ys, vs in groups:
        w = np.array([1.0 / v for v in vs])
        y = sum(wi * yi for wi, yi in zip(w, ys)) / w.sum()
        out.append((A, y, 1.0 / math.sqrt(w.sum())))
    return out


# -- x̂ = A⁺ Y for one strategy ---------------------------------------------------------------


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


@functools.singledispatch
def _strategy_solve(A, Y, tol, maxiter):
    """Hook: A⁺Y by a strategy family's own fast path (registered per class below); the
    default None means "no such path" (the generic one is taken)."""
    return None


@_strategy_solve.register(Tree)
def _(A, Y, tol, maxiter):
    plan = tree_plan(A)
    return None if plan is None else _tree_solve(plan, Y)


@_strategy_solve.register(Haar)
def _(A, Y, tol, maxiter):
    return _haar_solve(A, Y)


@_strategy_solve.register(MarginalStrategy)
@_strategy_solve.register(ResidualStrategy)
def _(A, Y, tol, maxiter):
    # (AᵀA)⁺Aᵀ Y with the lattice's spectral (AᵀA)⁺: no n×n matrix
    return A.gram_pinv()[0].matmat(A.rmatmat(Y))


def _pinv_apply(A, Y, tol=LSMR_TOL, maxiter=None):
    """A⁺Y through the operator hooks, in this order: the identity (``is_identity``), a
    scaling (``linear_terms`` of one term), a strategy family's own path
    (:func:`_strategy_solve`), a Kronecker product (``kron_factors``, one attribute at a
    time), a square non-singular explicit matrix (LU), else the generic path."""
    if getattr(A, "is_identity", False):
        return Y.copy()
    terms = A.linear_terms()
    if terms is not None and len(terms) == 1:
        c, base = terms[0]
        if c == 0:
            return np.zeros((A.shape[1], Y.shape[1]))
        return _pinv_apply(base, Y, tol, maxiter) / c
    out = _strategy_solve(A, Y, tol, maxiter)
    if out is not None:
        return out
    factors = getattr(A, "kron_factors", None)
    if factors is not None:
        return _kron_solve(factors(), A.shape[1], Y, tol, maxiter)
    mat = getattr(A, "matrix", None)
    if isinstance(mat, np.ndarray) and A.shape[0] == A.shape[1]:
        out = _square_solve(mat, Y)
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


# -- Kronecker: one attribute at a time --------------------------------------------------------------


def _kron_solve(factors, n, Y, tol, maxiter):
    """(⊗Aᵢ)⁺ Y = (⊗Aᵢ⁺) Y, applying Aᵢ⁺ along attribute i (cells row-major, last fastest)."""
    k = Y.shape[1]
    t = Y.reshape(*[f.shape[0] for f in factors], k)
    for axis, f in enumerate(factors):
        t = np.moveaxis(t, axis, 0)
        rest = t.shape[1:]
        flat = _pinv_apply(f, np.ascontiguousarray(t).reshape(t.shape[0], -1), tol, maxiter)
        t = np.moveaxis(flat.reshape(f.shape[1], *rest), 0, axis)
    return t.reshape(n, k)


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
    """The normal equations BᵀB x = Bᵀb solved densely by the one PSD kernel
    (:func:`matmech.linalg.gls.psd_solve`, shared with the dense GLS of records)."""
    return psd_solve(B.gram().dense(max_entries=DENSE_SOLVE_N**2), B.rmatvec(b))


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
