"""The free gaps as measurements of the selected rows, and the advised selection share.

[DWZK19] Ding, Wang, Zhang, Kifer, PVLDB 13(3) 2019, Sec. "Using the free gap": the gaps
of a selection are noisy *linear* measurements of the selected queries, and the best
linear unbiased combination of them with an independent measurement of the same queries
is generalised least squares (they give it for Laplace measurements of each query; here
the second measurement is the Matrix Mechanism's W_S x_hat with its full covariance).

Gap measurement of the k selected rows, in one form for all three mechanisms::

    z = q_S + e,   Cov(e) = diag(d) + s * 1 1^T

* Noisy Top-c with Gap: z_t = -(g_1 + ... + g_{t-1}) is the noisy score of j_t minus the
  (unreleased) noisy score of j_1; d_t = Var(eta), s = inf (an unknown common offset).
* SVT with gap / adaptive SVT: z_i = gap_i + T_i = q_i + nu_i - rho; d_i = Var(nu_i) of the
  branch that fired, s = Var(rho).
* The vector selection (:mod:`matmech.svt.vector`, Laplace mechanism on all of W x):
  z_i = the released noisy value, d_i = Var(DLap), s = 0 (no common offset: G = D^-1 exactly).

Its precision (Sherman-Morrison; the s = inf limit projects out the offset) is
G = D^-1 - D^-1 1 1^T D^-1 / (1/s + 1^T D^-1 1).  With the measurement y ~ (q_S, Sigma),
independent of the selection noise, the GLS estimate and its exact covariance are

    q_hat = (Sigma^-1 + G)^-1 (Sigma^-1 y + G z),    Cov(q_hat) = (Sigma^-1 + G)^-1.

When selected rows are duplicate or linearly dependent, Sigma is singular: the same GLS is
taken on the space the answers live in, q = B theta (:mod:`matmech.linalg.gls`), with
Sigma^-1 replaced by B (B^T Sigma B)^-1 B^T; nothing is dropped.

**The winner's curse: the releases never do this.** Those variances are those of the noise
draws, and the GLS is unbiased only for a measurement made independently of the selection.
A gap is not: *conditioned on being selected* a row's selecting draw is biased upwards (by
about one noise std for a row at the threshold; through the shared threshold noise even for
clear winners), and the GLS inherits the bias in proportion to the weight it gives the gap
(docs/guide/selection.md: +2 to +4 std for rows near the threshold, coverage 0-45% of a
"95%" interval). :func:`matmech.release` therefore answers every selected row from the
measurement alone, and :func:`combine_gaps` is left for analyses that condition on the
selection themselves.

:func:`advise_split` recommends the selection share of eps for the gap methods.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from matmech import validate
from matmech.linalg.gls import (
    RANK_RTOL,
    gls_answers,
    precision_on,
    row_space_basis,
)
from matmech.linalg.linop import as_linop
from matmech.linalg.structured import pinv_gram
from matmech.privacy.params import check_noise_eps
from matmech.svt.checks import check_c
from matmech.svt.measurement import GapMeasurement
from matmech.svt.methods import SELECTION_METHODS, mechanism_named
from matmech.svt.vector import prefer_vector
from typing import Any


#: answer_covariance refuses n * k above this (two n x k float64 blocks).
MAX_COVARIANCE_ENTRIES = 1 << 24
#: The selection shares advise_split searches.
SPLIT_GRID = tuple(round(0.05 * i, 2) for i in range(2, 17))
#: floor="auto" never advises a larger selection share than this (the even split): the
#: answers rest on the measurement's share alone.
AUTO_FLOOR_MAX = 0.5


def gap_measurement(result: Any, threshold: Any = None) -> GapMeasurement:
    """The linear measurement a :class:`~matmech.svt.gap.GapResult` makes of its selected values.

    ``threshold``: the public threshold(s) of an SVT run (scalar or one per candidate).

    Parameters
    ----------
    result : GapResult or VectorResult
        A free-gap or vector selection.
    threshold : float or array_like, optional
        The public threshold(s) of an SVT run.

    Returns
    -------
    GapMeasurement
        z = q_S + e with its covariance.

    Raises
    ------
    ValueError
        A missing threshold for an SVT run, or a threshold of the wrong length.
    TypeError
        ``result`` of the wrong kind.

    Examples
    --------
    >>> r = sparse_vector_gap([3, 500, 2, 700], 100, c=2, eps=1.0, rng=np.random.default_rng(0))
    >>> gap_measurement(r, 100).z.shape
    (2,)
    """
    mech = mechanism_named(getattr(result, "mechanism", ""))
    if mech.law is None:
        raise TypeError(f"result of {mech.name!r} releases no gaps to measure with")
    return mech.law(result, threshold)


def combine_gaps(y, cov, gap: GapMeasurement, order=None, *, basis=None):
    """GLS of the measured answers ``y`` (covariance ``cov``) with the gap measurement → (estimate, covariance).

    ``order[k]`` is the index into ``y`` of the k-th gap position (default: the same order).
    ``basis`` (k × r): a basis of the space the answers live in (the column space of W_S;
    duplicate or dependent rows make r < k and ``cov`` singular); default: the range of
    ``cov`` (:func:`~matmech.linalg.gls.row_space_basis`). The GLS is
    :func:`matmech.linalg.gls.gls_answers` (the one GLS) on that space: exact for duplicate and dependent rows.

    Parameters
    ----------
    y : numpy.ndarray
        The measured answers of the selected rows.
    cov : numpy.ndarray
        Their covariance (positive semidefinite).
    gap : GapMeasurement
        The selection's measurement of the same rows.
    order : sequence of int, optional
        Index into ``y`` of each gap position.
    basis : numpy.ndarray, optional
        A basis (k x r) of the space the answers live in.

    Returns
    -------
    estimate : numpy.ndarray
        The GLS estimate.
    covariance : numpy.ndarray
        Its covariance.

    Raises
    ------
    ValueError
        Shapes that do not match, or ``cov`` not positive semidefinite.

    Examples
    --------
    >>> r = sparse_vector_gap([3, 500, 2, 700], 100, c=2, eps=1.0, rng=np.random.default_rng(0))
    >>> est, C = combine_gaps(np.array([500.0, 700.0]), 4.0 * np.eye(2), gap_measurement(r, 100))
    >>> est.shape, bool(np.all(np.diag(C) < 4.0))
    ((2,), True)
    """
    if not isinstance(gap, GapMeasurement):
        raise TypeError(
            f"gap must be a GapMeasurement (from gap_measurement), got {type(gap).__name__}"
        )
    y = validate.vector(y, "y")
    k = y.shape[0]
    if k == 0:
        raise ValueError("y must hold at least one measured answer, got an empty sequence")
    cov = validate.matrix(cov, "cov").astype(np.float64)
    if cov.shape != (k, k):
        raise ValueError(f"cov must be {k}x{k} for the {k} answers in y, got shape {cov.shape}")
    lam = np.linalg.eigvalsh((cov + cov.T) / 2) if np.all(np.isfinite(cov)) else np.array([np.nan])
    if not np.abs(cov - cov.T).max() <= RANK_RTOL * np.abs(cov).max() or not lam[
        0
    ] >= -RANK_RTOL * max(float(lam[-1]), 0.0):
        raise ValueError("cov must be a symmetric positive semidefinite covariance matrix")
    if order is None:
        idx = np.arange(k)
    else:
        idx = np.asarray(
            validate.sequence(order, "order") if not isinstance(order, np.ndarray) else order
        )
        if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise TypeError(
                f"order must be a 1-D sequence of integer indices into y, got {order!r:.80}"
            )
        idx = idx.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= k or np.unique(idx).size != idx.size):
            raise ValueError(
                f"order must name distinct answers of y (indices in [0, {k - 1}]), got {order!r:.80}"
            )
    if idx.shape[0] != gap.z.shape[0]:
        what = "y holds" if order is None else "order names"
        raise ValueError(
            f"{gap.z.shape[0]} gap measurements but {what} {idx.shape[0]} answers: "
            f"pass y for the selected rows, or order= mapping each gap position to its answer"
        )
    B = row_space_basis(cov) if basis is None else np.asarray(basis, dtype=np.float64)
    if B.ndim != 2 or B.shape[0] != k or B.shape[1] > k:
        raise ValueError(f"basis must be a {k} x r matrix (r <= {k}), got shape {B.shape}")
    S = np.zeros((idx.size, k))
    S[np.arange(idx.size), idx] = 1.0
    out = gls_answers([(np.eye(k), y, precision_on(cov, B)), (S, gap.z, gap.precision())], B)
    return np.array(out.values), np.array(out.covariance)


def answer_covariance(sub, strategy, variance):
    """Cov(W_S x̂) = variance · W_S (AᵀA)⁺ W_Sᵀ for the measured ``strategy`` (k × k).

    Refuses (ValueError) when n·k exceeds :data:`MAX_COVARIANCE_ENTRIES`."""
    sub, A = as_linop(sub), as_linop(strategy)
    k, n = sub.shape
    if n * k > MAX_COVARIANCE_ENTRIES:
        raise ValueError(
            f"the covariance of {k} answers over {n} cells needs {n * k:,} entries per block "
            f"(limit {MAX_COVARIANCE_ENTRIES:,})"
        )
    M, _ = pinv_gram(A)
    U = sub.rmatvec(np.eye(k))
    F = getattr(M, "gram_factor", None)
    if F is not None:  # M = F Fᵀ: (W_S F)(W_S F)ᵀ, no cancellation
        SF = np.asarray(U, dtype=np.float64).T @ F
        return variance * (SF @ SF.T)
    C = variance * sub.matvec(as_linop(M).matvec(U))
    return (C + C.T) / 2


def advise_split(
    row_variance,
    *,
    method,
    eps,
    c,
    sensitivity=1.0,
    monotonic=False,
    floor="auto",
    joint_sensitivity=None,
    vector="auto",
    n_values=1,
    integer_values=True,
    ratio="optimal",
):
    """The selection share f of ``eps`` for a free-gap selection; data independent → (f, {f: v}).

    ``row_variance(eps_m)``: the mean Matrix-Mechanism variance v of one answer measured with
    eps_m (e.g. from :func:`matmech.error.per_query_variance`).

    **The answers**: a release answers every selected row from the measurement alone (the
    gaps are biased given the selection: module docstring), so the mean variance of a
    selected answer is v(eps_m), eps_m = (1 − f)·eps, which grows with f: the less the
    selection takes, the better the answers. The table maps each share searched to it.

    **Selection quality**: which rows are right depends on the data, but how finely the
    selection can rank them does not: the std of the noise on one selection score (plus the
    threshold noise for SVT; the vector selection's value noise when it runs,
    :func:`~matmech.svt.vector.prefer_vector`, with ``joint_sensitivity`` Δ_W given). With
    ``floor="auto"`` the advice is the smallest share in :data:`SPLIT_GRID` at which that
    std is at most the std sqrt(v) of one measured answer — the selection tells rows apart
    as finely as the answers will — but never above :data:`AUTO_FLOOR_MAX` = 0.5 (the even
    split). A number ``floor`` is the smallest share searched (the advice is the first
    share of the grid from it). (Adaptive SVT's scores are counted with the top-branch
    variance: rows worth answering clear the threshold by a margin.)

    Parameters
    ----------
    row_variance : callable
        ``row_variance(eps_m)``: the mean variance of one answer measured with eps_m.
    method, eps, c, sensitivity, monotonic, ratio
        The selection, as :func:`~matmech.svt.gap_calibration` takes it (``sensitivity``:
        the row sensitivity).
    floor : float or "auto", default "auto"
        Smallest share searched.
    joint_sensitivity : float, optional
        Δ_W, enabling the vector selection.
    vector : bool or "auto", default "auto"
        Consider the vector selection.
    n_values : int, default 1
        Number of candidates.
    integer_values : bool, default True
        Values on the integer grid.


    Returns
    -------
    share : float
        The advised selection share of ``eps``.
    table : dict
        {share: the mean variance of one selected answer} over the shares searched.

    Raises
    ------
    TypeError
        ``row_variance`` not callable, or arguments of the wrong kind.
    ValueError
        An unknown method or bad ε, c, floor.

    Examples
    --------
    >>> share, table = advise_split(lambda e: 2.0 / e ** 2, method="topc-gap", eps=1.0, c=2)
    >>> 0.0 < share < 1.0 and share in table
    True
    """
    if not callable(row_variance):
        raise TypeError(
            f"row_variance must be a function of eps (the variance of one answer), "
            f"got {type(row_variance).__name__}: {row_variance!r}"
        )
    validate.choice(method, "method", tuple(n for n, m in SELECTION_METHODS.items() if m.gap))
    entry = SELECTION_METHODS[method]
    eps = check_noise_eps(eps)
    c = check_c(c)
    if not (isinstance(floor, str) and floor == "auto"):
        floor = validate.real(floor, "floor")
        if not 0 <= floor <= SPLIT_GRID[-1]:
            raise ValueError(
                f"floor must be 'auto' or in [0, {SPLIT_GRID[-1]}] (the largest selection share "
                f"searched), got {floor!r}"
            )
    if joint_sensitivity is not None:
        joint_sensitivity = validate.real(joint_sensitivity, "joint_sensitivity")
        if not joint_sensitivity > 0:
            raise ValueError(
                f"joint_sensitivity must be positive (the L1 sensitivity of W x), got {joint_sensitivity!r}"
            )
    table, finer = {}, []
    for f in SPLIT_GRID:
        if not isinstance(floor, str) and f < floor:
            continue
        e_s, e_m = f * eps, (1 - f) * eps
        vm = row_variance(e_m)
        if (
            isinstance(vm, (bool, np.bool_))
            or not isinstance(vm, (numbers.Real, np.ndarray))
            or np.ndim(np.asarray(vm)) != 0
            or not (math.isfinite(float(vm)) and float(vm) > 0)
        ):
            raise ValueError(
                f"row_variance({e_m!r}) must return a positive finite variance, got {vm!r}"
            )
        table[f] = vm = float(vm)
        if not isinstance(floor, str):
            continue
        vec = (
            joint_sensitivity is not None
            and vector is not False
            and entry.vector is not None
            and (
                vector is True
                or prefer_vector(
                    method,
                    c=c,
                    eps=e_s,
                    row_sensitivity=sensitivity,
                    joint=joint_sensitivity,
                    monotonic=monotonic,
                    n_values=n_values,
                    integer_values=integer_values,
                    ratio=ratio,
                )
            )
        )
        mech = entry.mechanism if not vec or entry.vector is None else entry.vector
        cal = mech.calibrate(
            c=c,
            eps=e_s,
            sensitivity=joint_sensitivity if vec else sensitivity,
            monotonic=monotonic,
            ratio=ratio,
            integer_values=integer_values if vec else False,
            n_candidates=n_values,
        )
        if mech.score_variance is None:  # registration requires it of a free-gap method
            raise TypeError(
                f"selection method {method!r} has no score_variance hook to advise a split"
            )
        score = mech.score_variance(cal)
        if score <= vm:
            finer.append(f)
    start = min(table) if not isinstance(floor, str) else min(finer + [AUTO_FLOOR_MAX])
    return start, {f: v for f, v in table.items() if f >= start}
