"""Pure ε-DP strategy optimisation over the p-Identity family (McKenna et al., VLDB 2018).

Under pure ε the Laplace mechanism pays the L1 sensitivity, max_j ‖A e_j‖₁, which is not a
convex function of AᵀA: the L2 optimum is no guide (it is worse than the identity). HDMM's
p-Identity strategies A(Θ) = [I; Θ]·D with Θ ≥ 0 (p×n) and D = diag(1/(1 + 1ᵀΘ)) have every
column of L1 norm exactly 1, so sens₁ = 1 and the error is the smooth function
(HDMM §5.1, eq. 6)

    f(Θ) = trace(G̃ (I + ΘᵀΘ)⁻¹),   G̃ = D⁻¹ G D⁻¹,   G = WᵀW,

evaluated with the Woodbury identity (I + ΘᵀΘ)⁻¹ = I − Θᵀ(I_p + ΘΘᵀ)⁻¹Θ at O(p²n) cost
(plus p products with G, which are O(pn) for all-range and prefix grams through their
closed forms). A hierarchical strategy without its leaves' weights is a point of this
family (Θ = the rows of the internal nodes), so starting from the best hierarchy means the
optimum is never worse than it; from 1024 cells the hats on the b = 20 levels (fewer,
wider rows: :data:`WIDE_HAT_BRANCHING`) are a second start; HDMM's own OPT₀ start
(p = n/16 rows, Θ ~ U[0, 1): :func:`hdmm_theta`) is a start too (n ≤ 2048), so the result
is never worse than HDMM's start optimised with the same budget. Projected L-BFGS (:mod:`matmech.optimizers.lbfgs`) with the analytic
gradient of :func:`objective` does the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import math

import numpy as np

from matmech.optimizers.blas import blas_threads
from matmech.linalg.intervals import AllRange, Prefix
from matmech.optimizers.lbfgs import projected_lbfgs
from matmech.optimizers.multistart import lockstep_starts
from matmech.linalg.linop import check_size
from matmech.optimizers.gram import MAX_GRAM_N
from matmech.linalg.spectral import BlockSpectral
from matmech.error import expected_error
from matmech.validate import memory as check_memory
from matmech.strategies import hierarchical

from matmech.optimizers.pidentity import Objective, objective
from matmech.optimizers.pidentity_starts import (
    WEYL_STEP,
    QUADRATIC_FILL_MAX_N,
    hat_theta,
    hdmm_theta,
    quadratic_fill,
    tree_theta,
)


#: Largest domain for which the p-Identity optimiser runs (dense Θ is p×n, G products p·n²).
MAX_PIDENTITY_N = MAX_GRAM_N


#: Deterministic multistart of small 1-D factor fits (``fit_pidentity(quad_fills=...)``, used by
#: the Kronecker and generalised-marginal families up to :data:`QUAD_FILL_MAX_N` cells): the
#: p-Identity landscape of prefix(100) has a basin (trace 1767.57, one decaying "total" row
#: plus five bumps) that the hierarchy, HDMM-fill and quadratic-fill starts all miss (they stop
#: at 1773.4); U[0, 1) starts reach it about once in 50-100 tries. Continuing the quadratic
#: fill for 20 more blocks of p·n numbers reaches it deterministically (block 18), at about
#: 0.1 s per start at n = 100.
QUAD_FILL_STARTS = 20
QUAD_FILL_MAX_N = 128


def _fit_level_weights(gram, th, depth, iters=60):
    """Optimise one weight per tree level (Θ = Σ_ℓ w_ℓ Φ_ℓ) by L-BFGS-B; returns (w, f)."""
    from scipy.optimize import Bounds, minimize  # imported when needed (import time)

    levels = int(depth.max()) + 1
    obj = Objective(gram, th.shape[0])

    def fun(w):
        f, g = obj(th * w[depth][:, None])
        return f, np.bincount(depth, weights=(g * th).sum(1), minlength=levels)

    try:
        res = minimize(
            fun,
            np.ones(levels),
            jac=True,
            method="L-BFGS-B",
            bounds=Bounds(1e-6, np.inf),
            options={"maxiter": iters},
        )
        w = res.x if res.fun <= fun(np.ones(levels))[0] else np.ones(levels)
    except np.linalg.LinAlgError:  # a line search stepped to weights with a singular I + ΘΘᵀ
        w = np.ones(levels)
    return w, obj(th * w[depth][:, None], gradient=False)


# -- the optimiser -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PIdentityFit:
    """Outcome of :func:`fit_pidentity`: the best Θ, its objective, and every start's record."""

    theta: np.ndarray
    value: float
    init: str
    starts: tuple  # ((name, p, start value, final value, iterations), ...)
    evaluations: int


