"""A release with selection estimates from its typed records alone (issue 34): the draws are
a :class:`~matmech.measurements.selection.SelectionRecord` and the measurement's
:class:`~matmech.measurements.record.MeasurementRecord`, ``Draws.state`` stays None, and the
estimate rebuilt from those records equals the release's. On the factored path the record
is the measurement of the unweighted integer rows U_S (values y = U_S x + Z), and a dense
least squares of it reproduces the weighted answers and variances."""

import numpy as np
import pytest

import matmech as mm
from matmech import workloads as wl
from matmech.linalg.combinators import Kron, VStack
from matmech.linalg.operator import Dense
from matmech.measurements.selection import SelectionRecord
from matmech.plans.plan import Draws
from matmech.plans.selected import selected_plan
from matmech.release import release_factored

DOM = (3, 4, 2)


def weighted_workload(weights):
    D = Dense(np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0]], dtype=float))
    return VStack(
        [
            Kron(D, wl.total(4), wl.prefix(2)),
            Kron(wl.total(3), wl.identity(4), wl.total(2)),
            Kron(wl.identity(3), wl.prefix(4), wl.identity(2)),
        ],
        weights=weights,
    )


@pytest.mark.parametrize("strategy", ["auto", "identity"])
@pytest.mark.parametrize("method", ["em", "topc-gap"])
def test_selected_plan_estimates_from_its_records(strategy, method):
    x = np.random.default_rng(2).integers(0, 50, size=16)
    W = wl.all_range(16)
    sel = dict(method=method, c=3, eps=0.3)
    plan = selected_plan(
        W, 1.0, 0.0, strategy=strategy, neighbors="add_remove", select=sel, max_records=2**32
    )
    draws = plan.draw(plan.check({(0,): x}), rng=np.random.default_rng(4))
    assert draws.state is None
    chosen, meas = draws.records
    assert isinstance(chosen, SelectionRecord) and chosen.rows.size == 3
    assert not chosen.rows.flags.writeable and meas.query.shape[1] == 16
    est = plan.estimate(Draws(tuple(draws.records)))  # the records alone, nothing else
    assert est.fields["measurements"] == (meas,) and est.fields["selection"] is chosen.result
    rel = mm.release(x, W, 1.0, strategy=strategy, select=sel, rng=np.random.default_rng(4))
    assert np.array_equal(rel.selected, chosen.rows)
    assert rel.answers.tobytes() == est.answers.tobytes()
    assert rel.std.tobytes() == est.std.tobytes()
    assert len(rel.measurements) == 1


def test_nothing_selected_is_a_selection_record_only():
    x = np.zeros(8, dtype=np.int64)
    sel = dict(method="svt", c=2, eps=0.5, threshold=10**6)
    plan = selected_plan(
        wl.identity(8),
        1.0,
        0.0,
        strategy="identity",
        neighbors="add_remove",
        select=sel,
        max_records=2**32,
    )
    draws = plan.draw(plan.check({(0,): x}), rng=np.random.default_rng(0))
    (only,) = draws.records
    assert isinstance(only, SelectionRecord) and only.rows.size == 0 and only.choice is None
    est = plan.estimate(draws)
    assert est.answers.size == 0 and est.fields["measurements"] == ()


@pytest.mark.parametrize("delta", [0.0, 1e-6])
@pytest.mark.parametrize("weights", [[1.0, 2.0, 1.0], [3.0, 0.7, 1.3]])
def test_factored_selection_record_is_the_unweighted_rows(weights, delta):
    W = weighted_workload(weights)
    Wd = W.dense()
    w = np.repeat(weights, [3 * 2, 4, 3 * 4 * 2])
    codes = np.random.default_rng(7).integers(0, DOM, size=(400, 3))
    sel = dict(method="em", c=4, eps=0.3)
    rel = release_factored(codes, W, 1.0, delta, select=sel, rng=np.random.default_rng(3))
    rows = rel.selected
    assert "measured themselves" in rel.strategy_note
    (rec,) = rel.measurements
    U = rec.query.dense()
    np.testing.assert_array_equal(U, Wd[rows] / w[rows, None])  # the integer rows measured
    assert np.array_equal(rec.values, np.rint(rec.values))  # y = U_S x + Z: integers
    assert np.all(rec.variance == rec.variance[0])
    # dense least squares of the record, answered in W's (weighted) rows
    P = U @ np.linalg.pinv(U)
    np.testing.assert_allclose(rel.answers, w[rows] * (P @ rec.values), rtol=1e-12, atol=1e-9)
    var = rec.variance[0] * w[rows] ** 2 * np.diag(P)
    np.testing.assert_allclose(rel.std**2, var, rtol=1e-9)
