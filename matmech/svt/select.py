"""Private row selection: which workload rows are worth answering (a sparse-vector front-end).

``select_rows`` computes the true answers W x (structured, never a dense W), then either
runs the sparse vector technique (Lyu, Su, Li, VLDB 2017, Alg. 7: the first c rows whose
noisy answer clears the noisy threshold) or the exponential mechanism c times without
replacement (their recommendation when the whole workload is known in advance). Like
measurement, it reads the private x and charges the budget before any noise is drawn.

Sensitivity of one row under add/remove is max_j |W_ij| (one cell changes by 1); under
substitution the row changes by w_b − w_a ≤ max_j W_ij − min(0, min_j W_ij). Monotonic noise
(Lyu et al. §4.3) is valid only for non-negative rows under add/remove: adding a record
then moves every answer up or leaves it.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from matmech.privacy.params import check_neighbors, check_privacy_params, positive_real
from matmech import validate
from matmech.linalg.linop import as_linop
from matmech.privacy import noise
from matmech.privacy.budget import check_affordable, check_budget
from matmech.privacy.measure import check_counts, check_max_records, check_records, integer_valued
from matmech.svt import exponential_top_c, sparse_vector, svt_budget
from matmech.svt.calibration import DeclarationError, gap_calibration
from matmech.svt.grid import check_public_units
from matmech.svt.checks import check_threshold
from matmech.svt.gap import adaptive_sparse_vector, noisy_top_c_gap, sparse_vector_gap
from matmech.svt.vector import (
    VECTOR_METHODS,
    joint_sensitivity,
    noisy_vector_threshold,
    noisy_vector_top_c,
    prefer_vector,
    vector_calibration,
)
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # names used only in annotations
    from matmech.privacy.randomness import Rng
    from matmech.linalg.linop import LinOp
    from matmech.privacy.budget import PrivacyBudget
    import numpy.typing as npt

__all__ = [
    "SelectionMethod",
    "SELECTION_METHODS",
    "GAP_METHODS",
    "THRESHOLD_METHODS",
    "Selection",
    "SelectionPlan",
    "select_rows",
    "plan_selection",
    "run_selection",
    "check_selection",
    "take_rows",
    "entry_range",
    "METHODS",
    "SELECT_OPTIONS",
    "DEFAULT_TARGET_REL_ERROR",
    "check_select_options",
    "shown_select_options",
    "selection_arguments",
    "row_noise_rule",
    "advised_select_eps",
    "declared_calibration",
    "selection_mechanism",
    "MECHANISMS",
]


@dataclass(frozen=True)
class SelectionMethod:
    """What the rest of the package needs to know about a selection method (the registry
    :data:`SELECTION_METHODS`; the release paths, the CLI and the answer table read it):
    ``mechanism`` it runs by default ([LSL17] / [DWZK19]), whether it releases free gaps (``gap``)
    (its ε share may be advised and the gaps are combined by GLS), whether it tests rows
    against a ``threshold`` (else it takes the c largest), the most rows it can select for a
    given c (``max_rows_factor``·c − ``max_rows_offset``), why rows after its last find were
    not examined (``stop_reason``) and the options only it takes (``own_options``)."""

    name: str
    mechanism: str
    gap: bool
    threshold: bool
    max_rows_factor: int = 1
    max_rows_offset: int = 0
    stop_reason: str = "c rows already found"
    own_options: tuple = ()

    def max_rows(self, c: int) -> int:
        """The most rows one run can select (Ding et al.: adaptive SVT up to 2c − 1)."""
        return self.max_rows_factor * int(c) - self.max_rows_offset


#: The selection methods, by name. A new method is one entry here plus its runner.
SELECTION_METHODS = {
    m.name: m
    for m in (
        SelectionMethod("svt", "sparse-vector", gap=False, threshold=True),
        SelectionMethod("em", "exponential", gap=False, threshold=False),
        SelectionMethod("topc-gap", "noisy-top-c-gap", gap=True, threshold=False),
        SelectionMethod("svt-gap", "sparse-vector-gap", gap=True, threshold=True),
        SelectionMethod(
            "adaptive-svt",
            "adaptive-sparse-vector",
            gap=True,
            threshold=True,
            max_rows_factor=2,
            max_rows_offset=1,
            stop_reason="budget used up",
            own_options=("sigma",),
        ),
    )
}
METHODS = tuple(SELECTION_METHODS)
#: The methods that release free gaps (Ding, Wang, Zhang, Kifer, PVLDB 2019; :mod:`matmech.svt.gap`).
GAP_METHODS = tuple(n for n, m in SELECTION_METHODS.items() if m.gap)
#: The methods that test rows against a threshold.
THRESHOLD_METHODS = tuple(n for n, m in SELECTION_METHODS.items() if m.threshold)
#: The mechanism each method runs by default; "topc-gap" and "svt-gap" run
#: :data:`~matmech.svt.vector.VECTOR_METHODS` instead when that has less noise (:func:`selection_mechanism`).
MECHANISMS = {n: m.mechanism for n, m in SELECTION_METHODS.items()}


#: Keys of ``release(..., select=...)`` (the rest of select_rows' options come from release).
SELECT_OPTIONS = (
    "method",
    "eps",
    "c",
    "threshold",
    "target_rel_error",
    "monotonic",
    "ratio",
    "sigma",
    "vector",
)
#: threshold="auto" answers a row when its std is at most this fraction of its count.
DEFAULT_TARGET_REL_ERROR = 0.1


def check_select_options(select, eps):
    """The validated options of ``release(..., select=...)`` (defaults filled in), the rules of
    both release paths; ``eps`` is the release's total. Raises before anything is read or spent."""
    if not isinstance(select, Mapping):
        raise TypeError(
            "select must be a dict of select_rows options, e.g. dict(method='svt', threshold=2000, c=50, eps=0.3), "
            f"got {type(select).__name__}: {select!r}"
        )
    unknown = sorted(str(k) for k in select if k not in SELECT_OPTIONS)
    if unknown:
        raise ValueError(
            f"unknown select option(s) {unknown}: expected keys from {list(SELECT_OPTIONS)} "
            "(neighbors, budget and rng are release's own arguments)"
        )
    gap_method = select.get("method") in GAP_METHODS
    for key in ("c",) if gap_method else ("eps", "c"):
        if key not in select:
            raise ValueError(f"select needs {key!r} (got keys {sorted(map(str, select))})")
    opts = dict(
        method="svt",
        threshold=None,
        target_rel_error=None,
        monotonic="auto",
        ratio="optimal",
        sigma="auto",
        vector="auto",
    )
    opts.update(select)
    if opts["method"] not in METHODS:
        raise ValueError(f"select method must be one of {METHODS}, got {opts['method']!r}")
    if "eps" not in select:  # a gap method: the split is advised later (data independent)
        opts["eps"] = None
        return _check_threshold_options(opts)
    opts["eps"] = positive_real(opts["eps"], "select eps")
    if opts["eps"] >= eps:
        raise ValueError(
            f"select eps = {opts['eps']!r} must be less than release's total eps = {eps!r}: "
            "the selection's eps comes out of the total and the rest measures the selected rows"
        )
    return _check_threshold_options(opts)


