"""Input and output: workload specs (:mod:`~matmech.io.specs`), stored strategies
(:mod:`~matmech.io.store`) and histograms from records (:mod:`~matmech.sources.histogram`).
"""

__all__: list[str] = []
