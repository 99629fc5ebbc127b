"""The winner's curse of a free-gap selection, kept bounded: margins, flags, guarded weights.

A row is selected because its noisy score (or gap) came out high, so *conditioned on being
selected* that draw is biased upwards — by about one noise std for a row whose true value sits
at the threshold (Laplace noise: E[ν | ν > 0] = b). The GLS combination of
:func:`matmech.svt.combine.combine_selection` puts most of its weight on that draw when the
selection got most of ε (≈ 94% at the advised 0.8 share), so such a row's answer inherits the
bias: +2.04 std and 53% coverage of the "95%" interval in issue 23's Zipf set-up.

The measurement is drawn after the selection with independent noise, so its answer is
unbiased given the selection. :func:`guard` keeps the GLS answer only for rows whose released
selection margin (:func:`selection_margins`, the noisy gap over the std of its noise) is at
least ``margin`` std, and the measured answer for the others, which it flags (``near``).
A row whose true value is at the threshold then keeps the selecting draw only when that draw
exceeded the threshold by ``margin`` std (Laplace: probability e^{−margin·√2} given
selection, 1.4% at 3), which bounds its conditional bias; the price is the measurement's
larger variance for the flagged rows. benchmarks/coverage.py (Zipf, c = 19, ε = 1, vector
mechanism at the advised 0.8 share, rows within 1 std of the threshold): bias +0.32/+0.44 std
with every gap combined, +0.11/+0.17 at margin 2, +0.00/+0.07 at 3 (coverage 95.5/94.4%),
+0.02 from the measurement alone; flagged rows pay 4× the std at a 0.8 share, 1.08× at 0.3. Both answers are linear in independent draws, so each row's
variance stays exact. Everything here reads only DP outputs (gaps, noisy values) and public
calibrations: post-processing (Ding, Wang, Zhang, Kifer, PVLDB 2019, for the gaps).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["DEFAULT_MARGIN", "guard", "selection_margins"]

#: Rows whose selection margin is below this many std of the selecting noise are flagged and
#: answered from the measurement alone.
DEFAULT_MARGIN = 3.0


def selection_margins(selection) -> np.ndarray:
    """Per selected position (in ``selection.gap.positions`` order): the margin by which the
    row was selected, in std of the noise of that margin.

    Threshold methods (SVT gaps, vector above a threshold): gap / std(gap). Top-c methods
    (gaps to the next noisy score, the last to the unselected runner-up): the row's noisy
    score minus the runner-up's (the sum of the gaps from it on) over the std of a
    difference of two noisy scores.
    """
    res = selection.gap
    gaps = np.asarray(res.gaps, dtype=np.float64)
    cal = res.calibration
    if gaps.size == 0:
        return gaps
    ranked = selection.method == "topc-gap"
    if hasattr(res, "values"):  # a vector selection: each value has the mechanism's variance
        sd = math.sqrt(cal.variance())
        return np.cumsum(gaps[::-1])[::-1] / (math.sqrt(2.0) * sd) if ranked else gaps / sd
    if ranked:  # each noisy score has variance gap_variance("middle") (svt.combine.gap_measurement)
        return np.cumsum(gaps[::-1])[::-1] / math.sqrt(2.0 * cal.gap_variance("middle"))
    common = cal.gap_variance("threshold")
    sd = np.sqrt(np.array([cal.gap_variance(b) for b in res.branches]) + common)
    return gaps / sd


def guard(
    measured,
    measured_var,
    combined,
    combined_var,
    rows,
    selection,
    *,
    margin: float = DEFAULT_MARGIN,
):
    """(answers, variances, near): the combined answer where the row's selection margin is at
    least ``margin``, else the measured one; ``near`` flags the latter rows. All arrays follow
    the sorted selected ``rows``."""
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin >= 0:
        raise ValueError(f"margin must be a non-negative number of std, got {margin!r}")
    m = np.full(len(rows), np.inf)
    pos = np.asarray(selection.gap.positions, dtype=np.int64)
    if pos.size:
        m[np.searchsorted(rows, pos)] = selection_margins(selection)
    near = m < margin
    est = np.where(near, measured, combined)
    var = np.where(near, measured_var, combined_var)
    return est, var, near