def _check_threshold_options(opts):
    """The threshold / target_rel_error part of :func:`check_select_options`."""
    thr = opts["threshold"]
    is_auto = isinstance(thr, str) and thr == "auto"
    if opts["method"] in THRESHOLD_METHODS:
        if thr is None or (isinstance(thr, str) and not is_auto):
            raise ValueError(
                f"select method={opts['method']!r} needs a threshold: a number, one number per row, "
                f"or 'auto'; got {thr!r}"
            )
    elif thr is not None:
        raise ValueError(
            f"select method={opts['method']!r} picks the c largest rows and takes no threshold; "
            f"got threshold={thr!r}"
        )
    if is_auto:
        t = (
            DEFAULT_TARGET_REL_ERROR
            if opts["target_rel_error"] is None
            else opts["target_rel_error"]
        )
        opts["target_rel_error"] = positive_real(t, "select target_rel_error")
    elif opts["target_rel_error"] is not None:
        raise ValueError(
            f"select target_rel_error is only used with threshold='auto' (threshold is {thr!r})"
        )
    return opts


def selection_arguments(opts, *, c, threshold, neighbors) -> dict:
    """The keyword arguments of :func:`check_selection` / :func:`select_rows` for checked
    ``release(select=...)`` options ``opts`` (:func:`check_select_options`), with the
    selection's ``c``, its (resolved) ``threshold`` and the neighbour relation: one place
    for both release paths."""
    return dict(
        c=c,
        eps=opts["eps"],
        threshold=threshold,
        method=opts["method"],
        monotonic=opts["monotonic"],
        ratio=opts["ratio"],
        neighbors=neighbors,
        sigma=opts["sigma"],
        vector=opts["vector"],
    )


