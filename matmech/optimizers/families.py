"""The optimiser families behind :func:`matmech.optimizers.dispatch.optimize`, as a registry.

A family is a :class:`Family` record under its name in :data:`FAMILIES`: a fit function
(workload and privacy parameters → :class:`FamilyFit`), the privacy models it optimises for
(``"pure"``: ε-DP, L1; ``"l2"``: (ε, δ), Gaussian), whether its strategies keep a structured
inverse on any domain (else a release inverts their gram densely, up to
:data:`~matmech.linalg.structured.MAX_DENSE_N` cells: :func:`histogram_refusal`, decided
before optimising), an optional check that the workload fits it and an optional rule for
``method="auto"``. ``optimize(W, method=name)`` looks the name up
here; a new family is one :func:`register_family` call (docs/guide/extending.md). The
built-in families (the maths is in their modules) are listed in
:mod:`matmech.optimizers.dispatch`; their order under ``auto`` is :func:`auto_families`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from matmech.linalg.linop import LinOp, VStack
from matmech.linalg.structured import MAX_DENSE_N
from matmech.optimizers import (
    general_marginal_error,
    general_marginals,
    marginal_lattice,
    marginal_workloads,
    kronstack as opt_kronstack,
    l2 as opt_l2,
    pure as opt_pure,
    unions as opt_unions,
)
from matmech.optimizers.gram import GramOperator
from matmech.optimizers.pidentity import PIdentity
from matmech.optimizers.kronfit import fit_1d, fit_kron
from matmech.privacy.calibration import noise_variance


#: The privacy models: pure ε (Laplace noise, L1 sensitivity) and (ε, δ) (Gaussian, L2).
MODELS = ("pure", "l2")


@dataclass(frozen=True)
class FamilyFit:
    """What a family's fit returns: the strategy, the relative duality gap (None without a
    certificate), method details, and its total error in squared counts: a number, a
    callable evaluated after the fit is timed, or None for
    :func:`matmech.error.expected_error` of ``error_workload`` (default W) with continuous
    noise, the figure the optimisers minimise."""

    strategy: LinOp
    gap: float | None = None
    params: Mapping = field(default_factory=dict)
    error: float | Callable[[], float] | None = None
    error_workload: Any = None


@dataclass(frozen=True)
class Family:
    """One optimiser family: ``fit(W, eps, delta, *, restarts, rng, maxiter, time_limit,
    report, cutoff, shared) -> FamilyFit``; ``models`` the privacy models it optimises for;
    ``structured(delta)`` (or a bool) whether its strategy keeps a structured inverse and
    rounding on any domain (default False: a histogram release measures it only up to
    :data:`~matmech.linalg.structured.MAX_DENSE_N` cells); ``check(W)`` a reason the
    workload does not fit (None when it does); ``auto(W, delta)`` whether ``method="auto"``
    also tries it (after the built-in families); ``lower_bound(W, eps, delta)`` a cheap
    proven lower bound on the error its fit would report (squared counts, continuous noise),
    or None: ``method="auto"`` does not fit a family whose bound is above the best error so
    far (:func:`matmech.optimizers.dispatch.fit_families`)."""

    name: str
    fit: Callable[..., FamilyFit]
    models: tuple = MODELS
    structured: bool | Callable[[float], bool] = False
    check: Callable[[LinOp], str | None] | None = None
    auto: Callable[[LinOp, float], bool] | None = None
    lower_bound: Callable[[LinOp, float, float], float | None] | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or self.name == "auto":
            raise ValueError(f"a family needs a name other than 'auto', got {self.name!r}")
        if not callable(self.fit):
            raise TypeError(f"family {self.name!r}: fit must be callable, got {self.fit!r}")
        if not self.models or any(m not in MODELS for m in self.models):
            raise ValueError(
                f"family {self.name!r}: models must be a non-empty subset of {MODELS}, got {self.models!r}"
            )


#: Every family by name, in the order of registration.
FAMILIES: dict[str, Family] = {}


def register_family(family: Family, *, replace: bool = False) -> Family:
    """Add ``family`` to :data:`FAMILIES` (a name taken is refused unless ``replace``)."""
    if not isinstance(family, Family):
        raise TypeError(f"register_family takes a Family, got {type(family).__name__}")
    if family.name in FAMILIES and not replace:
        raise ValueError(f"an optimiser family named {family.name!r} is registered already")
    FAMILIES[family.name] = family
    return family


def _needs_kron(method):
    def check(W):
        if marginal_workloads.kron_blocks(W) is None:
            return f"method={method!r} needs a Kronecker workload or a union of Kronecker products over the same attributes"
        return None

    return check


def _needs_marginals(W):
    if marginal_workloads.expand_marginals(W) is None:
        return "method='marginals' needs a union of marginals (workloads.marginals); this workload is not one"
    return None


# -- the built-in families ------------------------------------------------------------------------


def _theta_by_subset(theta, k):
    """The positive lattice weights θ by attribute subset (bit i of the index: attribute i)."""
    return {
        tuple(i for i in range(k) if (m >> i) & 1): float(t) for m, t in enumerate(theta) if t > 0
    }


def _fit_marginals(W, eps, delta, *, restarts, rng, report, **_):
    report(0.0, "marginal lattice")
    params: dict = {}
    Wm = marginal_workloads.expand_marginals(W)
    if Wm is not W:
        params["expanded_marginals"] = len(Wm.blocks)
    fit = (
        marginal_lattice.optimize_marginals_pure(Wm, restarts=restarts, rng=rng)
        if delta == 0
        else marginal_lattice.optimize_marginals_l2(Wm)
    )
    params["theta"] = _theta_by_subset(fit.theta, len(fit.strategy.domain))
    # W_err: a workload with the same gram, on which the error has a cheap form
    return FamilyFit(fit.strategy, fit.gap, params, error_workload=Wm)


def _fit_gmarginals(W, eps, delta, *, restarts, rng, report, shared=None, **_):
    report(0.0, "generalised marginal lattice")
    kron_factors = None if shared is None else shared.get("kron_factors")
    given = None
    if kron_factors is not None:  # a single Kronecker workload: the kron family's factor fits
        given = {i: f.theta for i, f in enumerate(kron_factors) if isinstance(f, PIdentity)}
    fit = general_marginals.optimize_general_marginals(
        W, restarts=restarts, rng=rng, factor_thetas=given or None, norm=2 if delta > 0 else 1
    )
    strategy = fit.strategy
    k = len(strategy.domain_sizes)
    params: dict = {}
    params["theta"] = _theta_by_subset(fit.theta, k)
    params["factors"] = tuple(type(f).__name__ for f in strategy.factors)
    params["error_kind"] = "exact (factored)"
    unit = noise_variance(eps, delta, sensitivity=1.0)
    if delta > 0:
        params["weights"] = (
            "lattice weights re-optimised for the L2 (Gaussian) error, factors from the pure-eps fit"
        )

    def error():  # run after the fit is timed
        return unit * general_marginal_error.general_marginal_error(
            W, strategy, p=2 if delta > 0 else 1
        )

    return FamilyFit(strategy, None, params, error=error)


def _fit_unions(W, eps, delta, *, report, **_):
    report(0.0, "Gaussian planner for unions of Kronecker products")
    fit = opt_unions.optimize_unions(W)
    params = {**dict(fit.params), "plan": fit.kind, "error_kind": "exact (factored)"}
    unit = noise_variance(eps, delta, sensitivity=1.0)
    if fit.bound is not None:
        params["class_bound"] = unit * fit.bound
    return FamilyFit(fit.strategy, None, params, error=unit * fit.value)


def _fit_kronstack(W, eps, delta, *, report, shared=None, **_):
    report(0.0, "union of Kronecker products")
    prefit = None if shared is None else shared.get("factor_fits")
    fit = opt_kronstack.optimize_kron_stack(
        W, prefit=prefit if delta == 0 else None, norm=1 if delta == 0 else 2
    )
    params = {
        "terms": fit.terms,
        "weights": fit.weights,
        "error_kind": "exact" if fit.exact else "upper bound (each group from its own term)",
    }
    if prefit:
        params["reused_factor_fits"] = len(prefit)
    error = noise_variance(eps, delta, sensitivity=1.0) * fit.value
    return FamilyFit(fit.strategy, None, params, error=error)


def _kronstack_bound(W, eps, delta):
    """A lower bound on the kronstack family's error on more than
    :data:`~matmech.optimizers.kronstack.EXACT_N` cells, where it reports its group bound
    (:func:`~matmech.optimizers.kronstack.value_lower_bound`); None below."""
    if W.shape[1] <= opt_kronstack.EXACT_N:
        return None
    value = opt_kronstack.value_lower_bound(W, norm=1 if delta == 0 else 2)
    return noise_variance(eps, delta, sensitivity=1.0) * value


def _fit_kron(
    W, eps, delta, *, restarts, rng, maxiter, time_limit, report, cutoff=None, shared=None
):
    strategy, params = fit_kron(
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
    trace = params.pop("trace", None)
    if trace is not None and delta > 0:
        # a union under (ε, δ): the descent's own Σ_k v_k² Πᵢ trace(G_ik (AᵢᵀAᵢ)⁺) of factors
        # with unit L2 sensitivity is the exact error per unit noise variance (no dense pass)
        return FamilyFit(
            strategy, gap, params, error=noise_variance(eps, delta, sensitivity=1.0) * trace
        )
    return FamilyFit(strategy, gap, params)


def _fit_sdp(W, eps, delta, *, report, **_):
    n = W.shape[1]
    if n > opt_l2.MAX_SDP_N:
        raise ValueError(
            f"method='sdp' is limited to n <= {opt_l2.MAX_SDP_N} cells, got n={n}; "
            "use method='l2' (the scalable dual iteration, certified by its duality gap)"
        )
    report(0.0, f"cvxpy SDP, n={n}")
    fit = opt_l2.sdp_l2(W.gram())
    params = {"trace": fit.value, "dual_trace": fit.dual}
    return FamilyFit(fit.strategy, max(fit.gap, 0.0), params)


def _fit_l2(W, eps, delta, *, maxiter, time_limit, report, **_):
    n = W.shape[1]
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
    params = {"trace": fit.value, "dual_trace": fit.dual, "iterations": fit.iterations}
    return FamilyFit(fit.strategy, max(fit.gap, 0.0), params)


def _fit_pidentity(W, eps, delta, *, restarts, rng, maxiter, time_limit, report, **_):
    n = W.shape[1]
    if (
        n > opt_pure.MAX_PIDENTITY_N
    ):  # p-Identity's dense n×n work does not fit: the best exact hierarchy
        report(0.0, f"best hierarchy, n={n}")
        strategy, _, hp = opt_pure.best_hierarchy(W)
        return FamilyFit(strategy, None, {"init": "best hierarchy (exact error, any n)", **hp})
    op = GramOperator.from_workload(W)
    # every start (restarts, plus HDMM's OPT₀ start up to HDMM_START_MAX_N cells) and
    # the polish of the best
    starts = restarts + (n <= opt_pure.HDMM_START_MAX_N) + (n >= opt_pure.WIDE_HAT_MIN_N)
    polish = (
        opt_pure.ONE_D_POLISH if n <= opt_pure.ONE_D_POLISH_MAX_N else opt_pure.default_polish(n)
    )
    cap = (maxiter or opt_pure.default_maxiter(n)) * starts + polish
    count = [0]

    def cb(f):
        count[0] += 1
        if count[0] % 10 == 0:
            report(count[0] / cap, f"iteration {count[0]}, objective {f:.6g}")

    strategy, _, params = fit_1d(
        op,
        0.0,
        restarts=restarts,
        rng=rng,
        maxiter=maxiter,
        time_limit=time_limit,
        callback=cb,
        polish=polish,
    )
    return FamilyFit(strategy, None, params)


for _family in (
    Family("sdp", _fit_sdp, models=("l2",)),
    Family("l2", _fit_l2, models=("l2",)),
    # p-Identity up to MAX_PIDENTITY_N cells (within the dense limit), above it a hierarchy
    Family("pidentity", _fit_pidentity, models=("pure",), structured=True),
    # Kronecker products of 1-D fits (each factor within the dense limit): structured
    Family("kron", _fit_kron, structured=True, check=_needs_kron("kron")),
    # pure ε: weighted marginals, rounded to a structured operator; L2: the residual basis
    Family("marginals", _fit_marginals, structured=lambda d: d == 0, check=_needs_marginals),
    Family("gmarginals", _fit_gmarginals, check=_needs_kron("gmarginals")),
    Family(
        "kronstack",
        _fit_kronstack,
        check=_needs_kron("kronstack"),
        lower_bound=_kronstack_bound,
    ),
    Family("unions", _fit_unions, models=("l2",), check=_needs_kron("unions")),
):
    register_family(_family)


# -- method choice ------------------------------------------------------------------------------


def histogram_refusal(name: str, W: LinOp, delta: float) -> str | None:
    """Why a release could not measure family ``name``'s strategy for W on the histogram of
    W's columns, or None; decided from the family's record and W's size alone, before
    optimising (a real-valued strategy without a structured inverse has its gram inverted
    densely: :func:`matmech.linalg.structured.pinv_gram`)."""
    family = FAMILIES[name]
    structured = family.structured(delta) if callable(family.structured) else family.structured
    n = W.shape[1]
    if structured or n <= MAX_DENSE_N:
        return None
    return (
        f"{name}: its strategy has no structured inverse, and measuring it on the histogram of "
        f"{n:,} cells would invert its gram densely (limit {MAX_DENSE_N:,} cells)"
    )


def method_names() -> tuple:
    """``"auto"`` and every registered family's name."""
    return ("auto", *FAMILIES)


