"""One way to build an estimate: :meth:`Estimate.of_variances` (std, total error, checks) and
the one least-squares estimator of the strategy and selected plans
(:func:`matmech.plans.strategy.measured_estimate`).

The estimator is checked against an independent dense least squares of the measurement it
reads (numpy's pinv of the measured matrix, y from the Release), and bit for bit against the
public primitives it is made of (x̂ = least_squares(measurement), answers W x̂, std
√(plan variances)): a seeded release gives the same bytes as the code it replaced.
"""

import numpy as np
import pytest

import matmech as mm
from matmech.error import measured_variances
from matmech.estimators.gls import least_squares
from matmech.linalg.linop import Dense
from matmech.plans.plan import Estimate
from matmech.svt.rules import take_rows

from oracle_problems import problem

GRID_NOTE = "; entries rounded to a power-of-two grid"


# -- Estimate.of_variances ---------------------------------------------------------------------


def test_of_variances_takes_the_square_root_and_the_sum_and_keeps_the_variances():
    rng = np.random.default_rng(0)
    answers, var = rng.normal(size=50), rng.uniform(0.5, 9.0, size=50)
    keep = var.copy()
    fields = {"strategy_name": "x"}
    e = Estimate.of_variances(answers, var, fields)
    assert e.std.tobytes() == np.sqrt(keep).tobytes()
    assert e.expected_error == float(keep.sum())
    assert e.answers is answers and e.fields is fields
    np.testing.assert_array_equal(var, keep)  # not overwritten by default
    assert not np.shares_memory(e.std, var)
    own = keep.copy()
    e2 = Estimate.of_variances(answers, own, overwrite_var=True)
    assert np.shares_memory(e2.std, own) and e2.std.tobytes() == e.std.tobytes()
    assert e2.expected_error == e.expected_error and dict(e2.fields) == {}
    empty = Estimate.of_variances(np.zeros(0), np.zeros(0))
    assert empty.std.shape == (0,) and empty.expected_error == 0.0


@pytest.mark.parametrize(
    "answers, var, match",
    [
        (np.zeros((2, 2)), np.ones((2, 2)), r"answers must be a vector, got shape \(2, 2\)"),
        (np.zeros(3), np.ones(2), r"one entry per answer \(3\), got shape \(2,\)"),
        (np.zeros(3), np.ones((3, 1)), r"one entry per answer \(3\), got shape \(3, 1\)"),
        (np.zeros(3), np.array([1.0, np.nan, 1.0]), "variances are not all finite"),
        (np.zeros(3), np.array([1.0, np.inf, 1.0]), "variances are not all finite"),
        (np.zeros(3), np.array([1.0, -1e-18, -2.0]), "2 of 3 variances are negative"),
        (np.zeros(3), np.array([1.0, -np.inf, 1.0]), "1 of 3 variances are negative"),
        (np.array([0.0, np.nan, 1.0]), np.ones(3), "answers that are not finite"),
        (np.array([0.0, -np.inf, 1.0]), np.ones(3), "answers that are not finite"),
    ],
)
def test_of_variances_refuses_what_it_would_turn_into_a_wrong_error_bar(answers, var, match):
    with pytest.raises(ValueError, match=match):
        Estimate.of_variances(answers, var)


# -- the one least-squares estimator -----------------------------------------------------------


def _dense_ls(meas, rows):
    """(answers, variances) of the dense rows from the measurement alone: x̂ = A_g⁺ y and
    σ²·diag(W (A_gᵀA_g)⁺ Wᵀ) with numpy's pinv (Li et al., PODS 2010)."""
    pinv = np.linalg.pinv(meas.strategy.dense(), rcond=1e-12)
    G = rows @ pinv
    return G @ meas.y, meas.std**2 * np.einsum("ij,ij->i", G, G)


def _close(got, want):
    return np.abs(got - want).max() <= 1e-8 * max(1.0, np.abs(want).max())


def _real_strategy(n, seed):
    """A real-valued full-rank strategy: the measurement rounds it to a power-of-two grid."""
    A = np.vstack([np.eye(n), np.random.default_rng(seed).uniform(0.1, 0.9, size=(3, n))])
    return Dense(A)


