"""Choose what to measure for a workload from W, ε, δ alone (no data is read).

Named fixed strategies (per attribute on a product domain), a caller's LinOp, or a view of
the one planner (:func:`matmech.advise`): ``"auto"`` is its best row, ``"optimize"`` its best
single optimiser-family row (one family's plan, measured on the route its strategy needs),
so the table, ``auto`` and ``optimize`` never disagree.
:func:`matmech.plans.planned.choose_plan` builds the runnable plan of those rows;
:func:`choose_strategy` returns the strategy of the best row that is a single strategy on
the histogram (what the selection paths measure).
"""

from __future__ import annotations


import numpy as np
import scipy.sparse as sp

from matmech import strategies as S
from matmech.advisor.advise import advise
from matmech.advisor.cache import cached_choice
from matmech.advisor.compare import DEFAULT_BRANCHING, domain_of, fixed_candidates
from matmech.error import expected_error
from matmech.linalg.linop import LinOp, as_linop
from matmech.validate import linear


STRATEGY_NAMES = ("auto", "identity", "hierarchical", "haar", "optimize")
#: The strategy names the planner decides (every other name or a LinOp is measured as given).
PLANNED = ("auto", "optimize")


def per_attribute(W, make):
    """make(n) for a 1-D workload; the Kronecker product of make(n_i) over a product domain."""
    dom = domain_of(W)
    return make(dom[0]) if len(dom) == 1 else S.kron(*[make(d) for d in dom])


def planned(W, eps, delta=0.0, *, neighbors="add_remove", search="auto"):
    """The planner's :class:`~matmech.advisor.advice.Advice` for W (no clock: it does not
    depend on load), computed once per (W, ε, δ, neighbours, search) and then reused."""
    return cached_choice(
        W,
        eps,
        delta,
        neighbors,
        lambda: advise(W, eps, delta, neighbors=neighbors, search=search),
        extra=("advice", search),
    )


def view(advice, strategy):
    """The rows ``strategy`` ("auto" or "optimize") may pick from, best first."""
    if strategy == "auto":
        return list(advice.rows)
    return [r for r in advice.rows if r.family is not None and r.kind != "split"]


def refusal(strategy, W, advice, tried):
    skipped = "; ".join(f"{r.name}: {r.skipped}" for r in advice.skipped if r.family is not None)
    failed = "; ".join(f"{name}: {why}" for name, why in tried)
    if strategy == "optimize":
        return (
            f"strategy='optimize': no optimiser family that fits W gives a plan a release can run "
            f"for W's {W.shape[1]:,} cells ({'; '.join(x for x in (skipped, failed) if x)}); use "
            "strategy='auto' or a structured strategy (identity, hierarchical, Haar)"
        )
    return f"strategy='auto': no ranked plan could be built ({failed})"


def choose_strategy(W, eps, delta=0.0, *, strategy="auto", neighbors="add_remove"):
    """(A, name, note): the strategy to measure for W on its histogram; reads no data.

    ``strategy``: a LinOp (used as is), ``"identity"``, ``"hierarchical"`` (branching
    :data:`~matmech.advisor.compare.DEFAULT_BRANCHING`, per attribute on a product domain),
    ``"haar"``, ``"optimize"`` (the best optimiser-family strategy row of matmech.advise), or
    ``"auto"``: the best strategy row of matmech.advise (a release with ``"auto"`` runs the
    best row of any kind: :func:`choose_plan`).
    """
    W = as_linop(linear(W, "W"))
    if isinstance(strategy, (np.ndarray, list, tuple)) or sp.issparse(strategy):
        strategy = as_linop(linear(strategy, "strategy"))
    if isinstance(strategy, LinOp):
        return strategy, type(strategy).__name__, "given by the caller"
    if not isinstance(strategy, str):
        raise TypeError(
            f"strategy must be a LinOp or one of {STRATEGY_NAMES}, got {type(strategy).__name__}: {strategy!r}"
        )
    if strategy not in STRATEGY_NAMES:
        raise ValueError(f"strategy must be a LinOp or one of {STRATEGY_NAMES}, got {strategy!r}")
    if strategy == "identity":
        return per_attribute(W, S.identity), "identity", "given by name"
    if strategy == "hierarchical":
        return (
            per_attribute(W, lambda d: S.hierarchical(d, DEFAULT_BRANCHING)),
            f"hierarchical b={DEFAULT_BRANCHING}",
            "given by name",
        )
    if strategy == "haar":
        return per_attribute(W, S.haar), "haar", "given by name"
    advice = planned(W, eps, delta, neighbors=neighbors)
    rows = [
        r
        for r in view(advice, strategy)
        if r.kind == "strategy" and r.strategy is not None and r.strategy.shape[1] == W.shape[1]
    ]  # strategies over W's own cells (not the marginal of its support)
    if not rows:
        raise ValueError(refusal(strategy, W, advice, []))
    best = rows[0]
    note = (
        f"chosen by matmech.advise ({best.name}); best of {len(rows)} strategies on the histogram, "
        "no time limit"
    )
    return best.strategy, "auto" if strategy == "auto" else "optimized", note


def fixed_choice(W, eps, delta, neighbors):
    """(A, name, note): the member of the listed fixed family (identity, hierarchical,
    Haar: :func:`~matmech.advisor.compare.fixed_candidates`) of least error."""
    best = None
    for name, A in fixed_candidates(W, workload=False):
        try:
            err = expected_error(W, A, eps, delta, neighbors=neighbors, noise="continuous")
        except ValueError:
            continue  # cannot answer W, or no structured inverse at this size
        if best is None or err < best[0]:
            best = (err, name, A)
    if best is None:
        raise ValueError(
            "none of the fixed strategies (identity, hierarchical, Haar) can answer this workload"
        )
    return best[2], best[1], "least expected error among identity/hierarchical/Haar"
