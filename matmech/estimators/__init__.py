"""Measurements → answers with variances and their law: generalised least squares over the
cells, residual reconstruction, the generalised-marginal solve; or a fitted model
(post-processing): :mod:`matmech.estimators.graphical` hands marginal measurements to a
graphical model (private-pgm's ``mbi``, the ``synth`` extra) for non-negative, mutually
consistent marginal tables and synthetic records."""
