"""release(..., select=...): private row selection in front of the Matrix Mechanism."""

import json
import math
import sys

import numpy as np
import pytest

import matmech as mm
from matmech import strategies as S
from matmech import workloads as Wk
from matmech.privacy.budget import BudgetExceededError, PrivacyBudget
from matmech.linalg.linop import Dense, RowSubset
from matmech.release import _answer_variances
from matmech.svt.options import DEFAULT_TARGET_REL_ERROR
from matmech.results.release import release_table
from matmech.privacy.measure import plan_measurement

choice_module = sys.modules["matmech.advisor.choice"]

N = 256
BANDS = [(lo, lo + 7) for lo in range(0, N, 8)]  # 32 bands of 8 cells
HEAVY = [3, 4, 5, 20, 21, 30]  # bands with thousands of records


def synthetic_counts(seed=0):
    r = np.random.default_rng(seed)
    x = r.integers(0, 6, N)
    for b in HEAVY:
        x[8 * b : 8 * b + 8] += r.integers(600, 1200, 8)
    return x


X = synthetic_counts()
W = Wk.ranges(N, BANDS)
TRUTH = W @ X
SELECT = dict(method="svt", threshold=2000, c=10, eps=0.3)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_end_to_end_selects_the_big_rows_and_spends_the_total(delta):
    budget = PrivacyBudget(1.0, delta)
    rel = mm.release(
        X,
        W,
        1.0,
        delta,
        strategy="hierarchical",
        budget=budget,
        rng=np.random.default_rng(1),
        select=SELECT,
    )
    assert TRUTH[HEAVY].min() > 4000 and np.delete(TRUTH, HEAVY).max() < 100
    assert rel.selected.tolist() == HEAVY  # far above / far below a threshold of 2000
    assert rel.answers.shape == rel.std.shape == (len(HEAVY),)
    assert np.all(np.abs(rel.answers - TRUTH[HEAVY]) < 8 * rel.std)
    # the budget: selection (pure eps) and measurement (the rest and delta) in one atomic spend
    assert budget.spent == pytest.approx((1.0, delta)) and budget.remaining == pytest.approx(
        (0.0, 0.0)
    )
    (entry,) = budget.ledger
    assert entry.eps == 1.0 and entry.delta == delta and "selection" in entry.what
    assert (
        rel.spent == (1.0, delta)
        and rel.eps_select == 0.3
        and rel.measurement.eps == pytest.approx(0.7)
    )
    assert rel.selection.method == "svt" and rel.selection.monotonic  # counting rows, add/remove
    # the answers never contain NaN; unanswered rows are explicit
    assert np.all(np.isfinite(rel.answers))
    assert rel.answered.sum() == len(HEAVY) and rel.answered[HEAVY].all()
    full = rel.full(fill=0.0)
    assert full.sum() == pytest.approx(rel.answers.sum()) and full[0] == 0.0
    assert np.isnan(rel.full(fill=np.nan)[0])
    # std of the selected rows is the std the strategy gives those rows
    plan = plan_measurement(rel.strategy, rel.measurement.eps, delta)
    np.testing.assert_allclose(rel.std**2, _answer_variances(W, plan)[HEAVY], rtol=1e-12)
    assert rel.expected_error == pytest.approx(float((rel.std**2).sum()))


def test_table_and_json_mark_the_rows_without_answers():
    rel = mm.release(X, W, 1.0, strategy="identity", rng=np.random.default_rng(2), select=SELECT)
    rows = release_table(rel)
    assert len(rows) == len(BANDS)
    for i, row in enumerate(rows):
        assert row["query"] == f"[{BANDS[i][0]}, {BANDS[i][1]}]"
        if i in HEAVY:
            assert row["selected"] is True and row["status"] == "answered"
            assert row["lower"] < row["answer"] < row["upper"]
        else:
            assert row["selected"] is False and row["status"] == "below threshold"
            assert row["answer"] is None and row["std"] is None and row["lower"] is None
    data = json.loads(rel.to_json())
    assert data["answered"] == len(HEAVY) and data["queries_total"] == len(BANDS)
    assert data["selection"]["method"] == "svt" and data["selection"]["eps"] == 0.3
    assert data["selection"]["threshold"] == 2000 and data["selection"][
        "eps_measure"
    ] == pytest.approx(0.7)
    assert "NaN" not in rel.to_json()
    assert "6 answers of 32 (selected by svt)" in repr(rel)


