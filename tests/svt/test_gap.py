"""Free-gap selection (issue 16): mechanisms, the gaps as measurements, release integration.

Closed forms are checked against a second method: the k x k answer covariance against the
per-answer variances of matmech.error and a dense pseudo-inverse; the answers' analytic
variance against Monte Carlo over whole seeded releases (within 4 standard errors); the GLS of
combine_gaps against a dense weighted least squares on the stacked measurements. A release
never combines the gaps into its answers (the winner's curse, issue 31): its answers are the
measurement's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from matmech import strategies as S
from matmech.error import measured_variances
from matmech.release import release
from matmech.results.release import release_table
from matmech.svt.combine import (
    AUTO_FLOOR_MAX,
    SPLIT_GRID,
    GapMeasurement,
    advise_split,
    answer_covariance,
    combine_gaps,
)
from matmech.svt.gap_calibration import gap_calibration
from matmech.svt.gap import adaptive_sparse_vector, noisy_top_c_gap, sparse_vector_gap
from matmech.run.select import select_rows
from matmech.workloads import ranges

X = np.array([800, 3, 500, 10, 0, 300, 7, 1, 12, 0, 4, 2], dtype=np.int64)
RANGES = [(i, i) for i in range(12)] + [(3, 4), (6, 7), (8, 9), (9, 11), (10, 11)]


def test_answer_covariance_matches_variances_and_dense_pinv():
    W = ranges(12, RANGES).take_rows(np.array([0, 2, 5, 12, 16]))
    A = S.hierarchical(12, 2) if hasattr(S, "hierarchical") else S.identity(12)
    cov = answer_covariance(W, A, 3.0)
    Wd, Ad = W.dense(), A.dense()
    ref = 3.0 * Wd @ np.linalg.pinv(Ad.T @ Ad) @ Wd.T
    assert np.allclose(cov, ref, atol=1e-9)
    assert np.allclose(np.diag(cov), measured_variances(W, A, 3.0))


@pytest.mark.parametrize("common", [math.inf, 2.5, 0.0])
def test_combine_gaps_equals_dense_gls(common):
    rng = np.random.default_rng(1)
    k = 4
    B = rng.normal(size=(k, k))
    cov = B @ B.T + k * np.eye(k)
    y, z = rng.normal(size=k), rng.normal(size=k)
    d = rng.uniform(1, 3, size=k)
    gm = GapMeasurement(np.arange(k), z, d, common)
    order = np.array([2, 0, 3, 1])
    est, c = combine_gaps(y, cov, gm, order=order)
    # dense: unknown offset as an extra parameter (inf) or its covariance written out (finite)
    Pm = np.eye(k)[order]
    if common == 0:
        assert np.array_equal(gm.precision(), np.diag(1.0 / d))  # exact: no division by zero
    if math.isinf(common):
        X = np.block([[np.eye(k), np.zeros((k, 1))], [Pm, np.ones((k, 1))]])
        V = np.block([[cov, np.zeros((k, k))], [np.zeros((k, k)), np.diag(d)]])
    else:
        X = np.vstack([np.eye(k), Pm])
        V = np.block([[cov, np.zeros((k, k))], [np.zeros((k, k)), np.diag(d) + common]])
    Vi = np.linalg.inv(V)
    full = np.linalg.inv(X.T @ Vi @ X)
    beta = full @ X.T @ Vi @ np.concatenate([y, z])
    assert np.allclose(est, beta[:k]) and np.allclose(c, full[:k, :k])


def _mc(method, runs=300, **extra):
    """Monte Carlo over whole seeded releases: per-run squared error vs the analytic variance."""
    W = ranges(12, RANGES)
    truth = W.matvec(X.astype(float))
    sel = dict(method=method, c=3, eps=0.4, **extra)
    se, var = [], []
    for seed in range(runs):
        r = release(X, W, 1.0, strategy="identity", select=sel, rng=np.random.default_rng(seed))
        assert r.selected.tolist() == [0, 2, 5]  # clear winners: the selection is stable
        se.append(float(((r.answers - truth[r.selected]) ** 2).sum()))
        var.append(r.expected_error)
    return np.array(se), float(np.mean(var)), r


@pytest.mark.parametrize(
    "method,extra",
    [
        ("topc-gap", {}),
        ("svt-gap", {"threshold": 150}),
        ("adaptive-svt", {"threshold": 150}),
        ("topc-gap", {"vector": False}),
        ("svt-gap", {"threshold": 150, "vector": False}),
    ],
)
def test_monte_carlo_mse_matches_analytic_variance(method, extra):
    """Every cell of X touches at most 3 rows of W (joint sensitivity 3 <= c = 3), so with
    vector="auto" topc-gap / svt-gap run the vector selection; vector=False the paper's."""
    se, var, r = _mc(method, **extra)
    assert abs(se.mean() - var) <= 4 * se.std(ddof=1) / math.sqrt(se.size), (se.mean(), var)
    vec = method != "adaptive-svt" and extra.get("vector", "auto") == "auto"
    assert r.selection.mechanism == (
        {"topc-gap": "vector-top-c", "svt-gap": "vector-threshold"}[method]
        if vec
        else {
            "topc-gap": "noisy-top-c-gap",
            "svt-gap": "sparse-vector-gap",
            "adaptive-svt": "adaptive-sparse-vector",
        }[method]
    )
    assert ("Laplace mechanism on the whole vector" in r.strategy_note) == vec
    assert ("free gaps" in r.strategy_note) == (not vec)
    assert "not combined into the answers" in r.strategy_note


