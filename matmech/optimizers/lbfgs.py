"""L-BFGS for smooth objectives over the non-negative orthant (x ≥ 0).

:func:`projected_lbfgs` is used by the p-Identity optimiser (:mod:`matmech.optimizers.pure`),
whose variables are Θ ≥ 0; :func:`lbfgsb_nonneg` is scipy's L-BFGS-B (Byrd, Lu, Nocedal & Zhu,
SIAM J. Sci. Comput. 1995) on x ≥ 0, used by the marginal-lattice optimisers
(:mod:`matmech.optimizers.general_marginals`); :func:`armijo_lbfgs` is plain unconstrained L-BFGS
for the joint L2 descent of :mod:`matmech.optimizers.unions`.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator

import numpy as np
from matmech.linalg.lazy import sla


#: Iterations over which the relative decrease is measured for the stopping rule.
WINDOW = 10


def projected_lbfgs(fun, x0, *, maxiter=300, memory=6, ftol=1e-10, deadline=None, callback=None):
    """Minimise f over x ≥ 0 by projected L-BFGS; ``fun(x)`` returns (f, ∇f) (∇f may be reused).

    The two-loop recursion (Nocedal & Wright, Alg. 7.4) acts on the free variables
    (x > 0 or ∂f/∂x < 0); the step is projected onto x ≥ 0 and backtracked until the
    Armijo condition holds along the projected path (Bertsekas 1982). All vectors live in
    preallocated buffers: at p·n ≈ 10⁵ variables scipy's L-BFGS-B spends more per
    iteration (≈1.5 ms) than the p-Identity objective itself. Stops when the last 10
    iterations lowered f by less than 10·``ftol``·|f|, after ``maxiter`` iterations, or at ``deadline``
    (a ``time.perf_counter()`` value). Returns (x, f, iterations, evaluations).
    """
    axpy, dot = sla.blas.daxpy, np.dot
    isfinite = math.isfinite
    x = np.maximum(np.asarray(x0, dtype=np.float64), 0.0)
    size = x.size
    f, g = fun(x)
    g = np.array(g, dtype=np.float64)
    S, Y = np.zeros((memory, size)), np.zeros((memory, size))
    # row views and Python-float coefficients: the same IEEE operations as indexing S[j]
    # and a numpy rho/alpha, without their per-call overhead (which dominated at small sizes)
    s_rows, y_rows = list(S), list(Y)
    rho, alpha = [0.0] * memory, [0.0] * memory
    q, xn, step, metric = np.empty(size), np.empty(size), np.empty(size), np.empty(size)
    # the free set as 0.0 / 1.0: multiplying by a float mask is 2-4× faster than by a bool
    # one (whose cast runs per element), with the same products
    pos, neg, free = np.empty(size, dtype=bool), np.empty(size, dtype=bool), np.empty(size)
    stored, head, evaluations, it, trail = 0, 0, 1, 0, [f]
    for it in range(1, maxiter + 1):
        np.greater(x, 0.0, out=pos)
        np.less(g, 0.0, out=neg)
        np.logical_or(pos, neg, out=free)
        np.multiply(g, free, out=q)
        order = [(head - 1 - k) % memory for k in range(stored)]
        for j in order:
            a = rho[j] * dot(s_rows[j], q)
            alpha[j] = a
            q = axpy(y_rows[j], q, a=-a)
        # initial inverse Hessian γ·diag(x + x̄): a multiplicative metric for x ≥ 0 (large
        # entries move more), which helps with rows of very different scale
        np.add(x, x.sum() / size + 1e-300, out=metric)  # x.sum() / size is x.mean()
        if stored:
            j = order[0]
            np.multiply(y_rows[j], metric, out=xn)
            q *= metric
            q *= 1.0 / (rho[j] * dot(y_rows[j], xn))  # sᵀy / yᵀ diag(metric) y
        else:
            q *= metric
            q /= max(math.sqrt(dot(q, q)), 1e-300)
        for j in reversed(order):
            beta = rho[j] * dot(y_rows[j], q)
            q = axpy(s_rows[j], q, a=alpha[j] - beta)
        q *= free
        slope = -dot(q, g)
        if not slope < 0:  # curvature pairs gone stale: restart from steepest descent
            stored = 0
            np.multiply(g, free, out=q)
            q *= metric
            q /= max(math.sqrt(dot(q, q)), 1e-300)
        t, accepted = 1.0, False
        for _ in range(40):
            np.multiply(q, -t, out=xn)
            xn += x
            np.maximum(xn, 0.0, out=xn)
            np.subtract(xn, x, out=step)
            fn, gn = fun(xn)
            evaluations += 1
            if isfinite(fn) and fn <= f + 1e-4 * dot(g, step):
                accepted = True
                break
            t *= 0.5
        if not accepted:
            break
        j = head
        sj, yj = s_rows[j], y_rows[j]
        sj[...] = step
        np.subtract(gn, g, out=yj)
        sy = dot(step, yj)
        if sy > 1e-12 * dot(yj, yj):
            rho[j] = 1.0 / sy
            head, stored = (head + 1) % memory, min(stored + 1, memory)
        else:  # pair rejected; its slot held the oldest pair when the memory was full
            stored = min(stored, memory - 1)
        x, xn = xn, x
        f = float(fn)
        g[...] = gn
        trail.append(f)
        if callback is not None:
            callback(f)
        if len(trail) > WINDOW and trail[-WINDOW - 1] - f <= ftol * WINDOW * max(abs(f), 1e-300):
            break
        if deadline is not None and time.perf_counter() > deadline:
            break
    return x, f, it, evaluations


#: The call signature of scipy's compiled L-BFGS-B step (scipy ≥ 1.15) that
#: :func:`lbfgsb_nonneg` drives directly; with any other, it calls ``scipy.optimize.minimize``.
_SETULB_SIGNATURE = (
    "setulb(m,x,l,u,nbd,f,g,factr,pgtol,wa,iwa,task,lsave,isave,dsave,maxls,ln_task)"
)


@functools.lru_cache(maxsize=1)
def _setulb():
    """scipy's compiled step when its signature is the expected one AND driving it on a small
    bounded quadratic gives exactly ``minimize``'s result (a guard against a scipy whose step
    keeps the signature but changes its task codes); otherwise None (use ``minimize``)."""
    from scipy.optimize import Bounds, _lbfgsb, minimize

    fn = getattr(_lbfgsb, "setulb", None)
    doc = (getattr(fn, "__doc__", None) or "").strip().splitlines()
    if not (doc and doc[0].strip() == _SETULB_SIGNATURE):
        return None
    H = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.5], [0.0, 0.5, 2.0]])
    b = np.array([1.0, -2.0, 0.5])

    def quad(x):
        return 0.5 * x @ H @ x - b @ x, H @ x - b

    opts = dict(maxiter=50, ftol=1e-14, gtol=1e-10)
    try:
        mine, _ = _drive_setulb(fn, quad, np.ones(3), maxcor=10, maxls=20, maxfun=15000, **opts)
    except Exception:  # noqa: BLE001 - any failure of the private routine means: do not use it
        return None
    ref = minimize(
        quad, np.ones(3), jac=True, method="L-BFGS-B", bounds=Bounds(0.0, np.inf), options=opts
    ).x
    return fn if np.array_equal(mine, ref) else None


def lbfgsb_nonneg(fun, x0, *, maxiter, ftol, gtol, maxcor=10, maxls=20, maxfun=15000):
    """``scipy.optimize.minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=Bounds(0, inf),
    options={"maxiter", "ftol", "gtol"})`` → (x, f), with the same iterates and result.

    scipy's wrapper spends O(n) Python work per call on the bounds (two conversions and a
    per-variable loop: about 0.1 s at the 2^14 lattice weights of 14 attributes, called ~100
    times) and a few tens of µs per iteration; here the compiled step ``setulb`` is driven by
    the same loop as ``scipy.optimize._lbfgsb_py._minimize_lbfgsb`` (every bound code 1 = lower
    bound 0, evaluations cached at an unchanged x as ``ScalarFunction`` does, the same
    ``maxiter`` / ``maxfun`` stops). With another scipy version's step signature it falls back
    to ``minimize`` itself. ``fun(x)`` returns (f, ∇f)."""
    setulb = _setulb()
    x0 = np.asarray(x0, dtype=np.float64).ravel()
    if setulb is None:  # another scipy: its own wrapper
        from scipy.optimize import Bounds, minimize

        res = minimize(
            fun,
            x0,
            jac=True,
            method="L-BFGS-B",
            bounds=Bounds(0.0, np.inf),
            options={
                "maxiter": maxiter,
                "ftol": ftol,
                "gtol": gtol,
                "maxcor": maxcor,
                "maxls": maxls,
                "maxfun": maxfun,
            },
        )
        return res.x, res.fun
    return _drive_setulb(
        setulb,
        fun,
        x0,
        maxiter=maxiter,
        ftol=ftol,
        gtol=gtol,
        maxcor=maxcor,
        maxls=maxls,
        maxfun=maxfun,
    )


def _drive_setulb(setulb, fun, x0, *, maxiter, ftol, gtol, maxcor, maxls, maxfun):
    """The loop of ``scipy.optimize._lbfgsb_py._minimize_lbfgsb`` around ``setulb`` (x ≥ 0)."""
    n = x0.size
    x = np.array(np.clip(x0, 0.0, np.inf), dtype=np.float64)
    cache = {"x": x.copy(), "nfev": 0}

    def evaluate():
        fx, gx = fun(np.copy(cache["x"]))
        cache["nfev"] += 1
        if not np.isscalar(fx):
            fx = np.asarray(fx).item()
        cache["f"], cache["g"] = fx, np.atleast_1d(gx)

    evaluate()  # scipy's ScalarFunction evaluates at x0 when it is built
    m = maxcor
    factr = ftol / np.finfo(float).eps
    nbd = np.ones(n, np.int32)  # lower bound only
    low_bnd, upper_bnd = np.zeros(n), np.zeros(n)
    f = np.array(0.0, dtype=np.float64)
    g = np.zeros((n,), dtype=np.float64)
    wa = np.zeros(2 * m * n + 5 * n + 11 * m * m + 8 * m, np.float64)
    iwa = np.zeros(3 * n, dtype=np.int32)
    task, ln_task = np.zeros(2, dtype=np.int32), np.zeros(2, dtype=np.int32)
    lsave, isave, dsave = (
        np.zeros(4, dtype=np.int32),
        np.zeros(44, dtype=np.int32),
        np.zeros(29, dtype=np.float64),
    )
    iterations = 0
    while True:
        g = g.astype(np.float64)
        setulb(
            m,
            x,
            low_bnd,
            upper_bnd,
            nbd,
            f,
            g,
            factr,
            gtol,
            wa,
            iwa,
            task,
            lsave,
            isave,
            dsave,
            maxls,
            ln_task,
        )
        if task[0] == 3:  # f and ∇f at x, cached while x is unchanged
            if not np.array_equal(x, cache["x"]):
                cache["x"] = x.astype(np.float64)
                evaluate()
            f, g = cache["f"], cache["g"]
        elif task[0] == 1:  # a new iterate
            iterations += 1
            if iterations >= maxiter:
                task[0], task[1] = 5, 504
            elif cache["nfev"] > maxfun:
                task[0], task[1] = 5, 502
        else:
            break
    return x, f


def armijo_lbfgs_steps(
    fun: Callable, x0: np.ndarray, *, memory: int = 10
) -> Iterator[tuple[np.ndarray, float]]:
    """The iterates of :func:`armijo_lbfgs` one at a time: yields (x, f) at the start and after
    every accepted iteration (x is never written to afterwards), and ends when no step is
    accepted or f(x0) is not finite. A caller can advance several descents in lockstep and
    stop any of them after any iteration (:func:`matmech.optimizers.unions.refine_general_l2`)."""
    x = np.array(x0, dtype=np.float64)
    f, g = fun(x)
    yield x, f
    if not math.isfinite(f):
        return
    ss: list = []
    ys: list = []
    yss: list = []  # the pairs' y·s, computed once per pair
    axpy = sla.blas.daxpy  # q += a·v in place, one pass (the two-loop is memory-bound)
    while True:
        q = g.copy()
        alphas = []
        for s, y, ys_ in zip(reversed(ss), reversed(ys), reversed(yss)):
            a = float(s @ q) / ys_
            alphas.append(a)
            q = axpy(y, q, a=-a)
        if ss:
            q *= float(ss[-1] @ ys[-1]) / float(ys[-1] @ ys[-1])
        for (s, y, ys_), a in zip(zip(ss, ys, yss), reversed(alphas)):
            q = axpy(s, q, a=a - float(y @ q) / ys_)
        d = -q
        slope = float(g @ d)
        if slope >= 0:
            d, slope = -g, -float(g @ g)
            ss, ys, yss = [], [], []
        t, accepted = 1.0, False
        for _ in range(40):
            xn = x + t * d
            fn, gn = fun(xn)
            if math.isfinite(fn) and fn <= f + 1e-4 * t * slope:
                accepted = True
                break
            t *= 0.5
        if not accepted:
            return
        s, y = xn - x, gn - g
        if float(s @ y) > 1e-300:
            ss.append(s)
            ys.append(y)
            yss.append(float(y @ s))
            if len(ss) > memory:
                ss.pop(0)
                ys.pop(0)
                yss.pop(0)
        x, f, g = xn, fn, gn
        yield x, f


def stalled(hist: list, ftol: float) -> bool:
    """The stopping rule of :func:`armijo_lbfgs` on the values so far (start first): the last
    ten iterations lowered f by at most ``ftol``·|f|."""
    return len(hist) > WINDOW and hist[-WINDOW - 1] - hist[-1] <= ftol * abs(hist[-1])


def armijo_lbfgs(
    fun: Callable, x0: np.ndarray, *, maxiter: int, memory: int = 10, ftol: float = 1e-11
) -> tuple[np.ndarray, float]:
    """Unconstrained L-BFGS with Armijo backtracking that treats a non-finite value as a step
    too long (the joint L2 descent of :mod:`matmech.optimizers.unions`, whose error is +inf
    where the strategy stops answering W). Stops when ten iterations lowered f by at most
    ``ftol``·|f|, after ``maxiter`` iterations, or when no step is accepted. → (x, f)."""
    hist: list = []
    for x, f in armijo_lbfgs_steps(fun, x0, memory=memory):
        hist.append(f)
        if len(hist) > maxiter or stalled(hist, ftol):
            break
    return x, f