def block_energy(gram, s):
    """Σ_B 1_Bᵀ G 1_B over the aligned blocks B of s cells (s divides n)."""
    n = gram.n
    if gram.kind == "all_range":
        return gram.scale * AllRange(n).block_energy(s)
    if gram.kind == "prefix":
        return gram.scale * Prefix(n).block_energy(s)
    g = gram.dense().reshape(n // s, s, n // s, s)
    return float(np.einsum("aiaj->", g))


def weighted_tree_value(gram, sizes, weights, energies=None):
    """sens₁² · trace(G (AᵀA)⁻¹) of the hierarchy with leaves of weight 1 and the levels of
    block sizes ``sizes`` (each dividing the next and n) weighted by ``weights``, in closed
    form: AᵀA = I + Σ_ℓ w_ℓ² s_ℓ E_{s_ℓ} is block-spectral (:mod:`matmech.linalg.spectral`).
    ``energies``: an optional dict caching :func:`block_energy` by block size."""
    w = np.asarray(weights, dtype=np.float64)
    sizes = [1, *sizes]
    lam = np.cumsum(np.concatenate([[1.0], w * w * np.asarray(sizes[1:], dtype=np.float64)]))
    spec = BlockSpectral(gram.n, sizes, lam).pinv()
    cache = {} if energies is None else energies

    def energy(size):
        if size not in cache:
            cache[size] = block_energy(gram, size)
        return cache[size]

    return (1.0 + float(w.sum())) ** 2 * spec.trace_against(energy)


#: Smallest weight (relative to the leaves) of a non-root level in a tree start.
LEVEL_FLOOR = 0.05


def _level_weights(gram, b):
    """(weights by depth, value, regular) of the b-ary hierarchy with fitted level weights
    (root level included, weight ≥ 0), or None when it has no internal node. When the
    levels nest (``regular``: every block size divides the next and n) the closed form of
    :func:`weighted_tree_value` is used; otherwise the fit goes through the objective."""
    from scipy.optimize import Bounds, minimize  # imported when needed (import time)

    n = gram.n
    th, depth = tree_theta(n, b, True)
    if th.shape[0] == 0:
        return None
    sizes, s = [], b
    while s < n:
        sizes.append(s)
        s *= b
    levels = [*sizes, n]
    if all(levels[i + 1] % levels[i] == 0 for i in range(len(levels) - 1)):
        energies: dict = {}
        fun = lambda w: weighted_tree_value(gram, levels, w, energies)  # noqa: E731
        w0 = np.ones(len(levels))
        # every level below the root keeps a little weight (a zero row never revives in
        # the p-Identity descent and the level is worth more there than in the tree)
        lower = np.full(len(levels), LEVEL_FLOOR)
        lower[-1] = 0.0
        res = minimize(
            fun, w0, method="L-BFGS-B", bounds=Bounds(lower, np.inf), options={"maxiter": 200}
        )
        f0 = fun(w0)
        w, value = (res.x, float(res.fun)) if res.fun < f0 else (w0, float(f0))
        # depth 0 is the root; level ℓ of `levels` (small to large) is depth L−ℓ
        return w[::-1], value, True
    w, value = _fit_level_weights(gram, th, depth, iters=30)
    return w, value, False


def _tree_starts(gram, branchings, max_rows):
    """Yield (value, name, Θ) for each branching in order: the b-ary hierarchy with fitted
    level weights (:func:`_level_weights`), or, when better, the hats of :func:`hat_theta`
    (with the same weights when the levels nest, their own fitted weights otherwise). The
    value is never above the hierarchy's, so an optimisation from it never loses to it."""
    n = gram.n
    for b in branchings:
        if b >= n:
            continue
        box, depth = tree_theta(n, b, True)
        if not 0 < box.shape[0] <= max_rows + 1:
            continue
        fit = _level_weights(gram, b)
        if fit is None:
            continue
        w, value, regular = fit
        hat, hdepth = hat_theta(n, b, True)
        if regular:
            hw = w
        else:
            hw, _ = _fit_level_weights(gram, hat, hdepth, iters=15)
        keep = hw[hdepth] > 1e-9 * max(float(hw.max()), 1e-300)
        hat = (hat * hw[hdepth][:, None])[keep]
        hat_value = objective(hat, gram, gradient=False) if hat.shape[0] else np.inf
        if hat_value < value:
            yield hat_value, f"hats b={b} (fitted level weights)", hat
        else:
            keep = w[depth] > 1e-9 * max(float(w.max()), 1e-300)
            yield (
                value,
                f"hierarchical b={b} (fitted level weights)",
                (box * w[depth][:, None])[keep],
            )


def _lbfgs(gram, th0, maxiter, ftol, deadline, callback):
    shape = th0.shape
    obj = Objective(gram, shape[0])

    def fun(x):
        f, g = obj(x.reshape(shape))
        return f, g.reshape(-1)

    x, f, nit, _ = projected_lbfgs(
        fun, th0.ravel(), maxiter=maxiter, ftol=ftol, deadline=deadline, callback=callback
    )
    return x.reshape(shape).copy(), f, nit, obj.evaluations


#: Branchings of the hierarchies used as starting points, in order of preference (HDMM's
#: p = n/16 rows is the b = 16 tree without its upper levels). Not the advisor's candidate
#: family: these only seed the optimiser, a few good starts rather than every b scored.
START_BRANCHINGS = (16, 8, 32, 4, 64, 2)

#: From this many cells a second hat start joins the first hierarchy's: the hats on the
#: levels of b = 20 (:func:`hat_theta`; p ≈ n/20 finest rows, level weights fitted by
#: :func:`_fit_level_weights`, levels fitted to 0 dropped). Prefix n = 2048: after 40
#: iterations RMSE 10.778 against 10.984 from the b = 16 hats, 10.749 after 300 (b = 16:
#: 10.801; OPT₀ from HDMM's start: 10.750 after ~1,050 iterations); all ranges n = 4096: 14.204
#: against 14.278 after 40. Elsewhere b = 16 stays ahead (all ranges n ≤ 2048, prefix 4096),
#: so both run and the better continues.
WIDE_HAT_BRANCHING, WIDE_HAT_MIN_N = 20, 1024


def _wide_hat_start(gram, branching, max_rows):
    """(name, Θ) of the hats of :func:`hat_theta` on the levels of ``branching`` with fitted
    level weights, or None when they have no row or more than ``max_rows`` + 1 rows."""
    hat, depth = hat_theta(gram.n, branching, True)
    if not 0 < hat.shape[0] <= max_rows + 1:
        return None
    w, _ = _fit_level_weights(gram, hat, depth, iters=15)
    keep = w[depth] > 1e-9 * max(float(w.max()), 1e-300)
    if not keep.any():
        return None
    return f"hats b={branching} (fitted level weights)", (hat * w[depth][:, None])[keep]


def default_maxiter(n):
    """Iteration budget per start: 200 up to 512 cells, 40 above.

    From the hat starts the first tens of iterations do nearly all the work: at n = 1024
    (all ranges / prefix) 40 iterations reach RMSE 11.04 / 9.55 (HDMM: 11.09 / 9.59) in
    about 0.4 s on two cores, 200 iterations only 11.01 / 9.53. Above 1024 cells 40 are
    enough to rank the starts (the b = 16 and b = 20 hats, :data:`WIDE_HAT_BRANCHING`); the
    best then gets :func:`default_polish`. Pass ``maxiter`` for more.
    """
    return 200 if n <= 512 else 40


#: Largest n for which HDMM's own start (:func:`hdmm_theta`) is among the default starts. Up
#: to 2048 cells it costs at most about as much as the tree start (≤ ~1 s); above it, at
#: 80 iterations, it costs 12 s (n = 4096) to 70 s (n = 8192) on one core and ends far
#: above the hat start (a random Θ needs hundreds of iterations).
HDMM_START_MAX_N = 2048


def default_polish(n):
    """Extra iterations for the best start after all starts ran: 400 up to 512 cells, 160 up
    to 1024, 460 up to 2048, 80 above (:data:`ONE_D_POLISH` for a whole 1-D workload of
    ≤ 256 cells).

    At n = 512, all ranges, HDMM's start (the winner) reaches RMSE 9.5845 after the 200
    iterations of :func:`default_maxiter`, then 9.5793 / 9.5785 / 9.5754 after 200 / 400 /
    800 more (HDMM's OPT₀: 9.580); 400 cost about 0.6 s there (≤ 2 ms an iteration). At
    n = 1024, prefix, the hat start goes 9.545 → 9.528 with 160 more (+0.9 s; OPT₀ from
    HDMM's start after 3000 iterations: 9.533). At 2048, prefix, the b = 20 hats go
    10.778 → 10.744 with 460 more (OPT₀ from HDMM's start: 10.750 after ~1,050
    iterations, 10.740 after 3,000; as HDMM's code runs it, scipy L-BFGS-B with ftol 1e-4:
    10.836-11.061 over three seeds, 30-60 s each); all ranges 12.546 → 12.52. Above 2048
    cells an iteration costs 0.1-1 s: 80 more (4096: prefix 12.158 → 12.017, all ranges
    14.204 → 14.191). The stopping rule (10·ftol over 10 iterations) ends many polishes
    before the cap.
    """
    return 400 if n <= 512 else 160 if n <= 1024 else 460 if n <= 2048 else 80


#: Polish of a whole 1-D workload (``method="pidentity"``) up to :data:`ONE_D_POLISH_MAX_N`
#: cells, instead of :func:`default_polish` (the Kronecker factor fits keep the default: they
#: run many times). At n = 256, all ranges, 400 leave HDMM's start at RMSE 8.05440, above
#: OPT₀ run to convergence (8.0539); the stopping rule ends a 1000-iteration polish at 956
#: iterations with 8.05387 (< 1 ms an iteration there).
ONE_D_POLISH, ONE_D_POLISH_MAX_N = 1000, 256


#: Largest Σ_j s_j² G_jj / f accepted for a result: f is computed as that sum minus
#: ⟨Y, B⟩ (see :func:`objective`), so its rounding error is about 1e-16 times the ratio
#: times the condition of I + ΘΘᵀ; optimised strategies have ratios of 5-200 (n ≤ 1024).
#: Random starts (e.g. Θ ~ U[0, 1)) occasionally run away (Θ → 10⁷) into a region where
#: the cancellation makes f fall without bound, even below 0; such results are refused.
MAX_CANCELLATION = 1e6


def _reliable(th, f, gram):
    """Whether the value f of Θ is accurate (finite, positive, little cancellation)."""
    if not np.isfinite(f) or f <= 0:
        return False
    s = 1.0 + th.sum(0)
    return float(np.dot(s * s, gram.diag)) <= MAX_CANCELLATION * f


def _starts(
    gram, *, rng, restarts, branchings, max_rows, p_rand, hdmm_start, fill_starts, quad_fills=0
):
    """The named starting points of :func:`fit_pidentity`, in the order they are run."""
    n = gram.n
    # HDMM's start is the first draw from rng (before any random restart), so it is the
    # same Θ as hdmm_theta(n, rng=<a generator in the same state>)
    hdmm = hdmm_theta(n, rng=rng) if hdmm_start else None
    starts = []
    for _, name, th in _tree_starts(gram, branchings, max_rows):
        starts.append((name, th))
        if len(starts) >= (1 if rng is not None else restarts):
            break
    if not starts:  # no hierarchy fits: a flat start
        starts.append(("flat", np.full((p_rand, n), 1.0 / p_rand)))
    if n >= WIDE_HAT_MIN_N and n > WIDE_HAT_BRANCHING:
        wide = _wide_hat_start(gram, WIDE_HAT_BRANCHING, max_rows)
        if wide is not None and all(name != wide[0] for name, _ in starts):
            starts.append(wide)
    if hdmm is not None:
        starts.append((f"hdmm p={hdmm.shape[0]} U[0,1)", hdmm))
        if n <= QUADRATIC_FILL_MAX_N:
            starts.append(
                (f"hdmm-like quadratic fill p={hdmm.shape[0]}", quadratic_fill(n, hdmm.shape[0]))
            )
    if rng is not None:
        for r in range(restarts - 1):
            starts.append(
                (
                    f"random p={p_rand} #{r + 1}",
                    rng.uniform(0.0, 1.0, size=(p_rand, n)) * (4.0 / p_rand),
                )
            )
    for r in range(int(fill_starts)):
        k = np.arange((r + 1) * p_rand * n + 1, (r + 2) * p_rand * n + 1, dtype=np.float64)
        starts.append(
            (
                f"fill p={p_rand} #{r + 1}",
                np.mod(0.5 + k * WEYL_STEP, 1.0).reshape(p_rand, n) * (4.0 / p_rand),
            )
        )
    for r in range(int(quad_fills)):
        starts.append(
            (f"fill quadratic p={p_rand} #{r + 1}", quadratic_fill(n, p_rand, block=r + 1))
        )
    return starts


def fit_pidentity(
    gram,
    *,
    p=None,
    restarts=1,
    rng=None,
    branchings=START_BRANCHINGS,
    max_rows=None,
    maxiter=None,
    ftol=1e-8,
    time_limit=None,
    callback=None,
    hdmm_start=None,
    polish=None,
    fill_starts=0,
    quad_fills=0,
):
    """Minimise trace(G (AᵀA)⁻¹) over p-Identity strategies A = [I; Θ]D (sens₁ = 1).

    ``restarts`` starting points: the hierarchies of ``branchings`` (in that order, those
    with b < n and at most ``max_rows`` internal nodes, default n/8) with level weights
    fitted in closed form; with an ``rng`` only the first hierarchy and then random
    Θ ~ U(0, 4/p), p = ``p`` rows (default n/16). From :data:`WIDE_HAT_MIN_N` cells also
    the hats on the b = 20 levels (:data:`WIDE_HAT_BRANCHING`). In addition, HDMM's own OPT₀ start
    (:func:`hdmm_theta`: p = n/16 rows, Θ ~ U[0, 1), the first draw from ``rng``, or its
    deterministic fill when ``rng`` is None) when ``hdmm_start`` is true (default: for
    n ≤ :data:`HDMM_START_MAX_N`), so the result is never worse than HDMM's start
    optimised with the same budget. Each start runs projected L-BFGS for ``maxiter``
    iterations (default :func:`default_maxiter`), until 10 iterations gain less than
    10·``ftol`` relative, or until ``time_limit`` seconds have passed (then the result
    depends on the machine); the best then continues for ``polish`` more iterations
    (default :func:`default_polish`). Returns the best; never worse than the first
    hierarchy. ``gram`` is a :class:`GramOperator`. ``fill_starts``: that many more starts
    shaped like the random ones but deterministic (Θ = (4/p)·frac(½ + kα), the Weyl fill of
    :func:`hdmm_theta` continued past HDMM's start), with or without an ``rng``.
    ``quad_fills``: that many more deterministic U[0, 1)-scaled starts, blocks 1, 2, … of
    :func:`quadratic_fill` (see :data:`QUAD_FILL_STARTS`).
    """
    n = gram.n
    if n > MAX_PIDENTITY_N:
        raise ValueError(
            f"the p-Identity optimiser handles n <= {MAX_PIDENTITY_N} cells, got n={n}"
        )
    restarts = check_size(restarts, "restarts")
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + float(time_limit)
    p_rand = max(1, n // 16) if p is None else check_size(p, "p")
    max_rows = max(n // 8, 16) if max_rows is None else int(max_rows)
    # Θ, its gradient and four p×n work arrays per start (and a dense n×n gram for a general W)
    rows = max(max_rows + 1, p_rand)
    check_memory(
        8 * (6 * rows * n + (n * n if gram.kind == "dense" else 0)),
        f"the p-Identity optimiser on n={n:,} cells with up to {rows:,} rows",
    )
    maxiter = default_maxiter(n) if maxiter is None else check_size(maxiter, "maxiter")
    polish = default_polish(n) if polish is None else int(polish)
    if polish < 0:
        raise ValueError(f"polish must be >= 0, got {polish}")
    hdmm_start = n <= HDMM_START_MAX_N if hdmm_start is None else bool(hdmm_start)
    if int(quad_fills) < 0:
        raise ValueError(f"quad_fills must be >= 0, got {quad_fills}")
    if n == 1:
        f = float(gram.diag[0])
        return PIdentityFit(np.zeros((1, 1)), f, "identity", (("identity", 1, f, f, 0),), 1)

    with blas_threads(1):
        starts = _starts(
            gram,
            rng=rng,
            restarts=restarts,
            branchings=branchings,
            max_rows=max_rows,
            p_rand=p_rand,
            hdmm_start=hdmm_start,
            fill_starts=fill_starts,
            quad_fills=quad_fills,
        )
        best: tuple[float, str, np.ndarray] | None = None
        records, evals = [], 0
        # a large group of same-shape starts (the quadratic-fill multistart) runs in lockstep:
        # the same results per start, without the per-call overhead (matmech.optimizers.multistart)
        lockstep = (
            lockstep_starts(gram, starts, maxiter=maxiter, ftol=ftol)
            if deadline is None and callback is None
            else {}
        )
        for i, (name, th0) in enumerate(starts):
            f0 = objective(th0, gram, gradient=False)
            try:
                th, f, nit, ne = (
                    lockstep[i]
                    if i in lockstep
                    else _lbfgs(gram, th0, maxiter, ftol, deadline, callback)
                )
            except np.linalg.LinAlgError:
                if not name.startswith("fill"):
                    raise
                records.append(
                    (name, th0.shape[0], f0, math.inf, 0)
                )  # a fill start that broke down: skipped
                continue
            evals += ne + 1
            records.append((name, th.shape[0], f0, f, nit))
            if not _reliable(th, f, gram):  # a runaway Θ whose value is rounding noise
                th, f = th0, f0
            if best is None or f < best[0]:
                best = (f, name, th)
            if deadline is not None and time.perf_counter() > deadline:
                break
        if best is None:  # only fill starts may break down, and the starts hold others
            raise ValueError("every start of the p-Identity optimiser broke down")
        if polish and (deadline is None or time.perf_counter() < deadline):
            f0, name, th0 = best
            try:
                th, f, nit, ne = _lbfgs(gram, th0, polish, ftol, deadline, callback)
            except (
                np.linalg.LinAlgError
            ):  # a polish that ran away to a singular I + ΘΘᵀ: keep the best
                th, f, nit, ne = th0, math.inf, 0, 0
            evals += ne
            records.append((f"{name} (polish)", th.shape[0], f0, f, nit))
            if f < f0 and _reliable(th, f, gram):
                best = (f, name, th)
    f, name, th = best
    keep = th.max(1) > 0
    if keep.any() and not keep.all():
        th = th[keep]
    return PIdentityFit(th, f, name, tuple(records), evals)


# -- beyond the p-Identity limit: the best hierarchy by exact error ---------------------------------

#: Branchings :func:`best_hierarchy` scores (with and without the root) ...
HIERARCHY_BRANCHINGS = (2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 64)
#: ... and above this many cells (each costs ~1 s at 10⁶ cells) only these.
LARGE_HIERARCHY_N, LARGE_HIERARCHY_BRANCHINGS = 200_000, (4, 8, 16, 32)


def best_hierarchy(W, eps=1.0, delta=0.0, *, branchings=None):
    """(strategy, total error, params) of the hierarchical strategy (Hay et al. 2010) of least
    exact expected error on the 1-D workload W, over ``branchings`` with and without the
    root, for any number of cells: each error costs O(n · levels)
    (:class:`~matmech.linalg.spectral.NestedCovariance`), so this is the pure-ε answer beyond
    :data:`MAX_PIDENTITY_N` cells (and never worse than any of those hierarchies)."""
    n = W.shape[1]
    if branchings is None:
        branchings = HIERARCHY_BRANCHINGS if n <= LARGE_HIERARCHY_N else LARGE_HIERARCHY_BRANCHINGS
    best = None
    for b in [b for b in branchings if b < n] or [2]:
        for root in (True, False):
            A = hierarchical(n, b, root)
            try:
                err = expected_error(W, A, eps, delta, noise="continuous")
            except ValueError:
                continue
            if best is None or err < best[1]:
                best = (A, err, {"branching": int(b), "root": root})
    if best is None:
        raise ValueError("no hierarchical strategy can answer this workload")
    return best
