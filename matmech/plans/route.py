"""Which route a release takes: the explicit histogram or marginal tables (data-independent).

The route follows from the workload W, the strategy and the domain alone, never from the
form of the data (a histogram, records, marginal tables, an engine) nor from a cell count:

* ``"tables"`` — W is a union of marginals (identity and total factors) over two or more
  attributes and the strategy is ``"auto"``, or ``"optimize"`` under (ε, δ) (or
  ``strategy="residual"`` on any union of marginals). Under (ε, δ) the residual basis is the
  optimiser's best there is: it attains the SVD lower bound on the total squared error of
  every strategy (Xiao et al. 2023, Thm. 3; Li et al. 2015), so ``"optimize"`` measures it. The release measures the residual basis of Xiao et al.
  (NeurIPS 2023) from marginal tables: under (ε, δ) the Gaussian optimum, which attains the
  SVD bound; under pure ε weighted marginal tables with exact discrete Laplace noise (the
  family of HDMM's OPT_M, McKenna et al. VLDB 2018 §6.3). A histogram x is summed into the
  tables the plan asks for; the full histogram is never needed.
* ``"histogram"`` — everything else: the strategy is measured on the histogram of W's
  support (:func:`matmech.release`; records and engines hand out that marginal).

The same rule serves :func:`matmech.release` and
:func:`matmech.release.release_factored`, so every data form of one job takes the
same mechanism.

For ``"auto"`` and ``"optimize"`` (without ``select``) the plan itself is the planner's
(:mod:`matmech.advisor.planner`, :func:`matmech.plans.planned.choose_plan`: a strategy on
the marginal of W's support, the residual plan, a generalised marginal plan or a split, every
one read from marginal tables of any data form); this rule then only says which form of the
data to read first (``matmech release`` counts a file into marginal tables on the tables
route), and is the route of named strategies and selections.
"""

from __future__ import annotations

from dataclasses import dataclass

from matmech.linalg.terms import as_terms
from matmech.linalg.linop import LinOp


#: The two routes, in the order the rule checks them.
ROUTES = ("tables", "histogram")


@dataclass(frozen=True)
class Route:
    """The route (``"tables"`` or ``"histogram"``) and why, in one sentence (for notes)."""

    name: str
    reason: str


def _marginal_subsets(W):
    """(attribute sizes, subsets) when W is a union of marginals, else None (reads no data)."""
    try:
        terms = as_terms(W, name="W")
    except (TypeError, ValueError):
        return None
    marg = terms.marginals()
    return None if marg is None else (terms.domain, marg[0])


def release_route(W: LinOp, strategy: object = "auto", *, delta: float = 0.0) -> Route:
    """The :class:`Route` of a release of W with ``strategy`` under (ε, ``delta``)
    (data-independent; ε does not change the route).

    ``strategy="residual"`` needs W to be a union of marginals (ValueError otherwise).
    """
    marg = _marginal_subsets(W)
    if isinstance(strategy, str) and strategy == "residual":
        if marg is None:
            raise ValueError(
                "strategy='residual' needs W to be a union of marginals (identity and total factors)"
            )
        return Route(
            "tables", "strategy='residual': the residual basis, measured from marginal tables"
        )
    auto = isinstance(strategy, str) and strategy == "auto"
    optimum = isinstance(strategy, str) and strategy == "optimize" and delta > 0
    if (auto or optimum) and marg is not None and len(marg[0]) >= 2:
        k, d = len(marg[1]), len(marg[0])
        return Route(
            "tables",
            f"a union of {k} marginals over {d} attributes: the residual basis (Xiao et al. "
            "2023), measured from marginal tables"
            if auto
            else f"strategy='optimize' on a union of {k} marginals under (eps, delta): the "
            "optimum is the residual basis (Xiao et al. 2023, it attains the SVD bound), measured "
            "from marginal tables",
        )
    return Route("histogram", "the strategy is measured on the histogram of W's support")
