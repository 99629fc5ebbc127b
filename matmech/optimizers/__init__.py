"""Strategy optimisers: pure ε (p-Identity, HDMM's OPT₀), L2 / (ε, δ), Kronecker, marginal,
generalised marginal (per-attribute factor strategies on the marginal lattice) and
union-of-Kronecker (HDMM's OPT₊, :mod:`~matmech.optimizers.kronstack`) families. Pure linear
algebra on W: no data, no privacy budget.

:mod:`~matmech.optimizers.dispatch` holds the entry point :func:`matmech.optimize`.
"""