def _builtin_candidates(W, delta):
    """The built-in families ``method="auto"`` tries, in order (the first is the one reported when
    the results tie). Every applicable multi-attribute family runs and the lowest error is
    kept (HDMM's "best template"); a certified optimum (gap ≤ CERTIFIED_GAP) ends the search."""
    blocks = marginal_workloads.kron_blocks(W)
    multi = blocks is not None and len(blocks[0][1]) > 1
    out = []
    if marginal_workloads.expand_marginals(W) is not None:
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


def auto_families(W, delta):
    """The families ``method="auto"`` tries, in order: the built-in ones
    (:func:`_builtin_candidates`), then every registered family whose ``auto(W, delta)`` says
    so and that optimises for the privacy model."""
    out = _builtin_candidates(W, delta)
    model = "l2" if delta > 0 else "pure"
    return out + [
        f.name
        for f in FAMILIES.values()
        if f.auto is not None and model in f.models and f.name not in out and f.auto(W, delta)
    ]


def check_method(method, delta, W):
    if not isinstance(method, str):
        raise TypeError(
            f"method must be one of {method_names()}, got {type(method).__name__}: {method!r}"
        )
    family = FAMILIES.get(method)
    if family is None and method != "auto":
        raise ValueError(f"method must be one of {method_names()}, got {method!r}")
    if family is None:
        return
    if "pure" not in family.models and delta == 0:
        raise ValueError(
            f"method={method!r} optimises the L2 (Gaussian, delta > 0) error; under pure eps (delta=0) "
            "the L2 optimum is worse than the identity. Use method='pidentity' (or 'auto')"
        )
    if "l2" not in family.models and delta > 0:
        raise ValueError(
            f"method={method!r} optimises the pure-eps (L1) error; for delta > 0 use method='l2', 'kron', 'marginals' (or 'auto')"
        )
    why = None if family.check is None else family.check(W)
    if why:
        raise ValueError(why)
