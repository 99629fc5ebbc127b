"""Implicit linear operators and their structure: no data, no privacy.

:mod:`~matmech.linalg.linop` (the operator contract and combinators),
:mod:`~matmech.linalg.intervals` (range/prefix workloads by their bounds),
:mod:`~matmech.linalg.spectral` (closed-form spectra).
"""
