"""Selection by the Laplace mechanism on the whole candidate vector, the selected values released.

[DR14] C. Dwork, A. Roth, *The Algorithmic Foundations of Differential Privacy*, Thm. 3.6
(the Laplace mechanism) and Prop. 2.1 (post-processing): for f = W x with L1 sensitivity
Delta_W, the vector y = W x + Lap(Delta_W/eps)^m is eps-DP, and so is anything computed
from y alone.  Both selections here are such post-processing:

* :func:`noisy_vector_top_c` - the c largest noisy values (ties towards the lower index),
  their noisy values, and the gaps between consecutive ones (the last to the unselected
  runner-up), exactly the outputs of [DWZK19] Noisy Top-c with Gap plus the values;
* :func:`noisy_vector_threshold` - the first c rows (in row order) whose noisy value is at
  least the public threshold T_i, their noisy values and gaps y_i - T_i >= 0, the outputs
  of [DWZK19] Sparse Vector with Gap plus the values.

Joint sensitivity (:func:`joint_sensitivity`).  Under add/remove a neighbour is x +- e_j,
so Delta_W = max_j ||W e_j||_1, the largest column L1 norm (:meth:`LinOp.sensitivity`,
from the structure; never a dense W).  Under substitution x' = x + e_j - e_k and
||W(e_j - e_k)||_1 <= ||w_j||_1 + ||w_k||_1 <= 2 max_j ||w_j||_1 (triangle inequality;
equality when two columns of largest norm have disjoint supports, e.g. the identity), so
we use 2 max_j ||w_j||_1, the factor of :data:`matmech.privacy.params.NEIGHBORS`.

When to prefer it (:func:`prefer_vector`).  [DWZK19] Noisy Top-c adds Lap(k c D/eps) to
every score (D the largest row sensitivity, k = 1 for monotonic scores, 2 otherwise), and
its gaps carry an unknown common offset; SVT with gap adds Lap(k D/eps_1), eps_1 < eps/c,
plus a threshold noise shared by all gaps.  When Delta_W is at most that per-score scale
factor (cells that touch few rows: an identity workload has Delta_W = 1 against c) the
vector has less noise on every score, so it selects at least as well, and its released
values are direct measurements of the selected rows with variance Var(DLap) and no common
offset (:func:`matmech.svt.combine.gap_measurement` gives them common variance 0).  The
choice uses W, c, eps, the neighbour relation and the grid only: it is data independent.

Exactness and randomness as in :mod:`matmech.svt.gap`: one power-of-two grid g <= 1 (int64
units), discrete Laplace on g*Z (Canonne, Kamath, Steinke 2020) from
:mod:`matmech.privacy.noise` with the caller's ``rng`` (None = the secure CTR_DRBG).  Integer values
are on the grid; other values are snapped, which moves each of the m values by at most g/2,
so the calibration uses Delta_W + m*g (:func:`matmech.privacy.noise.snap_sensitivity`) with a
grid fine enough that m*g <= 2**-20 Delta_W.  No budget is taken here: callers
(:func:`matmech.svt.select.select_rows`, :func:`matmech.release`) charge it first.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from matmech.linalg.linop import as_linop
from matmech.privacy import noise
from matmech.privacy.calibration import (
    laplace_scale,
    neighbor_sensitivity,
    run_grid,
    scale_on_grid,
)
from matmech.privacy.params import calibrated_eps, check_neighbors
from matmech.svt.checks import check_c, check_eps, check_flag, check_sensitivity
from matmech.svt.gap_calibration import gap_calibration
from matmech.svt.grid import chunk_bounds
from matmech.svt.measurement import GapMeasurement
from matmech.svt.opening import Opening, open_selection
from matmech.svt.gap import top_c_order
from matmech.svt.split import (
    MAX_SCALE_UNITS,
    check_value_bound,
    declared_grid,
    pow2_floor_of,
    snapped_sensitivity,
)
from matmech.validate import linear

if TYPE_CHECKING:  # names used only in annotations
    from matmech.privacy.randomness import Rng
    from matmech.linalg.linop import LinOp
    import numpy.typing as npt


#: The vector selections, by the free-gap method whose outputs each one reproduces.
VECTOR_METHODS = {"topc-gap": "vector-top-c", "svt-gap": "vector-threshold"}


@dataclass(frozen=True)
class VectorCalibration:
    """Noise of a vector selection (public): Lap(``scale``) on every value, on the grid ``grid``.

    ``sensitivity`` is the L1 sensitivity calibrated for (Delta_W, plus m*grid when the
    values had to be snapped to the grid).
    """

    method: str
    eps: float
    c: int
    sensitivity: float
    grid: float
    scale: float

    def variance(self) -> float:
        """Exact variance of one released noisy value: Var(DLap(scale/grid)) * grid**2."""
        return noise.discrete_laplace_variance(int(round(self.scale / self.grid))) * self.grid**2

    def gap_variance(self, branch: str = "value") -> float:
        """The variance of one released value (the interface of :class:`~matmech.svt.gap_calibration.GapCalibration`)."""
        if branch not in ("value", "middle"):
            raise ValueError(f"a vector selection has only 'value' noise, got branch={branch!r}")
        return self.variance()


@dataclass(frozen=True)
class VectorResult:
    """Output of a vector selection, in the shape of :class:`~matmech.svt.gap.GapResult`.

    A frozen record, made by the vector selections.

    ``positions``: top-c best first / threshold in row order; ``values``: their noisy values;
    ``gaps``: top-c: value minus the next noisy value (the last minus the unselected
    runner-up); threshold: value minus the (grid-rounded) threshold, >= 0.  ``branches``
    are all "value".  ``eps_used`` equals ``eps`` (the whole vector is one mechanism).

    Parameters
    ----------
    positions : tuple of int
        The selected rows.
    values : tuple of float
        Their noisy values.
    gaps : tuple of float
        Their gaps (to the runner-up or to the threshold).
    branches : tuple of str
        All ``"value"``.
    eps, eps_used : float
        The budget (both equal).
    stopped : bool
        The run hit its cutoff.
    n_processed : int
        Rows examined.
    calibration : VectorCalibration
        The public calibration.

    Examples
    --------
    >>> r = noisy_vector_top_c([3, 500, 2, 700], 2, 1.0, sensitivity=1.0,
    ...                        rng=np.random.default_rng(0))
    >>> r.branches, r.eps_used
    (('value', 'value'), 1.0)
    """

    positions: tuple[int, ...]
    values: tuple[float, ...]
    gaps: tuple[float, ...]
    branches: tuple[str, ...]
    eps: float
    eps_used: float
    stopped: bool
    n_processed: int
    calibration: VectorCalibration

    @property
    def mechanism(self) -> str:
        """Which vector selection ran (the registry, :mod:`matmech.svt.methods`)."""
        return self.calibration.method


def joint_sensitivity(W: LinOp | npt.ArrayLike, neighbors: str = "add_remove") -> float:
    """Delta_W: the L1 sensitivity of the whole vector W x (see the module docstring).

    add/remove: the largest column L1 norm of W; substitution: twice that (an upper bound,
    tight for e.g. the identity).  Computed through W's structure (:meth:`LinOp.sensitivity`).

    Parameters
    ----------
    W : LinOp or array_like
        The workload.
    neighbors : {"add_remove", "substitute"}, default "add_remove"
        The neighbouring relation.

    Returns
    -------
    float
        Δ_W.

    Raises
    ------
    ValueError
        An unknown ``neighbors``.
    TypeError
        W not a matrix or operator.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> joint_sensitivity(W.identity(4)), joint_sensitivity(W.prefix(4))
    (1.0, 4.0)
    """
    check_neighbors(neighbors)
    s = float(as_linop(linear(W, "W")).sensitivity(1))
    if not (math.isfinite(s) and s > 0):
        raise ValueError(
            f"the workload's largest column L1 norm must be positive and finite, got {s}"
        )
    return neighbor_sensitivity(s, neighbors)


def vector_calibration(
    method: str,
    *,
    c: int,
    eps: float,
    sensitivity: float,
    n_values: int,
    integer_values: bool,
    value_bound: float = 0.0,
) -> VectorCalibration:
    """Calibration of a vector selection (see :func:`_vector_calibration`); every option is
    checked before the cache (issue 23: an equality-keyed cache accepted ``eps=True`` after
    a valid ``eps=1.0``)."""
    if not isinstance(method, str) or method not in VECTOR_METHODS.values():
        raise ValueError(f"method must be one of {tuple(VECTOR_METHODS.values())}, got {method!r}")
    c = check_c(c)
    eps, _ = check_eps(eps)
    sensitivity = check_sensitivity(sensitivity)
    if (
        isinstance(n_values, (bool, np.bool_))
        or not isinstance(n_values, (int, np.integer))
        or n_values < 1
    ):
        raise ValueError(
            f"n_values must be a positive integer (the number of candidate values), got {n_values!r}"
        )
    integer_values = check_flag("integer_values", integer_values)
    value_bound = check_value_bound(value_bound)
    return _vector_calibration(
        method, c, eps, sensitivity, int(n_values), integer_values, value_bound
    )


@functools.lru_cache(maxsize=256)
def _vector_calibration(
    method, c, eps, sensitivity, n_values, integer_values, value_bound
) -> VectorCalibration:
    """Calibration of a vector selection over ``n_values`` values with L1 sensitivity
    ``sensitivity`` (Delta_W); data independent.  Raises ValueError when the scale is too
    large for exact sampling on the grid, or when the declared bound on abs(values)
    ``value_bound`` (0 = none) needs a grid too coarse for the m values
    (:func:`~matmech.svt.calibration.declared_grid`). Every option was checked by
    :func:`vector_calibration`."""
    ec = calibrated_eps(eps)  # the decimal eps the budget charges (issue 21)
    nominal = laplace_scale(
        eps, sensitivity
    )  # the grid's scale (validates eps); exact scale below uses ec
    g = run_grid(nominal)
    if not integer_values:  # snapping: + m*g of L1 sensitivity, kept below 2**-20 of Delta_W
        g = min(g, pow2_floor_of(sensitivity * 2.0**-20 / n_values))
    g = declared_grid(g, value_bound, sensitivity, integer_values, coords=n_values)
    if nominal / g > MAX_SCALE_UNITS:
        raise ValueError(
            f"noise scale {nominal:.3g} is too large for exact sampling on a grid fine enough for "
            f"{n_values:,} values (eps={eps!r}, sensitivity={sensitivity!r}); use a larger eps or "
            "rescale the values"
        )
    sens = snapped_sensitivity(sensitivity, g, integer_values, coords=n_values)
    return VectorCalibration(method, eps, c, float(sens), g, scale_on_grid(1.0, sens, ec, g))


def prefer_vector(
    method: str,
    *,
    c: int,
    eps: float,
    row_sensitivity: float,
    joint: float,
    monotonic: bool,
    n_values: int,
    integer_values: bool,
    ratio="optimal",
    sigma="auto",
    value_bound: float = 0.0,
) -> bool:
    """True when the vector selection's released values have at most the per-score noise
    variance of the [DWZK19] mechanism ``method`` ("topc-gap" or "svt-gap") at the same eps.

    Compares exact variances on the grid (the vector's value noise against Noisy Top-c's
    score noise, or SVT with gap's query noise, whose threshold noise only adds to it), so
    when True the vector adds less noise to every score and its values carry no common
    offset.  Data independent.  Any other method (adaptive SVT: its point is the budget it
    saves on clear winners) gives False, and so does a vector whose scale cannot be sampled
    exactly on the grid its values need.
    """
    if method not in VECTOR_METHODS:
        return False
    kw = {} if method == "topc-gap" else {"ratio": ratio}
    gap = gap_calibration(
        method,
        c=c,
        eps=eps,
        sensitivity=row_sensitivity,
        monotonic=monotonic,
        integer_values=integer_values,
        value_bound=value_bound,
        **kw,
    )  # raises on bad arguments
    try:
        vec = vector_calibration(
            VECTOR_METHODS[method],
            c=c,
            eps=eps,
            sensitivity=joint,
            n_values=n_values,
            integer_values=integer_values,
            value_bound=value_bound,
        )
    except (
        ValueError
    ):  # a scale (or a declared bound) too large for exact sampling on the grid the m values need
        return False
    return vec.variance() <= gap.gap_variance("middle")


def calibrate(
    *,
    method: str,
    c: int,
    eps: float,
    sensitivity: float,
    integer_values: bool = False,
    value_bound: float = 0.0,
    n_candidates: int = 1,
    **_: Any,
) -> VectorCalibration:
    """The registry's calibration hook of a vector selection (:func:`vector_calibration`;
    ``sensitivity`` is Delta_W, the L1 sensitivity of the whole vector)."""
    return vector_calibration(
        method,
        c=c,
        eps=eps,
        sensitivity=sensitivity,
        n_values=max(n_candidates, 1),
        integer_values=integer_values,
        value_bound=value_bound,
    )


def _noisy_units(op: Opening, lo=0, hi=None):
    return op.units(lo, hi) + op.draw(op.calibration.scale, op.values[lo:hi].shape[0])


def value_law(result: Any, threshold: Any = None) -> GapMeasurement:
    """A vector selection's noisy values as a measurement: direct measurements of the selected
    rows, d_i = Var(DLap), no common offset (s = 0)."""
    pos = np.asarray(result.positions, dtype=np.int64)
    var = np.full(pos.size, result.calibration.variance())
    return GapMeasurement(pos, np.asarray(result.values, dtype=np.float64), var, 0.0)


def noisy_vector_top_c(
    values: npt.ArrayLike,
    c: int,
    eps: float,
    *,
    sensitivity: float,
    rng: Rng = None,
    value_bound: float | None = None,
) -> VectorResult:
    """The c largest of values + Lap(sensitivity/eps) (ties to the lower index), their noisy
    values and gaps; eps-DP when ``sensitivity`` bounds the L1 change of the whole vector.

    Needs c < len(values) (the last gap is to the runner-up).  ``rng=None`` is the secure CTR_DRBG.
    ``value_bound``: the declared bound on abs(values) the caller checked before its spend
    (:func:`matmech.svt.select.plan_selection`); the grid is chosen for it and nothing here
    checks the values.  None: the values themselves are range-checked before any draw.

    Parameters
    ----------
    values : array_like of float
        The vector W x.
    c : int
        How many to select (c < len(values)).
    eps : float
        The ε of the selection.
    sensitivity : float
        Δ_W, the L1 sensitivity of the whole vector.
    rng, value_bound
        As :func:`~matmech.svt.sparse_vector`.

    Returns
    -------
    VectorResult
        The c best, their noisy values and gaps.

    Raises
    ------
    ValueError, TypeError
        c >= len(values), or as :func:`~matmech.svt.sparse_vector`; before any randomness.

    Examples
    --------
    >>> r = noisy_vector_top_c([3, 500, 2, 700], 2, 1.0, sensitivity=1.0,
    ...                        rng=np.random.default_rng(0))
    >>> r.positions, len(r.values)
    ((3, 1), 2)
    """
    public: dict[str, Any] = dict(
        method="vector-top-c", eps=eps, sensitivity=sensitivity, candidates="runner-up"
    )
    bound: dict[str, Any] = dict(rng=rng, value_bound=value_bound)
    return run_top_c(open_selection(values, None, c=c, calibrate=calibrate, **public, **bound))


def run_top_c(op: Opening) -> VectorResult:
    """The c largest noisy values from the opening (the tie rule of Noisy Top-c with Gap)."""
    cal, c, n, g = op.calibration, op.c, op.n, op.grid
    noisy = _noisy_units(op)
    order = top_c_order(noisy, c)
    gaps = noisy[order[:-1]] - noisy[order[1:]]
    return VectorResult(
        tuple(int(i) for i in order[:-1]),
        tuple(float(v) * g for v in noisy[order[:-1]]),
        tuple(float(v) * g for v in gaps),
        ("value",) * c,
        cal.eps,
        cal.eps,
        True,
        n,
        cal,
    )


def noisy_vector_threshold(
    values: npt.ArrayLike,
    threshold: Any,
    *,
    c: int,
    eps: float,
    sensitivity: float,
    rng: Rng = None,
    value_bound: float | None = None,
) -> VectorResult:
    """The first c rows whose value + Lap(sensitivity/eps) is at least the public
    ``threshold`` (scalar or one per value), their noisy values and gaps to the threshold;
    eps-DP when ``sensitivity`` bounds the L1 change of the whole vector.

    The noise of rows after the c-th positive is never drawn (it would not be released).
    ``value_bound``: as in :func:`noisy_vector_top_c`.

    Parameters
    ----------
    values, c, eps, sensitivity
        As :func:`noisy_vector_top_c`.
    threshold, rng, value_bound
        As :func:`~matmech.svt.sparse_vector`.

    Returns
    -------
    VectorResult
        The first c rows at or above the threshold, with values and gaps.

    Raises
    ------
    ValueError, TypeError
        As :func:`~matmech.svt.sparse_vector`.

    Examples
    --------
    >>> r = noisy_vector_threshold([3, 500, 2, 700], 100, c=2, eps=1.0, sensitivity=1.0)
    >>> r.positions, r.calibration.method
    ((1, 3), 'vector-threshold')
    """
    public: dict[str, Any] = dict(method="vector-threshold", eps=eps, sensitivity=sensitivity)
    bound: dict[str, Any] = dict(rng=rng, value_bound=value_bound)
    return run_threshold(
        open_selection(values, threshold, c=c, calibrate=calibrate, **public, **bound)
    )


def run_threshold(op: Opening) -> VectorResult:
    """The first c rows whose noisy value reaches the threshold, from the opening (the noise of
    rows after the c-th positive is never drawn)."""
    cal, c, n, g = op.calibration, op.c, op.n, op.grid
    t_units = op.threshold_units()
    pos: list = []
    val: list = []
    gap: list = []
    processed, stopped = n, False
    for a, b in chunk_bounds(n):
        tu = t_units[0] if t_units.shape[0] == 1 else t_units[a:b]
        margin = _noisy_units(op, a, b) - tu
        idx = np.flatnonzero(margin >= 0)[: c - len(pos)]
        pos.extend((idx + a).tolist())
        gap.extend((margin[idx].astype(np.float64) * g).tolist())
        val.extend(
            ((margin[idx] + (tu if np.ndim(tu) == 0 else tu[idx])).astype(np.float64) * g).tolist()
        )
        if len(pos) == c:
            stopped, processed = True, pos[-1] + 1
            break
    return VectorResult(
        tuple(int(i) for i in pos),
        tuple(val),
        tuple(gap),
        ("value",) * len(pos),
        cal.eps,
        cal.eps,
        stopped,
        processed,
        cal,
    )
