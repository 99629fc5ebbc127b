"""Strategy optimisation: one entry point, :func:`optimize`, and its frozen result.

Methods (see the modules for the maths and the papers):

* ``"sdp"`` — the exact L2 program with cvxpy (:func:`matmech.optimizers.l2.sdp_l2`), n ≤ 64;
* ``"l2"`` — the certified L2 optimum by the accelerated dual fixed point of Denisov et
  al. (NeurIPS 2022) (:func:`matmech.optimizers.l2.dual_l2`), n ≤ 4096, each step O(n²) for all
  ranges and prefixes (tridiagonal G⁻¹);
* ``"pidentity"`` — pure ε: HDMM's p-Identity family [I; Θ]·D from the best hierarchy and
  (n ≤ 2048) HDMM's own OPT₀ start (:func:`matmech.optimizers.pure.fit_pidentity`), n ≤ 8192;
* ``"kron"`` — Kronecker workloads factor by factor, unions of Kronecker products by block
  coordinate descent over the factors (HDMM's OPT⊗);
* ``"marginals"`` — unions of marginals: the weighted marginal lattice (pure ε, HDMM's
  OPT_M) or the closed-form residual basis (L2, optimal);
* ``"gmarginals"`` — generalised marginals for any union of Kronecker products: weighted
  attribute subsets measured through per-attribute factor strategies (p-Identity on
  attributes queried by prefixes, ranges or custom predicates), lattice weights and factors
  optimised jointly for the pure-ε error, scored exactly from the factors
  (:func:`matmech.optimizers.marginals.optimize_general_marginals`); under (ε, δ) the
  lattice weights are then re-optimised for the L2 error with the factors fixed;
* ``"kronstack"`` — pure ε (p-Identity factors) or (ε, δ) (certified L2 factor optima, square-root weights), a union of Kronecker products with one term per group of
  workload terms (HDMM's OPT₊, :mod:`matmech.optimizers.kronstack`); its error is exact on
  small domains and HDMM's upper bound (each group answered by its own term) otherwise,
  ``params["error_kind"]`` says which;
* ``"unions"`` — (ε, δ) only, a union of Kronecker products: the Gaussian planner of
  :mod:`matmech.optimizers.unions` (residual products with closed-form subset weights,
  certified within their class when each attribute has one factor gram up to scale; and
  generalised marginals whose factors and weights descend jointly on the exact L2 error),
  the better kept (issue 24);
* ``"auto"`` — every family that fits the workload (marginals, including products of
  [identity; total] factors expanded into marginals; generalised marginals; Kronecker;
  unions of Kronecker products; the 1-D method for the privacy model), the lowest error
  kept (an upper bound counts as its value: the true error is at most that); a family that
  fails (too large, out of memory) is recorded in ``params["failed"]`` and the next one
  tried, so ``auto`` fails only when every family fails. A pure-ε ``kron`` run on a union
  of Kronecker products stops after its first round of block coordinate descent when it is
  then above :data:`KRON_CUTOFF_RATIO` × the best family so far (``params["tried"]["kron"]
  ["stopped"]`` says so; a heuristic, not a certified bound). Each distinct factor of a
  single Kronecker product (pure ε, ≤ 128 cells, not an identity-total gram a·I + b·11ᵀ:
  :data:`KRON_SKIP_QUAD_FILLS_IT`) gets the deterministic quadratic-fill multistart
  (:data:`matmech.optimizers.pure.QUAD_FILL_STARTS`). On a single Kronecker product (pure ε)
  ``kron`` runs first and ``gmarginals`` / ``kronstack`` start from its factor fits instead of
  fitting the same 1-D problems again (:data:`SHARE_FIT_MAX_N`); on a union ``gmarginals``
  runs first (the reference of the early stop).

Pure ε (δ = 0) and the L2 methods never stand in for each other: the L2 optimum pays a
large L1 sensitivity, and the p-Identity family ignores L2 structure.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from matmech.linalg.structured import pinv_gram
from matmech.optimizers import (
    general_marginal_error as gm_error,
    kronstack as opt_kronstack,
    l2 as opt_l2,
    marginals as opt_marginals,
    pure as opt_pure,
    unions as opt_unions,
)
from matmech.optimizers.gram import GramOperator
from matmech.optimizers.blas import blas_threads, capped
from matmech.privacy.calibration import noise_variance
from matmech.error import expected_error, lower_bound
from matmech.privacy.params import check_privacy_params
from matmech.linalg.linop import Identity, Kron, LinOp, VStack, as_linop, check_size
from matmech import validate

__all__ = ["optimize", "OptimizeResult", "METHODS"]

METHODS = (
    "auto",
    "sdp",
    "l2",
    "pidentity",
    "kron",
    "marginals",
    "gmarginals",
    "kronstack",
    "unions",
)
_PURE_METHODS = ("pidentity",)
_L2_METHODS = ("sdp", "l2", "unions")
#: Rounds of block coordinate descent over the factors of a union of Kronecker products.
KRON_ROUNDS = 3
#: Largest memory (bytes) for the dense per-attribute grams of a union of Kronecker products
#: (terms × Σᵢ nᵢ² doubles): refused up front with a ValueError beyond it.
MAX_KRON_GRAM_BYTES = 4 << 30
#: ``method="auto"`` stops trying families after one whose relative gap is at most this.
CERTIFIED_GAP = 1e-6
#: Pure-ε Kronecker fits add this many deterministic random-like starts (Weyl fills,
#: :func:`matmech.optimizers.pure.fit_pidentity` ``fill_starts``) to every 1-D fit: on HDMM's
#: census workloads the hierarchy starts alone stop at RMSE 7.77 / 10.88 (HDMM 7.48 / 10.33).
KRON_FILL_STARTS = 1
#: ``method="auto"``: a union-of-Kronecker ``kron`` run (block coordinate descent) stops after
#: its first round when its total squared error is then above this multiple of the best
#: family's so far (10× in RMSE; recorded in ``params["tried"]["kron"]["stopped"]``). Not a
#: certified bound: the later rounds gain at most 36× in squared error on HDMM's suite
#: (adult_W2: RMSE 6750 after round 1, 1127 after 3; loans_W2 10520 → 2135; adultsmall_W2
#: 27.1 → 23.4), and where it stops (loans, adult) kron ends 8-84× above the best family.
KRON_CUTOFF_RATIO = 100.0
#: The quadratic-fill multistart of single-Kronecker factor fits is skipped for identity-total
#: factor grams a·I + b·11ᵀ (identities, totals, [I; T] stacks: cps_W1, adultsmall_W1): over
#: n ∈ {2, …, 128} and b/a ∈ {0, 0.1, …, 1000} (60 grams) the 20 extra starts lowered the
#: fitted trace once, by 1.5e-5 relative (n = 75, b/a = 10), at 5× the time.
KRON_SKIP_QUAD_FILLS_IT = True
#: ``method="auto"``: the ``kron`` family's 1-D factor fits of a single Kronecker workload (a
#: superset of the starts the ``kronstack`` family would run on the same factor) are reused by
#: ``kronstack`` for factors of at most this many cells (the key is the dense factor gram).
SHARE_FIT_MAX_N = 1024


@dataclass(frozen=True)
class OptimizeResult:
    """An optimised strategy and its analytic figures (errors in squared counts, RMSE in counts).

    ``error`` is :func:`matmech.expected_error` of the strategy (total over the queries) with
    ``noise="continuous"``, the figure the optimisers minimise (a release draws discrete noise:
    ``expected_error``'s default gives its exact error),
    ``lower_bound`` the SVD bound of Li & Miklau (None where it cannot be computed),
    ``gap`` the relative duality gap (value − certified bound)/value for the L2 methods
    (None where the method has no certificate), ``seconds`` the optimisation time (the
    error and bound evaluations after it are not included; for ``method="auto"`` summed
    over the families tried, listed in ``params["tried"]``), ``params`` method details.

    Parameters
    ----------
    strategy : LinOp
        The optimised strategy.
    error, rmse : float
        Total expected error (squared counts) and RMSE per query (counts).
    lower_bound : float or None
        The SVD lower bound (total).
    method : str
        The family that produced the strategy.
    seconds : float
        Optimisation time.
    gap : float or None
        Relative duality gap of the L2 methods.
    eps, delta : float
        The privacy parameters optimised for.
    params : mapping
        Method details (``tried``, ``failed``, ...).

    Returns
    -------
    OptimizeResult
        A frozen record; :func:`optimize` makes it. ``summary()`` prints it.

    Raises
    ------
    dataclasses.FrozenInstanceError
        On any attempt to change a field.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> res = optimize(W.prefix(16), eps=1.0)
    >>> res.error >= res.lower_bound
    True
    """

    strategy: LinOp
    error: float
    rmse: float
    lower_bound: float | None
    method: str
    seconds: float
    gap: float | None
    eps: float
    delta: float
    params: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    @property
    def ratio(self):
        """error / lower_bound (≥ 1), or None without a bound."""
        return None if not self.lower_bound else self.error / self.lower_bound

    def summary(self):
        gap = "-" if self.gap is None else f"{self.gap:.2e}"
        bound = "-" if self.lower_bound is None else f"{self.ratio:.3f}"
        return f"{self.method}: total {self.error:.6g}, RMSE/query {self.rmse:.4f}, error/bound {bound}, gap {gap}, {self.seconds:.2f} s"


# -- progress -------------------------------------------------------------------------------------


def _progress_hook(progress):
    """A callable(fraction, message) from progress = False / True / a callable."""
    if progress is False or progress is None:
        return None
    if progress is True:

        def show(fraction, message):
            print(
                f"\r[{fraction:6.1%}] {message[:70]:<70}",
                end="" if fraction < 1 else "\n",
                file=sys.stderr,
                flush=True,
            )

        return show
    if callable(progress):
        return progress
    raise TypeError(
        f"progress must be True, False or a callable(fraction, message), got {progress!r}"
    )


# -- method choice ------------------------------------------------------------------------------


def _candidates(W, delta):
    """The families ``method="auto"`` tries, in order (the first is the one reported when
    the results tie). Every applicable multi-attribute family runs and the lowest error is
    kept (HDMM's "best template"); a certified optimum (gap ≤ CERTIFIED_GAP) ends the search."""
    blocks = opt_marginals.kron_blocks(W)
    multi = blocks is not None and len(blocks[0][1]) > 1
    out = []
    if opt_marginals.expand_marginals(W) is not None:
        out.append("marginals")
    if delta > 0:
        if multi and len(blocks) == 1:
            out.append("kron")  # exactly optimal factor by factor
        if W.shape[1] <= opt_l2.MAX_L2_N:
            out.append("l2")
        if multi and "kron" not in out:
            out.append("kron")
        if multi and len(blocks) > 1:
            out.append(
                "gmarginals"
            )  # L2 lattice weights; the only family releasable factored on huge domains
            out.append("unions")  # the Gaussian planner for unions (issue 24)
            out.append(
                "kronstack"
            )  # HDMM's OPT₊ with L2 factors: auto never loses to HDMM's templates
        return out or ["l2"]
    if multi:
        # one Kronecker product: kron first, its factor fits seed gmarginals and kronstack
        # (SHARE_FIT_MAX_N); a union: gmarginals first, the reference of kron's early stop
        out += ["kron", "gmarginals"] if len(blocks) == 1 else ["gmarginals", "kron"]
        if len(blocks) > 1 or any(isinstance(f, VStack) for f in blocks[0][1]):
            out.append("kronstack")  # one term without stacked factors: kronstack is kron
    return out or ["pidentity"]


def _check_method(method, delta, W):
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method in _L2_METHODS and delta == 0:
        raise ValueError(
            f"method={method!r} optimises the L2 (Gaussian, delta > 0) error; under pure eps (delta=0) "
            "the L2 optimum is worse than the identity. Use method='pidentity' (or 'auto')"
        )
    if method in _PURE_METHODS and delta > 0:
        raise ValueError(
            f"method={method!r} optimises the pure-eps (L1) error; for delta > 0 use method='l2', 'kron', 'marginals' (or 'auto')"
        )
    if method == "marginals" and opt_marginals.expand_marginals(W) is None:
        raise ValueError(
            "method='marginals' needs a union of marginals (workloads.marginals); this workload is not one"
        )
    if (
        method in ("kron", "gmarginals", "kronstack", "unions")
        and opt_marginals.kron_blocks(W) is None
    ):
        raise ValueError(
            f"method={method!r} needs a Kronecker workload or a union of Kronecker products over the same attributes"
        )


# -- 1-D solvers --------------------------------------------------------------------------------


def _fit_1d(
    gram_op,
    delta,
    *,
    restarts,
    rng,
    maxiter,
    time_limit,
    callback,
    fill_starts=0,
    quad_fills=0,
    polish=None,
):
    """(strategy, value = sens² · trace(G (AᵀA)⁻¹), params) for one gram."""
    if delta > 0:
        inverse = opt_l2.tridiagonal_inverse(gram_op)
        fit = opt_l2.dual_l2(
            gram_op.dense(),
            maxiter=maxiter or 500,
            time_limit=time_limit,
            callback=callback,
            inverse=inverse,
        )
        return (
            fit.strategy,
            fit.value,
            {"dual": fit.dual, "gap": max(fit.gap, 0.0), "iterations": fit.iterations},
        )
    fit = opt_pure.fit_pidentity(
        gram_op,
        restarts=restarts,
        rng=rng,
        maxiter=maxiter,
        time_limit=time_limit,
        callback=callback,
        fill_starts=fill_starts,
        quad_fills=quad_fills,
        polish=polish,
    )
    ident = float(gram_op.diag.sum())  # Θ = 0: the identity, also in the family
    if ident <= fit.value:
        return Identity(gram_op.n), ident, {"init": "identity", "p": 0}
    params = {
        "p": int(fit.theta.shape[0]),
        "init": fit.init,
        "evaluations": fit.evaluations,
        "starts": fit.starts,
    }
    return opt_pure.PIdentity(fit.theta), fit.value, params


def _traces_with(grams_dense, strategy):
    """[sens² · trace(G (AᵀA)⁺)] for each G of ``grams_dense``, for a 1-D strategy with sens = 1
    (our optimisers' outputs); the dense (AᵀA)⁺ is formed once for all of them."""
    m, _ = pinv_gram(strategy)
    md = m.dense(max_entries=opt_pure.MAX_PIDENTITY_N**2) if not isinstance(m, Identity) else None
    return [float(np.trace(g)) if md is None else float((g * md).sum()) for g in grams_dense]


def check_kron_memory(blocks, limit=None):
    """Refuse (ValueError) a union of Kronecker products whose dense factor grams would not fit."""
    limit = MAX_KRON_GRAM_BYTES if limit is None else limit
    need = 8 * sum(f.shape[1] ** 2 for _, fs in blocks for f in fs)
    big = max(f.shape[1] for _, fs in blocks for f in fs)
    if big > opt_pure.MAX_PIDENTITY_N:
        raise ValueError(
            f"method='kron' on a union of Kronecker products needs attribute sizes <= {opt_pure.MAX_PIDENTITY_N}, got {big}"
        )
    if need > limit:
        raise ValueError(
            f"method='kron' on this union of {len(blocks)} Kronecker products needs about {need / 2**30:.1f} GiB "
            f"of dense factor grams (limit {limit / 2**30:.1f} GiB, MAX_KRON_GRAM_BYTES)"
        )
    return need


def _kron(W, delta, *, restarts, rng, maxiter, time_limit, report, cutoff=None, shared=None):
    blocks = opt_marginals.kron_blocks(W)
    d = len(blocks[0][1])
    if len(blocks) == 1:
        factors, values, params, done = [], [], [], {}
        prefit = {}  # pure ε: the factor fits, for the kronstack family (SHARE_FIT_MAX_N)
        for i, f in enumerate(blocks[0][1]):
            report(i / d, f"factor {i + 1}/{d} (n={f.shape[1]})")
            op = GramOperator.from_workload(f)
            # equal factors (e.g. all ranges on both axes) are optimised once
            key = (
                (op.kind, op.n, op.scale)
                if op.kind != "dense"
                else (op.kind, op.n, op.dense().tobytes())
            )
            if key not in done:
                # each distinct factor is fitted once here, so small ones get the deterministic
                # quadratic-fill multistart (opt_pure.QUAD_FILL_STARTS), except identity-total
                # grams a·I + b·11ᵀ (KRON_SKIP_QUAD_FILLS_IT)
                quad = opt_pure.QUAD_FILL_STARTS if op.n <= opt_pure.QUAD_FILL_MAX_N else 0
                if quad and KRON_SKIP_QUAD_FILLS_IT and gm_error._identity_total_gram(op.dense()):
                    quad = 0
                fa, fv, fp = _fit_1d(
                    op,
                    delta,
                    restarts=restarts,
                    rng=rng,
                    maxiter=maxiter,
                    time_limit=time_limit,
                    callback=None,
                    fill_starts=KRON_FILL_STARTS,
                    quad_fills=quad,
                )
                done[key] = (fa, fv, {**fp, "quad_fills": quad} if delta == 0 else fp)
            a, v, p = done[key]
            if delta == 0 and op.n <= SHARE_FIT_MAX_N:
                prefit[(op.n, op.dense().tobytes())] = (a, v)
            factors.append(a)
            values.append(v)
            params.append(p)
        out = {"factors": tuple(params), "rounds": 1}
        if shared is not None and prefit:
            shared["factor_fits"] = prefit
            shared["kron_factors"] = tuple(factors)
        if delta > 0:
            # the Kronecker product of factor optima is optimal (its dual point factors too):
            # the product of certified factor bounds bounds the product problem
            prim, dual = math.prod(values), math.prod(p["dual"] for p in params)
            out["gap"] = max(0.0, (prim - dual) / prim)
        return Kron(*factors), out
    # a union Σⱼ wⱼ² ⊗ᵢ Gᵢⱼ: block coordinate descent (HDMM §6.2)
    check_kron_memory(blocks)
    grams = [
        [f.gram().dense(max_entries=opt_pure.MAX_PIDENTITY_N**2) for f in fs] for _, fs in blocks
    ]
    w2 = np.array([w for w, _ in blocks])
    costs = np.array(
        [[float(np.trace(g)) for g in row] for row in grams]
    )  # start: identity factors
    factors = [Identity(grams[0][i].shape[0]) for i in range(d)]
    best, history = (math.inf, None), []
    steps, step = KRON_ROUNDS * d, 0
    for rnd in range(KRON_ROUNDS):
        for i in range(d):
            report(step / steps, f"round {rnd + 1}, factor {i + 1}/{d}")
            step += 1
            others = np.prod(np.delete(costs, i, axis=1), axis=1) * w2
            g_eff = sum(c * row[i] for c, row in zip(others, grams))
            op = GramOperator.from_gram(g_eff)
            a, _, _ = _fit_1d(
                op,
                delta,
                restarts=restarts,
                rng=rng,
                maxiter=maxiter,
                time_limit=time_limit,
                callback=None,
                fill_starts=KRON_FILL_STARTS,
            )
            factors[i] = a
            costs[:, i] = _traces_with([row[i] for row in grams], a)
            total = float((w2 * np.prod(costs, axis=1)).sum())
            history.append(total)
            if total < best[0]:
                best = (total, list(factors))
        if cutoff is not None and rnd + 1 < KRON_ROUNDS and best[0] > cutoff:
            out = {
                "rounds": rnd + 1,
                "history": tuple(history),
                "stopped": f"after round {rnd + 1} of {KRON_ROUNDS}: above {KRON_CUTOFF_RATIO:g}x the best family so far",
            }
            return Kron(*best[1]), out
    return Kron(*best[1]), {"rounds": KRON_ROUNDS, "history": tuple(history)}


# -- the entry point -----------------------------------------------------------------------------


@capped
def optimize(
    W,
    eps=1.0,
    delta=0.0,
    method="auto",
    *,
    restarts=1,
    rng=None,
    progress=False,
    maxiter=None,
    time_limit=None,
    bound=True,
):
    """Optimise a strategy for workload W under ε-DP (δ = 0) or (ε, δ)-DP (δ > 0).

    ``restarts``: starting points per optimisation (the best result is kept); the
    deterministic starts (best hierarchies, workload marginals, …) come first, random ones
    only from ``rng`` (a ``numpy.random.Generator``; ``rng=None`` means deterministic starts
    only, so the result is reproducible either way). Pure ε on one attribute also starts from
    HDMM's OPT₀ point (p = n/16 rows, Θ ~ U[0, 1) drawn first from ``rng``, or a fixed
    equidistributed fill without one: :func:`matmech.optimizers.pure.hdmm_theta`) for
    n ≤ 2048, in addition to the ``restarts``. ``progress``: True prints to stderr,
    a callable(fraction, message) receives updates. ``maxiter`` / ``time_limit`` cap each
    1-D optimisation. ``bound=False`` skips the SVD lower bound (an n×n eigenproblem).
    Raises ValueError for an unknown method, a method that does not fit the workload or
    privacy model, or a domain too large for it.

    Parameters
    ----------
    W : LinOp or array_like
        The workload.
    eps : float, default 1.0
        ε in [1e-4, 100].
    delta : float, default 0.0
        0 for pure ε-DP, else in [1e-100, 1).
    method : str, default "auto"
        ``"auto"`` (every family that fits, lowest exact error kept), ``"pidentity"``,
        ``"l2"``, ``"sdp"``, ``"kron"``, ``"marginals"``, ``"gmarginals"``, ``"kronstack"``.
    restarts : int, default 1
        Starting points per optimisation.
    rng : numpy.random.Generator, optional
        Random restarts (none without it; the result is reproducible either way).
    progress : bool or callable, default False
        Progress reports.
    maxiter : int, optional
        Iteration cap per 1-D optimisation.
    time_limit : float, optional
        Seconds per 1-D optimisation.
    bound : bool, default True
        Compute the SVD lower bound.

    Returns
    -------
    OptimizeResult
        The strategy, its exact error, RMSE, lower bound and details.

    Raises
    ------
    ValueError
        An unknown method, one that does not fit W or the privacy model, or a domain too
        large for it.
    TypeError
        Arguments of the wrong kind.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> res = optimize(W.prefix(16), eps=1.0)
    >>> res.method, res.strategy.shape[1], res.rmse < 4.0
    ('pidentity', 16, True)
    """
    eps, delta = check_privacy_params(eps, delta)
    W = as_linop(validate.linear(W, "W"))
    restarts = check_size(restarts, "restarts")
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator or None, got {type(rng).__name__}")
    if maxiter is not None:
        maxiter = check_size(maxiter, "maxiter")
    if time_limit is not None and not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    _check_method(method, delta, W)
    families = _candidates(W, delta) if method == "auto" else [method]
    hook = _progress_hook(progress)
    current = [families[0]]

    def report(fraction, message):
        if hook is not None:
            hook(min(max(float(fraction), 0.0), 1.0), f"{current[0]}: {message}")

    # one BLAS thread throughout: the work is many small or thin products (and scipy's
    # L-BFGS-B calls BLAS level 1), where OpenBLAS threads spinning against other processes
    # cost 5-10× on a busy two-core machine (marginals 0.43 s -> 0.055 s, dense eigh 3.6 s
    # -> 0.5 s at n = 1024); on an idle machine a second thread saves at most ~25%
    with blas_threads(1):
        if len(families) == 1:
            fit = _fit(
                W,
                eps,
                delta,
                families[0],
                restarts=restarts,
                rng=rng,
                maxiter=maxiter,
                time_limit=time_limit,
                report=report,
            )
            return _result(W, eps, delta, families[0], *fit, bound=bound)
        # auto over several families: a family's failure is recorded and the next one tried
        best, failed, tried, spent = None, {}, {}, 0.0
        shared = {}  # work one family leaves for the next (kron's factor fits for kronstack)
        for family in families:
            current[0] = family
            # a kron union run is stopped early when far behind the best so far (KRON_CUTOFF_RATIO)
            cutoff = (
                None
                if best is None
                else KRON_CUTOFF_RATIO * best[1][3] / noise_variance(eps, delta, sensitivity=1.0)
            )
            try:
                fit = _fit(
                    W,
                    eps,
                    delta,
                    family,
                    restarts=restarts,
                    rng=rng,
                    maxiter=maxiter,
                    time_limit=time_limit,
                    report=report,
                    cutoff=cutoff,
                    shared=shared,
                )
            except (
                ValueError,
                TypeError,
                MemoryError,
                np.linalg.LinAlgError,
                OverflowError,
                RuntimeError,
            ) as ex:
                failed[family] = f"{type(ex).__name__}: {ex}"
                continue
            entry = {"error": fit[3], "seconds": fit[4], "gap": fit[1]}
            if "stopped" in fit[2]:
                entry["stopped"] = fit[2]["stopped"]
            tried[family] = MappingProxyType(entry)
            spent += fit[4]
            if best is None or fit[3] < best[1][3] * (1 - 1e-12):
                best = (family, fit)
            if fit[1] is not None and fit[1] <= CERTIFIED_GAP:
                break
        if best is None:
            raise ValueError(
                "method='auto': every applicable family failed: "
                + "; ".join(f"{k}: {v}" for k, v in failed.items())
            )
        family, (strategy, gap, params, err, _) = best
        params = dict(params)
        params["tried"] = MappingProxyType(tried)
        if failed:
            params["failed"] = MappingProxyType(failed)
        return _result(W, eps, delta, family, strategy, gap, params, err, spent, bound=bound)


def _fit(
    W, eps, delta, chosen, *, restarts, rng, maxiter, time_limit, report, cutoff=None, shared=None
):
    """(strategy, gap, params, total error, seconds) of one family."""
    n = W.shape[1]
    t0 = time.perf_counter()
    gap, params = None, {}
    W_err = W  # a workload with the same gram, on which the error has a cheap form
    if chosen == "marginals":
        report(0.0, "marginal lattice")
        Wm = opt_marginals.expand_marginals(W)
        if Wm is not W:
            params["expanded_marginals"] = len(Wm.blocks)
            W_err = Wm
        fit = (
            opt_marginals.optimize_marginals_pure(Wm, restarts=restarts, rng=rng)
            if delta == 0
            else opt_marginals.optimize_marginals_l2(Wm)
        )
        strategy, gap = fit.strategy, fit.gap
        params["theta"] = {
            tuple(i for i in range(len(fit.strategy.domain)) if (m >> i) & 1): float(t)
            for m, t in enumerate(fit.theta)
            if t > 0
        }
    elif chosen == "gmarginals":
        report(0.0, "generalised marginal lattice")
        kron_factors = None if shared is None else shared.get("kron_factors")
        given = None
        if kron_factors is not None:  # a single Kronecker workload: the kron family's factor fits
            given = {
                i: f.theta for i, f in enumerate(kron_factors) if isinstance(f, opt_pure.PIdentity)
            }
        fit = opt_marginals.optimize_general_marginals(
            W, restarts=restarts, rng=rng, factor_thetas=given or None, norm=2 if delta > 0 else 1
        )
        strategy = fit.strategy
        k = len(strategy.domain_sizes)
        params["theta"] = {
            tuple(i for i in range(k) if (m >> i) & 1): float(t)
            for m, t in enumerate(fit.theta)
            if t > 0
        }
        params["factors"] = tuple(type(f).__name__ for f in strategy.factors)
        params["error_kind"] = "exact (factored)"
        seconds = time.perf_counter() - t0
        report(1.0, f"done in {seconds:.2f} s")
        unit = noise_variance(eps, delta, sensitivity=1.0)
        if delta > 0:
            params["weights"] = (
                "lattice weights re-optimised for the L2 (Gaussian) error, factors from the pure-eps fit"
            )
        error = opt_marginals.general_marginal_error(W, strategy, p=2 if delta > 0 else 1)
        return strategy, None, params, unit * error, seconds
    elif chosen == "unions":
        report(0.0, "Gaussian planner for unions of Kronecker products")
        fit = opt_unions.optimize_unions(W)
        params = {**dict(fit.params), "plan": fit.kind, "error_kind": "exact (factored)"}
        unit = noise_variance(eps, delta, sensitivity=1.0)
        if fit.bound is not None:
            params["class_bound"] = unit * fit.bound
        seconds = time.perf_counter() - t0
        report(1.0, f"done in {seconds:.2f} s")
        return fit.strategy, None, params, unit * fit.value, seconds
    elif chosen == "kronstack":
        report(0.0, "union of Kronecker products")
        prefit = None if shared is None else shared.get("factor_fits")
        fit = opt_kronstack.optimize_kron_stack(
            W, prefit=prefit if delta == 0 else None, norm=1 if delta == 0 else 2
        )
        strategy = fit.strategy
        params = {
            "terms": fit.terms,
            "weights": fit.weights,
            "error_kind": "exact" if fit.exact else "upper bound (each group from its own term)",
        }
        if prefit:
            params["reused_factor_fits"] = len(prefit)
        seconds = time.perf_counter() - t0
        report(1.0, f"done in {seconds:.2f} s")
        return (
            strategy,
            None,
            params,
            noise_variance(eps, delta, sensitivity=1.0) * fit.value,
            seconds,
        )
    elif chosen == "kron":
        strategy, params = _kron(
            W,
            delta,
            restarts=restarts,
            rng=rng,
            maxiter=maxiter,
            time_limit=time_limit,
            report=report,
            cutoff=cutoff if delta == 0 else None,
            shared=shared,
        )
        gap = params.pop("gap", None)
    elif chosen == "sdp":
        if n > opt_l2.MAX_SDP_N:
            raise ValueError(
                f"method='sdp' is limited to n <= {opt_l2.MAX_SDP_N} cells, got n={n}; "
                "use method='l2' (the scalable dual iteration, certified by its duality gap)"
            )
        report(0.0, f"cvxpy SDP, n={n}")
        fit = opt_l2.sdp_l2(W.gram())
        strategy, gap, params = (
            fit.strategy,
            max(fit.gap, 0.0),
            {"trace": fit.value, "dual_trace": fit.dual},
        )
    elif chosen == "l2":
        if n > opt_l2.MAX_L2_N:
            raise ValueError(
                f"method='l2' is limited to n <= {opt_l2.MAX_L2_N} cells, got n={n}; use a Kronecker workload (method='kron')"
            )
        cap = maxiter or 500

        def cb(it, g):
            report(it / cap, f"dual iteration {it}, gap {g:.2e}")

        inverse = opt_l2.tridiagonal_inverse(W)  # all ranges / prefixes: O(n²) per step
        gram = W.gram() if inverse is None else GramOperator.from_workload(W).dense()
        fit = opt_l2.dual_l2(gram, maxiter=cap, time_limit=time_limit, callback=cb, inverse=inverse)
        strategy, gap = fit.strategy, max(fit.gap, 0.0)
        params = {"trace": fit.value, "dual_trace": fit.dual, "iterations": fit.iterations}
    else:  # pidentity
        if (
            n > opt_pure.MAX_PIDENTITY_N
        ):  # p-Identity's dense n×n work does not fit: the best exact hierarchy
            report(0.0, f"best hierarchy, n={n}")
            strategy, _, hp = opt_pure.best_hierarchy(W)
            params = {"init": "best hierarchy (exact error, any n)", **hp}
        else:
            op = GramOperator.from_workload(W)
            # every start (restarts, plus HDMM's OPT₀ start up to HDMM_START_MAX_N cells) and
            # the polish of the best
            starts = restarts + (n <= opt_pure.HDMM_START_MAX_N) + (n >= opt_pure.WIDE_HAT_MIN_N)
            polish = (
                opt_pure.ONE_D_POLISH
                if n <= opt_pure.ONE_D_POLISH_MAX_N
                else opt_pure.default_polish(n)
            )
            cap = (maxiter or opt_pure.default_maxiter(n)) * starts + polish
            count = [0]

            def cb(f):  # type: ignore[misc]  # one callback per branch, each its optimiser's signature
                count[0] += 1
                if count[0] % 10 == 0:
                    report(count[0] / cap, f"iteration {count[0]}, objective {f:.6g}")

            strategy, _, params = _fit_1d(
                op,
                0.0,
                restarts=restarts,
                rng=rng,
                maxiter=maxiter,
                time_limit=time_limit,
                callback=cb,
                polish=polish,
            )
    seconds = time.perf_counter() - t0
    report(1.0, f"done in {seconds:.2f} s")
    err = expected_error(
        W_err, strategy, eps, delta, noise="continuous"
    )  # the objective's figure (1/ε² scaling)
    return strategy, gap, params, err, seconds


def _result(W, eps, delta, chosen, strategy, gap, params, err, seconds, *, bound):
    lb = None
    if bound:
        try:
            lb = lower_bound(W, eps, delta)
        except ValueError:
            lb = None
    if gap is not None:
        unit = noise_variance(eps, delta, sensitivity=1.0) if delta > 0 else None
        if unit is not None and "dual_trace" in params:
            params["dual_bound"] = unit * params["dual_trace"]
    params = MappingProxyType(dict(params))
    return OptimizeResult(
        strategy, err, math.sqrt(err / W.shape[0]), lb, chosen, seconds, gap, eps, delta, params
    )
