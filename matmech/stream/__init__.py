"""Continual release of running totals by matrix factorization (issue 25).

Data-independent: :mod:`~matmech.stream.series`, :mod:`~matmech.stream.blt`,
:mod:`~matmech.stream.factorizations`, :mod:`~matmech.stream.bounds`,
:mod:`~matmech.stream.advise`, :mod:`~matmech.stream.plan`. Reading data:
:mod:`~matmech.stream.state`, :mod:`~matmech.stream.release`, :mod:`~matmech.cli.stream`.
"""

__all__: list[str] = []
