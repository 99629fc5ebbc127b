"""Every single plan a release can run for one workload, each scored by its exact expected
error from W, ε, δ and the neighbour relation alone (issue 32; no data is read).

A plan answers a :class:`PlanningTarget`: the rows W (over the whole domain) read for planning, its
Kronecker terms, its *support* U (the attributes where some term is not a total) and the
workload its strategies are fitted to (W itself when U is every attribute, else W restricted
to U, :func:`matmech.linalg.terms.restrict`: the marginal on U is all a plan needs to read).
The kinds of plan (:attr:`~matmech.advisor.compare.Candidate.kind`):

* ``"strategy"`` — a strategy measured on the histogram of the support (Li et al., PODS
  2010): the fixed candidates (the identity, the best hierarchies, Haar; per attribute on a
  product domain: :mod:`matmech.advisor.candidates`), W itself, and every optimiser family
  of :func:`matmech.optimizers.families.auto_families` whose strategy the histogram route can
  measure (:func:`unmeasurable`);
* ``"residual"`` — the tables route's residual plan for a union of marginals (Xiao et al.,
  NeurIPS 2023; pure ε: weighted marginal tables, HDMM's OPT_M, McKenna et al. VLDB 2018);
* ``"gmarginal"`` — a generalised marginal strategy (McKenna et al. 2018, §6.3) measured
  from marginal tables, on any domain size (:mod:`matmech.plans.gmarginal`).

Each row carries the ``recipe`` of the plan a release runs
(:func:`matmech.plans.planned.build_plan`); :mod:`matmech.advisor.split` composes them
into split plans and :mod:`matmech.advisor.advise` ranks everything. Figures use continuous noise (2Δ₁²/ε² or
σ²; they scale exactly as 1/ε² or 1/ρ, which the split's budget shares use); a release draws
the exact discrete noise, whose variance is at most that (``Release.expected_error``).

Cheap bounds skip what cannot win: a family whose strategy the histogram route cannot measure
on the support's cells is not fitted (:func:`~matmech.optimizers.families.histogram_refusal`;
the generalised marginal families are measured from tables instead); a union of marginals on
two or more attributes gets the residual plan, which under (ε, δ) attains the SVD lower bound
(so nothing else is tried), and under pure ε searches a set of table weightings that contains
every fixed candidate and the marginal family's lattice (so that family is not fitted again).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from matmech.advisor.candidates import attributes, searched_fixed, workload_strategy
from matmech.advisor.compare import Candidate, evaluate
from matmech.error import sensitivity
from matmech.privacy.calibration import noise_variance
from matmech.linalg.linop import MAX_DENSE_ROUNDING, Kron, LinOp, Scaled
from matmech.linalg.terms import MarginalWorkload, as_terms, restrict
from matmech.linalg.structured import MAX_DENSE_N
from matmech.optimizers.blas import blas_threads
from matmech.optimizers.dispatch import fit_families
from matmech.optimizers.families import auto_families, histogram_refusal
from matmech.optimizers.general_marginal_error import GeneralMarginalStrategy
from matmech.optimizers.residual import marginal_lattice_plan, residual_total


#: The fixed families among :data:`matmech.advisor.advise.CANDIDATES`.
FIXED = ("identity", "hierarchical", "haar")

#: Without a time budget, the pure-ε optimiser of a 1-D workload runs up to this many cells
#: (a work rule, not a clock: at 8192 one start alone took 50-80 s on a busy two-core machine
#: and lost to the best hierarchy); above it the exact hierarchy search is the answer.
DEFAULT_PIDENTITY_N = 4096
#: Families whose strategies (generalised marginals) are measured from marginal tables when
#: the histogram route cannot measure them (:func:`~matmech.optimizers.families.histogram_refusal`
#: does not decide for them).
TABLE_FAMILIES = ("gmarginals", "unions")
#: A candidate within this relative distance of the SVD lower bound attains it (the bound
#: holds for every strategy, so nothing can improve on it).
BOUND_ATTAINED = 1e-9


def unmeasurable(A):
    """Why :func:`matmech.release` cannot measure strategy A on the histogram, or None.

    A real-valued strategy is measured rounded to a power-of-two grid
    (:mod:`matmech.privacy.measure`); the rounding keeps the structure of Kronecker factors
    and of a scaled integer matrix, and otherwise gives a plain matrix, whose gram is
    inverted densely: refused past :data:`~matmech.linalg.structured.MAX_DENSE_N` cells (or
    past :data:`~matmech.linalg.linop.MAX_DENSE_ROUNDING` entries without a structured
    rounding). Data-independent; conservative (a refusal names the limit)."""
    if isinstance(A, Kron):
        return next((why for why in map(unmeasurable, A.factors) if why), None)
    if A.integer_valued() or (isinstance(A, Scaled) and A.base.integer_valued()):
        return None
    if (
        getattr(A, "rounded_operator", None) is not None
    ):  # rounds to a structured operator (marginals)
        return None
    m, n = A.shape
    if n > MAX_DENSE_N:
        return (
            f"release measures a real-valued strategy rounded to a grid, and the rounded matrix over {n:,} cells "
            f"has no structured inverse (dense limit {MAX_DENSE_N:,} cells)"
        )
    if type(A).rounded_matrix is LinOp.rounded_matrix and m * n > MAX_DENSE_ROUNDING:
        return f"release cannot round this real-valued strategy to a grid without materialising {m * n:,} entries"
    return None


# -- the workload a plan answers ------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class PlanningTarget:
    """W (the rows, over the whole domain) read for planning: ``terms`` (None: no Kronecker
    form, one attribute of W's columns), the support ``U`` and ``fit``, the workload the
    strategies are fitted to (W, or W restricted to U when U is not every attribute)."""

    W: Any
    terms: Any
    U: tuple | None
    fit: Any

    @property
    def sizes(self) -> tuple:
        return tuple(self.terms.domain) if self.terms is not None else (int(self.W.shape[1]),)

    @property
    def local(self) -> bool:
        """True when the plans read the marginal on U, not the whole histogram."""
        return (
            self.terms is not None and self.U is not None and len(self.U) < len(self.terms.domain)
        )

    @property
    def marginal_attributes(self) -> int:
        """The number of attributes of a union of marginals (0 when W is not one)."""
        if self.terms is None or self.terms.marginals() is None:
            return 0
        return len(self.terms.domain)


def target_of(W) -> PlanningTarget:
    """The :class:`PlanningTarget` of W (reads no data)."""
    try:
        wt = as_terms(W, name="W")
    except (TypeError, ValueError):
        return PlanningTarget(W, None, None, W)
    U = wt.support or (0,)
    if len(U) == len(wt.domain) or isinstance(W, MarginalWorkload):
        return PlanningTarget(W, wt, U, W)
    return PlanningTarget(W, wt, U, restrict(wt, U))


@dataclass(frozen=True)
class Context:
    """The job's privacy parameters and planning options: ``bound`` the SVD lower bound of
    the workload being ranked (None inside a split's parts), ``search`` the pure-ε residual
    table search (:func:`matmech.release.release_factored`), ``part`` whether a
    split's part is planned."""

    eps: float
    delta: float
    neighbors: str
    bound: float | None = None
    search: str = "auto"
    #: True while planning a split's part (the cheaper rules: no optimiser family for a
    #: union of marginals, whose residual plan covers them).
    part: bool = False


def skipped(name, reason, seconds=0.0, **fields) -> Candidate:
    """A row that is not ranked, with the reason."""
    return Candidate(name=name, seconds=seconds, skipped=reason, **fields)


# -- rows -----------------------------------------------------------------------------------------


def lift(A: GeneralMarginalStrategy, U, sizes) -> GeneralMarginalStrategy:
    """A generalised marginal strategy over the attributes U (sorted) of ``sizes`` as the same
    strategy over every attribute (its subsets renumbered; identity factors elsewhere, in no
    subset)."""
    k = len(sizes)
    theta = np.zeros(1 << k)
    for mask in np.flatnonzero(A.theta > 0).tolist():
        theta[sum(1 << U[i] for i in range(len(U)) if (mask >> i) & 1)] = A.theta[mask]
    factors = [None] * k
    for i, f in zip(U, A.factors):
        factors[i] = f
    return GeneralMarginalStrategy(sizes, theta, factors)


def strategy_row(
    ctx, t, name, params, A, *, family=None, seconds=None, reason="", note="", total=None
):
    """The ranked row of strategy A for ``t`` (or a skipped one: it cannot answer W, is too
    big to score, or the histogram route cannot measure it). ``total``: A's total error
    (continuous noise) when known (an optimiser family's own exact figure), else computed."""
    t0 = time.perf_counter()
    why = unmeasurable(A)  # advise ranks only what release can measure (issue 22)
    if why is not None:
        return skipped(name, why, time.perf_counter() - t0, family=family)
    note = note or (
        "given by name" if family is None else f"optimised by matmech.optimize ({family})"
    )
    fields = dict(kind="strategy", family=family, reason=reason)
    fields["recipe"] = {"target": t, "note": note}
    if total is not None:
        m = t.W.shape[0]
        try:
            sens = sensitivity(A, 1 if ctx.delta == 0 else 2, ctx.neighbors)
        except (ValueError, MemoryError):
            sens = None
        return Candidate(
            name=name,
            sensitivity=sens,
            total=total,
            rmse=math.sqrt(total / m),
            ratio_to_bound=total / ctx.bound if ctx.bound else None,
            seconds=seconds or 0.0,
            strategy=A,
            params=params,
            **fields,
        )
    try:
        row = evaluate(
            t.fit,
            A,
            ctx.eps,
            ctx.delta,
            name=name,
            bound=ctx.bound,
            neighbors=ctx.neighbors,
            params=params,
            # the largest variance goes row by row: for one attribute only (a display figure;
            # on a product domain it cost more than the ranking)
            max_variance=len(t.sizes) == 1,
        )
    except (ValueError, MemoryError, np.linalg.LinAlgError) as exc:
        return skipped(name, str(exc), time.perf_counter() - t0, family=family)
    return replace(row, seconds=time.perf_counter() - t0 if seconds is None else seconds, **fields)


def residual_row(ctx, t):
    """The tables route's residual plan of ``t`` (a union of marginals)."""
    t0 = time.perf_counter()
    name = "residual (tables)"
    try:
        subsets, weights = t.terms.marginals()
        plan = marginal_lattice_plan(t.terms.domain, subsets, weights, ctx.delta, search=ctx.search)
        total = residual_total(plan, ctx.eps, ctx.delta, ctx.neighbors)
    except (ValueError, MemoryError) as exc:
        return skipped(
            name, str(exc), time.perf_counter() - t0, kind="residual", family="marginals"
        )
    m = t.W.shape[0]
    model = (
        "weighted marginal tables, discrete Laplace"
        if ctx.delta == 0
        else "residual basis, discrete Gaussian"
    )
    return Candidate(
        name=name,
        total=total,
        rmse=math.sqrt(total / m),
        ratio_to_bound=total / ctx.bound if ctx.bound else None,
        seconds=time.perf_counter() - t0,
        params={"plan": model},
        kind="residual",
        family="marginals",
        reason=(
            "a union of marginals: the residual basis of Xiao et al. 2023 from marginal tables"
            + (", the Gaussian optimum (it attains the SVD bound)" if ctx.delta > 0 else "")
        ),
        recipe={"target": t, "search": ctx.search},
    )


def gmarginal_row(ctx, t, A, name, params, *, family, error, seconds):
    """A generalised marginal strategy (fitted to ``t.fit``) measured from marginal tables."""
    if t.terms is None:
        return skipped(
            name, "a generalised marginal strategy needs W's Kronecker terms", family=family
        )
    full = lift(A, t.U, t.sizes) if t.local else A
    m = t.W.shape[0]
    note = f"optimised by matmech.optimize ({family}), measured from marginal tables"
    return Candidate(
        name=name,
        total=error,
        rmse=math.sqrt(error / m),
        ratio_to_bound=error / ctx.bound if ctx.bound else None,
        seconds=seconds,
        strategy=full,
        params=params,
        kind="gmarginal",
        family=family,
        reason="a generalised marginal strategy, measured from the marginal tables of its subsets",
        recipe={"target": t, "note": note},
    )


def optimizer_params(fam):
    """The short parameters of a family's result shown in the table."""
    params = {"method": fam.family}
    if fam.gap is not None:
        params["gap"] = fam.gap
    params.update(
        {k: fam.params[k] for k in ("p", "init", "iterations", "rounds") if k in fam.params}
    )
    return params


def _family_refusal(t, family, delta):
    """A family's known inability on the histogram route (decided before fitting), or None."""
    if family in TABLE_FAMILIES and t.terms is not None:
        return None  # measured from marginal tables when the histogram cannot
    why = histogram_refusal(family, t.fit, delta)
    return None if why is None else why.split(": ", 1)[-1]


def family_rows(ctx, t, *, rng=None, time_limit=None, report=None, only=None):
    """One row per optimiser family fitted to ``t.fit`` (:func:`fit_families`): a strategy
    row, a generalised-marginal (tables) row, or a skipped row with the reason (``only``:
    fit only these of them)."""
    W = t.fit
    families = auto_families(W, ctx.delta)
    if only is not None:
        families = [f for f in families if f in only]
        if not families:
            return []
    refused = {f: _family_refusal(t, f, ctx.delta) for f in families}
    rows = []
    with blas_threads(1):
        for fam in fit_families(
            W,
            ctx.eps,
            ctx.delta,
            families,
            restarts=2 if rng is not None else 1,
            rng=rng,
            time_limit=time_limit,
            report=report,
            skip=lambda f, best: refused.get(f),
        ):
            name = f"optimized ({fam.family})"
            if fam.failed is not None:
                rows.append(skipped(name, fam.failed.removeprefix("skipped: "), family=fam.family))
                continue
            params = optimizer_params(fam)
            A = fam.strategy
            fit = dict(family=fam.family, seconds=fam.seconds)
            if unmeasurable(A) is not None and isinstance(A, GeneralMarginalStrategy):
                rows.append(gmarginal_row(ctx, t, A, name, params, error=fam.error, **fit))
            else:
                rows.append(strategy_row(ctx, t, name, params, A, total=fam.error, **fit))
    return rows


def fixed_rows(ctx, t, wanted):
    """The wanted fixed candidates of ``t`` (one BLAS thread: many small dense solves)."""
    with blas_threads(1):
        try:
            fixed = searched_fixed(t.fit, ctx.delta)
        except (ValueError, MemoryError) as exc:
            return [skipped("fixed candidates", str(exc))]
        out = []
        for name, params, A in fixed:
            family = "hierarchical" if name.startswith("hierarchical") else name
            if family in wanted or (
                name == "best fixed per attribute" and set(FIXED) <= set(wanted)
            ):
                out.append(strategy_row(ctx, t, name, params, A))
        return out


def _factor_rank(f):
    """rank of a 1-D factor: its own ``rank()``, the identity's n, a single row's 1, a small
    dense factor's numerical rank, else 1 (a lower bound)."""
    rank = getattr(f, "rank", None)
    if rank is not None:
        return int(rank())
    m, n = f.shape
    if m == 1:
        return 1
    if m * n <= 1 << 20:
        return int(np.linalg.matrix_rank(f.dense()))
    return 1


def rank_lower_bound(W) -> int:
    """A lower bound on rank W: the largest rank of one of its Kronecker terms (the product of
    its factors' ranks), or 1."""
    from matmech.linalg.products import product_terms

    terms = product_terms(W)
    if terms is None:
        return 1
    return max(math.prod(_factor_rank(f) for f in term.factors) for term in terms)


def workload_row(ctx, t, rows):
    """W itself as the strategy, unless a cheap bound shows it cannot beat the best row so
    far: with A = W the total error is the unit noise variance times rank W (Li et al.,
    VLDB J. 2015, §5), at least the unit variance times :func:`rank_lower_bound`."""
    A = workload_strategy(t.fit)
    best = min((r.total for r in rows if r.skipped is None), default=math.inf)
    if A is t.fit or A is getattr(t.fit, "base", None):
        try:
            p = 1 if ctx.delta == 0 else 2
            unit = noise_variance(ctx.eps, ctx.delta, sensitivity=sensitivity(A, p, ctx.neighbors))
            bound = unit * rank_lower_bound(A)
        except (ValueError, MemoryError):
            bound = 0.0
        if bound >= best:
            return skipped(
                "workload",
                "cannot win: as its own strategy W's total error is its unit noise variance "
                "times rank W, already above the best row's",
            )
    return strategy_row(ctx, t, "workload", {}, A)


def attains_bound(rows, bound) -> bool:
    """Whether a ranked row attains the SVD lower bound ``bound`` (nothing can do better)."""
    return bool(bound) and any(
        r.skipped is None and r.total <= bound * (1 + BOUND_ATTAINED) for r in rows
    )


def single_rows(ctx, t, wanted, *, rng=None, time_left=None, report=None, default_budget=True):
    """Every single (unsplit) plan of ``t`` the ``wanted`` candidate families allow, ranked
    or skipped with the reason (:data:`matmech.advisor.advise.CANDIDATES` names)."""
    report = report or (lambda fraction, message: None)
    rows: list = []
    tables = t.marginal_attributes >= 2
    if tables and "tables" in wanted:
        rows.append(residual_row(ctx, t))
        if isinstance(t.W, MarginalWorkload) or (ctx.delta > 0 and rows[-1].skipped is None):
            why = (
                "the residual plan attains the SVD lower bound"
                if ctx.delta > 0
                else "a marginal workload described by its subsets only: the tables route"
            )
            return rows + [skipped(c, why) for c in wanted if c not in ("tables", "split")]
    fixed = [c for c in wanted if c in FIXED]
    if fixed:
        report(0.05, "fixed candidates")
        rows += fixed_rows(ctx, t, fixed)
    if "workload" in wanted:
        report(0.15, "workload as strategy")
        rows.append(workload_row(ctx, t, rows))
    if "optimized" not in wanted:
        return rows
    if attains_bound(rows, ctx.bound):
        return rows + [skipped("optimized", "a candidate already attains the SVD lower bound")]
    if (
        default_budget
        and ctx.delta == 0
        and len(attributes(t.fit) or [t.fit]) == 1
        and t.fit.shape[1] > DEFAULT_PIDENTITY_N
    ):
        return rows + [
            skipped(
                "optimized",
                f"the pure-eps optimiser on {t.fit.shape[1]:,} > {DEFAULT_PIDENTITY_N:,} "
                "cells takes minutes; call optimize(W, eps) to run it",
            )
        ]
    limit = None if time_left is None else time_left()
    if limit is not None and limit <= 0:
        return rows + [skipped("optimized", "time budget exhausted")]
    only = None
    if tables and "tables" in wanted and rows[0].skipped is None:
        why = (
            "a union of marginals: the residual plan's table weights are searched over "
            "the marginal lattice (HDMM's OPT_M), the family the optimisers would fit"
        )
        if ctx.part:
            return rows + [skipped("optimized", why)]
        only = ("marginals",)  # the same family on the histogram (what choose_strategy measures)
    report(0.2, "optimising")
    rows += family_rows(
        ctx,
        t,
        rng=rng,
        time_limit=limit,
        report=lambda f, m: report(0.2 + 0.6 * f, m),
        only=only,
    )
    return rows
