"""The vector selection (matmech.svt.vector) and its use by release(select=...) (issue 16).

Closed forms against a second method: the joint sensitivity against a dense enumeration of
neighbouring pairs; the released values' variance against Monte Carlo; the mechanism choice
against the two calibrations' variances; the advised split against the even split by
Monte Carlo over whole releases.  The exact privacy audit is in test_audit_exact.py.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from matmech import strategies as S
from matmech.privacy.budget import PrivacyBudget
from matmech.release import release
from matmech.svt.gap_calibration import gap_calibration
from matmech.run.select import select_rows
from matmech.svt.select import plan_selection
from matmech.svt.vector import (
    joint_sensitivity,
    noisy_vector_threshold,
    noisy_vector_top_c,
    prefer_vector,
    vector_calibration,
)
from matmech.workloads import ranges

X = np.array([800, 3, 500, 10, 0, 300, 7, 1, 12, 0, 4, 2], dtype=np.int64)


def _dense_joint(Wd, neighbors):
    """max ||W(x - x')||_1 over neighbouring x, x' by enumeration of the cell moves."""
    n = Wd.shape[1]
    if neighbors == "add_remove":
        return max(np.abs(Wd[:, j]).sum() for j in range(n))
    return max(np.abs(Wd[:, j] - Wd[:, k]).sum() for j in range(n) for k in range(n) if j != k)


@pytest.mark.parametrize(
    "spec",
    [
        [(i, i) for i in range(12)],
        [(i, i + 3) for i in range(0, 9, 2)],
        [(0, 11), (2, 5), (3, 3), (6, 7)],
    ],
)
def test_joint_sensitivity_matches_dense_enumeration(spec):
    W = ranges(12, spec)
    Wd = W.dense()
    assert joint_sensitivity(W, "add_remove") == _dense_joint(Wd, "add_remove")
    exact_sub = _dense_joint(Wd, "substitute")
    # substitution: 2 x the largest column norm, an upper bound on the exact maximum over pairs
    assert exact_sub <= joint_sensitivity(W, "substitute") == 2 * joint_sensitivity(W, "add_remove")
    if spec[0] == (0, 0):  # identity: the bound is tight
        assert joint_sensitivity(W, "substitute") == exact_sub == 2


def test_joint_sensitivity_of_a_large_structured_workload_needs_no_dense_matrix():
    W = ranges(
        2_000_000, [(i, i + 63) for i in range(0, 2_000_000 - 63, 8)]
    )  # 250k rows x 2M cells
    assert joint_sensitivity(W) == 8.0  # each cell lies in at most 64/8 windows


def test_vector_top_c_outputs_and_variance():
    rng = np.random.default_rng(0)
    q = np.array([100, 0, 60, 5, 30], dtype=np.int64)
    res = noisy_vector_top_c(q, 2, 1.0, sensitivity=3.0, rng=rng)
    assert res.positions == (0, 2) and res.branches == ("value", "value")
    assert math.isclose(res.gaps[0], res.values[0] - res.values[1])
    assert res.gaps[1] > 0  # to the unselected runner-up
    cal = res.calibration
    assert cal.scale >= 3.0 and cal.scale / cal.grid == int(
        cal.scale / cal.grid
    )  # whole grid steps, >= nominal
    draws = np.array(
        [noisy_vector_top_c(q, 2, 1.0, sensitivity=3.0, rng=rng).values for _ in range(2000)]
    )
    err = draws - q[[0, 2]]
    assert np.all(np.abs(err.mean(0)) < 5 * math.sqrt(cal.variance() / 2000))
    assert np.all(np.abs(err.var(0) / cal.variance() - 1) < 0.15)
    assert math.isclose(cal.variance(), 2 * 3.0**2, rel_tol=1e-3)
    with pytest.raises(ValueError, match="runner-up"):
        noisy_vector_top_c(q, 5, 1.0, sensitivity=1.0)
    with pytest.raises(ValueError, match="sensitivity"):
        noisy_vector_top_c(q, 2, 1.0, sensitivity=0.0)


def test_vector_threshold_takes_the_first_c_in_row_order():
    rng = np.random.default_rng(1)
    q = np.array([0, 500, 3, 400, 600, 700], dtype=np.int64)
    res = noisy_vector_threshold(q, 200, c=2, eps=1.0, sensitivity=1.0, rng=rng)
    assert res.positions == (1, 3) and res.stopped and res.n_processed == 4
    assert all(g >= 0 for g in res.gaps)
    assert np.allclose(np.array(res.values) - 200, res.gaps)
    none = noisy_vector_threshold(q, 10_000, c=2, eps=1.0, sensitivity=1.0, rng=rng)
    assert none.positions == () and not none.stopped and none.n_processed == q.size
    per_row = noisy_vector_threshold(
        q, [1e9, 0, 1e9, 1e9, 1e9, 0], c=3, eps=1.0, sensitivity=1.0, rng=rng
    )
    assert per_row.positions == (1, 5)


def test_non_integer_values_are_snapped_with_their_sensitivity():
    cal = vector_calibration(
        "vector-top-c", c=1, eps=1.0, sensitivity=2.0, n_values=1000, integer_values=False
    )
    assert cal.sensitivity == 2.0 + 1000 * cal.grid and 1000 * cal.grid <= 2.0 * 2.0**-20
    res = noisy_vector_top_c(
        np.array([0.3, 9.7, 4.1]), 1, 1.0, sensitivity=2.0, rng=np.random.default_rng(2)
    )
    assert res.positions == (1,) and res.calibration.sensitivity > 2.0


def test_prefer_vector_compares_the_two_calibrations():
    kw = dict(eps=0.5, row_sensitivity=1.0, monotonic=True, n_values=100, integer_values=True)
    for c in (1, 2, 5):
        gap = gap_calibration("topc-gap", c=c, eps=0.5, monotonic=True, integer_values=True)
        for joint in (1.0, 2.0, 8.0):
            vec = vector_calibration(
                "vector-top-c", c=c, eps=0.5, sensitivity=joint, n_values=100, integer_values=True
            )
            assert prefer_vector("topc-gap", c=c, joint=joint, **kw) == (
                vec.variance() <= gap.gap_variance("middle")
            )
            assert prefer_vector("topc-gap", c=c, joint=joint, **kw) == (
                joint <= c
            )  # scales c*D/eps vs joint/eps
    assert prefer_vector("svt-gap", c=2, joint=2.0, **kw)
    assert not prefer_vector("adaptive-svt", c=2, joint=1.0, **kw)


def test_selection_picks_the_mechanism_from_W_not_from_x():
    W_id = ranges(12, [(i, i) for i in range(12)])
    W_win = ranges(12, [(i, i + 7) for i in range(5)])  # cells in up to 5 windows
    for x in (X, np.zeros(12, dtype=np.int64)):
        assert plan_selection(W_id, x, c=2, eps=0.5, method="topc-gap").mechanism == "vector-top-c"
        assert (
            plan_selection(W_win, x, c=2, eps=0.5, method="topc-gap").mechanism == "noisy-top-c-gap"
        )
        assert (
            plan_selection(W_win, x, c=2, eps=0.5, method="topc-gap", vector=True).mechanism
            == "vector-top-c"
        )
        assert (
            plan_selection(
                W_id, x, c=2, eps=0.5, method="svt-gap", threshold=5, vector=False
            ).mechanism
            == "sparse-vector-gap"
        )
    p = plan_selection(W_id, X, c=2, eps=0.5, method="topc-gap", neighbors="substitute")
    assert p.mechanism == "vector-top-c" and p.joint_sensitivity == 2.0


def test_release_with_vector_selection_records_it_and_charges_once():
    W = ranges(12, [(i, i) for i in range(12)])
    b = PrivacyBudget(3.0)
    r = release(
        X,
        W,
        1.0,
        strategy="identity",
        budget=b,
        select=dict(method="topc-gap", c=3, eps=0.5),
        rng=np.random.default_rng(0),
    )
    assert r.selection.mechanism == "vector-top-c" and r.selected.tolist() == [0, 2, 5]
    assert (
        "Laplace mechanism on the whole vector (vector-top-c in place of topc-gap, joint L1 sensitivity 1)"
        in r.strategy_note
    )
    assert math.isclose(b.remaining[0], 2.0) and len(b.ledger) == 1
    # identity + vector: the values are released, the answers are the measurement's alone
    assert np.allclose(r.std**2, r.measurement.std**2) and len(r.measurements) == 1
    d = r.to_dict()["selection"]
    assert not d["gaps_combined"]
    assert len(d["gaps"]) == 3 and {g["branch"] for g in d["gaps"]} == {"value"}
    # bad vector option: refused before anything is spent
    for bad, err in (("yes", ValueError), (1, TypeError)):
        with pytest.raises(err, match="vector must be"):
            release(X, W, 1.0, budget=b, select=dict(method="topc-gap", c=3, eps=0.5, vector=bad))
    with pytest.raises(ValueError, match="replaces 'topc-gap' or 'svt-gap'"):
        release(
            X,
            W,
            1.0,
            budget=b,
            select=dict(method="adaptive-svt", c=3, eps=0.5, threshold=10, vector=True),
        )
    assert math.isclose(b.remaining[0], 2.0)


def test_adaptive_sigma_is_settable_through_release_and_select_rows():
    W = ranges(12, [(i, i) for i in range(12)])
    r = release(
        X,
        W,
        1.0,
        strategy="identity",
        select=dict(method="adaptive-svt", c=2, eps=0.5, threshold=100, sigma=37.0),
        rng=np.random.default_rng(0),
    )
    cal = r.selection.gap.calibration
    assert cal.sigma >= 37.0 and cal.sigma - 37.0 < cal.grid  # rounded up onto the grid
    auto = select_rows(
        W, X, c=2, eps=0.5, method="adaptive-svt", threshold=100, rng=np.random.default_rng(0)
    )
    assert auto.gap.calibration.sigma != cal.sigma
    huge = select_rows(
        W,
        X,
        c=2,
        eps=0.5,
        method="adaptive-svt",
        threshold=100,
        sigma=1e6,
        rng=np.random.default_rng(0),
    )
    assert set(huge.gap.branches) == {"middle"}  # no margin of 1e6: the top branch never fires
    b = PrivacyBudget(2.0)
    for sel, match in (
        (dict(method="topc-gap", c=2, eps=0.5, sigma=3.0), "adaptive-svt' only"),
        (dict(method="adaptive-svt", c=2, eps=0.5, threshold=5, sigma=-1.0), "sigma must be"),
        (dict(method="adaptive-svt", c=2, eps=0.5, threshold=5, sigma=[1]), "sigma must be"),
    ):
        with pytest.raises(ValueError, match=match):
            release(X, W, 1.0, budget=b, select=sel)
    assert b.remaining[0] == 2.0


def test_cli_select_sigma():
    from matmech.cli import build_parser
    from matmech.cli.release import _select_arg

    args = SimpleNamespace(
        select="adaptive-svt",
        c=3,
        select_eps=0.2,
        threshold="50",
        target_rel_error=None,
        select_sigma=12.5,
    )
    assert _select_arg(args) == {
        "method": "adaptive-svt",
        "c": 3,
        "eps": 0.2,
        "threshold": 50.0,
        "sigma": 12.5,
    }
    with pytest.raises(ValueError, match="--select-sigma"):
        _select_arg(
            SimpleNamespace(
                select="svt-gap",
                c=3,
                select_eps=None,
                threshold="5",
                target_rel_error=None,
                select_sigma=1.0,
            )
        )
    with pytest.raises(ValueError, match="--select-sigma: only used with --select"):
        _select_arg(
            SimpleNamespace(
                select=None,
                c=None,
                select_eps=None,
                threshold=None,
                target_rel_error=None,
                select_sigma=1.0,
            )
        )
    ns = build_parser().parse_args(
        [
            "release",
            "spec.json",
            "--data",
            "data.csv",
            "--eps",
            "1",
            "--select",
            "adaptive-svt",
            "--c",
            "2",
            "--select-sigma",
            "7",
        ]
    )
    assert ns.select_sigma == 7.0


def _mc_mse(x, W, sel, runs, strategy):
    truth = W.matvec(x.astype(float))
    se, var = [], []
    for seed in range(runs):
        r = release(x, W, 1.0, strategy=strategy, select=sel, rng=np.random.default_rng(seed))
        se.append(float(((r.answers - truth[r.selected]) ** 2).mean()))
        var.append(r.expected_error / r.selected.size)
    return np.array(se), float(np.mean(var)), r


@pytest.mark.parametrize("method,extra", [("topc-gap", {}), ("svt-gap", {"threshold": 150})])
def test_advised_split_on_identity_is_the_even_split_and_its_variance_holds(method, extra):
    """The vector's values are as fine as the answers at the even split (joint sensitivity 1,
    identity strategy); the measured answers' analytic variance holds by Monte Carlo (4 s.e.)."""
    W = ranges(12, [(i, i) for i in range(12)])
    adv, var_adv, r = _mc_mse(X, W, dict(method=method, c=3, **extra), 200, "identity")
    assert r.eps_select == pytest.approx(0.5)
    assert abs(adv.mean() - var_adv) <= 4 * adv.std(ddof=1) / math.sqrt(adv.size)


