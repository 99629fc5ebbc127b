"""Measurements → answers with variances and their law: generalised least squares over the
cells, residual reconstruction, the generalised-marginal solve."""
