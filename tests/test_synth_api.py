"""matmech.synthesize and matmech.synthesize_adaptive: records, labels, privacy accounting."""

import math

import numpy as np
import pytest

from matmech.estimators.graphical import load_mbi as _load_mbi

_load_mbi()  # mbi is in the test extra (quietly imported): never skipped in CI

import matmech  # noqa: E402
from matmech import workloads as W  # noqa: E402
from matmech.io.declare import categories, integer_range  # noqa: E402
from matmech.io.domain import Domain  # noqa: E402
from matmech.privacy.events import ExponentialMechanism  # noqa: E402

SIZES = (2, 3, 4)


def _records(n=300, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, n)
    b = (a + rng.integers(0, 2, n)) % 3
    c = (b + rng.integers(0, 3, n)) % 4
    return np.column_stack([a, b, c])


DOMAIN = Domain(
    (
        categories("sex", ["F", "M"]),
        categories("region", ["north", "south", "west"]),
        integer_range("band", 0, 3),
    )
)


def test_synthesize_a_release_gives_labelled_records_matching_the_model():
    X = _records()
    rel = matmech.release(X, W.marginals(SIZES, 2), 1.0, 1e-6, rng=np.random.default_rng(0))
    s = matmech.synthesize(rel, domain=DOMAIN, n=5000, iters=200, rng=np.random.default_rng(1))
    df = s.records
    assert list(df.columns) == ["sex", "region", "band"] and len(df) == 5000
    assert set(df["sex"]) <= {"F", "M"} and set(df["region"]) <= {"north", "south", "west"}
    # the records' 2-way tables follow the model's (randomized rounding + sampling error)
    for attrs in [("sex", "region"), ("region", "band")]:
        p = s.table(attrs) / s.model.total
        j = [DOMAIN.names.index(a) for a in attrs]
        idx = np.ravel_multi_index(s.codes[:, j].T, p.shape)
        got = np.bincount(idx, minlength=p.size).reshape(p.shape)
        assert np.all(np.abs(got - 5000 * p) <= 5 * np.sqrt(5000 * p * (1 - p)) + 1)
    assert s.events == () and s.measurements == rel.measurements
    assert not hasattr(s, "interval") and not hasattr(s, "std")  # no error bars are given
    # default n: the model's total; default names without a Domain
    s2 = matmech.synthesize(rel, iters=50, rng=np.random.default_rng(2))
    assert len(s2.codes) == round(s2.model.total) and s2.model.names == ("a0", "a1", "a2")


def test_synthesize_refuses_bad_input_before_fitting():
    X = _records()
    rel = matmech.release(X, W.marginals(SIZES, 2), 1.0, 1e-6, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="n must be"):
        matmech.synthesize(rel, n=-3, iters=5)
    with pytest.raises(TypeError, match="rng"):
        matmech.synthesize(rel, rng=7)
    with pytest.raises(ValueError, match="nothing was measured"):
        matmech.synthesize([])
    with pytest.raises(TypeError, match="domain"):
        matmech.synthesize(rel, domain=3.5)


class _Spy(matmech.PrivacyBudget):
    """A budget that records, at each charge, how many noise/selection draws had happened."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.log = []

    def spend_events(self, events, *, what=""):
        self.log.append((tuple(events), what))
        return super().spend_events(events, what=what)


def test_adaptive_spends_exactly_the_budget_charging_each_round_first(monkeypatch):
    import matmech.plans.marginal_pick as pick_plan

    X = _records(400)
    budget = _Spy(1.0, 1e-6, accountant="zcdp")
    rho = budget.total_rho
    charged_picks = []
    real = pick_plan.exponential_top_c

    def spy(values, c, eps, **kw):  # a pick's ε must be charged before its draw
        charged = [e for evs, _ in budget.log for e in evs if isinstance(e, ExponentialMechanism)]
        assert len(charged) == len(charged_picks) + 1 and charged[-1].eps == eps
        charged_picks.append(eps)
        return real(values, c, eps, **kw)

    monkeypatch.setattr(pick_plan, "exponential_top_c", spy)
    s = matmech.synthesize_adaptive(
        X,
        {"a": 2, "b": 3, "c": 4},
        budget=budget,
        workload=[(0, 1), (1, 2), (0, 2)],
        rounds=2,
        picks=1,
        iters=50,
        rng=np.random.default_rng(0),
    )
    assert len(charged_picks) == 2 and len(s.picks) == 2
    # each pick is a plan run by the runner: its spend carries the plan's line
    picks_charged = [w for evs, w in budget.log if isinstance(evs[0], ExponentialMechanism)]
    assert len(picks_charged) == 2 and all("pick one of" in w for w in picks_charged)
    # the whole ρ is spent, and no more: the shares add up to the budget
    assert budget.remaining_rho == pytest.approx(0.0, abs=1e-9 * rho)
    spent = sum(e.zcdp() for e in s.events)
    assert float(spent) == pytest.approx(rho, rel=1e-6) and float(spent) <= rho * (1 + 1e-12)
    left = budget.remaining_rho
    with pytest.raises(ValueError):  # nothing is left: refused, nothing charged
        matmech.synthesize_adaptive(
            X, {"a": 2, "b": 3, "c": 4}, budget=budget, iters=5, rng=np.random.default_rng(0)
        )
    assert budget.remaining_rho == left
    assert len(s.codes) == round(s.model.total)


def test_adaptive_refuses_an_overspend_before_any_noise():
    X = _records(100)
    b = matmech.PrivacyBudget(1.0, 1e-6, accountant="zcdp")
    b.spend_events([ExponentialMechanism(math.sqrt(2 * b.total_rho) * 0.999999)])
    before = b.remaining_rho
    with pytest.raises(ValueError):  # too little left to measure: refused before any charge
        matmech.synthesize_adaptive(X, SIZES, budget=b, iters=5, rng=np.random.default_rng(0))
    assert b.remaining_rho == before
    with pytest.raises(ValueError, match="delta > 0"):
        matmech.synthesize_adaptive(X, SIZES, eps=1.0, delta=0.0)
    with pytest.raises(ValueError, match="workload marginal"):
        matmech.synthesize_adaptive(X, SIZES, eps=1.0, delta=1e-6, workload=[(0, 9)])


def test_adaptive_spends_the_budget_when_candidates_run_out():
    X = _records(300)
    budget = matmech.PrivacyBudget(1.0, 1e-6, accountant="zcdp")
    s = matmech.synthesize_adaptive(
        X, SIZES, budget=budget, workload=[(0, 1)], rounds=3, picks=2, iters=30,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    assert s.picks == ((0, 1),)  # one candidate only: the loop stops after one pick
    assert budget.remaining_rho == pytest.approx(0.0, abs=1e-6 * budget.total_rho)
