"""Accuracy of the selection mechanisms: alpha for a given failure probability beta.

Sources (in ``shared/references``):

* [DR14] Dwork, Roth 2014, Thm. 3.24, quoted in [LSL17] Sec. 5 and in
  R. Cummings' lecture notes (Thm. 8): AboveThreshold is (alpha, beta)-accurate
  for alpha = 8 (ln k + ln(2/beta)) / eps.
* [M18] A. Machanavajjhala, CompSci 590.03 slides "Sparse Vector Technique:
  Accuracy": alpha = 4c (ln k + ln(2/beta)) / eps, from
  P(|tau - tau'| > alpha/2) = beta/2 and P(max_i |v_i| > alpha/2) <= beta/2.
* [LSL17] Lyu, Su, Li, VLDB 2017, Sec. 5: alpha_EM = (ln(k-1) + ln((1-beta)/beta)) / eps,
  "less than 1/8 of alpha_SVT".
"""

from __future__ import annotations

import math

from matmech.svt.checks import (
    Ratio,
    check_beta,
    check_c,
    check_flag,
    check_int,
    check_ratio,
    check_real,
    check_sensitivity,
)
from matmech.svt.calibration import split_eps


def _inputs(beta, k, eps, sensitivity, *, c=None, min_k=1):
    """The checked (beta, k, c, eps, D) of an accuracy bound, in the order every bound checks
    them (c None: the bound takes none)."""
    beta = check_beta(beta)
    k = check_int("k", k, what="the number of queries")
    if k < min_k:
        raise ValueError(f"k must be >= 2 for a selection to be wrong, got {k!r}")
    c = None if c is None else check_c(c)
    return beta, k, c, check_real("eps", eps), check_sensitivity(sensitivity)


def _log_inv(beta: float, num: float = 2.0) -> float:
    """ln(num / beta) without forming num / beta, which overflows for a subnormal beta
    (ln(2 / 5e-324) = 745.1 is finite)."""
    return math.log(num) - math.log(beta)


def _finite_alpha(alpha: float, eps: float, sensitivity: float) -> float:
    """``alpha`` if it is a finite float; otherwise the (finite, but huge) alpha does not fit
    in a float: refuse, naming eps and the sensitivity that caused it."""
    if not math.isfinite(alpha):
        raise ValueError(
            f"alpha overflows a float for eps={eps!r} with sensitivity={sensitivity!r} "
            f"(it grows as sensitivity / eps); use a larger eps"
        )
    return alpha


def above_threshold_alpha(beta: float, *, k: int, eps: float, sensitivity: float = 1.0) -> float:
    """alpha = 8 D (ln k + ln(2/beta)) / eps for :func:`~matmech.svt.above_threshold`.

    [DR14] Thm. 3.24, as quoted in [LSL17] Sec. 5 and Cummings' lecture
    notes (Thm. 8), scaled by the sensitivity D: for k queries of which only
    the last may be >= T - alpha, with probability >= 1 - beta AboveThreshold
    does not halt before the k-th query, every reported query has
    q >= T - alpha and every rejected one q <= T + alpha.

    Parameters
    ----------
    beta : float
        Failure probability in (0, 1).
    k : int
        Number of queries.
    eps : float
        The ε of :func:`~matmech.svt.above_threshold`.
    sensitivity : float, default 1.0
        D.

    Returns
    -------
    float
        α: with probability ≥ 1 − β every answer is α-accurate ([DR14] Thm. 3.24).

    Raises
    ------
    ValueError, TypeError
        β outside (0, 1), k < 1, a bad ε, or an argument of the wrong kind.

    Examples
    --------
    >>> round(above_threshold_alpha(0.05, k=100, eps=1.0), 2)
    66.35
    """
    beta, k, _, eps, d = _inputs(beta, k, eps, sensitivity)
    return _finite_alpha(8.0 * d * (math.log(k) + _log_inv(beta)) / eps, eps, d)