def test_gaps_are_released_but_the_answers_are_the_measurements():
    W = ranges(12, RANGES)
    for method, extra in (
        ("topc-gap", {}),
        ("svt-gap", {"threshold": 150}),
        ("topc-gap", {"vector": False}),
        ("svt-gap", {"threshold": 150, "vector": False}),
    ):
        r = release(
            X,
            W,
            1.0,
            strategy="identity",
            select=dict(method=method, c=3, eps=0.5, **extra),
            rng=np.random.default_rng(0),
        )
        sub = W.take_rows(r.selected)
        base = measured_variances(sub, r.strategy, r.measurement.std**2)
        assert np.allclose(r.std**2, base) and np.allclose(r.answers, sub.matvec(r.estimate))
        assert len(r.selection.gap.gaps) == r.selected.size and len(r.measurements) == 1


def test_release_json_and_table_for_gap_methods():
    W = ranges(12, RANGES)
    r = release(
        X,
        W,
        1.0,
        select=dict(method="adaptive-svt", c=2, eps=0.5, threshold=150),
        rng=np.random.default_rng(0),
    )
    d = r.to_dict()["selection"]
    assert d["method"] == "adaptive-svt" and not d["gaps_combined"]
    assert len(d["gaps"]) == r.selected.size
    assert {g["branch"] for g in d["gaps"]} <= {"top", "middle"}
    statuses = {row["status"] for row in release_table(r)}
    assert "answered" in statuses and statuses <= {
        "answered",
        "below threshold",
        "not examined (budget used up)",
    }
    r2 = release(
        X, W, 1.0, select=dict(method="topc-gap", c=2, eps=0.5), rng=np.random.default_rng(0)
    )
    assert {row["status"] for row in release_table(r2)} == {"answered", "not among the top c"}