def shown_select_options(opts):
    """The checked select options as a release records them (a dict): a per-row threshold
    array is summarised as "one per row"."""
    out = dict(opts)
    thr = out["threshold"]
    if thr is not None and not isinstance(thr, str):
        out["threshold"] = float(thr) if np.ndim(thr) == 0 else "one per row"
    return out


@dataclass(frozen=True)
class Selection:
    """The rows of W chosen privately, in the order they were found (SVT) or ranked (EM).

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

    Returns
    -------
    Selection
        A frozen record; :func:`select_rows` makes it.

    Raises
    ------
    dataclasses.FrozenInstanceError
        On any attempt to change a field.

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


def entry_range(W):
    """(min, max) over the entries of W and 0, through the structure where there is one
    (:meth:`~matmech.linalg.linop.LinOp.entry_range`)."""
    return as_linop(W).entry_range()


def take_rows(W, rows):
    """The sub-workload of the given rows, keeping interval structure where W has it
    (:meth:`~matmech.linalg.linop.LinOp.take_rows`)."""
    return as_linop(W).take_rows(np.asarray(rows, dtype=np.int64))


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


def _check_vector(vector, method):
    if isinstance(vector, str):
        if vector != "auto":
            raise ValueError(f"vector must be 'auto', True or False, got {vector!r}")
    elif vector is not True and vector is not False:
        raise TypeError(
            f"vector must be 'auto', True or False, got {type(vector).__name__}: {vector!r}"
        )
    elif vector is True and method not in VECTOR_METHODS:
        raise ValueError(
            f"vector=True (the Laplace mechanism on the whole vector) replaces 'topc-gap' or 'svt-gap', "
            f"not method={method!r}"
        )
    return vector


def selection_mechanism(
    W,
    *,
    method,
    c,
    eps,
    sensitivity,
    monotonic,
    ratio="optimal",
    neighbors="add_remove",
    vector="auto",
    integer_values=True,
    value_bound=0.0,
):
    """(mechanism, Delta_W) for a checked selection; data independent (W, c, eps, neighbours,
    the declared ``value_bound`` on abs(W x)).

    "topc-gap" / "svt-gap" run the vector selection (:mod:`matmech.svt.vector`) when
    ``vector`` is True, or when it is "auto" and :func:`~matmech.svt.vector.prefer_vector`
    finds its per-value noise no larger than the [DWZK19] mechanism's per-score noise (and
    its grid can hold the declared bound). Delta_W is 0 when the vector selection does not run.
    """
    _check_vector(vector, method)
    if method not in VECTOR_METHODS or vector is False:
        return MECHANISMS[method], 0.0
    joint = joint_sensitivity(W, neighbors)
    if vector is True or prefer_vector(
        method,
        c=c,
        eps=eps,
        row_sensitivity=sensitivity,
        joint=joint,
        monotonic=monotonic,
        n_values=W.shape[0],
        integer_values=integer_values,
        ratio=ratio,
        value_bound=value_bound,
    ):
        # a scale too large for exact sampling, or a declaration too large for the grid, is
        # refused by declared_calibration before anything is read or spent
        return VECTOR_METHODS[method], joint
    return MECHANISMS[method], 0.0


def declared_calibration(
    W,
    *,
    method,
    mechanism,
    c,
    eps,
    sensitivity,
    monotonic,
    ratio="optimal",
    sigma="auto",
    joint=0.0,
    thr=None,
    integer_values,
    max_records,
):
    """(calibration, value_bound): the calibration the selection will run with and the declared
    bound on abs(W x) (``max_records`` times W's largest abs(entry)) its grid is chosen to hold.

    Every magnitude check of the run happens here, from the declaration and the public
    inputs, before anything is read or spent: a declaration no exact grid can hold is refused
    naming max_records and the largest that fits; so is a threshold or sigma beyond the grid
    (:func:`~matmech.svt.grid.check_public_units`). The exponential mechanism compares float
    scores and has no grid (calibration None). Data independent.
    """
    lo, hi = entry_range(W)
    entry = max(abs(lo), abs(hi))
    bound = float(max_records) * entry
    if method == "em":
        return None, bound
    try:
        if mechanism in VECTOR_METHODS.values():
            cal = vector_calibration(
                mechanism,
                c=c,
                eps=eps,
                sensitivity=joint,
                n_values=W.shape[0],
                integer_values=integer_values,
                value_bound=bound,
            )
        elif method == "svt":
            cal = svt_budget(
                c=c,
                eps=eps,
                sensitivity=sensitivity,
                monotonic=monotonic,
                ratio=ratio,
                integer_values=integer_values,
                value_bound=bound,
            )
        else:
            kw = {} if method == "topc-gap" else dict(ratio=ratio, sigma=sigma)
            cal = gap_calibration(
                method,
                c=c,
                eps=eps,
                sensitivity=sensitivity,
                monotonic=monotonic,
                integer_values=integer_values,
                value_bound=bound,
                n_candidates=W.shape[0] if method == "adaptive-svt" else 0,
                **kw,
            )
    except DeclarationError as exc:
        raise ValueError(
            f"max_records={max_records:,} times the workload's largest |entry| {entry:g} is more than exact grid "
            f"arithmetic can hold for method={method!r} ({mechanism or MECHANISMS[method]}); at most "
            f"max_records={max(int(exc.fits // entry), 0):,} fits: declare a smaller max_records"
        ) from None
    if thr is not None:
        check_public_units(thr, cal.grid, "threshold")
    if getattr(cal, "sigma", None) is not None:
        check_public_units(cal.sigma, cal.grid, "sigma (the top-branch margin)")
    return cal, bound


def row_noise_rule(W, monotonic, neighbors):
    """(row sensitivity, monotonic) of a selection over the rows of W, from W's entry range
    (module docstring): monotonic="auto" uses monotonic noise exactly where it is valid,
    True where it is not valid raises."""
    lo, hi = entry_range(W)
    sens = max(abs(lo), abs(hi)) if neighbors == "add_remove" else hi - lo
    if not sens > 0:
        raise ValueError(
            "the workload's rows are all zero (row sensitivity 0): there is nothing to select"
        )
    valid_monotonic = lo >= 0 and neighbors == "add_remove"
    if isinstance(monotonic, str) and monotonic == "auto":
        monotonic = valid_monotonic
    elif monotonic is True and not valid_monotonic:
        raise ValueError(
            "monotonic=True needs non-negative counting rows and add/remove neighbours "
            f"(rows have entries in [{lo:g}, {hi:g}], neighbors={neighbors!r}); use monotonic=False"
        )
    elif monotonic is not True and monotonic is not False:
        raise TypeError(
            f"monotonic must be True, False or 'auto', got {type(monotonic).__name__}: {monotonic!r}"
        )
    return float(sens), bool(monotonic)


def advised_select_eps(W, eps, opts, row_variance, *, neighbors, integer_values):
    """The selection's share of ``eps`` for a free-gap method given no select eps:
    :func:`matmech.svt.combine.advise_split` with W's row sensitivity, monotonic rule and, for
    "topc-gap"/"svt-gap", its joint sensitivity (the vector selection); ``opts`` are the
    checked select options, ``row_variance(eps_m)`` the mean variance of one measured answer.
    Data independent."""
    from matmech.svt.combine import advise_split

    sens, mono = row_noise_rule(W, opts["monotonic"], neighbors)
    vec = opts["vector"] is not False and opts["method"] in VECTOR_METHODS
    f, _ = advise_split(
        row_variance,
        method=opts["method"],
        eps=eps,
        c=opts["c"],
        sensitivity=sens,
        monotonic=mono,
        joint_sensitivity=joint_sensitivity(W, neighbors) if vec else None,
        vector=opts["vector"],
        n_values=W.shape[0],
        integer_values=integer_values,
        ratio=opts["ratio"],
    )
    return f * eps


def check_selection(
    W, *, c, eps, threshold, method, monotonic, ratio, neighbors, sigma="auto", vector="auto"
):
    """Every data-independent check of a selection → (c, sensitivity, monotonic, thresholds);
    raises before anything is read or spent."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    _check_vector(vector, method)
    c = _check_c(c)
    check_neighbors(neighbors)
    sens, monotonic = row_noise_rule(W, monotonic, neighbors)
    thr = None
    if method in THRESHOLD_METHODS:
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
    if method == "topc-gap" and c >= W.shape[0]:
        raise ValueError(
            f"method='topc-gap' needs c below the {W.shape[0]} rows (the last gap is to the runner-up), got c={c}"
        )
    if method == "svt":  # validates eps, ratio and sensitivity without drawing anything
        svt_budget(c=c, eps=eps, sensitivity=sens, monotonic=monotonic, ratio=ratio)
    elif method == "topc-gap":
        gap_calibration(method, c=c, eps=eps, sensitivity=sens, monotonic=monotonic)
    elif method == "adaptive-svt":
        gap_calibration(
            method, c=c, eps=eps, sensitivity=sens, monotonic=monotonic, ratio=ratio, sigma=sigma
        )
    elif method in GAP_METHODS:
        gap_calibration(method, c=c, eps=eps, sensitivity=sens, monotonic=monotonic, ratio=ratio)
    else:
        check_privacy_params(eps, 0.0)
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
    mech, joint = selection_mechanism(
        W,
        method=method,
        c=c,
        eps=eps,
        sensitivity=sens,
        monotonic=monotonic,
        ratio=ratio,
        neighbors=neighbors,
        vector=vector,
        integer_values=exact,
        value_bound=bound,
    )
    # every magnitude check of the run, from the declaration: before x is read or anything spent
    _, bound = declared_calibration(
        W,
        method=method,
        mechanism=mech,
        c=c,
        eps=eps,
        sensitivity=sens,
        monotonic=monotonic,
        ratio=ratio,
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
    """Run a checked selection (the budget already charged) → :class:`Selection`."""
    if plan.method in GAP_METHODS:
        mech = plan.mechanism or MECHANISMS[plan.method]
        if mech in VECTOR_METHODS.values():
            kw = dict(
                eps=plan.eps,
                sensitivity=plan.joint_sensitivity,
                rng=rng,
                value_bound=plan.value_bound,
            )
            if mech == "vector-top-c":
                res = noisy_vector_top_c(plan.values, plan.c, **kw)
            else:
                res = noisy_vector_threshold(plan.values, plan.thr, c=plan.c, **kw)
        else:
            kw = dict(
                eps=plan.eps,
                sensitivity=plan.sensitivity,
                monotonic=plan.monotonic,
                rng=rng,
                value_bound=plan.value_bound,
            )
            if plan.method == "topc-gap":
                res = noisy_top_c_gap(plan.values, plan.c, **kw)
            elif plan.method == "svt-gap":
                res = sparse_vector_gap(plan.values, plan.thr, c=plan.c, ratio=plan.ratio, **kw)
            else:
                res = adaptive_sparse_vector(
                    plan.values, plan.thr, c=plan.c, ratio=plan.ratio, sigma=plan.sigma, **kw
                )
        rows = np.asarray(res.positions, dtype=np.int64)
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
            res,
            mech,
        )
    if plan.method == "svt":
        res = sparse_vector(
            plan.values,
            plan.thr,
            c=plan.c,
            eps=plan.eps,
            sensitivity=plan.sensitivity,
            monotonic=plan.monotonic,
            ratio=plan.ratio,
            rng=rng,
            value_bound=plan.value_bound,
        )
        rows, stopped = np.asarray(res.positions, dtype=np.int64), res.stopped
    else:
        res = exponential_top_c(
            plan.values,
            plan.c,
            plan.eps,
            sensitivity=plan.sensitivity,
            monotonic=plan.monotonic,
            rng=rng,
        )
        rows, stopped = np.asarray(res.positions, dtype=np.int64), True
    rows.setflags(write=False)
    return Selection(
        rows,
        plan.method,
        plan.eps,
        plan.c,
        plan.threshold,
        plan.sensitivity,
        plan.monotonic,
        bool(stopped),
        plan.n_rows,
        None,
        MECHANISMS[plan.method],
    )


def select_rows(
    W: LinOp | npt.ArrayLike,
    x: npt.ArrayLike,
    *,
    c: int,
    eps: float,
    threshold: Any = None,
    method: str = "svt",
    monotonic: bool | str = "auto",
    ratio: float | str = "optimal",
    neighbors: str = "add_remove",
    budget: PrivacyBudget | None = None,
    rng: Rng = None,
    max_records: int | None = None,
    sigma: float | str = "auto",
    vector: bool | str = "auto",
) -> Selection:
    """Choose up to ``c`` rows of W privately; spends ``eps`` (pure ε-DP).

    ``method="svt"``: the first c rows (in row order) whose answer clears ``threshold`` (a
    scalar or one value per row; data-independent) by Lyu et al. Alg. 7 with ε₁:ε₂ from
    ``ratio``. ``method="em"``: the c rows with the largest answers by the exponential
    mechanism (no threshold). ``monotonic="auto"`` uses monotonic noise exactly when it
    is valid; ``True`` where it is not valid raises. ``max_records``: the declared bound
    on Σx (see :func:`matmech.measure`). Free-gap methods (:mod:`matmech.svt.gap`):
    "topc-gap", "svt-gap", "adaptive-svt" (``sigma``: its top-branch margin, "auto" or a
    number). ``vector``: "auto" runs "topc-gap"/"svt-gap" as the Laplace mechanism on the
    whole vector W x (:mod:`matmech.svt.vector`) when that has less noise per score; True
    forces it, False never. Every check runs before ``budget`` is charged.

    Parameters
    ----------
    W : LinOp or array_like
        The workload whose rows are candidates.
    x : array_like of int
        The histogram.
    c : int
        At most c rows are selected.
    eps : float
        The selection's ε.
    threshold : float, array_like or "auto", optional
        SVT's threshold (not for ``"em"``).
    method : str, default "svt"
        ``"svt"``, ``"em"``, ``"topc-gap"``, ``"svt-gap"`` or ``"adaptive-svt"``.
    monotonic : bool or "auto", default "auto"
        Monotonic noise where valid.
    ratio : float or "optimal"
        SVT's ε₁:ε₂.
    neighbors : {"add_remove", "substitute"}, default "add_remove"
        The neighbouring relation.
    budget : PrivacyBudget, optional
        Charged before any noise.
    rng : numpy.random.Generator, optional
        None (default) for the OS CSPRNG; a Generator is NOT secure.
    max_records : int, optional
        The declared bound on Σx.
    sigma : float or "auto"
        Adaptive SVT's margin.
    vector : bool or "auto"
        Run the gap methods as the vector Laplace selection when less noisy.

    Returns
    -------
    Selection
        The selected rows and how they were chosen.

    Raises
    ------
    ValueError
        Bad options (unknown method, c < 1, a threshold with ``"em"``, ...) or bad counts.
    TypeError
        Arguments of the wrong kind.
    BudgetExceededError
        The budget cannot afford ``eps``.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> x = histogram(np.repeat(np.arange(8), [50, 0, 3, 80, 1, 0, 60, 2]), 8)
    >>> sel = select_rows(W.identity(8), x, c=2, eps=1.0, method="em",
    ...                   rng=np.random.default_rng(0))
    >>> sorted(sel.rows.tolist()), sel.method
    ([3, 6], 'em')
    """
    W = as_linop(validate.linear(W, "W"))
    check_budget(budget)
    noise.check_rng(rng)
    what = f"select up to {c} of {W.shape[0]} rows ({method})"
    check_selection(
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
    check_affordable(budget, eps, 0.0, what=what)
    plan = plan_selection(
        W,
        x,
        c=c,
        eps=eps,
        threshold=threshold,
        method=method,
        monotonic=monotonic,
        ratio=ratio,
        neighbors=neighbors,
        max_records=max_records,
        sigma=sigma,
        vector=vector,
    )
    if budget is not None:  # every check has passed: charge before any noise is drawn
        budget.spend(eps, 0.0, what=what)
    return run_selection(plan, rng=rng)