def sparse_alpha(
    beta: float,
    *,
    k: int,
    c: int,
    eps: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    ratio: Ratio = "optimal",
) -> float:
    """alpha for a given beta for :func:`~matmech.svt.sparse_vector` over k queries.

    [M18]: if ``max_i |nu_i| + |rho| <= alpha`` then every positive has
    q_i >= T - alpha, every negative q_i < T + alpha, and queries below
    T - alpha are all negative (so with at most c queries >= T - alpha the run
    does not abort early).  Bounding ``P(|rho| > alpha/2)`` = beta/2 and
    ``P(max |nu_i| > alpha/2)`` <= k e^{-alpha/(2 b2)} = beta/2 gives
    alpha = 2 max(b1 ln(2/beta), b2 ln(2k/beta)) with b1, b2 the threshold and
    query noise scales of :func:`~matmech.svt.sparse_vector` with the same
    ``c``, ``eps``, ``monotonic`` and ``ratio`` (defaults match it).  With the
    slides' noise (``monotonic=True, ratio=1``: b1 = 2D/eps, b2 = 2cD/eps) this
    is exactly their alpha = 4cD (ln k + ln(2/beta)) / eps;
    ``monotonic=False, ratio=1`` doubles b2, hence 8cD(...)/eps, which for
    c = 1 is [DR14] Thm. 3.24.  Computed for continuous Laplace noise at the
    nominal scales; the grid (scales rounded up by <= 2**-16, discrete tails)
    moves beta by a relative amount of order 2**-15.

    Parameters
    ----------
    beta : float
        Failure probability in (0, 1).
    k : int
        Number of queries.
    c, eps, sensitivity, monotonic, ratio
        As :func:`~matmech.svt.sparse_vector`.

    Returns
    -------
    float
        α for the given β.

    Raises
    ------
    ValueError, TypeError
        β outside (0, 1), k or c < 1, a bad ε, or an argument of the wrong kind.

    Examples
    --------
    >>> round(sparse_alpha(0.05, k=100, c=1, eps=1.0), 2)
    54.08
    """
    beta, k, c, eps, d = _inputs(beta, k, eps, sensitivity, c=c)
    ratio = check_ratio(ratio)
    monotonic = check_flag("monotonic", monotonic)
    e1, e2 = split_eps(eps, ratio, c, monotonic)
    if not (e1 > 0 and e2 > 0):  # eps so small that a share of it underflows to 0
        raise ValueError(
            f"eps={eps!r} is too small to split into threshold and query shares "
            f"(eps1={e1!r}, eps2={e2!r}); use a larger eps"
        )
    b1 = d / e1  # Python floats: an overflow is inf (refused below), never an exception
    b2 = (1.0 if monotonic else 2.0) * c * d / e2
    return _finite_alpha(
        2.0 * max(b1 * _log_inv(beta), b2 * (math.log(k) + _log_inv(beta))), eps, d
    )


def exponential_alpha(beta: float, *, k: int, eps: float, sensitivity: float = 1.0) -> float:
    """alpha_EM = D (ln(k-1) + ln((1-beta)/beta)) / eps, [LSL17] Sec. 5.

    The exponential mechanism with c = 1 (non-monotonic scores): given k-1
    candidates <= T - alpha and one >= T + alpha, the top one is selected with
    probability >= 1 - beta (with equality at the boundary).
    :func:`~matmech.svt.exponential_top_c` runs permute-and-flip, which picks
    the top one at least that often there (tests/svt/test_svt.py: exactly
    (1 - (1-p)^k)/(k p), p = e^{-alpha eps / D}).  Requires k >= 2.

    Parameters
    ----------
    beta : float
        Failure probability in (0, 1).
    k : int
        Number of candidates (≥ 2).
    eps : float
        The ε of one EM draw.
    sensitivity : float, default 1.0
        D.

    Returns
    -------
    float
        α_EM.

    Raises
    ------
    ValueError, TypeError
        As :func:`above_threshold_alpha`, with k < 2 the bad k.

    Examples
    --------
    >>> round(exponential_alpha(0.05, k=100, eps=1.0), 3)
    7.54
    """
    beta, k, _, eps, d = _inputs(beta, k, eps, sensitivity, min_k=2)
    return _finite_alpha(d * (math.log(k - 1) + math.log1p(-beta) - math.log(beta)) / eps, eps, d)