def test_svt_stops_after_c_rows_and_says_so():
    rel = mm.release(
        X, W, 1.0, strategy="identity", rng=np.random.default_rng(3), select={**SELECT, "c": 2}
    )
    assert rel.selected.tolist() == HEAVY[:2] and rel.selection.stopped
    status = [r["status"] for r in release_table(rel)]
    assert status[: HEAVY[1] + 1].count("answered") == 2
    assert set(status[HEAVY[1] + 1 :]) == {"not examined (c rows already found)"}


def test_em_selects_exactly_c_rows():
    rel = mm.release(
        X,
        W,
        1.0,
        strategy="identity",
        rng=np.random.default_rng(4),
        select=dict(method="em", c=4, eps=0.5),
    )
    assert rel.selected.size == 4 and set(rel.selected.tolist()) <= set(HEAVY)
    assert {r["status"] for r in release_table(rel) if not r["selected"]} == {"not among the top c"}
    assert json.loads(rel.to_json())["selection"]["threshold"] is None


def test_nothing_selected_measures_nothing():
    budget = PrivacyBudget(1.0)
    rel = mm.release(
        X,
        W,
        1.0,
        strategy="identity",
        budget=budget,
        rng=np.random.default_rng(5),
        select={**SELECT, "threshold": 1e7},
    )
    assert (
        rel.selected.size == 0
        and rel.answers.size == 0
        and rel.measurement is None
        and rel.strategy is None
    )
    # the measurement's share was reserved with the selection (one atomic spend) and stays spent
    assert budget.spent == (1.0, 0.0) and rel.spent == (1.0, 0.0) and len(budget.ledger) == 1
    assert rel.expected_error == 0.0 and not rel.answered.any()
    data = json.loads(rel.to_json())
    assert (
        data["rmse"] is None
        and data["noise"] is None
        and {q["status"] for q in data["queries"]} == {"below threshold"}
    )


def test_threshold_auto_is_std_over_target(monkeypatch):
    """threshold='auto' tests row i against std_i / target, std_i under the strategy and eps − select eps."""
    seen = {}
    from matmech.plans import selected as selected_module  # the histogram's selection plan

    real = selected_module.plan_selection

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(selected_module, "plan_selection", spy)
    for target, delta in ((None, 0.0), (0.01, 1e-6), (0.005, 0.0)):
        opts = dict(threshold="auto", c=8, eps=0.25)
        if target is not None:
            opts["target_rel_error"] = target
        rel = mm.release(
            X, W, 1.0, delta, strategy="hierarchical", rng=np.random.default_rng(6), select=opts
        )
        A = S.hierarchical(N, 16)
        std = np.sqrt(_answer_variances(W, plan_measurement(A, 0.75, delta)))
        t = DEFAULT_TARGET_REL_ERROR if target is None else target
        np.testing.assert_allclose(seen["threshold"], std / t, rtol=1e-12)
        assert seen["eps"] == 0.25 and "budget" not in seen
        if target is not None:
            # thresholds ~1000 and ~2000 counts: the heavy bands and only they meet the target
            assert set(rel.selected.tolist()) == set(HEAVY)
            assert np.all(rel.std / TRUTH[rel.selected] <= t)
        data = json.loads(rel.to_json())["selection"]
        assert data["threshold"] == "auto" and data["target_rel_error"] == t
    assert DEFAULT_TARGET_REL_ERROR == 0.1


def test_auto_strategy_is_chosen_for_the_selected_rows():
    Wa = Wk.all_range(64)
    x = np.random.default_rng(7).integers(0, 50, 64)
    rel = mm.release(
        x, Wa, 2.0, rng=np.random.default_rng(8), select=dict(method="em", c=5, eps=0.5)
    )
    assert "chosen for the selected rows" in rel.strategy_note and rel.strategy.shape[1] == 64
    assert rel.answers.shape == (5,)
    assert np.all(np.abs(rel.answers - (Wa @ x)[rel.selected]) < 10 * rel.std)


