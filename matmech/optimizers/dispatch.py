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
  (:func:`matmech.optimizers.general_marginals.optimize_general_marginals`); under (ε, δ) the
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
  then above :data:`~matmech.optimizers.kronfit.KRON_CUTOFF_RATIO` × the best family so far
  (``params["tried"]["kron"]["stopped"]`` says so; a heuristic, not a certified bound). Each
  distinct factor of a single Kronecker product (pure ε, ≤ 128 cells, not an identity-total
  gram a·I + b·11ᵀ: :data:`~matmech.optimizers.kronfit.KRON_SKIP_QUAD_FILLS_IT`) gets the
  deterministic quadratic-fill multistart (:data:`matmech.optimizers.pure.QUAD_FILL_STARTS`).
  On a single Kronecker product (pure ε) ``kron`` runs first and ``gmarginals`` /
  ``kronstack`` start from its factor fits instead of fitting the same 1-D problems again
  (:data:`~matmech.optimizers.kronfit.SHARE_FIT_MAX_N`); on a union ``gmarginals``
  runs first (the reference of the early stop).

Pure ε (δ = 0) and the L2 methods never stand in for each other: the L2 optimum pays a
large L1 sensitivity, and the p-Identity family ignores L2 structure.

The families are entries of :data:`matmech.optimizers.families.FAMILIES` (a new one is one
:func:`~matmech.optimizers.families.register_family` call); the Kronecker fits live in
:mod:`matmech.optimizers.kronfit`, the result record in :mod:`matmech.optimizers.result`.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from matmech import validate
from matmech.error import expected_error
from matmech.limits import steady
from matmech.linalg.linop import as_linop, check_size
from matmech.optimizers import kronfit
from matmech.optimizers.blas import blas_threads, capped
from matmech.optimizers.families import FAMILIES, check_method, auto_families
from matmech.optimizers.result import optimize_result
from matmech.privacy.calibration import noise_variance
from matmech.privacy.params import check_privacy_params


#: ``"auto"`` and the built-in families (registered later ones: ``families.method_names()``).
METHODS = ("auto", *FAMILIES)
#: ``method="auto"`` stops trying families after one whose relative gap is at most this.
CERTIFIED_GAP = 1e-6


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


# -- the entry point -----------------------------------------------------------------------------


@capped
@steady
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
    families=None,
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
    W, eps, delta : LinOp or array_like, float, float
        The workload, ε (default 1.0) and δ (default 0.0), as :func:`~matmech.error.expected_error`.
    method : str, default "auto"
        ``"auto"`` (every family that fits, lowest exact error kept), ``"pidentity"``,
        ``"l2"``, ``"sdp"``, ``"kron"``, ``"marginals"``, ``"gmarginals"``, ``"kronstack"``,
        ``"unions"``, or the name of a family added with
        :func:`matmech.optimizers.families.register_family`.
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
    families : sequence of str, optional
        With ``method="auto"``: try only these of the families ``auto`` would try (e.g. the
        ones a release can measure, :func:`matmech.optimizers.families.histogram_refusal`);
        ValueError when none of them fits W.

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
    check_method(method, delta, W)
    if families is not None and method != "auto":
        raise ValueError(f"families= restricts method='auto', not method={method!r}")
    wanted = families
    families = auto_families(W, delta) if method == "auto" else [method]
    if wanted is not None:
        keep = set(wanted)
        families = [f for f in families if f in keep]
        if not families:
            raise ValueError(
                f"method='auto' restricted to {list(wanted)}: none of them fits this workload and privacy model"
            )
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
            return optimize_result(W, eps, delta, families[0], *fit, bound=bound)
        # auto over several families: a family's failure is recorded and the next one tried
        best, failed, tried, spent = None, {}, {}, 0.0
        for fam in fit_families(
            W,
            eps,
            delta,
            families,
            restarts=restarts,
            rng=rng,
            maxiter=maxiter,
            time_limit=time_limit,
            report=report,
            on_start=lambda f: current.__setitem__(0, f),
        ):
            if fam.failed is not None:
                failed[fam.family] = fam.failed
                continue
            entry = {"error": fam.error, "seconds": fam.seconds, "gap": fam.gap}
            if "stopped" in fam.params:
                entry["stopped"] = fam.params["stopped"]
            tried[fam.family] = MappingProxyType(entry)
            spent += fam.seconds
            if best is None or fam.error < best.error * (1 - 1e-12):
                best = fam
        if best is None:
            raise ValueError(
                "method='auto': every applicable family failed: "
                + "; ".join(f"{k}: {v}" for k, v in failed.items())
            )
        params = dict(best.params)
        params["tried"] = MappingProxyType(tried)
        if failed:
            params["failed"] = MappingProxyType(failed)
        return optimize_result(
            W,
            eps,
            delta,
            best.family,
            best.strategy,
            best.gap,
            params,
            best.error,
            spent,
            bound=bound,
        )


