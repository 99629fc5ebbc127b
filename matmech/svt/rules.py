"""The data-independent rules of a selection over the rows of W.

From W's entry range and the declared ``max_records`` alone: the row sensitivity and the
monotonic-noise rule (Lyu, Su, Li, VLDB 2017, §4.3: valid only for non-negative rows under
add/remove), which mechanism runs (the vector selection of :mod:`matmech.svt.vector` when it
is less noisy), the calibration and grid the run will use (every magnitude check, before
anything is read or spent), and the advised ε share of a free-gap method
(:func:`matmech.svt.combine.advise_split`).

Sensitivity of one row under add/remove is max_j |W_ij| (one cell changes by 1); under
substitution the row changes by w_b − w_a ≤ max_j W_ij − min(0, min_j W_ij).
"""

from __future__ import annotations

import numpy as np

from matmech.linalg.linop import as_linop
from matmech.privacy.calibration import row_sensitivity
from matmech.svt.split import DeclarationError
from matmech.svt.grid import check_public_units
from matmech.svt.methods import SELECTION_METHODS
from matmech.svt.vector import joint_sensitivity, prefer_vector


def entry_range(W):
    """(min, max) over the entries of W and 0, through the structure where there is one
    (:meth:`~matmech.linalg.linop.LinOp.entry_range`)."""
    return as_linop(W).entry_range()


def take_rows(W, rows):
    """The sub-workload of the given rows, keeping interval structure where W has it
    (:meth:`~matmech.linalg.linop.LinOp.take_rows`)."""
    return as_linop(W).take_rows(np.asarray(rows, dtype=np.int64))


def check_vector(vector, method):
    """``vector`` checked: "auto", True (only for a method with a vector selection) or False."""
    if isinstance(vector, str):
        if vector != "auto":
            raise ValueError(f"vector must be 'auto', True or False, got {vector!r}")
    elif vector is not True and vector is not False:
        raise TypeError(
            f"vector must be 'auto', True or False, got {type(vector).__name__}: {vector!r}"
        )
    elif vector is True and SELECTION_METHODS[method].vector is None:
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
    check_vector(vector, method)
    entry = SELECTION_METHODS[method]
    if entry.vector is None or vector is False:
        return entry.mechanism.name, 0.0
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
        return entry.vector.name, joint
    return entry.mechanism.name, 0.0


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
    (:func:`~matmech.svt.grid.check_public_units`). The calibration is the method's own hook
    (:mod:`matmech.svt.methods`). Data independent.
    """
    lo, hi = entry_range(W)
    entry = max(abs(lo), abs(hi))
    bound = float(max_records) * entry
    mech = SELECTION_METHODS[method].runs(mechanism)
    try:
        cal = mech.calibrate(
            c=c,
            eps=eps,
            sensitivity=joint if mech.joint else sensitivity,
            monotonic=monotonic,
            ratio=ratio,
            sigma=sigma,
            integer_values=integer_values,
            value_bound=bound,
            n_candidates=W.shape[0],
        )
    except DeclarationError as exc:
        raise ValueError(
            f"max_records={max_records:,} times the workload's largest |entry| {entry:g} is more than exact grid "
            f"arithmetic can hold for method={method!r} ({mech.name}); at most "
            f"max_records={max(int(exc.fits // entry), 0):,} fits: declare a smaller max_records"
        ) from None
    if thr is not None:
        check_public_units(thr, cal.grid, "threshold")
    if getattr(cal, "sigma", None) is not None:  # a margin the user gave: named before any spend
        check_public_units(cal.sigma, cal.grid, "sigma (the top-branch margin)")
    return cal, bound


def row_noise_rule(W, monotonic, neighbors):
    """(row sensitivity, monotonic) of a selection over the rows of W, from W's entry range
    (module docstring): monotonic="auto" uses monotonic noise exactly where it is valid,
    True where it is not valid raises."""
    lo, hi = entry_range(W)
    sens = row_sensitivity(lo, hi, neighbors)
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
    vec = opts["vector"] is not False and SELECTION_METHODS[opts["method"]].vector is not None
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