def test_late_strategy_failure_falls_back_to_a_fixed_one(monkeypatch):
    """After the selection has spent, a strategy choice that fails must not lose the release."""

    def broken(*args, **kwargs):
        raise ValueError("optimiser exploded")

    monkeypatch.setattr(choice_module, "planned", broken)
    budget = PrivacyBudget(1.0)
    rel = mm.release(X, W, 1.0, budget=budget, rng=np.random.default_rng(9), select=SELECT)
    assert "optimiser exploded" in rel.strategy_note and rel.selected.tolist() == HEAVY
    assert budget.spent == pytest.approx((1.0, 0.0))


def test_multi_attribute_workload_with_selection():
    x = np.zeros(4 * 8, dtype=np.int64)
    x[[5, 13, 29]] = [3000, 2500, 4000]
    Wm = Wk.marginals((4, 8), 1)
    rel = mm.release(
        x,
        Wm,
        1.0,
        strategy="identity",
        rng=np.random.default_rng(10),
        select=dict(threshold=1500, c=12, eps=0.4),
    )
    truth = Wm @ x
    assert set(rel.selected.tolist()) == set(np.flatnonzero(truth > 1500).tolist())
    assert isinstance(rel.selection.rows, np.ndarray) and rel.selection.monotonic
    assert np.all(np.abs(rel.answers - truth[rel.selected]) < 8 * rel.std)


def test_monotonic_only_where_valid():
    kw = dict(strategy="identity", rng=np.random.default_rng(11))
    assert mm.release(X, W, 1.0, select=SELECT, **kw).selection.monotonic is True
    sub = mm.release(X, W, 1.0, select=SELECT, neighbors="substitute", **kw)
    assert sub.selection.monotonic is False and sub.measurement.sensitivity == 2.0
    signed = Dense(np.vstack([np.eye(N)[:4], -np.eye(N)[4:6]]))
    assert (
        mm.release(
            X, signed, 1.0, select=dict(threshold=10, c=2, eps=0.3), **kw
        ).selection.monotonic
        is False
    )


def test_selected_answers_are_unbiased_with_the_reported_std():
    """Measurement noise is independent of the selection: z = (answer − truth)/std is mean 0, variance 1."""
    rng = np.random.default_rng(12)
    z = []
    for _ in range(300):
        rel = mm.release(X, W, 1.0, strategy="hierarchical", rng=rng, select=SELECT)
        z.extend(((rel.answers - TRUTH[rel.selected]) / rel.std).tolist())
    z = np.asarray(z)
    k = z.size
    assert k >= 300 * 5
    assert abs(z.mean()) < 4 / math.sqrt(k)
    # var(z²) = kurtosis − 1 ≤ 5 for these noise sums (Laplace has 6): a loose 4-sigma band
    assert abs((z**2).mean() - 1) < 4 * math.sqrt(5 / k)


