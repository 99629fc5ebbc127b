"""How a sparse vector run spends its budget: the eps split, noise scales and grid.

The free-gap calibrations live in :mod:`matmech.svt.gap_calibration`, the ε split and the
declared grid in :mod:`matmech.svt.split`; both are re-exported here (old import paths).

Data independent.  [LSL17] = Lyu, Su, Li, *Understanding the Sparse Vector
Technique for Differential Privacy*, VLDB 2017 (in ``shared/references``).

* Alg. 7: threshold noise Lap(D/eps1), query noise Lap(2cD/eps2) (Lap(cD/eps2)
  for monotonic queries, Sec. 4.3, Thm. 4.9), numeric answers Lap(cD/eps3).
* Eq. (12): eps1:eps2 = 1:(2c)^(2/3) minimises Var(Lap(D/eps1) - Lap(2cD/eps2));
  1:c^(2/3) for monotonic queries.

All noise of one run lives on one power-of-two grid ``g <= 1`` (discrete
Laplace on g*Z, see :mod:`matmech.privacy.noise`).  Scales are rounded UP to whole grid
steps with exact rational arithmetic, so every scale is at least its nominal
value.  Values that are not integers are snapped to the grid, which adds ``g``
to the sensitivity (:func:`matmech.privacy.noise.snap_sensitivity`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional


from matmech.privacy.calibration import laplace_scale, scale_on_grid
from matmech.privacy.params import calibrated_eps
from matmech.svt.checks import Ratio, check_c, check_eps, check_flag, check_ratio, check_sensitivity
from matmech.svt.split import (
    binary_rest,
    snapped_sensitivity,
    scales_grid,
    split_eps,
)


@dataclass(frozen=True)
class SVTCalibration:
    """How an SVT run spends its budget (data independent; [LSL17] Alg. 7).

    A frozen record, made by :func:`svt_budget` (``SVTBudget`` is the same class).

    ``eps_threshold`` (eps1) buys the threshold noise ``Lap(threshold_scale)``,
    ``eps_queries`` (eps2) the per-query noise ``Lap(query_scale)``,
    ``eps_answer`` (eps3) the numeric answers ``Lap(answer_scale)``
    (``answer_scale`` is None when eps3 = 0).  ``sensitivity`` is the
    sensitivity the scales were calibrated with: the nominal one, plus the
    grid step ``grid`` when values had to be rounded onto the grid.

    Parameters
    ----------
    eps_threshold, eps_queries, eps_answer : float
        ε₁, ε₂, ε₃.
    threshold_scale, query_scale, answer_scale : float
        The Laplace scales (``answer_scale`` None when ε₃ = 0).
    sensitivity, grid : float
        The sensitivity used and the grid step.

    Examples
    --------
    >>> b = svt_budget(c=2, eps=1.0)
    >>> b.eps_threshold + b.eps_queries
    1.0
    """

    eps: float
    eps_threshold: float
    eps_queries: float
    eps_answer: float
    c: int
    monotonic: bool
    sensitivity: float
    threshold_scale: float
    query_scale: float
    answer_scale: Optional[float]
    grid: float


#: The former name (it is a calibration, not a budget: see :class:`matmech.PrivacyBudget`).
SVTBudget = SVTCalibration


@functools.lru_cache(maxsize=512, typed=True)  # typed: True / 1 / 1.0 are distinct keys
def make_budget(
    *,
    c: int,
    eps: float,
    eps_answer: float,
    e1: float,
    e2: float,
    sensitivity: float,
    monotonic: bool,
    exact_on_grid: bool,
    threshold_mult: float,
    query_mult: float,
    value_bound: float = 0.0,
) -> SVTCalibration:
    """Budget with threshold scale threshold_mult*D/e1 and query scale query_mult*D/e2.

    Arguments must already be valid.  Raises ValueError when a scale is too
    large for exact sampling.  Cached: runs with the same parameters share one
    (immutable) record.
    """
    nominal = [
        laplace_scale(e1, threshold_mult * sensitivity),
        laplace_scale(e2, query_mult * sensitivity),
    ]
    if eps_answer > 0:
        nominal.append(laplace_scale(eps_answer, c * sensitivity))
    inputs = f"eps={eps!r}, sensitivity={sensitivity!r}, split eps1={e1:.3g}, eps2={e2:.3g}"
    g = scales_grid(nominal, value_bound, sensitivity, exact_on_grid, inputs)
    sens = snapped_sensitivity(sensitivity, g, exact_on_grid)
    return SVTCalibration(
        eps=eps,
        eps_threshold=e1,
        eps_queries=e2,
        eps_answer=eps_answer,
        c=c,
        monotonic=bool(monotonic),
        sensitivity=sens,
        threshold_scale=scale_on_grid(threshold_mult, sens, e1, g),
        query_scale=scale_on_grid(query_mult, sens, e2, g),
        answer_scale=scale_on_grid(c, sens, eps_answer, g) if eps_answer > 0 else None,
        grid=g,
    )


def svt_budget(
    *,
    c: int,
    eps: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    ratio: Ratio = "optimal",
    eps_answer: float = 0.0,
    integer_values: bool = False,
    value_bound: float = 0.0,
) -> SVTCalibration:
    """Calibration of :func:`~matmech.svt.sparse_vector` ([LSL17] Alg. 7) without touching data.

    eps1 + eps2 = eps - eps_answer split as 1:ratio; threshold noise
    Lap(D/eps1), query noise Lap(2cD/eps2) (Lap(cD/eps2) if ``monotonic``,
    Thm. 4.9), answers Lap(cD/eps3).  ``integer_values`` says whether the
    values will arrive with an integer dtype (then no grid rounding, and D is
    not increased by the grid step).

    Parameters
    ----------
    c : int
        The cutoff.
    eps : float
        The total ε.
    sensitivity : float, default 1.0
        Sensitivity of each value.
    monotonic : bool, default False
        Monotonic queries.
    ratio : float or "optimal", default "optimal"
        r in ε₁:ε₂ = 1:r.
    eps_answer : float, default 0.0
        ε₃ for numeric answers.
    integer_values : bool, default False
        Values already on the integer grid (no rounding allowance).
    value_bound : float, default 0.0
        A declared bound on abs(values) (0 = none); the grid is coarsened so that no value
        within it can overflow (:func:`declared_grid`).

    Returns
    -------
    SVTCalibration
        The split and the noise scales.

    Raises
    ------
    ValueError
        Bad ε, c, ratio or a scale too large for exact sampling.
    TypeError
        Arguments of the wrong kind.

    Examples
    --------
    >>> b = svt_budget(c=2, eps=1.0)
    >>> b.query_scale > b.threshold_scale
    True
    """
    c = check_c(c)
    eps, eps_answer = check_eps(eps, eps_answer)
    sensitivity = check_sensitivity(sensitivity)
    ratio = check_ratio(ratio)
    monotonic = check_flag("monotonic", monotonic)
    # calibrated for the decimal eps the budget charges (issue 21): parts add up to at most it
    e1, e2 = split_eps(binary_rest(calibrated_eps(eps), eps_answer), ratio, c, monotonic)
    return make_budget(
        c=c,
        eps=eps,
        eps_answer=eps_answer,
        e1=e1,
        e2=e2,
        sensitivity=sensitivity,
        monotonic=bool(monotonic),
        exact_on_grid=bool(integer_values),
        threshold_mult=1.0,
        query_mult=(1.0 if monotonic else 2.0) * c,
        value_bound=float(value_bound),
    )