@dataclass(frozen=True)
class FamilyResult:
    """One family's outcome in :func:`fit_families`: its strategy, gap, params, total error
    (continuous noise, squared counts) and fit seconds, or ``failed`` (the reason)."""

    family: str
    strategy: Any = None
    gap: float | None = None
    params: Mapping = field(default_factory=dict)
    error: float = math.inf
    seconds: float = 0.0
    failed: str | None = None


#: What a family's fit may raise and :func:`fit_families` records instead (the next is tried).
FIT_ERRORS = (
    ValueError,
    TypeError,
    MemoryError,
    np.linalg.LinAlgError,
    OverflowError,
    RuntimeError,
)


def fit_families(
    W,
    eps,
    delta,
    families,
    *,
    restarts=1,
    rng=None,
    maxiter=None,
    time_limit=None,
    report=None,
    skip=None,
    on_start=None,
) -> Iterator[FamilyResult]:
    """Fit ``families`` to W in order, yielding each one's :class:`FamilyResult` as it ends
    (``method="auto"``'s loop, shared with :mod:`matmech.advisor.planner`).

    A family's failure is yielded with its reason; a pure-ε kron run on a union stops after
    its first round when far behind the best so far
    (:data:`~matmech.optimizers.kronfit.KRON_CUTOFF_RATIO`); the kron family's factor fits
    are shared with the families after it; a certified optimum (gap ≤
    :data:`CERTIFIED_GAP`) ends the loop. ``skip(family, best_error)``: a reason not to fit
    ``family`` (a cheap bound showing it cannot win), or None; a family whose
    :attr:`~matmech.optimizers.families.Family.lower_bound` is above the best error so far is
    not fitted either; a skipped family is yielded with ``failed`` set to
    ``"skipped: " + reason``. Call inside one BLAS thread
    (:func:`~matmech.optimizers.blas.blas_threads`)."""
    report = report or (lambda fraction, message: None)
    best = math.inf
    shared: dict = {}  # work one family leaves for the next (kron's factor fits for kronstack)
    unit = noise_variance(eps, delta, sensitivity=1.0)
    for family in families:
        if on_start is not None:
            on_start(family)
        why = None if skip is None else skip(family, best)
        if why is None and not math.isinf(best):
            why = _cannot_win(W, eps, delta, family, best)
        if why is not None:
            yield FamilyResult(family, failed=f"skipped: {why}")
            continue
        # a kron union run is stopped early when far behind the best so far (KRON_CUTOFF_RATIO)
        cutoff = None if math.isinf(best) else kronfit.KRON_CUTOFF_RATIO * best / unit
        try:
            strategy, gap, params, err, seconds = _fit(
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
        except FIT_ERRORS as ex:
            yield FamilyResult(family, failed=f"{type(ex).__name__}: {ex}")
            continue
        best = min(best, err)
        yield FamilyResult(family, strategy, gap, params, err, seconds)
        if gap is not None and gap <= CERTIFIED_GAP:
            return


def _cannot_win(W, eps, delta, family, best):
    """Why ``family`` cannot beat the error ``best`` (its :attr:`Family.lower_bound` is above
    it), or None (no bound, or a bound that does not decide)."""
    bound_of = getattr(FAMILIES.get(family), "lower_bound", None)
    if bound_of is None:
        return None
    try:
        bound = bound_of(W, eps, delta)
    except FIT_ERRORS:
        return None
    if bound is None or not bound > best:
        return None
    return (
        f"cannot win: a lower bound on its error ({bound:.6g}) is above the best family's "
        f"({best:.6g})"
    )


def _fit(W, eps, delta, chosen, *, report, **options):
    """(strategy, gap, params, total error, seconds) of one family (``options``: restarts, rng,
    maxiter, time_limit, cutoff, shared), timed without its error evaluation."""
    t0 = time.perf_counter()
    fit = FAMILIES[chosen].fit(W, eps, delta, report=report, **options)
    seconds = time.perf_counter() - t0
    report(1.0, f"done in {seconds:.2f} s")
    if fit.error is None:  # the objective's figure (1/ε² scaling)
        work = W if fit.error_workload is None else fit.error_workload
        err = expected_error(work, fit.strategy, eps, delta, noise="continuous")
    else:
        err = fit.error() if callable(fit.error) else fit.error
    return fit.strategy, fit.gap, dict(fit.params), float(err), seconds
