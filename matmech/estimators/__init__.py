"""Estimators: measurement records (+ a workload) -> answers or a fitted model (post-processing).

:mod:`matmech.estimators.graphical` hands a release's marginal measurements to a graphical
model (private-pgm's ``mbi``, the ``synth`` extra): non-negative, mutually consistent marginal
tables and synthetic records.
"""

__all__: list[str] = []
