"""The marginal-pick plan of synthesize_adaptive, run by the one runner: AIM's scores, the
declared clip, the spend before the draw and nothing read when the budget cannot pay."""

import math

import numpy as np
import pytest

import matmech as mm
from matmech.plans.marginal_pick import MarginalPickPlan
from matmech.privacy.budget import BudgetExceededError
from matmech.privacy.events import ExponentialMechanism
from matmech.run.runner import run_plan

TRUTH = {(0, 1): np.array([[5.0, 0.0], [1.0, 4.0]]), (1, 2): np.array([[3.0, 3.0], [2.0, 2.0]])}
EST = {(0, 1): np.full((2, 2), 2.5), (1, 2): np.array([[3.0, 3.0], [2.0, 2.0]])}


def _plan(eps=1.0, bound=2.0**34, penalties=(0.5, 0.25)):
    return MarginalPickPlan(tuple(TRUTH), EST, penalties, eps, bound)


def test_scores_are_aims_l1_error_minus_the_penalty_clipped_to_the_bound():
    plan = _plan()
    scores = plan.check(plan.read(TRUTH))
    # by hand: |5-2.5|+|0-2.5|+|1-2.5|+|4-2.5| = 8, minus 0.5; the exact candidate: 0 - 0.25
    assert scores.tolist() == [7.5, -0.25]
    assert _plan(bound=4.0).check(plan.read(TRUTH)).tolist() == [4.0, -0.25]


def test_a_pick_is_charged_before_its_draw_and_picks_the_worst_fit_at_large_eps():
    budget = mm.PrivacyBudget(100.0)
    seen = []

    class Watch(MarginalPickPlan):
        def draw(self, scores, *, rng):
            seen.append(budget.remaining)  # the spend already happened
            return super().draw(scores, rng=rng)

    plan = Watch(tuple(TRUTH), EST, (0.5, 0.25), 50.0, 2.0**10)
    picks = [run_plan(plan, TRUTH, budget=budget, rng=np.random.default_rng(i)) for i in (0, 1)]
    assert seen[0][0] == pytest.approx(50.0) and seen[1][0] == pytest.approx(0.0, abs=1e-9)
    # ε = 50, score gap 7.75, sensitivity 1: the worse fit wins unless exp(-50·7.75/2) strikes
    assert picks == [(0, 1), (0, 1)]
    assert plan.events == (ExponentialMechanism(50.0),)


def test_an_unaffordable_pick_reads_nothing():
    class Untouchable(dict):
        def __getitem__(self, key):
            raise AssertionError("read before the budget was checked")

    budget = mm.PrivacyBudget(0.5)
    with pytest.raises(BudgetExceededError):
        run_plan(_plan(eps=1.0), Untouchable(), budget=budget, rng=np.random.default_rng(0))
    assert budget.remaining[0] == pytest.approx(0.5)


def test_the_pick_law_is_permute_and_flip_at_small_eps():
    """Two candidates, scores 7.5 and -0.25, ε = 0.2, sensitivity 1: the exponential
    mechanism as report-noisy-max with exponential noise of rate ε/2 (permute-and-flip's law)
    picks the worse one with probability ½·exp(-ε·gap/2) (enumerating its two orders: the
    worse comes first with ½ and flips with exp(-ε·gap/2); the best always flips)."""
    eps, gap = 0.2, 7.75
    p = math.exp(-eps * gap / 2)  # the flip probability of the worse candidate
    want = 0.5 * p
    rng = np.random.default_rng(7)
    plan = _plan(eps=eps, bound=2.0**10)
    n = 1500  # 4σ ≈ 0.04: a wrong noise scale (×2: P = 0.11, ×½: 0.34) is caught
    worse = sum(run_plan(plan, TRUTH, budget=None, rng=rng) == (1, 2) for _ in range(n))
    assert abs(worse / n - want) <= 4 * math.sqrt(want * (1 - want) / n)