def test_advised_split_is_used_when_select_eps_is_absent():
    W = ranges(12, RANGES)
    r = release(X, W, 1.0, select=dict(method="topc-gap", c=3), rng=np.random.default_rng(0))
    assert r.to_dict()["selection"]["eps_advised"] and 0 < r.eps_select < 1.0
    # the table: the variance of one selected answer, v((1 - f) eps), for every share searched
    f, table = advise_split(lambda e: 2.0 / e**2, method="topc-gap", eps=1.0, c=3)
    assert all(math.isclose(v, 2.0 / (1 - g) ** 2) for g, v in table.items())
    # floor="auto": the first share at which one selection score's noise std is at most one
    # answer's std (topc-gap, c=3, Lap(6/eps_s) scores vs sqrt(2)/eps_m answers: ~0.81), capped
    # at AUTO_FLOOR_MAX, the even split; the advice is the smallest share searched
    assert f == AUTO_FLOOR_MAX == min(table)
    f1, t1 = advise_split(lambda e: 2.0 / e**2, method="topc-gap", eps=1.0, c=3, floor=0.12)
    assert f1 == 0.15 == min(t1)  # a number floor: the first share of the grid from it
    # a noisy measurement: the selection is as fine as the answers at a small share
    f2, _ = advise_split(lambda e: 5000.0 / e**2, method="svt-gap", eps=1.0, c=3, monotonic=True)
    cal = gap_calibration("svt-gap", c=3, eps=f2, monotonic=True)
    score = cal.gap_variance("middle") + cal.gap_variance("threshold")
    assert score <= 5000.0 / (1 - f2) ** 2 and f2 == SPLIT_GRID[0]
    # a precise measurement: the first share at which the selection is as fine
    f5, _ = advise_split(lambda e: 200.0 / e**2, method="svt-gap", eps=1.0, c=3, monotonic=True)
    for g in (f5, SPLIT_GRID[SPLIT_GRID.index(f5) - 1]):
        cal = gap_calibration("svt-gap", c=3, eps=g, monotonic=True)
        fine = cal.gap_variance("middle") + cal.gap_variance("threshold") <= 200.0 / (1 - g) ** 2
        assert fine == (g == f5), (g, f5)
    # the vector selection on an identity workload (joint sensitivity 1 < c): its values are
    # as fine as the answers at the even split
    f3, _ = advise_split(
        lambda e: 2.0 / e**2, method="topc-gap", eps=1.0, c=3, monotonic=True, joint_sensitivity=1.0
    )
    assert f3 == 0.5


def test_bad_select_options_raise_before_anything():
    W = ranges(12, RANGES)
    with pytest.raises(ValueError, match="threshold"):
        release(X, W, 1.0, select=dict(method="svt-gap", c=2, eps=0.5))
    with pytest.raises(ValueError, match="no threshold"):
        release(X, W, 1.0, select=dict(method="topc-gap", c=2, eps=0.5, threshold=3))
    with pytest.raises(ValueError, match="needs 'eps'"):
        release(X, W, 1.0, select=dict(method="svt", c=2, threshold=3))
    with pytest.raises(ValueError, match="runner-up"):
        select_rows(np.eye(3), np.array([1, 2, 3]), c=3, eps=1.0, method="topc-gap")
    with pytest.raises(ValueError):
        noisy_top_c_gap([1, 2], 2, 1.0)


def test_adaptive_finds_more_rows_than_svt_gap_for_clear_winners():
    v = np.array([1000] * 40, dtype=np.int64)
    rng = np.random.default_rng(3)
    a = adaptive_sparse_vector(v, 0, c=5, eps=1.0, rng=rng)
    s = sparse_vector_gap(v, 0, c=5, eps=1.0, rng=rng)
    assert len(s.positions) == 5 and len(a.positions) == 9 and set(a.branches) == {"top"}
    assert a.eps_used <= 1.0 and min(a.gaps) >= a.calibration.sigma


def test_budget_charged_once_and_nothing_on_bad_options():
    from matmech.privacy.budget import PrivacyBudget

    W = ranges(12, RANGES)
    b = PrivacyBudget(2.0)
    with pytest.raises(ValueError):
        release(
            X, W, 1.0, budget=b, select=dict(method="adaptive-svt", c=2, eps=0.5, threshold="nope")
        )
    assert b.remaining[0] == 2.0
    release(X, W, 1.0, budget=b, select=dict(method="topc-gap", c=2), rng=np.random.default_rng(0))
    assert math.isclose(b.remaining[0], 1.0)


def test_cli_select_arg_accepts_gap_methods_without_select_eps():
    from types import SimpleNamespace

    from matmech.cli.release import _select_arg

    args = SimpleNamespace(
        select="topc-gap", c=3, select_eps=None, threshold=None, target_rel_error=None
    )
    assert _select_arg(args) == {"method": "topc-gap", "c": 3}
    args = SimpleNamespace(select="svt", c=3, select_eps=None, threshold="5", target_rel_error=None)
    with pytest.raises(ValueError, match="select-eps"):
        _select_arg(args)