BAD = [
    (dict(select=[("eps", 0.3)]), TypeError, "select must be a dict"),
    (
        dict(select={**SELECT, "neighbors": "substitute"}),
        ValueError,
        r"unknown select option\(s\) \['neighbors'\]",
    ),
    (dict(select={**SELECT, "budget": None}), ValueError, "unknown select option"),
    (
        dict(select={k: v for k, v in SELECT.items() if k != "eps"}),
        ValueError,
        "select needs 'eps'",
    ),
    (dict(select={k: v for k, v in SELECT.items() if k != "c"}), ValueError, "select needs 'c'"),
    (
        dict(select={**SELECT, "eps": 1.0}),
        ValueError,
        "must be less than release's total eps = 1.0",
    ),
    (dict(select={**SELECT, "eps": 1.5}), ValueError, "must be less than"),
    (
        dict(select={**SELECT, "eps": 0.0}),
        ValueError,
        "select eps must be a positive finite number, got 0.0",
    ),
    (dict(select={**SELECT, "eps": -0.1}), ValueError, "select eps must be a positive"),
    (dict(select={**SELECT, "eps": "0.3"}), TypeError, "select eps must be a real number, got str"),
    (dict(select={**SELECT, "eps": True}), TypeError, "select eps must be a real number, got bool"),
    (dict(select={**SELECT, "method": "magic"}), ValueError, "select method must be one of"),
    (
        dict(select={k: v for k, v in SELECT.items() if k != "threshold"}),
        ValueError,
        "needs a threshold",
    ),
    (dict(select={**SELECT, "threshold": "high"}), ValueError, "needs a threshold.*'high'"),
    (dict(select=dict(method="em", c=3, eps=0.3, threshold=5)), ValueError, "takes no threshold"),
    (
        dict(select={**SELECT, "target_rel_error": 0.1}),
        ValueError,
        "only used with threshold='auto'",
    ),
    (
        dict(select={**SELECT, "threshold": "auto", "target_rel_error": 0}),
        ValueError,
        "target_rel_error must be a positive",
    ),
    (
        dict(select={**SELECT, "threshold": "auto", "target_rel_error": "10%"}),
        TypeError,
        "target_rel_error must be a real",
    ),
    (dict(select={**SELECT, "threshold": [1, 2, 3]}), ValueError, "one threshold per value"),
    (dict(select={**SELECT, "c": 0}), ValueError, "c must be a positive integer"),
    (dict(select={**SELECT, "c": 2.5}), TypeError, "c must be a positive integer"),
    (dict(select={**SELECT, "c": 33}), ValueError, "c = 33 is more than the 32 rows"),
    (dict(select={**SELECT, "monotonic": "yes"}), TypeError, "monotonic must be"),
    (
        dict(select={**SELECT, "monotonic": True}, neighbors="substitute"),
        ValueError,
        "monotonic=True needs non-negative",
    ),
    (
        dict(
            W=Dense(np.vstack([np.eye(N)[:3], -np.eye(N)[3:4]])),
            select={**SELECT, "c": 2, "monotonic": True},
        ),
        ValueError,
        "monotonic=True needs non-negative counting rows",
    ),
    (dict(select={**SELECT, "ratio": -1}), ValueError, "ratio"),
    (dict(rng="seed"), TypeError, "rng must be"),
    (dict(budget=PrivacyBudget(0.9)), BudgetExceededError, "remains"),
    (dict(strategy=Wk.total(N)), ValueError, "not in the strategy's row space"),
    (
        dict(strategy=RowSubset(S.identity(N), np.arange(N - 8))),
        ValueError,
        "not in the strategy's row space",
    ),
    (dict(strategy=S.identity(N + 1)), ValueError, "strategy has 257 columns"),
    (dict(x=np.r_[X[:-1], -1]), ValueError, "is negative"),
    (dict(eps=0.3), ValueError, "must be less than release's total eps = 0.3"),
]


@pytest.mark.parametrize("kwargs, exc, pattern", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_select_input_raises_and_spends_nothing(kwargs, exc, pattern):
    rng = np.random.default_rng(13)
    before = rng.bit_generator.state
    args = dict(
        x=X,
        W=W,
        eps=1.0,
        delta=0.0,
        strategy="identity",
        budget=PrivacyBudget(1.0),
        rng=rng,
        select=SELECT,
    )
    args.update(kwargs)
    budget = args["budget"]
    with pytest.raises(exc, match=pattern):
        mm.release(args.pop("x"), args.pop("W"), args.pop("eps"), args.pop("delta"), **args)
    assert budget.spent == (0.0, 0.0) and not budget.ledger
    assert rng.bit_generator.state == before


def test_tenths_add_up_exactly():
    """select eps 0.1 of a total 0.3: the rest is rounded so the budget's exact sum fits."""
    budget = PrivacyBudget(0.3)
    rel = mm.release(
        X,
        W,
        0.3,
        strategy="identity",
        budget=budget,
        rng=np.random.default_rng(14),
        select={**SELECT, "eps": 0.1},
    )
    assert budget.remaining[0] >= 0 and rel.measurement.eps == pytest.approx(0.2)
    from fractions import Fraction

    from matmech.privacy.params import rest_of

    for total, part in (
        (0.3, 0.1),
        (1.0, 0.7),
        (0.7, 0.3),
        (1e-3, 3e-4),
        (2.0, 1 / 3),
        (1.0, 0.1),
        (0.3, 0.2),
    ):
        rest = rest_of(total, part)
        assert Fraction(repr(part)) + Fraction(repr(rest)) <= Fraction(
            repr(total)
        )  # the budget's reading
        assert Fraction(part) + Fraction(rest) <= Fraction(
            total
        )  # the binary values the noise uses
        assert rest == pytest.approx(total - part, rel=1e-15)


def test_plot_of_a_selected_release():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    rel = mm.release(X, W, 1.0, strategy="identity", rng=np.random.default_rng(15), select=SELECT)
    ax = rel.plot()
    assert len(ax.patches) == len(HEAVY)  # one bar per answered row, none for the others
    import matplotlib.pyplot as plt

    plt.close(ax.figure)
