"""What a free-gap selection's released outputs measure: :class:`GapMeasurement`.

[DWZK19] Ding, Wang, Zhang, Kifer, PVLDB 13(3) 2019, Sec. "Using the free gap": the gaps of a
selection are noisy *linear* measurements of the selected queries, z = q_S + e with
Cov(e) = diag(d) + s 1 1ᵀ. Each free-gap mechanism states its own form (its output law, the
``law`` hook of :mod:`matmech.svt.methods`); :func:`matmech.svt.combine.gap_measurement`
dispatches to it and :func:`~matmech.svt.combine.combine_gaps` reads the record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from matmech import validate
from matmech.linalg.gls import precision
from matmech.svt.checks import check_threshold


@dataclass(frozen=True)
class GapMeasurement:
    """z = q_S + e over the selected ``positions`` (selection order), Cov(e) = diag(var) + common_var 1 1ᵀ
    (``common_var`` inf: an unknown common offset; 0: none, the entries are independent).

    A frozen record, made by :func:`matmech.svt.combine.gap_measurement`.

    Parameters
    ----------
    positions : numpy.ndarray
        The selected indices.
    z : numpy.ndarray
        The measured values.
    var : numpy.ndarray
        Independent noise variances.
    common_var : float
        Variance of a common offset (inf: unknown offset; 0: none).

    Examples
    --------
    >>> GapMeasurement(np.arange(2), np.zeros(2), np.full(2, 4.0), 0.0).precision().tolist()
    [[0.25, 0.0], [0.0, 0.25]]
    """

    positions: np.ndarray
    z: np.ndarray
    var: np.ndarray
    common_var: float

    def precision(self) -> np.ndarray:
        """G = D⁻¹ − D⁻¹11ᵀD⁻¹ / (1/s + 1ᵀD⁻¹1); exactly D⁻¹ when s = 0 (no common offset):
        :func:`matmech.linalg.gls.precision`."""
        return precision(self.var, self.common_var)


def selected_thresholds(threshold: Any, positions: np.ndarray, method: str) -> np.ndarray:
    """The public threshold of each selected position (float64), checked: a scalar or one
    threshold per candidate (a ValueError naming what is missing)."""
    if threshold is None:
        raise ValueError(f"{method} gaps are relative to the threshold: pass threshold=")
    validate.rectangular(threshold, "threshold")
    t = check_threshold(threshold, None if np.ndim(threshold) == 0 else len(threshold)).astype(
        np.float64
    )
    if t.ndim and positions.size and t.shape[0] <= int(positions.max()):
        raise ValueError(
            f"threshold must be a scalar or one threshold per candidate; it has {t.shape[0]} entries "
            f"but position {int(positions.max())} was selected"
        )
    return t[positions] if t.ndim else np.full(positions.size, float(t))