def test_advised_split_on_windows_leaves_the_measurement_at_least_half():
    """Range windows (joint sensitivity 4 > c = 2: the paper mechanism): the advice is a share
    of at most one half, so the answers' variance is at most the even split's."""
    x = np.random.default_rng(3).multinomial(
        20_000, np.arange(1, 129) ** -1.0 / np.sum(np.arange(1, 129) ** -1.0)
    )
    W = ranges(128, [(i, i + 15) for i in range(0, 113, 4)])
    for method, extra in (
        ("topc-gap", {}),
        ("svt-gap", {"threshold": 3000}),
        ("adaptive-svt", {"threshold": 3000}),
    ):
        out = {}
        for key, e in (("advised", {}), ("even", {"eps": 0.5})):
            r = release(
                x,
                W,
                1.0,
                strategy=S.hierarchical(128, 2),
                select=dict(method=method, c=2, **extra, **e),
                rng=np.random.default_rng(0),
            )
            assert r.selected.size
            out[key] = (r.eps_select, r.expected_error / r.selected.size)
        assert out["advised"][0] <= 0.5 and out["advised"][1] <= out["even"][1] * (1 + 1e-9)


def test_forced_vector_with_an_unsamplable_scale_is_refused_before_spending():
    """Non-integer rows are snapped on a grid fine enough for all m values (m*g <= 2**-20 Delta_W):
    16,384 rows at eps 1e-4 need scale/grid ~ 2**47.3, beyond exact sampling; refused up front.
    (A small declared max_records keeps that fine grid: a large one coarsens it, issue 21.)"""
    import scipy.sparse as sp

    m = 1 << 14
    W = sp.identity(m, format="csr") * 0.5
    x = np.ones(m, dtype=np.int64)
    b = PrivacyBudget(1.0)
    with pytest.raises(ValueError, match="too large for exact sampling"):
        select_rows(W, x, c=2, eps=1e-4, method="topc-gap", vector=True, budget=b, max_records=m)
    assert b.remaining[0] == 1.0 and not b.ledger
    assert (
        select_rows(
            W,
            x,
            c=2,
            eps=1e-4,
            method="topc-gap",
            budget=b,
            rng=np.random.default_rng(0),
            max_records=m,
        ).mechanism
        == "noisy-top-c-gap"
    )  # "auto" never picks a vector it cannot sample
