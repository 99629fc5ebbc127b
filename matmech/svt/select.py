"""Private row selection: which workload rows are worth answering (a sparse-vector front-end).

A selection computes the true answers W x (structured, never a dense W), then either
runs the sparse vector technique (Lyu, Su, Li, VLDB 2017, Alg. 7: the first c rows whose
noisy answer clears the noisy threshold) or the exponential mechanism c times without
replacement (their recommendation when the whole workload is known in advance). This module
is the mechanism: :func:`check_selection` and :func:`plan_selection` (every check, from the
declared bounds; nothing drawn or spent) and :func:`run_selection` (the draws). The public
:func:`matmech.select_rows` (:mod:`matmech.run.select`) runs it as a plan through the one
spend protocol, which charges the budget before any noise is drawn.

The method registry is :mod:`matmech.svt.methods`, the ``select=`` options of a release
:mod:`matmech.svt.options`, the data-independent rules (row sensitivity, mechanism,
calibration, advised split) :mod:`matmech.svt.rules`; their names are re-exported here.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from matmech.privacy.params import check_neighbors
from matmech import validate
from matmech.linalg.linop import as_linop
from matmech.privacy.events import ExponentialMechanism, SparseVectorEvent
from matmech.privacy.measure import check_counts, check_max_records, check_records, integer_valued
from matmech.svt.checks import check_threshold
from matmech.svt.opening import opening
from matmech.svt import methods as _methods
from matmech.svt.methods import (
    SELECTION_METHODS,
)
from matmech.svt.rules import (
    check_vector,
    declared_calibration,
    entry_range,
    row_noise_rule,
    selection_mechanism,
)


MECHANISMS: dict[str, str]  # re-exported as read: :data:`matmech.svt.methods.MECHANISMS`


def __getattr__(name: str) -> dict[str, str]:
    if name == "MECHANISMS":  # derived from the registry on every read, never a stale copy
        return _methods.MECHANISMS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Selection:
    """The rows of W chosen privately, in the order they were found (SVT) or ranked (EM).

    A frozen record; :func:`select_rows` makes it.

    Parameters
    ----------
    rows : numpy.ndarray
        The selected row indices of W.
    method : str
        The selection method.
    eps : float
        What the selection spent.
    c : int
        The cap on the number of rows.
    threshold : object
        The threshold used (SVT), or None.
    sensitivity : float
        The row sensitivity used.
    monotonic, stopped : bool
        Monotonic noise; whether the run stopped at c rows.
    n_candidates : int
        Rows examined.
    gap : object
        The free-gap result, for the gap methods.
    mechanism : str
        The mechanism that ran (e.g. ``"vector-top-c"``).

    Examples
    --------
    >>> from matmech import workloads as W
    >>> x = histogram(np.repeat(np.arange(8), [50, 0, 3, 80, 1, 0, 60, 2]), 8)
    >>> select_rows(W.identity(8), x, c=2, eps=1.0, method="em",
    ...             rng=np.random.default_rng(0)).c
    2
    """

    rows: np.ndarray
    method: str
    eps: float
    c: int
    threshold: object
    sensitivity: float
    monotonic: bool
    stopped: bool
    n_candidates: int
    gap: object = field(
        default=None, repr=False
    )  # the GapResult / VectorResult of a free-gap method (public)
    mechanism: str = ""  # which mechanism ran (:data:`MECHANISMS`); "" = the method's own


def _check_c(c):
    if isinstance(c, (bool, np.bool_)) or not isinstance(c, numbers.Integral):
        raise TypeError(
            f"c must be a positive integer (the most rows to select), got {type(c).__name__}: {c!r}"
        )
    if c < 1:
        raise ValueError(f"c must be a positive integer (the most rows to select), got {c!r}")
    return int(c)


@dataclass(frozen=True, eq=False)
class SelectionPlan:
    """A checked selection, ready to run: the true row answers and the calibration.

    Made by :func:`plan_selection` (which reads x but draws and spends nothing); run by
    :func:`run_selection` after the budget is charged.
    """

    values: np.ndarray = field(repr=False)
    threshold: object
    thr: np.ndarray | None = field(repr=False)
    method: str
    c: int
    eps: float
    sensitivity: float
    monotonic: bool
    ratio: object
    n_rows: int
    sigma: object = "auto"  # adaptive-svt's top-branch margin
    mechanism: str = (
        ""  # :data:`MECHANISMS` entry chosen by :func:`selection_mechanism`; "" = the method's own
    )
    joint_sensitivity: float = 0.0  # Delta_W of the vector selection (0 when it does not run)
    value_bound: float | None = (
        None  # declared bound on abs(values) (max_records x largest abs(entry)) the grid holds
    )


def check_selection(
    W, *, c, eps, threshold, method, monotonic, ratio, neighbors, sigma="auto", vector="auto"
):
    """Every data-independent check of a selection → (c, sensitivity, monotonic, thresholds);
    raises before anything is read or spent."""
    validate.choice(method, "method", SELECTION_METHODS)
    entry = SELECTION_METHODS[method]
    check_vector(vector, method)
    c = _check_c(c)
    check_neighbors(neighbors)
    sens, monotonic = row_noise_rule(W, monotonic, neighbors)
    thr = None
    if entry.threshold:
        if threshold is None or isinstance(threshold, str):
            raise ValueError(
                f"method={method!r} needs a numeric threshold (scalar or one per row), got {threshold!r}"
            )
        if isinstance(threshold, (bool, np.bool_)):
            raise TypeError(f"threshold must be a real number or one per row, got {threshold!r}")
        thr = check_threshold(threshold, W.shape[0]).astype(np.float64)
    elif threshold is not None:
        raise ValueError(
            f"method={method!r} picks the c largest rows and takes no threshold; got threshold={threshold!r}"
        )
    if c > W.shape[0]:
        raise ValueError(f"c = {c} is more than the {W.shape[0]} rows of the workload")
    if not (isinstance(sigma, str) and sigma == "auto"):
        if "sigma" not in SELECTION_METHODS[method].own_options:
            raise ValueError(
                f"sigma (the top-branch margin) is an option of method='adaptive-svt' only, got "
                f"sigma={sigma!r} for method={method!r}"
            )
        if (
            isinstance(sigma, (bool, np.bool_))
            or not isinstance(sigma, numbers.Real)
            or not (np.isfinite(float(sigma)) and float(sigma) > 0)
        ):
            raise ValueError(
                f"sigma must be 'auto' or a positive finite number (the top-branch margin in the "
                f"values' units), got {sigma!r}"
            )
        sigma = float(sigma)
    if entry.runner_up and c >= W.shape[0]:
        raise ValueError(
            f"method={method!r} needs c below the {W.shape[0]} rows (the last gap is to the runner-up), got c={c}"
        )
    # the method's calibration validates eps, ratio, sigma and the sensitivity, drawing nothing
    entry.mechanism.calibrate(
        c=c,
        eps=eps,
        sensitivity=sens,
        monotonic=monotonic,
        ratio=ratio,
        sigma=sigma,
        n_candidates=W.shape[0],
    )
    return c, float(sens), bool(monotonic), thr


def plan_selection(
    W,
    x,
    *,
    c,
    eps,
    threshold=None,
    method="svt",
    monotonic="auto",
    ratio="optimal",
    neighbors="add_remove",
    max_records=None,
    sigma="auto",
    vector="auto",
):
    """Check a selection and compute the true answers W x → :class:`SelectionPlan`.

    Reads x but draws nothing and spends nothing; every refusal happens here, and no message
    carries a value computed from x. Whether the answers are exact integers (then they need
    no snapping to the SVT grid) follows from W and the declared ``max_records``, not from x.
    """
    W = as_linop(validate.linear(W, "W"))
    c, sens, monotonic, thr = check_selection(
        W,
        c=c,
        eps=eps,
        threshold=threshold,
        method=method,
        monotonic=monotonic,
        ratio=ratio,
        neighbors=neighbors,
        sigma=sigma,
        vector=vector,
    )
    max_records = check_max_records(max_records)
    # Integer rows times at most max_records records: the float sums are exact integers, and as
    # int64 they are on every SVT grid (no snapping, no grid step in the sensitivity). Decided
    # from W and the declared bound, never from x; so is the mechanism.
    exact = integer_valued(W) and max_records * sens < 2.0**53
    lo, hi = entry_range(W)
    bound = float(max_records) * max(abs(lo), abs(hi))
    public: dict[str, Any] = dict(
        method=method, c=c, eps=eps, sensitivity=sens, monotonic=monotonic, ratio=ratio
    )
    mech, joint = selection_mechanism(
        W, **public, neighbors=neighbors, vector=vector, integer_values=exact, value_bound=bound
    )
    # every magnitude check of the run, from the declaration: before x is read or anything spent
    _, bound = declared_calibration(
        W,
        **public,
        mechanism=mech,
        sigma=sigma,
        joint=joint,
        thr=thr,
        integer_values=exact,
        max_records=max_records,
    )
    x = check_counts(x, W.shape[1])
    check_records(x, max_records)
    values = W.matvec(x.astype(np.float64))
    if exact:
        values = np.rint(values).astype(np.int64)
    return SelectionPlan(
        values,
        threshold,
        thr,
        method,
        c,
        float(eps),
        sens,
        monotonic,
        ratio,
        W.shape[0],
        sigma=sigma,
        mechanism=mech,
        joint_sensitivity=joint,
        value_bound=bound,
    )


def run_selection(plan, *, rng=None):
    """Run a checked selection (the budget already charged) → :class:`Selection`: the opening
    of the mechanism the plan chose (:mod:`matmech.svt.opening`; the input was checked when
    the plan was made), then the mechanism's own run, both through the registry."""
    entry = SELECTION_METHODS[plan.method]
    mech = entry.runs(plan.mechanism)
    op = opening(
        plan.values,
        plan.thr if entry.threshold else None,
        c=plan.c,
        calibrate=mech.calibrate,
        rng=rng,
        value_bound=plan.value_bound,
        eps=plan.eps,
        sensitivity=plan.joint_sensitivity if mech.joint else plan.sensitivity,
        monotonic=plan.monotonic,
        ratio=plan.ratio,
        sigma=plan.sigma,
    )
    res = mech.run(op)
    rows = np.asarray(res.positions, dtype=np.int64)
    if rows.ndim != 1 or np.unique(rows).size != rows.size or rows.size > entry.max_rows(plan.c):
        raise RuntimeError(
            f"selection method {plan.method!r} returned positions that are not at most "
            f"{entry.max_rows(plan.c)} distinct row indices"
        )
    rows.setflags(write=False)
    return Selection(
        rows,
        plan.method,
        plan.eps,
        plan.c,
        plan.threshold,
        plan.sensitivity,
        plan.monotonic,
        bool(res.stopped),
        plan.n_rows,
        res if mech.gap else None,
        mech.name,
    )


def selection_event(method: str, eps: float):
    """The privacy event of a selection run (:mod:`matmech.privacy.events`): a sparse vector
    run for a method that tests rows against a threshold, an exponential mechanism / noisy
    top-c run otherwise; pure ``eps`` either way."""
    cls = SparseVectorEvent if SELECTION_METHODS[method].threshold else ExponentialMechanism
    return cls(eps)
