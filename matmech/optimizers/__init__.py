"""Strategy optimisers: pure ε (p-Identity, HDMM's OPT₀), L2 / (ε, δ), Kronecker and
marginal families. Pure linear algebra on W: no data, no privacy budget.

:mod:`~matmech.optimizers.dispatch` holds the entry point :func:`matmech.optimize`.
"""

__all__: list[str] = []
