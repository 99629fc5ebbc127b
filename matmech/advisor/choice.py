"""Choose the strategy to measure for a workload from W, ε, δ alone (no data is read).

Named fixed strategies (per attribute on a product domain), a caller's LinOp, the
optimiser (:func:`matmech.optimize`), or ``"auto"``: the best row of :func:`matmech.advise`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from matmech import strategies as S
from matmech.advisor.advise import advise, optimize_for_histogram
from matmech.advisor.cache import cached_choice
from matmech.advisor.compare import DEFAULT_BRANCHING, domain_of, fixed_candidates
from matmech.error import expected_error
from matmech.linalg.linop import LinOp, as_linop
from matmech.validate import linear

__all__ = ["choose_strategy", "fixed_choice", "per_attribute", "STRATEGY_NAMES"]

STRATEGY_NAMES = ("auto", "identity", "hierarchical", "haar", "optimize")


def per_attribute(W, make):
    """make(n) for a 1-D workload; the Kronecker product of make(n_i) over a product domain."""
    dom = domain_of(W)
    return make(dom[0]) if len(dom) == 1 else S.kron(*[make(d) for d in dom])


def _optimiser_choice(W, eps, delta, neighbors):
    """(A, note): the best strategy of :func:`matmech.advise`."""
    advice = advise(
        W, eps, delta, neighbors=neighbors
    )  # no clock: the choice does not depend on load
    best = advice.best_row
    skipped = (
        f"; not ranked (reasons in matmech.advise): {', '.join(r.name for r in advice.skipped)}"
        if advice.skipped
        else ""
    )
    return (
        best.strategy,
        f"chosen by matmech.advise ({best.name}); best of {len(advice.rows)} ranked, no time limit{skipped}",
    )


def choose_strategy(W, eps, delta=0.0, *, strategy="auto", neighbors="add_remove"):
    """(A, name, note): the strategy to measure for W; reads no data.

    ``strategy``: a LinOp (used as is), ``"identity"``, ``"hierarchical"`` (branching
    :data:`~matmech.advisor.compare.DEFAULT_BRANCHING`, per attribute on a product domain),
    ``"haar"``, ``"optimize"`` (matmech.optimize), or ``"auto"``: the best strategy of
    matmech.advise.
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
    if strategy == "optimize":  # only families the histogram can measure, refused up front
        res, note = optimize_for_histogram(W, eps, delta)
        return res.strategy, "optimized", note
    A, note = cached_choice(
        W, eps, delta, neighbors, lambda: _optimiser_choice(W, eps, delta, neighbors)
    )
    return A, "auto", note


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
