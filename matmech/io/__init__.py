"""Declarations, read without data: the domain and its attributes (:mod:`~matmech.io.domain`,
:mod:`~matmech.io.declare`), workload specs (:mod:`~matmech.io.specs`), stored strategies
(:mod:`~matmech.io.store`) and answer labels. Reading data is :mod:`matmech.sources`.
"""

__all__: list[str] = []
