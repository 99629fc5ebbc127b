"""Sparse vector technique (SVT) and exponential-mechanism top-c selection.

The private selection step of the matmech pipeline: from a long list of
candidate values (exact query answers, row scores, counts) report *which*
candidates are large, paying privacy only for the ones reported.  This module
is the public namespace; the code lives in one module per concept:

================================  ============================================================
:mod:`matmech.svt.core`           [LSL17] Alg. 7 :func:`sparse_vector`, :func:`above_threshold`
:mod:`matmech.svt.interactive`    :class:`SparseVector` (one ``.test(value)`` at a time)
:mod:`matmech.svt.variants`       :func:`sparse_vector_dpbook` (Alg. 2), :func:`sparse_vector_retraversal`
:mod:`matmech.svt.topc`           :func:`exponential_top_c` (exact EM: permute-and-flip, c rounds)
:mod:`matmech.svt.accuracy`       alpha for beta: AboveThreshold, Sparse, EM
:mod:`matmech.svt.calibration`    eps split (Eq. 12), noise scales, grid: :func:`svt_budget`
:mod:`matmech.svt.grid`           exact grid arithmetic, chunked / two-thread noise
:mod:`matmech.svt.checks`         argument checks (run before any randomness)
:mod:`matmech.svt.gap`            [DWZK19] free gap: :func:`noisy_top_c_gap`, :func:`sparse_vector_gap`, :func:`adaptive_sparse_vector`
:mod:`matmech.svt.vector`         Laplace mechanism on the whole vector: :func:`noisy_vector_top_c`, :func:`noisy_vector_threshold`
:mod:`matmech.svt.combine`        the gaps as measurements (:func:`combine_gaps`), :func:`advise_split`
================================  ============================================================

References (all in ``shared/references``):

* **[LSL17]** M. Lyu, D. Su, N. Li, *Understanding the Sparse Vector Technique
  for Differential Privacy*, VLDB 2017.  Alg. 1, 2 and 7, Eq. (12), Thm. 4.7,
  Thm. 4.9 (monotonic queries), Sec. 5 (EM top-c, SVT with retraversal).
* **[DR14]** C. Dwork, A. Roth, *The Algorithmic Foundations of Differential
  Privacy*: AboveThreshold (Alg. 1) and Sparse (Alg. 2), accuracy Thm. 3.24
  (quoted in [LSL17] Sec. 5 and in R. Cummings' lecture notes, Thm. 8).
* **[DWZK19]** Z. Ding, Y. Wang, D. Zhang, D. Kifer, *Free Gap Information from the
  Differentially Private Sparse Vector and Noisy Max Mechanisms*, PVLDB 13(3), 2019:
  Noisy Top-K with Gap, Sparse Vector with Gap, Adaptive SVT, and the combination of
  the gaps with later measurements.
* **[M18]** A. Machanavajjhala, CompSci 590.03 *The Sparse Vector Technique*
  slides, "Sparse Vector Technique: Accuracy".

Which mechanism to use
----------------------
* Stream of queries not known in advance (interactive): :class:`SparseVector`
  or :func:`sparse_vector` (Alg. 7, "SVT-S").
* All candidates known up front (non-interactive): :func:`exponential_top_c`
  is more accurate than any SVT ([LSL17] Sec. 5-6).
* :func:`sparse_vector_dpbook` exists for comparison only; it is the textbook
  Alg. 2 and less accurate than Alg. 7 at the same epsilon.

The non-private variants of [LSL17] Fig. 2 (Alg. 3-6) are deliberately *not*
implemented here; tests keep them as fixtures to show the privacy auditor
catches them.

Noise and exactness
-------------------
All randomness comes from :mod:`matmech.privacy.noise` (``rng=None`` means the secure
CTR_DRBG; pass a ``numpy.random.Generator`` only for reproducible, *not secure*,
runs).  Every comparison ``q_i + nu_i >= T_i + rho`` is done exactly, in int64
units of one power-of-two grid ``g`` shared by values, thresholds and noise
(discrete Laplace on ``g*Z``, cf. Canonne-Kamath-Steinke 2020).  Integer-typed
values are already on the grid (``g <= 1``); any other values are rounded to
the grid, which can move a neighbour's value by up to ``g`` more, so the
sensitivity used for calibration becomes ``sensitivity + g`` (``g`` is a tiny
fraction of every noise scale).  The privacy proofs of [LSL17] carry over to
discrete Laplace noise on the grid because every shift they use is a multiple
of ``g``.
"""

from __future__ import annotations

from matmech.svt.accuracy import above_threshold_alpha, exponential_alpha, sparse_alpha
from matmech.svt.calibration import SVTBudget, SVTCalibration, svt_budget
from matmech.svt.split import optimal_ratio
from matmech.svt.core import SVTResult, above_threshold, sparse_vector
from matmech.svt.interactive import SparseVector, SparseVectorExhausted
from matmech.svt.variants import sparse_vector_dpbook, sparse_vector_retraversal
from matmech.svt.topc import TopCResult, exponential_top_c
from matmech.svt.gap_calibration import GapCalibration, gap_calibration
from matmech.svt.gap import GapResult, adaptive_sparse_vector, noisy_top_c_gap, sparse_vector_gap
from matmech.svt.combine import advise_split, combine_gaps, gap_measurement
from matmech.svt.measurement import GapMeasurement
from matmech.svt.vector import (
    VectorResult,
    joint_sensitivity,
    noisy_vector_threshold,
    noisy_vector_top_c,
)

__all__ = [
    "SVTCalibration",
    "SVTBudget",
    "SVTResult",
    "TopCResult",
    "SparseVector",
    "SparseVectorExhausted",
    "optimal_ratio",
    "svt_budget",
    "sparse_vector",
    "above_threshold",
    "sparse_vector_dpbook",
    "sparse_vector_retraversal",
    "exponential_top_c",
    "above_threshold_alpha",
    "sparse_alpha",
    "exponential_alpha",
    "GapCalibration",
    "gap_calibration",
    "GapResult",
    "noisy_top_c_gap",
    "sparse_vector_gap",
    "adaptive_sparse_vector",
    "GapMeasurement",
    "gap_measurement",
    "combine_gaps",
    "advise_split",
    "VectorResult",
    "joint_sensitivity",
    "noisy_vector_top_c",
    "noisy_vector_threshold",
]
