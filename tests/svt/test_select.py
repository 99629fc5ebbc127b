import numpy as np
import pytest

from matmech import workloads as W
from matmech.privacy.budget import BudgetExceededError, PrivacyBudget
from matmech.linalg.intervals import Intervals
from matmech.linalg.linop import Dense
from matmech.run.select import select_rows
from matmech.svt.select import entry_range
from matmech.svt.rules import take_rows


def counts(n=64, seed=0):
    x = np.random.default_rng(seed).poisson(3, size=n)
    x[10:14] += 500  # a few heavy cells
    return x


def test_svt_selects_rows_above_threshold():
    x, w = counts(), W.identity(64)
    sel = select_rows(w, x, c=4, eps=5.0, threshold=250, rng=np.random.default_rng(1))
    assert sorted(sel.rows.tolist()) == [10, 11, 12, 13] and sel.stopped and sel.monotonic
    assert sel.sensitivity == 1.0 and sel.n_candidates == 64


def test_em_selects_top_rows_and_per_row_thresholds():
    x, w = counts(), W.ranges(64, [(0, 5), (10, 11), (12, 13), (20, 30)])
    sel = select_rows(w, x, c=2, eps=5.0, method="em", rng=np.random.default_rng(2))
    assert sorted(sel.rows.tolist()) == [1, 2]
    sel = select_rows(
        w, x, c=4, eps=5.0, threshold=[10, 2000, 500, 10], rng=np.random.default_rng(3)
    )
    assert sorted(sel.rows.tolist()) == [0, 2, 3] and not sel.stopped


def test_budget_is_charged_and_refusal_draws_nothing():
    x, w = counts(), W.prefix(64)
    b = PrivacyBudget(0.5)
    select_rows(w, x, c=3, eps=0.3, threshold=100, budget=b, rng=np.random.default_rng(0))
    assert b.spent == (0.3, 0.0)
    g = np.random.default_rng(7)
    state = g.bit_generator.state
    with pytest.raises(BudgetExceededError, match="only .eps=0.2, delta=0.0. remains"):
        select_rows(w, x, c=3, eps=0.3, threshold=100, budget=b, rng=g)
    assert g.bit_generator.state == state and b.spent == (0.3, 0.0)


def test_monotonic_only_where_valid():
    x = counts()
    signed = Dense(np.vstack([np.ones(64), np.r_[np.ones(32), -np.ones(32)]]))
    assert not select_rows(
        signed, x, c=1, eps=1.0, threshold=0, rng=np.random.default_rng(0)
    ).monotonic
    b = PrivacyBudget(1.0)
    with pytest.raises(ValueError, match="monotonic=True needs non-negative counting rows"):
        select_rows(signed, x, c=1, eps=1.0, threshold=0, monotonic=True, budget=b)
    with pytest.raises(ValueError, match="neighbors='substitute'"):
        select_rows(
            W.identity(64),
            x,
            c=1,
            eps=1.0,
            threshold=0,
            monotonic=True,
            neighbors="substitute",
            budget=b,
        )
    sel = select_rows(
        W.identity(64),
        x,
        c=1,
        eps=1.0,
        threshold=0,
        neighbors="substitute",
        rng=np.random.default_rng(0),
    )
    assert (
        not sel.monotonic and sel.sensitivity == 1.0
    )  # a 0/1 row moves by at most 1 under substitution
    assert b.spent == (0.0, 0.0)


@pytest.mark.parametrize(
    "kwargs, exc, text",
    [
        (dict(c=0), ValueError, "c must be a positive integer"),
        (dict(c=2.5), TypeError, "2.5"),
        (dict(eps=0), ValueError, "eps"),
        (dict(eps=float("nan")), ValueError, "nan"),
        (dict(threshold=[1, 2]), ValueError, "one threshold per value"),
        (dict(threshold=None), ValueError, "needs a numeric threshold"),
        (dict(method="topk"), ValueError, "method must be one of"),
        (dict(ratio=-1), ValueError, "ratio"),
        (dict(x=np.r_[np.nan, np.ones(63)]), ValueError, r"x holds an entry that is not finite"),
        (dict(x=np.r_[-1, np.ones(63)]), ValueError, "negative"),
        (dict(x=np.ones(10)), ValueError, "10 cells"),
        (dict(c=65), ValueError, "more than the 64 rows"),
    ],
)
def test_bad_input_raises_and_spends_nothing(kwargs, exc, text):
    args = dict(c=2, eps=0.5, threshold=10, x=counts())
    args.update(kwargs)
    x = args.pop("x")
    b = PrivacyBudget(1.0)
    g = np.random.default_rng(0)
    state = g.bit_generator.state
    with pytest.raises(exc, match=text):
        select_rows(W.identity(64), x, budget=b, rng=g, **args)
    assert b.spent == (0.0, 0.0) and g.bit_generator.state == state


def test_entry_range_and_take_rows_against_dense():
    rng = np.random.default_rng(0)
    cases = [
        W.all_range(5),
        W.kron(W.prefix(3), W.total(2)),
        W.stack(W.identity(4), W.total(4), weights=[1, 3]),
        Dense(rng.normal(size=(3, 4))),
        -2.0 * W.prefix(3),
    ]
    for w in cases:
        d = w.dense()
        assert entry_range(w) == pytest.approx((min(0, d.min()), max(0, d.max())))
        rows = np.array([w.shape[0] - 1, 0])
        sub = take_rows(w, rows)
        np.testing.assert_array_equal(sub.dense(), d[rows])
    assert isinstance(take_rows(W.all_range(6), [3, 1]), Intervals)


def test_integer_workloads_reach_svt_as_exact_integers(monkeypatch):
    import dataclasses

    from matmech.svt.methods import SELECTION_METHODS

    seen = {}
    entry = SELECTION_METHODS["svt"]  # the mechanism select_rows runs, from the registry

    def spy(opening):
        seen["dtype"] = opening.values.dtype
        return entry.mechanism.run(opening)

    run = dataclasses.replace(entry.mechanism, run=spy)
    monkeypatch.setitem(SELECTION_METHODS, "svt", dataclasses.replace(entry, mechanism=run))
    select_rows(
        W.all_range(16), counts(16), c=2, eps=1.0, threshold=40, rng=np.random.default_rng(0)
    )
    assert seen["dtype"] == np.int64  # no grid rounding, sensitivity stays exactly 1
    select_rows(
        0.5 * W.prefix(16), counts(16), c=2, eps=1.0, threshold=40, rng=np.random.default_rng(0)
    )
    assert seen["dtype"] == np.float64