@pytest.mark.parametrize("seed", [1, 4])
@pytest.mark.parametrize("strategy", ["hierarchical", "real"])
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_the_strategy_plan_estimate_is_the_least_squares_of_its_measurement(seed, strategy, delta):
    _, W, x, _ = problem(seed)
    A = _real_strategy(W.shape[1], seed) if strategy == "real" else strategy
    rel = mm.release(x, W, 1.0, delta, strategy=A, rng=np.random.default_rng(seed))
    m = rel.measurement
    assert m.rounded == (strategy == "real")  # both notes exercised
    assert rel.strategy_note.endswith(GRID_NOTE) == m.rounded
    a, v = _dense_ls(m, W.dense())
    assert _close(rel.answers, a) and _close(rel.std**2, v)
    # the same bytes as its parts: x̂ = least_squares, W x̂, √ of the plan's variances
    xhat = least_squares(m)
    assert rel.estimate.tobytes() == xhat.tobytes() and not rel.estimate.flags.writeable
    assert rel.answers.tobytes() == W.matvec(xhat).tobytes()
    var = measured_variances(W, m.strategy, m.std**2)  # the plan's, from its measurement
    assert rel.std.tobytes() == np.sqrt(var).tobytes()
    assert rel.expected_error == float(var.sum())
    assert rel.strategy is m.strategy and rel.answered_workload is None


def test_the_factored_strategy_plan_keeps_its_answered_workload():
    """With attributes the same estimator answers W_U over the marginal it measured."""
    for seed in range(3):
        _, W, x, codes = problem(seed)
        rel = mm.release(codes, W, 1.0, strategy="identity", rng=np.random.default_rng(seed))
        WU, m = rel.answered_workload, rel.measurement
        assert WU is not None and WU.shape == (W.shape[0], m.strategy.shape[1])
        a, v = _dense_ls(m, WU.dense())
        assert _close(rel.answers, a) and _close(rel.std**2, v)
        assert rel.answers.tobytes() == WU.matvec(least_squares(m)).tobytes()
        assert rel.std.tobytes() == np.sqrt(measured_variances(WU, m.strategy, m.std**2)).tobytes()


@pytest.mark.parametrize("strategy", ["hierarchical", "auto", "real"])
@pytest.mark.parametrize("method", ["svt", "em"])
def test_the_selected_plan_estimate_is_the_same_estimator_on_the_selected_rows(strategy, method):
    seen = 0
    for seed in range(4):
        _, W, x, _ = problem(seed)
        q = W.dense() @ x
        sel = dict(method=method, c=3, eps=0.3)
        if method == "svt":
            sel["threshold"] = float(np.quantile(q, 0.8))
        A = _real_strategy(W.shape[1], seed) if strategy == "real" else strategy
        rel = mm.release(x, W, 1.0, strategy=A, select=sel, rng=np.random.default_rng(seed))
        rows = np.asarray(rel.selected)
        if rows.size == 0:
            continue
        seen += 1
        m = rel.measurement
        a, v = _dense_ls(m, W.dense()[rows])
        assert _close(rel.answers, a) and _close(rel.std**2, v)
        xhat = least_squares(m)
        assert rel.estimate.tobytes() == xhat.tobytes() and not rel.estimate.flags.writeable
        sub = take_rows(W, rows)
        assert rel.answers.tobytes() == sub.matvec(xhat).tobytes()
        var = measured_variances(sub, m.strategy, m.std**2)
        assert rel.std.tobytes() == np.sqrt(var).tobytes()
        assert rel.expected_error == pytest.approx(float(v.sum()), rel=1e-8)
        assert rel.strategy_note.endswith(GRID_NOTE) == m.rounded
        assert "selected rows" in rel.strategy_note and rel.eps_select == 0.3
    assert seen >= 2


def test_gap_selections_answer_from_the_measurement_alone():
    """The gaps are released but never combined (issue 31): the Release is the measured least
    squares of the selected rows, its note says so, its only record is the measurement."""
    _, W, x, _ = problem(2)
    rel = mm.release(
        x,
        W,
        1.0,
        strategy="identity",
        select=dict(method="topc-gap", c=3, eps=0.3),
        rng=np.random.default_rng(2),
    )
    rows = np.asarray(rel.selected)
    assert rows.size == 3 and rel.selection.gap is not None and len(rel.measurements) == 1
    assert "not combined into the answers" in rel.strategy_note
    a, v = _dense_ls(rel.measurement, W.dense()[rows])
    assert _close(rel.answers, a) and _close(rel.std**2, v)