def test_gap_functions_refuse_bad_arguments_naming_them():
    """combine_gaps, gap_measurement and advise_split check every argument before any work
    (issue 15): ValueError/TypeError naming the argument, never a numpy or Cholesky error."""
    from matmech.svt.combine import gap_measurement

    res = sparse_vector_gap(
        [1.0, 50.0, 3.0, 80.0], 10.0, c=2, eps=1.0, rng=np.random.default_rng(0)
    )
    assert res.positions  # the checks below are about a run that selected something
    gm = gap_measurement(res, 10.0)
    per_row = gap_measurement(res, [10.0] * 4)
    assert np.array_equal(gm.z, per_row.z)  # a scalar and one threshold per candidate agree
    for bad, match in [
        (float("nan"), "threshold must be finite"),
        (float("inf"), "threshold must be finite"),
        ([], "threshold .* 0 entries but position"),
        ([10.0] * 2, "threshold .* 2 entries"),
        ([[1.0, 2.0], [1.0]], "threshold is ragged: row 1"),
        ("10", "threshold must be a real"),
    ]:
        with pytest.raises((ValueError, TypeError), match=match):
            gap_measurement(res, bad)
    k = len(res.positions)
    y, cov = np.full(k, 40.0), np.eye(k)
    est, c = combine_gaps(y, cov, gm)
    assert np.all(np.isfinite(est)) and np.all(np.diag(c) < 1.0)  # the gaps add information
    for args, match in [
        ((1.0, cov), "y must be 1-D"),
        ((None, cov), "y must be a 1-D sequence"),
        (([], cov), "y must hold at least one"),
        ((y, [[1.0, 2.0], [1.0]]), "cov is ragged: row 1"),
        ((y, np.eye(k + 1)), f"cov must be {k}x{k}"),
        ((y, [[1.0, 2.0], [2.0, 1.0]]), "cov must be a symmetric positive semidefinite"),
        ((np.append(y, 1.0), np.eye(k + 1)), "gap measurements but y holds"),
    ]:
        with pytest.raises((ValueError, TypeError), match=match):
            combine_gaps(*args, gm)
    with pytest.raises(ValueError, match="order must name distinct answers"):
        combine_gaps(y, cov, gm, order=[0, 0])
    with pytest.raises(TypeError, match="order must be a 1-D sequence of integer"):
        combine_gaps(y, cov, gm, order=[0.0, 1.0])
    with pytest.raises(TypeError, match="gap must be a GapMeasurement"):
        combine_gaps(y, cov, res)
    rv = lambda e: 2.0 / e**2  # noqa: E731
    for kw, err, match in [
        (dict(eps=0.0), ValueError, "eps"),
        (dict(eps=True), TypeError, "eps"),
        (dict(eps="1"), TypeError, "eps"),
        (dict(eps=1e-300), ValueError, "eps=1e-300 is too small"),
        (dict(c=float("inf")), TypeError, "c .* must be an integer"),
        (dict(c=2.0), TypeError, "c .* must be an integer"),
        (dict(method="svt"), ValueError, "method"),
        (dict(floor=0.9), ValueError, "floor must be 'auto' or in"),
        (dict(joint_sensitivity=0.0), ValueError, "joint_sensitivity must be positive"),
    ]:
        with pytest.raises(err, match=match):
            advise_split(rv, **{"method": "svt-gap", "eps": 1.0, "c": 2, **kw})
    with pytest.raises(TypeError, match="row_variance must be a function"):
        advise_split(None, method="svt-gap", eps=1.0, c=2)
    with pytest.raises(ValueError, match="row_variance.* must return a positive finite variance"):
        advise_split(lambda e: 0.0, method="svt-gap", eps=1.0, c=2)


def test_noisy_top_c_gap_blames_values_not_c_for_too_few_candidates():
    for values in ([], [5.0]):
        with pytest.raises(ValueError, match="values must hold at least two candidates"):
            noisy_top_c_gap(values, 1, 1.0)
